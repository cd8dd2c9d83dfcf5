//! Traces that cross services: e2e/testdata/services runs a front and a back service and a
//! client that sends some requests with a traceparent of their own (valid, of a later
//! version, or invalid), some with many headers. The front handler (`propagate: true`)
//! joins the client's trace, its direct call and the goroutine it starts are its
//! children, and its requests to the back service (its own, and the goroutine's) carry
//! its span where the kernel lets BPF write it (else gprobe says why and counts the
//! requests that went out without it). JSONL and a real OTLP receiver must show exactly
//! the trees the program's own record describes. A handler joins the trace of a request
//! with many headers (150, 850, 1,000) on both Go map layouts, and counts a request with more
//! than gprobe searches (`join_incomplete`). Requests that share one http.Header, made by
//! calls on many goroutines at once, each carry their own call's span. They need root
//! (BPF).

mod sampled;
mod service;
mod shared;
mod two_services;

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::otlp_receiver::{attr_str, grpc_receiver, receiver_runtime, Received};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use service::{attached, ctx, id, Service};
use shared::run_shared;
use two_services::{run_services, REQUESTS};

#[test]
fn a_requests_spans_form_one_trace_across_two_services() {
    let _serial = serial();
    require_trace("a_requests_spans_form_one_trace_across_two_services");
    let rt = receiver_runtime();
    // Go 1.19: buckets of the old map layout; Go 1.27 stripped: swiss maps, and the
    // handlers' types from their signatures and Go's runtime type data.
    for (v, stripped) in [(GoVersion::Go119, false), (GoVersion::Go127, true)] {
        let (rec, endpoint) = grpc_receiver(&rt);
        let bin = program("e2e/testdata/services", v, stripped);
        let sig = |p: ProbeBuilder, s: &str| if stripped { p.signature(s) } else { p };
        let handler = "func(w http.ResponseWriter, r *http.Request)";
        let spec = SpecBuilder::new("services")
            .executable(&bin)
            .events_per_second(0)
            .probe(
                sig(ProbeBuilder::new("main.frontHandler"), handler)
                    .capture(["r.URL.RawQuery"])
                    .latency()
                    .propagate(),
            )
            .probe(
                sig(ProbeBuilder::new("main.work"), "func(id int) int")
                    .capture(["id"])
                    .latency(),
            )
            .probe(
                sig(ProbeBuilder::new("main.async"), "func(id int) int")
                    .capture(["id"])
                    .latency(),
            )
            .probe(
                sig(ProbeBuilder::new("main.backHandler"), handler)
                    .capture(["r.URL.RawQuery"])
                    .latency(),
            )
            .probe(sig(ProbeBuilder::new("main.lookup"), "func(id int) int").capture(["id"]))
            .yaml();
        let what = format!("{v:?} stripped={stripped}");
        let prop = run_services(&bin, &spec, &endpoint, &[], &rec, &what);
        if !prop["error"].is_null() {
            // The kernel forbids the write: the dry run checks the rest (the writer's type
            // check of the connection's *bufio.Writer, the room in its buffer), counts what
            // it would have written, and still sends the requests as they were.
            let (rec, endpoint) = grpc_receiver(&rt);
            let dry = ["--propagate-dry-run"];
            let prop = run_services(&bin, &spec, &endpoint, &dry, &rec, &format!("{what} dry"));
            assert_eq!(prop["written"], 2 * REQUESTS, "{what}: {prop}");
            assert_eq!(prop["dry_run"], true, "{what}: {prop}");
        }
    }
}

#[test]
fn sampling_keeps_the_same_requests_in_both_services() {
    let _serial = serial();
    require_trace("sampling_keeps_the_same_requests_in_both_services");
    let bin = program("e2e/testdata/services", GoVersion::Go127, true);
    if !sampled::run_sampled(&bin, &[], "Go 1.27 stripped") {
        // The kernel forbids the write: the back service decides on traces of its own.
        // The dry run makes every line but writes none: those of the calls left out must
        // say "not sampled".
        eprintln!("traceparent writes refused by this kernel: the dry run checks the lines");
        assert!(!sampled::run_sampled(
            &bin,
            &["--propagate-dry-run"],
            "dry run"
        ));
    }
}

/// The last value the receiver got of the counter `name` for the probe on `symbol`.
fn counter(rec: &Received, name: &str, symbol: &str) -> Option<i64> {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value as V};
    let mut last = None;
    for req in rec.metrics.lock().unwrap().iter() {
        for sm in req.resource_metrics.iter().flat_map(|r| &r.scope_metrics) {
            for m in sm.metrics.iter().filter(|m| m.name == name) {
                if let Some(Data::Sum(sum)) = &m.data {
                    for p in &sum.data_points {
                        if attr_str(&p.attributes, "code.function").as_deref() == Some(symbol) {
                            if let Some(V::AsInt(v)) = p.value {
                                last = Some(v);
                            }
                        }
                    }
                }
            }
        }
    }
    last
}

/// Requests of `headers` headers, a valid traceparent among them, `n` of them from id
/// `first` on, and whether the handler must join their traces.
const MANY_HEADERS: [(usize, usize, usize, bool); 5] = [
    (10, 3, 1, true),
    (150, 5, 101, true),
    // As many as net/http sizes a request's map for.
    (1000, 3, 201, true),
    // More keys than gprobe searches (1,024): not searched, counted.
    (1100, 2, 301, false),
    // Go 1.19: the server sizes the map for the headers in its first 4 KiB (about 290
    // here), so it grows while they are read; past 832 keys to 256 buckets, moving two
    // old ones per key added: with 852 keys most of the 128 old buckets are still to be
    // searched.
    (850, 2, 401, true),
];

#[test]
fn a_handler_joins_the_trace_of_a_request_with_many_headers() {
    let _serial = serial();
    require_trace("a_handler_joins_the_trace_of_a_request_with_many_headers");
    let rt = receiver_runtime();
    // Go 1.19: buckets with overflow chains, old buckets while the map grows; Go 1.27
    // stripped: swiss tables, a directory of several for 1,000 headers.
    for (v, stripped) in [(GoVersion::Go119, false), (GoVersion::Go127, true)] {
        let what = format!("{v:?} stripped={stripped}");
        let (rec, endpoint) = grpc_receiver(&rt);
        let bin = program("e2e/testdata/services", v, stripped);
        let mut probe = ProbeBuilder::new("main.backHandler")
            .capture(["r.URL.RawQuery"])
            .latency();
        if stripped {
            probe = probe.signature("func(w http.ResponseWriter, r *http.Request)");
        }
        let spec = SpecBuilder::new("headers")
            .executable(&bin)
            .events_per_second(0)
            .probe(probe)
            .yaml();
        let g = Gprobe::cmd(&spec)
            .args(&["--otlp-endpoint", &endpoint])
            .summary_file()
            .start();
        g.wait_ready();
        let dir = gprobe_e2e::harness::build_dir();
        let back = Service::start(&bin, &["-role", "back"], dir.join("headers-back.log"));
        attached(&g, &back, 1);
        let mut sent = Vec::new();
        for (headers, n, first, _) in MANY_HEADERS {
            let (h, n, f) = (headers.to_string(), n.to_string(), first.to_string());
            let args = ["-role", "headers", "-backend", &back.url(), "-headers", &h];
            let out = run_program(&bin, &[&args[..], &["-n", &n, "-first", &f]].concat());
            sent.extend(program_lines(&out, "sent "));
        }
        let received = back.lines("back ");
        drop(back);
        let run = g.stop();
        assert!(run.status.success(), "{what}: {}", run.stderr);
        let records = run.records_of("main.backHandler");
        let expected: usize = MANY_HEADERS.iter().map(|c| c.1).sum();
        assert_eq!(sent.len(), expected, "{what}");
        assert_eq!(records.len(), expected, "{what}: every call recorded");
        let mut joined = 0;
        for line in &sent {
            let i: usize = line["id"].parse().unwrap();
            let (headers, _, _, joins) = *MANY_HEADERS.iter().rev().find(|c| i >= c.2).unwrap();
            assert_eq!(line["headers"], headers.to_string(), "{what}");
            let tp = &line["traceparent"];
            assert_eq!(&received[&line["id"]], tp, "{what}: the handler got it");
            let q = format!("id={i}");
            let r = records
                .iter()
                .find(|r| r["args"]["r.URL.RawQuery"] == q.as_str())
                .unwrap_or_else(|| panic!("{what}: no record of {q}"));
            let (trace, span) = ctx(tp).unwrap();
            if joins {
                assert_eq!(
                    (id(r, "trace_id"), id(r, "parent_span_id")),
                    (Some(trace), Some(span)),
                    "{what}: {headers} headers: {r} joins {tp}"
                );
                joined += 1;
            } else {
                assert_eq!(id(r, "parent_span_id"), None, "{what}: {r} is a root");
                assert_ne!(id(r, "trace_id"), Some(trace), "{what}: {r}");
            }
        }
        assert_eq!(joined, expected - 2, "{what}");
        let summary = run.summary_json();
        let p = &summary["probes"][0];
        assert_eq!(p["symbol"], "main.backHandler", "{what}: {summary}");
        assert_eq!(
            p["join_incomplete"], 2,
            "{what}: the two requests of 1,100 headers are counted: {summary}"
        );
        assert_eq!(
            counter(&rec, "gprobe.joins.incomplete", "main.backHandler"),
            Some(2),
            "{what}: the metric says the same"
        );
    }
}

#[test]
fn requests_sharing_one_header_each_carry_their_own_span() {
    let _serial = serial();
    require_trace("requests_sharing_one_header_each_carry_their_own_span");
    for (v, stripped) in [(GoVersion::Go119, false), (GoVersion::Go127, true)] {
        let what = format!("{v:?} stripped={stripped}");
        let bin = program("e2e/testdata/services", v, stripped);
        let sig = |p: ProbeBuilder, s: &str| if stripped { p.signature(s) } else { p };
        let spec = SpecBuilder::new("shared")
            .executable(&bin)
            .events_per_second(0)
            .probe(
                sig(
                    ProbeBuilder::new("main.call"),
                    "func(id int, c *http.Client, back string, h http.Header) error",
                )
                .capture(["id"])
                .latency()
                .propagate(),
            )
            .probe(
                sig(
                    ProbeBuilder::new("main.backHandler"),
                    "func(w http.ResponseWriter, r *http.Request)",
                )
                .capture(["r.URL.RawQuery"])
                .latency(),
            )
            .yaml();
        let prop = run_shared(&bin, &spec, &[], &what);
        if !prop["error"].is_null() {
            // The kernel forbids the write: the dry run does everything else and counts.
            let prop = run_shared(
                &bin,
                &spec,
                &["--propagate-dry-run"],
                &format!("{what} dry"),
            );
            assert_eq!(prop["dry_run"], true, "{what}: {prop}");
        }
    }
}

/// Kernels without bpf_loop (before 5.17) get the uprobe program built without it, here by
/// turning it off: gprobe says what that costs, traces every call, and a handler whose
/// request carries a traceparent does not join its trace (its header map is not searched),
/// counted as `join_incomplete`, never joined wrong.
#[test]
fn without_bpf_loop_a_handler_does_not_join_and_it_is_counted() {
    let _serial = serial();
    require_trace("without_bpf_loop_a_handler_does_not_join_and_it_is_counted");
    let bin = program("e2e/testdata/services", GoVersion::Go127, false);
    let spec = SpecBuilder::new("noloop")
        .executable(&bin)
        .events_per_second(0)
        .probe(
            ProbeBuilder::new("main.backHandler")
                .capture(["r.URL.RawQuery"])
                .latency(),
        )
        .yaml();
    let g = Gprobe::cmd(&spec)
        .env("GPROBE_DISABLE_FEATURES", "bpf_loop")
        .summary_file()
        .start();
    g.wait_ready();
    let dir = gprobe_e2e::harness::build_dir();
    let back = Service::start(&bin, &["-role", "back"], dir.join("noloop-back.log"));
    attached(&g, &back, 1);
    let args = ["-role", "headers", "-backend", &back.url(), "-headers", "5"];
    let out = run_program(&bin, &[&args[..], &["-n", "4", "-first", "1"]].concat());
    let sent = program_lines(&out, "sent ");
    drop(back);
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("bpf_loop missing: Go maps are not searched"),
        "gprobe says what the kernel lacks: {}",
        run.stderr
    );
    let records = run.records_of("main.backHandler");
    assert_eq!(sent.len(), 4);
    assert_eq!(records.len(), 4, "every call recorded: {records:?}");
    for line in &sent {
        let (trace, _) = ctx(&line["traceparent"]).unwrap();
        let q = format!("id={}", line["id"]);
        let r = records
            .iter()
            .find(|r| r["args"]["r.URL.RawQuery"] == q.as_str())
            .unwrap_or_else(|| panic!("no record of {q}"));
        assert_eq!(id(r, "parent_span_id"), None, "{r} is a root");
        assert_ne!(id(r, "trace_id"), Some(trace), "{r} did not join");
    }
    let summary = run.summary_json();
    assert_eq!(summary["probes"][0]["join_incomplete"], 4, "{summary}");
    let missing: Vec<_> = summary["kernel"]["features"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f[1]["state"] == "missing")
        .map(|f| f[0].as_str().unwrap().to_string())
        .collect();
    assert!(missing.contains(&"bpf_loop".to_string()), "{summary}");
}
