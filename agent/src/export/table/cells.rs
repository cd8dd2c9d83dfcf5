//! The text of a table row's cells: captured values as the table shows them (strings
//! quoted and escaped, bytes that are not UTF-8 as `\xNN`), columns cut to their width, the
//! duration in a unit that fits, and the values wrapped on indented lines of
//! [`WIDTH`] columns. The ordering and timing of rows is table.rs.

use crate::events::{CallRecord, Value, ValueKind};
use std::io::Write;

const INDENT: &str = "    ";
/// Columns every line fits in.
pub const WIDTH: usize = 80;

/// A value longer than a line continues on at most this many lines, then is cut.
const MAX_VALUE_LINES: usize = 3;

pub(super) fn fmt_value(v: &Value) -> String {
    format!("{}={}", v.name, show(&v.kind))
}

/// Bytes as a quoted string: UTF-8 text escaped as Rust escapes it (`\n`, `\"`), every
/// byte that is not UTF-8 as `\xNN`.
fn quoted_bytes(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        s.extend(chunk.valid().chars().flat_map(char::escape_debug));
        for b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s.push('"');
    s
}

pub(super) fn show(kind: &ValueKind) -> String {
    match kind {
        ValueKind::Bool(b) => b.to_string(),
        ValueKind::Int(i) => i.to_string(),
        ValueKind::Uint(u) => u.to_string(),
        ValueKind::Float(f) => f.to_string(),
        ValueKind::Pointer(p) => format!("{p:#x}"),
        ValueKind::Str { text, truncated } => {
            format!("{text:?}{}", if *truncated { "…" } else { "" })
        }
        ValueKind::Bytes { bytes, truncated } => {
            format!(
                "{}{}",
                quoted_bytes(bytes),
                if *truncated { "…" } else { "" }
            )
        }
        ValueKind::Interface { nil } => (if *nil { "nil" } else { "non-nil" }).to_string(),
        ValueKind::Null => "nil".to_string(),
        ValueKind::Array { items, truncated } => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!(
                "[{}{}]",
                items.join(" "),
                if *truncated { " …" } else { "" }
            )
        }
        ValueKind::Fault => "<unreadable>".to_string(),
        ValueKind::Invalid => "<invalid length>".to_string(),
    }
}

/// `s` in at most `n` characters, cut at the end with `…`.
pub(super) fn cut_end(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// `s` in at most `n` characters, cut at the start with `…` (a symbol keeps its function
/// name: `…/pkg.(*Server).Handle`).
pub(super) fn cut_start(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        s.to_string()
    } else {
        std::iter::once('…')
            .chain(s.chars().skip(len - (n - 1)))
            .collect()
    }
}

pub(super) fn duration(rec: &CallRecord) -> String {
    match rec.duration_ns {
        // Past 99999.999s the seconds no longer fit the column.
        Some(d) if d >= 100_000_000_000_000 => format!("{:.2}h", d as f64 / 3.6e12),
        Some(d) if d >= 1_000_000_000 => format!("{:.3}s", d as f64 / 1e9),
        Some(d) if d >= 1_000_000 => format!("{:.3}ms", d as f64 / 1e6),
        Some(d) => format!("{:.3}µs", d as f64 / 1e3),
        None if rec.unfinished => "unfinished".into(),
        None => "-".into(),
    }
}

/// Lays `tokens` out on lines of [`WIDTH`] columns, each starting with [`INDENT`].
pub(super) fn wrap(tokens: &[String], out: &mut Vec<u8>) {
    let room = WIDTH - INDENT.len();
    let mut line = String::new();
    let mut used = 0;
    let mut end_line = |line: &mut String, used: &mut usize| {
        if *used > 0 {
            let _ = writeln!(out, "{INDENT}{line}");
            line.clear();
            *used = 0;
        }
    };
    for t in tokens {
        let n = t.chars().count();
        if used > 0 && used + 1 + n > room {
            end_line(&mut line, &mut used);
        }
        if n <= room {
            if used > 0 {
                line.push(' ');
                used += 1;
            }
            line.push_str(t);
            used += n;
            continue;
        }
        // Longer than a line: its own lines, then cut.
        let chars: Vec<char> = t.chars().collect();
        let lines = chars.len().div_ceil(room).min(MAX_VALUE_LINES);
        for (i, chunk) in chars.chunks(room).take(lines).enumerate() {
            let mut s: String = chunk.iter().collect();
            if i + 1 == lines && chars.len() > lines * room {
                s = chunk[..room - 1].iter().chain(['…'].iter()).collect();
            }
            line.push_str(&s);
            used = s.chars().count();
            end_line(&mut line, &mut used);
        }
    }
    end_line(&mut line, &mut used);
}
