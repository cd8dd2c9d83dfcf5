//! A readable table for terminals (`--output table`): one row per call in 80 columns, its
//! captured values on indented lines below it, wrapped at 80 columns.
//!
//! ```text
//! TIME (UTC)          PID PROBE            SYMBOL                       DURATION
//! 10:46:40.000000    4242 http-client-urls net/http.(*Client).Get      183.000µs
//!     url="http://10.0.0.7:8080/cart" →err=nil
//! ```

use crate::events::{CallRecord, Value, ValueKind};
use std::io::Write;

/// Columns every line fits in.
pub const WIDTH: usize = 80;
const INDENT: &str = "    ";
/// A value longer than a line continues on at most this many lines, then is cut.
const MAX_VALUE_LINES: usize = 3;
const PROBE_W: usize = 16;
const SYMBOL_W: usize = 26;

pub fn write_header(out: &mut Vec<u8>) {
    let _ = writeln!(
        out,
        "{:<15} {:>7} {:<PROBE_W$} {:<SYMBOL_W$} {:>10}",
        "TIME (UTC)", "PID", "PROBE", "SYMBOL", "DURATION"
    );
}

fn fmt_value(v: &Value) -> String {
    format!("{}={}", v.name, show(&v.kind))
}

fn show(kind: &ValueKind) -> String {
    match kind {
        ValueKind::Bool(b) => b.to_string(),
        ValueKind::Int(i) => i.to_string(),
        ValueKind::Uint(u) => u.to_string(),
        ValueKind::Float(f) => f.to_string(),
        ValueKind::Pointer(p) => format!("{p:#x}"),
        ValueKind::Str { text, truncated } => {
            format!("{text:?}{}", if *truncated { "…" } else { "" })
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
fn cut_end(s: &str, n: usize) -> String {
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
fn cut_start(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        s.to_string()
    } else {
        std::iter::once('…')
            .chain(s.chars().skip(len - (n - 1)))
            .collect()
    }
}

fn duration(rec: &CallRecord) -> String {
    match rec.duration_ns {
        Some(d) if d >= 1_000_000_000 => format!("{:.3}s", d as f64 / 1e9),
        Some(d) if d >= 1_000_000 => format!("{:.3}ms", d as f64 / 1e6),
        Some(d) => format!("{:.3}µs", d as f64 / 1e3),
        None if rec.unfinished => "unfinished".into(),
        None => "-".into(),
    }
}

/// Lays `tokens` out on lines of [`WIDTH`] columns, each starting with [`INDENT`].
fn wrap(tokens: &[String], out: &mut Vec<u8>) {
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

/// Appends one call: its row, then its values.
pub fn write_row(rec: &CallRecord, out: &mut Vec<u8>) {
    let secs = rec.start_time_unix_nano / 1_000_000_000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let micros = (rec.start_time_unix_nano / 1000) % 1_000_000;
    let _ = writeln!(
        out,
        "{h:02}:{m:02}:{s:02}.{micros:06} {:>7} {:<PROBE_W$} {:<SYMBOL_W$} {:>10}",
        rec.pid,
        cut_end(&rec.probe.spec, PROBE_W),
        cut_start(&rec.probe.symbol, SYMBOL_W),
        duration(rec),
    );
    let mut vals: Vec<String> = rec.args.iter().map(fmt_value).collect();
    if let Some(r) = &rec.returns {
        vals.extend(r.iter().map(|v| format!("→{}", fmt_value(v))));
    }
    wrap(&vals, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ProbeMeta, Resource};
    use std::sync::Arc;

    fn call(spec: &str, symbol: &str, args: Vec<(&str, ValueKind)>) -> CallRecord {
        CallRecord {
            probe: Arc::new(ProbeMeta::simple(spec, symbol, true)),
            pid: 4194304,
            tid: 1,
            // 00:06:40.123456 UTC
            start_time_unix_nano: 1_763_770_000_123_456_789,
            duration_ns: Some(183_000),
            args: args
                .into_iter()
                .map(|(n, kind)| Value {
                    name: n.into(),
                    kind,
                })
                .collect(),
            returns: Some(vec![Value {
                name: "err".into(),
                kind: ValueKind::Interface { nil: true },
            }]),
            resource: Arc::new(Resource::default()),
            unfinished: false,
            span: Default::default(),
        }
    }

    fn text(recs: &[CallRecord]) -> String {
        let mut out = Vec::new();
        write_header(&mut out);
        for r in recs {
            write_row(r, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    fn s(t: &str) -> ValueKind {
        ValueKind::Str {
            text: t.into(),
            truncated: false,
        }
    }

    #[test]
    fn rows_fit_80_columns_and_say_the_time_is_utc() {
        let long_url = format!("http://10.0.0.7:8080/{}", "x".repeat(300));
        let t = text(&[
            call(
                "http-client-urls",
                "net/http.(*Client).Get",
                vec![("url", s("http://10.0.0.7:8080/cart"))],
            ),
            call(
                "a-very-long-spec-name-for-the-shop",
                "github.com/example/shop/internal/orders.(*Service).PlaceOrder",
                vec![
                    ("url", s(&long_url)),
                    ("n", ValueKind::Int(-42)),
                    ("r.URL.Path", s("/api/v1/orders/1234567890")),
                    ("r.Method", s("POST")),
                    ("r.Host", s("shop.example.internal:8443")),
                ],
            ),
        ]);
        for line in t.lines() {
            assert!(
                line.chars().count() <= WIDTH,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("TIME (UTC) "), "{}", lines[0]);
        assert!(lines[0].ends_with("DURATION"));
        assert_eq!(
            lines[1],
            "00:06:40.123456 4194304 http-client-urls net/http.(*Client).Get      183.000µs"
        );
        assert_eq!(lines[2], "    url=\"http://10.0.0.7:8080/cart\" →err=nil");
        // Long names are cut with …: the spec at its end, the symbol at its start.
        assert!(
            lines[3].contains(" a-very-long-spe… …ers.(*Service).PlaceOrder "),
            "{}",
            lines[3]
        );
        // A value longer than a line takes at most three lines and is cut; the next
        // values follow on their own line.
        assert!(lines[4].starts_with("    url=\"http://10.0.0.7:8080/xxx"));
        assert!(lines[6].ends_with('…'), "{}", lines[6]);
        assert_eq!(
            lines[7],
            "    n=-42 r.URL.Path=\"/api/v1/orders/1234567890\" r.Method=\"POST\""
        );
        assert_eq!(
            lines[8],
            "    r.Host=\"shop.example.internal:8443\" →err=nil"
        );
        assert_eq!(lines.len(), 9);
    }

    #[test]
    fn durations_and_calls_without_values() {
        let mut c = call("p", "main.f", vec![]);
        c.returns = None;
        c.duration_ns = Some(2_500_000_000);
        assert!(text(&[c.clone()])
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("    2.500s"));
        c.duration_ns = Some(1_500_000);
        assert!(text(&[c.clone()])
            .lines()
            .nth(1)
            .unwrap()
            .ends_with("   1.500ms"));
        c.duration_ns = None;
        c.unfinished = true;
        let t = text(&[c]);
        assert!(t.lines().nth(1).unwrap().ends_with("unfinished"));
        assert_eq!(t.lines().count(), 2, "no empty value line:\n{t}");
    }
}
