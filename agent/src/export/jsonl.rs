//! The JSONL record (README, "JSONL record"; docs/DESIGN.md): one object per call, field
//! names part of the contract.

use crate::events::{CallRecord, Value, ValueKind};
use std::io::Write;

fn string(out: &mut Vec<u8>, s: &str) {
    // serde_json escapes exactly as JSON requires; writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// One value as JSON.
pub(crate) fn write_value(out: &mut Vec<u8>, v: &ValueKind) {
    value(out, v)
}

fn value(out: &mut Vec<u8>, v: &ValueKind) {
    match v {
        ValueKind::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        ValueKind::Int(i) => {
            let _ = write!(out, "{i}");
        }
        ValueKind::Uint(u) => {
            let _ = write!(out, "{u}");
        }
        ValueKind::Float(f) if f.is_finite() => {
            let _ = write!(out, "{f:?}");
        }
        ValueKind::Float(f) => string(out, &f.to_string()),
        ValueKind::Pointer(p) => {
            let _ = write!(out, "\"{p:#x}\"");
        }
        ValueKind::Str { text, .. } => string(out, text),
        // Listed in the record's "invalid" as well.
        ValueKind::Invalid => out.extend_from_slice(b"\"\""),
        ValueKind::Bytes { bytes, .. } => string(out, &String::from_utf8_lossy(bytes)),
        ValueKind::Interface { nil: false } => out.extend_from_slice(b"\"non-nil\""),
        ValueKind::Interface { nil: true } | ValueKind::Null | ValueKind::Fault => {
            out.extend_from_slice(b"null")
        }
        ValueKind::Array { items, .. } => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                value(out, v);
            }
            out.push(b']');
        }
    }
}

fn object(out: &mut Vec<u8>, vals: &[Value]) {
    out.push(b'{');
    for (i, v) in vals.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, &v.name);
        out.push(b':');
        value(out, &v.kind);
    }
    out.push(b'}');
}

/// `,"key":[names...]` of the values listed, if any.
fn names<'a>(out: &mut Vec<u8>, key: &str, vals: impl Iterator<Item = &'a Value>) {
    let mut first = true;
    for v in vals {
        if first {
            let _ = write!(out, ",\"{key}\":[");
            first = false;
        } else {
            out.push(b',');
        }
        string(out, &v.name);
    }
    if !first {
        out.push(b']');
    }
}

/// Appends one record and a newline to `out`.
pub fn write_record(rec: &CallRecord, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"probe\":");
    string(out, &rec.probe.spec);
    out.extend_from_slice(b",\"symbol\":");
    string(out, &rec.probe.symbol);
    let _ = write!(
        out,
        ",\"pid\":{},\"tid\":{},\"start_time_unix_nano\":{}",
        rec.pid, rec.tid, rec.start_time_unix_nano
    );
    if rec.span.span_id != 0 {
        let _ = write!(
            out,
            ",\"trace_id\":\"{:032x}\",\"span_id\":\"{:016x}\"",
            rec.span.trace_id, rec.span.span_id
        );
        if let Some(p) = rec.span.parent {
            let _ = write!(out, ",\"parent_span_id\":\"{p:016x}\"");
        }
    }
    if let Some(d) = rec.duration_ns {
        let _ = write!(out, ",\"duration_ns\":{d}");
    }
    out.extend_from_slice(b",\"args\":");
    object(out, &rec.args);
    if let Some(r) = &rec.returns {
        out.extend_from_slice(b",\"returns\":");
        object(out, r);
    }
    let all = || rec.args.iter().chain(rec.returns.iter().flatten());
    let truncated = all().filter(|v| {
        matches!(
            v.kind,
            ValueKind::Str {
                truncated: true,
                ..
            } | ValueKind::Bytes {
                truncated: true,
                ..
            } | ValueKind::Array {
                truncated: true,
                ..
            }
        )
    });
    names(out, "truncated", truncated);
    names(out, "invalid", all().filter(|v| v.kind.has_invalid()));
    // Shown as null, as a nil one is: the list tells them apart.
    names(
        out,
        "unreadable",
        all().filter(|v| v.kind == ValueKind::Fault),
    );
    if rec.unfinished {
        out.extend_from_slice(b",\"unfinished\":true");
    }
    out.extend_from_slice(b",\"resource\":{");
    for (i, (k, v)) in rec.resource.attributes.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, k);
        out.push(b':');
        string(out, v);
    }
    out.extend_from_slice(b"}}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ProbeMeta, Resource};
    use std::sync::Arc;

    #[test]
    fn record_matches_the_documented_shape() {
        let rec = CallRecord {
            probe: Arc::new(ProbeMeta::simple(
                "http-client-urls",
                "net/http.(*Client).Get",
                true,
            )),
            pid: 4242,
            tid: 4250,
            start_time_unix_nano: 1763770000000000000,
            duration_ns: Some(183000),
            args: vec![Value {
                name: "url".into(),
                kind: ValueKind::Str {
                    text: "http://10.0.0.7:8080/cart\"".into(),
                    truncated: true,
                },
            }],
            returns: Some(vec![Value {
                name: "err".into(),
                kind: ValueKind::Interface { nil: false },
            }]),
            resource: Arc::new(Resource {
                attributes: vec![("process.executable.path", "/app/shop".into())],
            }),
            unfinished: false,
            span: crate::events::SpanIds {
                trace_id: 0x4bf92f3577b34da6a3ce929d0e0e4736,
                span_id: 0x00f067aa0ba902b7,
                parent: Some(0x0a),
            },
        };
        let mut out = Vec::new();
        write_record(&rec, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["probe"], "http-client-urls");
        assert_eq!(v["symbol"], "net/http.(*Client).Get");
        assert_eq!(v["pid"], 4242);
        assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(v["span_id"], "00f067aa0ba902b7");
        assert_eq!(v["parent_span_id"], "000000000000000a");
        assert_eq!(v["tid"], 4250);
        assert_eq!(v["start_time_unix_nano"], 1763770000000000000u64);
        assert_eq!(v["duration_ns"], 183000);
        assert_eq!(v["args"]["url"], "http://10.0.0.7:8080/cart\"");
        assert_eq!(v["returns"]["err"], "non-nil");
        assert_eq!(v["truncated"][0], "url");
        assert_eq!(v["resource"]["process.executable.path"], "/app/shop");
        assert!(v.get("unfinished").is_none());
    }

    #[test]
    fn nil_is_null_and_slices_are_arrays_listed_when_cut() {
        let s = |t: &str| ValueKind::Str {
            text: t.into(),
            truncated: false,
        };
        let mut out = Vec::new();
        let vals = [
            ValueKind::Null,
            ValueKind::Interface { nil: true },
            ValueKind::Array {
                items: vec![
                    s("a"),
                    ValueKind::Int(-1),
                    ValueKind::Bool(true),
                    ValueKind::Null,
                ],
                truncated: true,
            },
        ];
        for (i, v) in vals.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_value(&mut out, v);
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"null,null,["a",-1,true,null]"#
        );
        let rec = CallRecord {
            probe: Arc::new(ProbeMeta::simple("p", "main.f", false)),
            pid: 1,
            tid: 1,
            start_time_unix_nano: 0,
            duration_ns: None,
            args: vec![Value {
                name: "o.Tags".into(),
                kind: vals[2].clone(),
            }],
            returns: None,
            resource: Arc::new(Resource::default()),
            unfinished: false,
            span: crate::events::SpanIds::default(),
        };
        let mut out = Vec::new();
        write_record(&rec, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["args"]["o.Tags"][0], "a");
        assert_eq!(v["truncated"][0], "o.Tags");
        assert!(v.get("invalid").is_none());
    }

    #[test]
    fn a_negative_length_is_an_empty_value_listed_as_invalid() {
        let val = |name: &str, kind| Value {
            name: name.into(),
            kind,
        };
        let rec = CallRecord {
            probe: Arc::new(ProbeMeta::simple("p", "put", false)),
            pid: 1,
            tid: 1,
            start_time_unix_nano: 0,
            duration_ns: None,
            args: vec![
                val("buf[:len]", ValueKind::Invalid),
                val("len", ValueKind::Int(-1)),
                val(
                    "names",
                    ValueKind::Array {
                        items: vec![ValueKind::Invalid],
                        truncated: false,
                    },
                ),
            ],
            returns: None,
            resource: Arc::new(Resource::default()),
            unfinished: false,
            span: crate::events::SpanIds::default(),
        };
        let mut out = Vec::new();
        write_record(&rec, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["args"]["buf[:len]"], "");
        assert_eq!(v["args"]["names"], serde_json::json!([""]));
        assert_eq!(v["invalid"], serde_json::json!(["buf[:len]", "names"]));
        assert!(v.get("truncated").is_none());
        assert!(v.get("unreadable").is_none());
    }

    #[test]
    fn memory_not_read_is_null_listed_as_unreadable_and_nil_is_not() {
        let val = |name: &str, kind| Value {
            name: name.into(),
            kind,
        };
        let rec = CallRecord {
            probe: Arc::new(ProbeMeta::simple("p", "put", false)),
            pid: 1,
            tid: 1,
            start_time_unix_nano: 0,
            duration_ns: None,
            args: vec![val("s", ValueKind::Fault), val("p", ValueKind::Null)],
            returns: None,
            resource: Arc::new(Resource::default()),
            unfinished: false,
            span: crate::events::SpanIds::default(),
        };
        let mut out = Vec::new();
        write_record(&rec, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (&v["args"]["s"], &v["args"]["p"]),
            (&serde_json::Value::Null, &serde_json::Value::Null)
        );
        assert_eq!(v["unreadable"], serde_json::json!(["s"]));
        assert!(v.get("invalid").is_none());
    }
}
