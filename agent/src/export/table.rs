//! A readable table for terminals (`--output table`).

use crate::events::{CallRecord, Value, ValueKind};
use std::io::Write;

pub fn write_header(out: &mut Vec<u8>) {
    let _ = writeln!(
        out,
        "{:<15} {:>7} {:<20} {:<36} {:>12}  VALUES",
        "TIME", "PID", "PROBE", "SYMBOL", "DURATION"
    );
}

fn fmt_value(v: &Value) -> String {
    let s = match &v.kind {
        ValueKind::Bool(b) => b.to_string(),
        ValueKind::Int(i) => i.to_string(),
        ValueKind::Uint(u) => u.to_string(),
        ValueKind::Float(f) => f.to_string(),
        ValueKind::Pointer(p) => format!("{p:#x}"),
        ValueKind::Str { text, truncated } => {
            format!("{text:?}{}", if *truncated { "…" } else { "" })
        }
        ValueKind::Interface { nil } => (if *nil { "nil" } else { "non-nil" }).to_string(),
        ValueKind::Fault => "<unreadable>".to_string(),
    };
    format!("{}={}", v.name, s)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

pub fn write_row(rec: &CallRecord, out: &mut Vec<u8>) {
    let secs = rec.start_time_unix_nano / 1_000_000_000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let micros = (rec.start_time_unix_nano / 1000) % 1_000_000;
    let dur = match rec.duration_ns {
        Some(d) if d >= 1_000_000_000 => format!("{:.3}s", d as f64 / 1e9),
        Some(d) if d >= 1_000_000 => format!("{:.3}ms", d as f64 / 1e6),
        Some(d) => format!("{:.3}µs", d as f64 / 1e3),
        None if rec.unfinished => "unfinished".into(),
        None => "-".into(),
    };
    let mut vals: Vec<String> = rec.args.iter().map(fmt_value).collect();
    if let Some(r) = &rec.returns {
        vals.extend(r.iter().map(|v| format!("→{}", fmt_value(v))));
    }
    let _ = writeln!(
        out,
        "{h:02}:{m:02}:{s:02}.{micros:06} {:>7} {:<20} {:<36} {:>12}  {}",
        rec.pid,
        truncate(&rec.probe.spec, 20),
        truncate(&rec.probe.symbol, 36),
        dur,
        vals.join(" ")
    );
}
