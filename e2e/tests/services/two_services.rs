//! The two services and the client under gprobe, and the check that JSONL and the OTLP
//! receiver show exactly the trace trees the program's own record describes.

use crate::service::{attached, ctx, id, text, Service};
use gprobe_e2e::harness::{program_lines, run_program, Gprobe};
use gprobe_e2e::otlp_receiver::{spans, Received};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Requests the client sends.
pub const REQUESTS: usize = 12;

/// Runs the two services and the client under gprobe with `spec`; checks the traces;
/// returns the summary's propagation counts.
pub fn run_services(
    bin: &Path,
    spec: &str,
    endpoint: &str,
    extra: &[&str],
    rec: &Received,
    what: &str,
) -> Value {
    let mut args = vec!["--otlp-endpoint", endpoint];
    args.extend_from_slice(extra);
    let g = Gprobe::cmd(spec).args(&args).summary_file().start();
    g.wait_ready();
    let dir = gprobe_e2e::harness::build_dir();
    let back = Service::start(bin, &["-role", "back"], dir.join("services-back.log"));
    attached(&g, &back, 5);
    let front = Service::start(
        bin,
        &["-role", "front", "-backend", &back.url()],
        dir.join("services-front.log"),
    );
    attached(&g, &front, 5);
    let front_url = front.url();
    let n = REQUESTS.to_string();
    let out = run_program(bin, &["-role", "client", "-front", &front_url, "-n", &n]);
    let (fronts, backs) = (front.lines("front "), back.lines("back "));
    drop((front, back));
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    check(&run, &out, &fronts, &backs, rec, what);
    run.summary_json()["propagation"].clone()
}

fn check(
    run: &gprobe_e2e::harness::Run,
    client_out: &str,
    fronts: &BTreeMap<String, String>,
    backs: &BTreeMap<String, String>,
    rec: &Received,
    what: &str,
) {
    let lines = program_lines(client_out, "sent ");
    let sent: BTreeMap<String, String> = lines
        .iter()
        .map(|l| (l["id"].clone(), l["traceparent"].clone()))
        .collect();
    let valid: BTreeMap<String, bool> = lines
        .iter()
        .map(|l| (l["id"].clone(), l["valid"] == "1"))
        .collect();
    assert_eq!(sent.len(), REQUESTS, "{what}");
    assert!(valid.values().filter(|v| **v).count() >= 4, "{what}");
    assert_eq!(
        &sent, fronts,
        "{what}: the front service got what the client sent"
    );
    let records = run.records();
    let by_span: BTreeMap<String, &Value> = records
        .iter()
        .map(|r| (id(r, "span_id").expect("every record has a span id"), r))
        .collect();
    assert_eq!(by_span.len(), records.len(), "{what}: span ids are unique");
    let of = |symbol: &str, key: &str, value: &str| -> &Value {
        let hits: Vec<&&Value> = by_span
            .values()
            .filter(|r| r["symbol"] == symbol)
            .filter(|r| text(&r["args"][key]) == value)
            .collect();
        assert_eq!(hits.len(), 1, "{what}: one {symbol} with {key}={value}");
        hits[0]
    };
    let parent = |r: &Value| id(r, "parent_span_id");
    let summary = run.summary_json();
    let prop = &summary["propagation"];
    // Each front request makes two: its own, and its goroutine's.
    assert_eq!(prop["requests"], 2 * REQUESTS, "{what}: {summary}");
    let written = prop["written"].as_u64().unwrap();
    let dry_run = prop["dry_run"] == true;
    let kernel_writes = prop["error"].is_null() && !dry_run;
    if dry_run {
        // Counted as written; nothing was: the requests went out as they were.
        assert_eq!(written, 2 * REQUESTS as u64, "{what}: {prop}");
    } else if kernel_writes {
        assert_eq!(
            written,
            2 * REQUESTS as u64,
            "{what}: every request carried its span"
        );
    } else {
        // This kernel forbids BPF writes to process memory (lockdown): said, and counted.
        assert_eq!(written, 0, "{what}");
        assert!(
            prop["error"]
                .as_str()
                .unwrap()
                .contains("bpf_probe_write_user"),
            "{what}: {prop}"
        );
        assert!(
            run.stderr.contains("carry no traceparent"),
            "{}",
            run.stderr
        );
    }
    for (i, tp) in &sent {
        let q = format!("id={i}");
        let f = of("main.frontHandler", "r.URL.RawQuery", &q);
        let (ft, fs) = (id(f, "trace_id").unwrap(), id(f, "span_id").unwrap());
        match ctx(tp).filter(|_| valid[i]) {
            Some((trace, span)) => {
                assert_eq!(
                    (&ft, parent(f)),
                    (&trace, Some(span)),
                    "{what}: {f} joins {tp}"
                )
            }
            None => assert_eq!(parent(f), None, "{what}: {f} is a root ({tp})"),
        }
        for child in ["main.work", "main.async"] {
            let c = of(child, "id", i);
            assert_eq!(parent(c).as_ref(), Some(&fs), "{what}: {c} under {f}");
            assert_eq!(id(c, "trace_id").as_ref(), Some(&ft), "{what}: {c}");
        }
        // The request the handler makes, and the one the goroutine it started makes.
        for (query, line) in [
            (q.clone(), i.clone()),
            (format!("{q}&from=goroutine"), format!("{i}/goroutine")),
        ] {
            let b = of("main.backHandler", "r.URL.RawQuery", &query);
            let bs = id(b, "span_id");
            let lookups: Vec<&&Value> = by_span
                .values()
                .filter(|r| r["symbol"] == "main.lookup" && parent(r) == bs)
                .collect();
            assert_eq!(lookups.len(), 1, "{what}: one lookup under {b}");
            assert_eq!(text(&lookups[0]["args"]["id"]), *i, "{what}: {b}");
            assert_eq!(id(lookups[0], "trace_id"), id(b, "trace_id"), "{what}: {b}");
            if kernel_writes {
                assert_eq!(
                    backs[&line],
                    format!("00-{ft}-{fs}-01"),
                    "{what}: request {line}"
                );
                assert_eq!(
                    (id(b, "trace_id"), parent(b)),
                    (Some(ft.clone()), Some(fs.clone())),
                    "{what}: {b}"
                );
            } else {
                assert_eq!(
                    backs[&line], "-",
                    "{what}: request {line} went out as it was"
                );
                assert_eq!(parent(b), None, "{what}: {b} is a root");
                assert_ne!(id(b, "trace_id"), Some(ft.clone()), "{what}: {b}");
            }
        }
    }
    assert_eq!(records.len(), REQUESTS * 7, "{what}: every call recorded");

    // The receiver has the same spans with the same ids and parents.
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let got: BTreeMap<String, (String, String, String)> = spans(rec)
        .into_iter()
        .map(|(_, s)| {
            let p = if s.parent_span_id.is_empty() {
                String::new()
            } else {
                hex(&s.parent_span_id)
            };
            (hex(&s.span_id), (s.name.clone(), hex(&s.trace_id), p))
        })
        .collect();
    let want: BTreeMap<String, (String, String, String)> = by_span
        .iter()
        .map(|(s, r)| {
            let name = r["symbol"].as_str().unwrap().to_string();
            (
                s.clone(),
                (
                    name,
                    id(r, "trace_id").unwrap(),
                    parent(r).unwrap_or_default(),
                ),
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "{what}: the receiver's spans are the records' spans"
    );
}
