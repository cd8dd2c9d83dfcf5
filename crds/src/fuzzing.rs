//! Entry points for the fuzz targets of the text parsers a user feeds (`fuzz/`), and for
//! their regression inputs (replayed by `crds/tests/fuzz_text.rs`): each takes any bytes,
//! runs a parser on them as text, and checks what it returns. A panic (a stack overflow
//! included) is the failure.
//!
//! Inputs with several parts (a signature and a capture, an expression and its flags) put
//! one part per line.

use crate::csig::{is_go_signature, parse_c_signature, CaptureExpr};
use crate::gopath::parse_go_capture;
use crate::oneliner::{self, TraceOptions};
use crate::signature::parse_signature;
use crate::when::{self, Value, MAX_STEPS, MAX_TERMS};
use crate::Selector;

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// A `when:` predicate: parsed, then evaluated with every term unknown, and with values
/// of every kind.
pub fn when(data: &[u8]) {
    let t = text(data);
    match when::parse(&t) {
        Ok(w) => {
            assert!(
                w.terms.len() <= MAX_TERMS && w.steps() <= MAX_STEPS,
                "{t:?}"
            );
            assert!(w.terms.iter().all(|term| !term.text.is_empty()), "{t:?}");
            let _ = w.eval(|_| None);
            for v in [
                Value::Int(-1),
                Value::Bool(true),
                Value::IsNil(false),
                Value::Unreadable,
                Value::Str {
                    bytes: b"abc".to_vec(),
                    truncated: true,
                },
            ] {
                let _ = w.eval(|_| Some(v.clone()));
            }
        }
        Err(e) => {
            assert!(e.at >= 1 && e.at <= t.chars().count() + 1, "{t:?}: {e}");
            // The message quotes a bounded part of the condition.
            assert!(e.to_string().len() < 1024, "{t:?}: {e}");
        }
    }
}

/// A Go signature, and the names and types it gives.
pub fn go_signature(data: &[u8]) {
    let t = text(data);
    if let Ok(sig) = parse_signature(&t) {
        for p in sig.params.iter().chain(&sig.results) {
            let _ = p.ty.to_string();
        }
        for n in sig.capture_names() {
            let _ = sig.lookup(&n);
            let _ = sig.positional(&n);
        }
    }
}

/// A C prototype (or a USDT argument list), and the declarations it gives.
pub fn c_signature(data: &[u8]) {
    let t = text(data);
    if let Ok(sig) = parse_c_signature(&t) {
        for p in &sig.params {
            let _ = p.ty.declare(&p.name);
            let _ = p.ty.class();
        }
        let _ = sig.capture_names();
    }
}

/// A capture entry (a field path, `len(x)`, a C `ptr[:len]`), alone and checked against
/// a signature: the first line is the signature, the second the entry.
pub fn capture(data: &[u8]) {
    let t = text(data);
    let (sig, entry) = t.split_once('\n').unwrap_or(("", &t));
    let _ = parse_go_capture(entry).map(|c| c.to_string());
    let _ = CaptureExpr::parse(entry);
    if is_go_signature(sig) {
        if let Ok(s) = parse_signature(sig) {
            let _ = s.check_capture(entry, sig);
        }
    }
}

/// A `gprobe trace` expression: the first line; the next ones, where given, are `--when`
/// and `--signature`.
pub fn oneliner(data: &[u8]) {
    let t = text(data);
    let mut lines = t.splitn(3, '\n');
    let expr = lines.next().unwrap_or_default();
    let opts = TraceOptions {
        when: lines.next().map(str::to_string),
        signature: lines.next().map(str::to_string),
        ..TraceOptions::default()
    };
    let exe = Selector {
        executable: Some("/usr/local/bin/app".into()),
        ..Selector::default()
    };
    match oneliner::parse(expr) {
        Ok(o) => {
            assert!(
                expr[o.point.at()..].starts_with(&o.point.text()),
                "{expr:?}"
            );
            let _ = oneliner::build_spec(expr, &opts, exe, None);
        }
        Err(e) => {
            if let Some(at) = e.at {
                assert!(
                    at <= expr.len() && expr.is_char_boundary(at),
                    "{expr:?}: {e:?}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_targets_take_what_once_overflowed_the_stack() {
        when(format!("{}x == 1{}", "(".repeat(20_000), ")".repeat(20_000)).as_bytes());
        when("!".repeat(200_000).as_bytes());
        go_signature(format!("func(x {}int)", "*".repeat(200_000)).as_bytes());
        go_signature(format!("func(x {}int)", "[]".repeat(2_000)).as_bytes());
        c_signature(format!("int f(char {}p)", "*".repeat(200_000)).as_bytes());
        capture(format!("func(a int)\n{}", "a.".repeat(100_000)).as_bytes());
        oneliner(format!("main.f(x)\n{}ok\nfunc(x bool)", "!".repeat(200_000)).as_bytes());
    }
}
