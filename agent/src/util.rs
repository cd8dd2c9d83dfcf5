//! Small helpers shared by several stages.

use std::borrow::Cow;

/// `s` with control characters escaped (`\n`, `\u{1b}`), for logs: a file name or symbol
/// chosen by whoever controls a traced program must not forge log lines.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_is_borrowed() {
        assert!(matches!(printable("/usr/bin/x"), Cow::Borrowed(_)));
        assert_eq!(
            printable("/tmp/a\nERROR forged\x1b[31m"),
            "/tmp/a\\nERROR forged\\u{1b}[31m"
        );
        assert_eq!(printable("é/ü"), "é/ü");
    }
}
