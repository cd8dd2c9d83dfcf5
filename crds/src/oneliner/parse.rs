//! The grammar of a one-line probe, read in one pass over the bytes (no recursion):
//!
//! ```text
//! PROBE   = POINT [ "(" [ LIST ] ")" ] [ "->" ( LIST | "(" LIST ")" ) ]
//! POINT   = SYMBOL | "usdt:" PROVIDER ":" NAME
//! LIST    = CAPTURE { "," CAPTURE }
//! ```
//!
//! A symbol may hold brackets of its own (`main.(*T).M`, `main.Sum[go.shape.int64]`,
//! `main.F[go.shape.interface { M() }]`): the capture list is the last parenthesized group
//! at the top level, and only when the text before `->` ends with it. `main.(*T).M()` is
//! method M with no captures; `main.(*T).M` (no list) is the same probe.

use super::{Item, OneLiner, OneLinerError, Point};
use crate::csig::CaptureExpr;
use crate::gopath::parse_go_capture;

/// Longest expression accepted: a symbol (at most 1024 bytes), 8 captures and a result
/// list fit in far less.
pub const MAX_EXPR_BYTES: usize = 4096;
/// Deepest nesting of brackets accepted (a generic instantiation of a generic type nests
/// a few levels).
pub const MAX_NESTING: usize = 32;

/// What one pass over the brackets found.
struct Brackets {
    /// The first `->` outside any bracket.
    arrow: Option<usize>,
    /// The last parenthesized group closed at the top level before the arrow: its `(` and
    /// `)`.
    last_group: Option<(usize, usize)>,
}

fn err(expr: &str, at: usize, message: impl Into<String>) -> OneLinerError {
    OneLinerError {
        expr: expr.to_string(),
        at: Some(at),
        flag: None,
        message: message.into(),
    }
}

fn closer(open: u8) -> u8 {
    match open {
        b'(' => b')',
        b'[' => b']',
        _ => b'}',
    }
}

/// Matches the brackets of `expr`, finds the arrow and the last top-level group before it.
fn scan(expr: &str) -> Result<Brackets, OneLinerError> {
    let bytes = expr.as_bytes();
    let mut stack: Vec<(u8, usize)> = Vec::new();
    let mut arrow = None;
    let mut last_group = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'(' | b'[' | b'{' => {
                if stack.len() == MAX_NESTING {
                    return Err(err(
                        expr,
                        i,
                        format!("nests brackets more than {MAX_NESTING} deep"),
                    ));
                }
                stack.push((b, i));
            }
            b')' | b']' | b'}' => match stack.pop() {
                None => {
                    return Err(err(
                        expr,
                        i,
                        format!(
                            "`{}` closes nothing: is a bracket missing before it?",
                            b as char
                        ),
                    ))
                }
                Some((open, at)) if closer(open) != b => {
                    return Err(err(
                        expr,
                        i,
                        format!(
                            "`{}` does not close the `{}` at column {}: expected `{}`",
                            b as char,
                            open as char,
                            column(expr, at),
                            closer(open) as char
                        ),
                    ))
                }
                Some((open, at)) => {
                    if stack.is_empty() && open == b'(' && arrow.is_none() {
                        last_group = Some((at, i));
                    }
                }
            },
            b'-' if stack.is_empty() && bytes.get(i + 1) == Some(&b'>') => {
                if let Some(first) = arrow {
                    return Err(err(
                        expr,
                        i,
                        format!(
                            "a second `->` (the first is at column {}): list every result after \
                             one `->`, separated by commas",
                            column(expr, first)
                        ),
                    ));
                }
                arrow = Some(i);
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if let Some(&(open, at)) = stack.last() {
        return Err(err(
            expr,
            at,
            format!("this `{}` is never closed", open as char),
        ));
    }
    Ok(Brackets { arrow, last_group })
}

/// The 1-based column of byte `at`, in characters.
pub(super) fn column(expr: &str, at: usize) -> usize {
    expr.get(..at).map_or(at, |s| s.chars().count()) + 1
}

/// Splits `text` (found at byte `base` of the expression, brackets already matched) at its
/// top-level commas.
fn split_list(expr: &str, text: &str, base: usize) -> Result<Vec<Item>, OneLinerError> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let bytes = text.as_bytes();
    for i in 0..=bytes.len() {
        let b = bytes.get(i).copied().unwrap_or(b',');
        match b {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                let raw = &text[start..i];
                let lead = raw.len() - raw.trim_start().len();
                let item = raw.trim();
                if item.is_empty() {
                    let what = if i == bytes.len() {
                        "a comma at the end"
                    } else {
                        "two commas, or a comma at the start"
                    };
                    return Err(err(
                        expr,
                        base + i.min(bytes.len()),
                        format!("an empty capture ({what}): write a name between the commas, or remove one"),
                    ));
                }
                items.push(Item {
                    text: item.to_string(),
                    at: base + start + lead,
                });
                start = i + 1;
            }
            _ => {}
        }
    }
    Ok(items)
}

fn is_c_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Checks one capture's syntax: what `capture` accepts (a name, a Go field path,
/// `len(x)`, a C `PTR[:LEN]`).
fn check_capture(expr: &str, item: &Item) -> Result<(), OneLinerError> {
    let why = match CaptureExpr::parse(&item.text) {
        CaptureExpr::Slice { ptr, len } => {
            if is_c_ident(ptr) && is_c_ident(len) {
                return Ok(());
            }
            "PTR[:LEN] takes two C names".to_string()
        }
        CaptureExpr::Name(n) => match parse_go_capture(n) {
            Ok(_) => return Ok(()),
            Err(e) => e.message,
        },
    };
    Err(err(
        expr,
        item.at,
        format!(
            "`{}` is not a capture ({why}): write a parameter or result name (url), a field \
             path (r.URL.Path), len(x), or PTR[:LEN] for the bytes at a C pointer",
            item.text
        ),
    ))
}

/// Checks the point: a symbol without spaces or colons, or `usdt:provider:name`.
fn point(expr: &str, text: &str, at: usize) -> Result<Point, OneLinerError> {
    if text.is_empty() {
        return Err(err(
            expr,
            at,
            "names no function: write SYMBOL(CAPTURE, ...) -> RESULT, e.g. 'main.work(id) -> r0'",
        ));
    }
    if let Some(rest) = text.strip_prefix("usdt:") {
        let base = at + "usdt:".len();
        let word =
            |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let bad = match rest.split_once(':') {
            None => Some((base + rest.len(), "expected `:NAME` after the provider")),
            Some((prov, _)) if !word(prov) => Some((base, "the provider is not a word")),
            Some((prov, name)) if !word(name) => Some((
                base + prov.len() + 1,
                "the probe's name is not a word (letters, digits, _)",
            )),
            Some(_) => None,
        };
        if let Some((where_, why)) = bad {
            return Err(err(
                expr,
                where_,
                format!(
                    "{why}: a USDT probe is usdt:PROVIDER:NAME, e.g. usdt:postgresql:query__start \
                     (`gprobe symbols BINARY` lists them)"
                ),
            ));
        }
        return Ok(Point::Usdt {
            name: rest.to_string(),
            at,
        });
    }
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            c if depth == 0 && c.is_whitespace() => {
                return Err(err(
                    expr,
                    at + i,
                    "a space in the symbol: write the function's name whole (main.work), its \
                     captures in parentheses after it, and quote the expression for the shell",
                ))
            }
            ':' if depth == 0 => {
                return Err(err(
                    expr,
                    at + i,
                    "`:` in a symbol: USDT probes are written usdt:PROVIDER:NAME; the program \
                     is chosen with --pid, --executable or -- CMD, not in the expression",
                ))
            }
            _ => {}
        }
    }
    if text.ends_with(['.', '/']) {
        return Err(err(
            expr,
            at + text.len() - 1,
            format!(
                "`{text}` is not a function's name: name the function after the package \
                 (main.work), or the method after its type (main.(*T).Method)"
            ),
        ));
    }
    Ok(Point::Symbol {
        name: text.to_string(),
        at,
    })
}

/// Parses a one-line probe. Errors point at the mistake (`OneLinerError::at`).
pub fn parse(expr: &str) -> Result<OneLiner, OneLinerError> {
    if expr.len() > MAX_EXPR_BYTES {
        return Err(OneLinerError {
            expr: expr.chars().take(80).collect::<String>() + "...",
            at: None,
            flag: None,
            message: format!(
                "is {} bytes long; a probe expression has at most {MAX_EXPR_BYTES}",
                expr.len()
            ),
        });
    }
    if let Some((i, c)) = expr.char_indices().find(|(_, c)| c.is_control()) {
        return Err(err(
            expr,
            i,
            format!(
                "a control character ({:?}) in the expression: write it on one line",
                c
            ),
        ));
    }
    let br = scan(expr)?;
    let head_end = br.arrow.unwrap_or(expr.len());
    let head = &expr[..head_end];
    let trimmed_end = head.trim_end().len();
    let lead = head.len() - head.trim_start().len();
    // The capture list: the last top-level group, when the head ends with it.
    let (point_text, args) = match br.last_group {
        Some((open, close)) if close + 1 == trimmed_end => {
            let inner = &expr[open + 1..close];
            let args = if inner.trim().is_empty() {
                Vec::new()
            } else {
                split_list(expr, inner, open + 1)?
            };
            (&expr[lead.min(open)..open], args)
        }
        _ => (&head[lead.min(trimmed_end)..trimmed_end], Vec::new()),
    };
    let point_text_trimmed = point_text.trim_end();
    let point = point(expr, point_text_trimmed, lead)?;
    let results = match br.arrow {
        None => Vec::new(),
        Some(a) => {
            if matches!(point, Point::Usdt { .. }) {
                return Err(err(
                    expr,
                    a,
                    "a USDT probe marks a point in the code, not a call: it has no result; \
                     remove `-> ...`",
                ));
            }
            let text = &expr[a + 2..];
            let lead_r = text.len() - text.trim_start().len();
            let body = text.trim();
            if body.is_empty() {
                return Err(err(
                    expr,
                    a,
                    "expected a result after `->`: a result's name (err), or r0 for the first \
                     unnamed one",
                ));
            }
            let base = a + 2 + lead_r;
            // `-> (resp, err)`: a parenthesized list, as Go writes several results.
            let grouped = body.starts_with('(')
                && body.ends_with(')')
                && matches!(scan(body), Ok(Brackets { last_group: Some((0, c)), .. }) if c + 1 == body.len());
            if grouped {
                split_list(expr, &body[1..body.len() - 1], base + 1)?
            } else {
                split_list(expr, body, base)?
            }
        }
    };
    for item in args.iter().chain(&results) {
        check_capture(expr, item)?;
    }
    Ok(OneLiner {
        expr: expr.to_string(),
        point,
        args,
        results,
    })
}
