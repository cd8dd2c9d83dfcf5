//! Redaction of captured strings (README: URL credentials and secret-looking query values
//! are replaced by REDACTED).
//!
//! Two things are replaced, and only in what looks like a URL or a query string:
//! - the userinfo of a URL, `scheme://user:pass@host/...` -> `scheme://REDACTED@host/...`
//!   (with or without a password);
//! - the values of secret-looking parameters in a URL's query or fragment, or in a string
//!   that is a query (`a=1&token=x`, `/path?token=x`): `token=x` -> `token=REDACTED`. The
//!   parameter is kept, as the OpenTelemetry semantic conventions ask for `url.query`.
//!
//! URLs are found anywhere in the string (an error message that quotes one is covered);
//! other text passes unchanged, without an allocation.

use std::borrow::Cow;

/// What a redacted part becomes.
pub const REDACTED: &str = "REDACTED";

/// Parameter names whose values are secret (compared case-insensitively, after
/// percent-decoding): the OpenTelemetry semantic conventions' list for `url.query`
/// (`AWSAccessKeyId`, `Signature`, `sig`, `X-Goog-Signature`) and common names of tokens,
/// passwords and keys.
const SECRET_NAMES: &[&str] = &[
    "AWSAccessKeyId",
    "Signature",
    "sig",
    "X-Goog-Signature",
    "token",
    "password",
    "passwd",
    "pwd",
    "secret",
    "key",
    "api_key",
    "apikey",
    "access_token",
    "signature",
    "auth",
    "credential",
    "credentials",
];

/// Name endings that make a parameter secret: `refresh_token`, `client_secret`,
/// `X-Amz-Security-Token`, `X-Amz-Signature`, `X-Amz-Credential`, `x-api-key`, ...
const SECRET_SUFFIXES: &[&str] = &[
    "_token",
    "-token",
    "_key",
    "-key",
    "_secret",
    "-secret",
    "_signature",
    "-signature",
    "-credential",
    "_password",
];

/// Whether a query parameter's value is redacted.
pub fn is_secret_param(name: &str) -> bool {
    let decoded;
    let name = if name.contains('%') {
        decoded = percent_decode(name);
        decoded.as_str()
    } else {
        name
    };
    let b = name.as_bytes();
    SECRET_NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
        || SECRET_SUFFIXES
            .iter()
            .any(|s| b.len() > s.len() && b[b.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes()))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One replacement: `range` of the input becomes [`REDACTED`].
type Edit = std::ops::Range<usize>;

fn is_scheme_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.')
}

/// Where a URL embedded in text ends.
fn is_url_end(c: u8) -> bool {
    c.is_ascii_whitespace()
        || c.is_ascii_control()
        || matches!(c, b'"' | b'\'' | b'<' | b'>' | b'`')
}

/// The values of secret parameters in `s[range]`, a query (`a=1&b=2`) or a fragment.
fn query_edits(s: &str, range: std::ops::Range<usize>, edits: &mut Vec<Edit>) {
    let mut start = range.start;
    for part in s[range.clone()].split('&') {
        let end = start + part.len();
        if let Some(eq) = part.find('=') {
            let value = &part[eq + 1..];
            if !value.is_empty() && value != REDACTED && is_secret_param(&part[..eq]) {
                edits.push(start + eq + 1..end);
            }
        }
        start = end + 1;
    }
}

/// `s[start..end]` is a query, perhaps followed by `#fragment`.
fn query_and_fragment(s: &str, start: usize, end: usize, edits: &mut Vec<Edit>) {
    let hash = s[start..end].find('#').map(|i| start + i);
    query_edits(s, start..hash.unwrap_or(end), edits);
    if let Some(h) = hash {
        fragment_edits(s, h + 1..end, edits);
    }
}

/// Fragments carry tokens too (OAuth's `#access_token=...`).
fn fragment_edits(s: &str, range: std::ops::Range<usize>, edits: &mut Vec<Edit>) {
    if s[range.clone()].contains('=') {
        query_edits(s, range, edits);
    }
}

/// `s[range]` is `path[?query][#fragment]` (what follows a URL's authority).
fn path_edits(s: &str, range: std::ops::Range<usize>, edits: &mut Vec<Edit>) {
    let rest = &s[range.clone()];
    let hash = rest.find('#');
    match rest.find('?') {
        Some(q) if hash.is_none_or(|h| q < h) => {
            query_and_fragment(s, range.start + q + 1, range.end, edits)
        }
        _ => {
            if let Some(h) = hash {
                fragment_edits(s, range.start + h + 1..range.end, edits);
            }
        }
    }
}

/// The edits for every `scheme://...` in `s`; `false` when there is none.
fn url_edits(s: &str, truncated: bool, edits: &mut Vec<Edit>) -> bool {
    let b = s.as_bytes();
    let mut found = false;
    let mut from = 0;
    while let Some(i) = s[from..].find("://").map(|i| from + i) {
        // The scheme: letters, digits, + - . before "://", starting with a letter.
        let mut start = i;
        while start > from && is_scheme_byte(b[start - 1]) {
            start -= 1;
        }
        while start < i && !b[start].is_ascii_alphabetic() {
            start += 1;
        }
        let auth_start = i + 3;
        if start == i {
            from = auth_start;
            continue;
        }
        found = true;
        let end = b[auth_start..]
            .iter()
            .position(|&c| is_url_end(c))
            .map_or(b.len(), |p| auth_start + p);
        let auth_end = b[auth_start..end]
            .iter()
            .position(|&c| matches!(c, b'/' | b'?' | b'#'))
            .map_or(end, |p| auth_start + p);
        let authority = &s[auth_start..auth_end];
        if let Some(at) = authority.rfind('@') {
            if at > 0 && &authority[..at] != REDACTED {
                edits.push(auth_start..auth_start + at);
            }
        } else if truncated && auth_end == s.len() {
            // Cut inside the authority: `user:pass` cannot be told from `host:port`
            // unless what follows the colon is a port number.
            if let Some(colon) = authority.rfind(':') {
                if !authority[colon + 1..].bytes().all(|c| c.is_ascii_digit()) {
                    edits.push(auth_start..auth_end);
                }
            }
        }
        path_edits(s, auth_end..end, edits);
        from = end.max(auth_start);
    }
    found
}

/// Whether `s` as a whole reads as a query string, or a path with one.
fn looks_like_query(s: &str) -> bool {
    if s.bytes()
        .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
    {
        return false;
    }
    if s.contains('?') {
        return true;
    }
    let query = s.split('#').next().unwrap_or("");
    query.contains('=')
        && query.split('&').all(|p| {
            let name = p.split('=').next().unwrap_or("");
            !name.is_empty()
                && name
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"_-.[]%+~".contains(&c))
        })
}

/// `s` with URL credentials and secret parameter values replaced by [`REDACTED`];
/// borrowed (no allocation) when nothing is replaced. `truncated`: `s` was cut at
/// maxStringBytes, so a URL's authority may end early (then `user:pa` is redacted too).
pub fn redact(s: &str, truncated: bool) -> Cow<'_, str> {
    let has_url = s.contains("://");
    if !has_url && !s.contains('=') {
        return Cow::Borrowed(s);
    }
    let mut edits = Vec::new();
    if !(has_url && url_edits(s, truncated, &mut edits)) && looks_like_query(s) {
        if s.contains('?') {
            path_edits(s, 0..s.len(), &mut edits);
        } else {
            query_and_fragment(s, 0, s.len(), &mut edits);
        }
    }
    if edits.is_empty() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + edits.len() * REDACTED.len());
    let mut at = 0;
    for e in edits {
        out.push_str(&s[at..e.start]);
        out.push_str(REDACTED);
        at = e.end;
    }
    out.push_str(&s[at..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> String {
        redact(s, false).into_owned()
    }

    #[test]
    fn userinfo_is_redacted_with_or_without_a_password() {
        assert_eq!(
            r("http://user:pass@10.0.0.7:8080/cart"),
            "http://REDACTED@10.0.0.7:8080/cart"
        );
        assert_eq!(
            r("https://alice@example.com/"),
            "https://REDACTED@example.com/"
        );
        assert_eq!(
            r("postgres://app:s3cr3t@db:5432/shop"),
            "postgres://REDACTED@db:5432/shop"
        );
        assert_eq!(r("http://:pw@h"), "http://REDACTED@h");
        // Encoded and raw `@` in the password: the authority's last `@` ends the userinfo.
        assert_eq!(r("http://us%40er:p%3A@ss@h/x"), "http://REDACTED@h/x");
        assert_eq!(r("redis://u:p@h?db=1"), "redis://REDACTED@h?db=1");
        // An `@` in the path or query is not userinfo.
        assert_eq!(
            r("https://medium.com/@alice?x=1"),
            "https://medium.com/@alice?x=1"
        );
        assert_eq!(r("http://h/?mail=a@b"), "http://h/?mail=a@b");
    }

    #[test]
    fn secret_query_values_are_redacted_and_their_names_kept() {
        assert_eq!(
            r("https://s3.example/obj?AWSAccessKeyId=AKIA&Expires=1&Signature=abc%2Bd"),
            "https://s3.example/obj?AWSAccessKeyId=REDACTED&Expires=1&Signature=REDACTED"
        );
        assert_eq!(
            r("https://x/?q=OpenTelemetry&sig=abc"),
            "https://x/?q=OpenTelemetry&sig=REDACTED"
        );
        assert_eq!(
            r("https://storage/b?X-Goog-Signature=f00&X-Goog-Credential=me%2F2026"),
            "https://storage/b?X-Goog-Signature=REDACTED&X-Goog-Credential=REDACTED"
        );
        assert_eq!(
            r("https://b.s3/k?X-Amz-Credential=A%2F1&X-Amz-Signature=9&X-Amz-Security-Token=t&X-Amz-Date=2"),
            "https://b.s3/k?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&\
             X-Amz-Security-Token=REDACTED&X-Amz-Date=2"
        );
        // Case-insensitive, whole names and the listed endings only.
        assert_eq!(
            r("http://h/p?TOKEN=1&Password=2&api_key=3&ApiKey=4&refresh_token=5&client_secret=6&x-api-key=7"),
            "http://h/p?TOKEN=REDACTED&Password=REDACTED&api_key=REDACTED&ApiKey=REDACTED&\
             refresh_token=REDACTED&client_secret=REDACTED&x-api-key=REDACTED"
        );
        assert_eq!(
            r("http://h/p?tokens=1&monkey=2&keyboard=3&author=4&page=5"),
            "http://h/p?tokens=1&monkey=2&keyboard=3&author=4&page=5"
        );
        assert_eq!(
            r("http://h/?auth=a&credential=b&credentials=c&passwd=d&secret=e&key=f&access_token=g"),
            "http://h/?auth=REDACTED&credential=REDACTED&credentials=REDACTED&passwd=REDACTED&\
             secret=REDACTED&key=REDACTED&access_token=REDACTED"
        );
        // Repeated parameters are all redacted; empty values and bare names stay.
        assert_eq!(
            r("http://h/?token=a&token=b&token=&token&x=1"),
            "http://h/?token=REDACTED&token=REDACTED&token=&token&x=1"
        );
        // A percent-encoded name is decoded before it is compared.
        assert_eq!(
            r("http://h/?%74oken=a&api%5Fkey=b"),
            "http://h/?%74oken=REDACTED&api%5Fkey=REDACTED"
        );
        // Values with encoded separators are replaced whole.
        assert_eq!(
            r("http://h/?password=a%26b%3Dc&n=1"),
            "http://h/?password=REDACTED&n=1"
        );
    }

    #[test]
    fn fragments_and_both_parts_together() {
        assert_eq!(
            r("https://app/cb#access_token=eyJ&token_type=bearer&state=s"),
            "https://app/cb#access_token=REDACTED&token_type=bearer&state=s"
        );
        assert_eq!(
            r("https://u:p@app/cb?code=1&token=t#section"),
            "https://REDACTED@app/cb?code=1&token=REDACTED#section"
        );
        // A `?` inside the fragment does not start a query.
        assert_eq!(r("https://app/#a?token=t"), "https://app/#a?token=t");
    }

    #[test]
    fn urls_inside_text_are_redacted() {
        assert_eq!(
            r(r#"Get "http://u:p@h/x?token=t": dial tcp 10.0.0.7:80: connect: connection refused"#),
            r#"Get "http://REDACTED@h/x?token=REDACTED": dial tcp 10.0.0.7:80: connect: connection refused"#
        );
        assert_eq!(
            r("from http://a:b@one/ to https://c:d@two/?sig=x done"),
            "from http://REDACTED@one/ to https://REDACTED@two/?sig=REDACTED done"
        );
    }

    #[test]
    fn query_strings_and_paths_with_queries() {
        assert_eq!(r("q=shoes&token=abc"), "q=shoes&token=REDACTED");
        assert_eq!(r("/cart?id=7&api_key=k"), "/cart?id=7&api_key=REDACTED");
        assert_eq!(r("?password=x"), "?password=REDACTED");
        assert_eq!(r("a=1#token=t"), "a=1#token=REDACTED");
    }

    #[test]
    fn other_strings_pass_unchanged_without_an_allocation() {
        for s in [
            "",
            "hello world",
            "GET",
            "/api/v1/items/42",
            "10.0.0.7:8080",
            "token is secret",
            "password = hunter2 (not a query)",
            "x == y",
            "a=1 b=2",
            "http://10.0.0.7:8080/cart",
            "https://example.com/search?q=OpenTelemetry#SemConv",
            "http://h/?x=REDACTED&token=REDACTED",
            "http://REDACTED@h/",
            "://no-scheme?token=x but words",
            "ünïcödé ✓",
        ] {
            assert!(
                matches!(redact(s, false), Cow::Borrowed(_)),
                "{s:?} was changed: {:?}",
                redact(s, false)
            );
        }
    }

    #[test]
    fn truncated_values() {
        // Cut inside the password: it has no `@` yet, but it is not a port either.
        assert_eq!(redact("http://user:hunt", true), "http://REDACTED");
        // Cut after a port, or inside a host: kept.
        assert_eq!(redact("http://10.0.0.7:80", true), "http://10.0.0.7:80");
        assert_eq!(redact("http://exam", true), "http://exam");
        // Not truncated: a colon with letters after it is still host:port-like text.
        assert_eq!(redact("http://user:hunt", false), "http://user:hunt");
        // Cut inside a secret value or its name.
        assert_eq!(
            redact("http://h/?a=1&token=abc", true),
            "http://h/?a=1&token=REDACTED"
        );
        assert_eq!(redact("http://h/?a=1&tok", true), "http://h/?a=1&tok");
        assert_eq!(redact("http://h/?token=", true), "http://h/?token=");
        // Cut after a complete userinfo.
        assert_eq!(redact("https://u:p@ho", true), "https://REDACTED@ho");
    }

    #[test]
    fn non_ascii_around_urls_keeps_char_boundaries() {
        assert_eq!(r("ü http://u:p@h/ é"), "ü http://REDACTED@h/ é");
        assert_eq!(r("http://h/?token=ü€&x=é"), "http://h/?token=REDACTED&x=é");
        assert_eq!(r("€://x"), "€://x");
    }
}
