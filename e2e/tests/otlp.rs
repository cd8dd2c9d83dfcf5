//! OTLP export end to end: gprobe traces a real Go program and exports to a real OTLP
//! receiver started here (gRPC with tonic, and HTTP/protobuf), built on opentelemetry-proto.

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{build_dir, program, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::otlp_receiver::{attr_str, grpc_receiver, http_receiver, receiver_runtime};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use std::collections::BTreeSet;

fn check(protocol: &str) {
    let rt = receiver_runtime();
    let (rec, endpoint) = if protocol == "grpc" {
        grpc_receiver(&rt)
    } else {
        http_receiver(&rt)
    };
    let bin = program("examples/http-client", GoVersion::Go127, false);
    let _guard = serial();
    let spec = SpecBuilder::new("otlp-urls")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("net/http.(*Client).Get")
                .signature("func(c *Client, url string) (resp *Response, err error)")
                .capture(["url", "err"])
                .latency(),
        )
        .yaml();
    let g = Gprobe::start(
        &spec,
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            protocol,
            "--metrics-interval",
            "1s",
        ],
    );
    let urls_file = build_dir().join(format!("otlp-urls-{}.txt", protocol.replace('/', "-")));
    run_program(
        &bin,
        &[
            "-n",
            "5",
            "-interval",
            "20ms",
            "-urls-out",
            urls_file.to_str().unwrap(),
        ],
    );
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    let fetched: BTreeSet<String> = std::fs::read_to_string(&urls_file)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let jsonl = run.records_of("net/http.(*Client).Get");
    assert_eq!(jsonl.len(), 5);

    // Spans: one per call, named after the symbol, values as attributes, the process as resource.
    let traces = rec.traces.lock().unwrap().clone();
    let mut urls = BTreeSet::new();
    let mut spans = 0;
    for req in &traces {
        for rs in &req.resource_spans {
            let res = &rs.resource.as_ref().expect("resource").attributes;
            assert_eq!(
                attr_str(res, "service.name").as_deref(),
                Some("http-client")
            );
            assert_eq!(
                attr_str(res, "process.executable.path").as_deref(),
                bin.to_str()
            );
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    spans += 1;
                    assert_eq!(s.name, "net/http.(*Client).Get");
                    // Every call succeeds: a nil error has no attribute (JSON: null).
                    assert!(
                        !s.attributes.iter().any(|kv| kv.key == "gprobe.returns.err"),
                        "{:?}",
                        s.attributes
                    );
                    assert_eq!(
                        attr_str(&s.attributes, "gprobe.probe").as_deref(),
                        Some("otlp-urls")
                    );
                    let url = attr_str(&s.attributes, "gprobe.args.url").unwrap();
                    let j = jsonl
                        .iter()
                        .find(|r| r["args"]["url"] == url.as_str())
                        .expect("span matches a JSONL record");
                    assert_eq!(
                        s.start_time_unix_nano,
                        j["start_time_unix_nano"].as_u64().unwrap()
                    );
                    assert_eq!(
                        s.end_time_unix_nano - s.start_time_unix_nano,
                        j["duration_ns"].as_u64().unwrap()
                    );
                    urls.insert(url);
                }
            }
        }
    }
    assert_eq!(spans, 5, "{protocol}: spans received");
    assert_eq!(urls, fetched);

    // Metrics: the final export holds the cumulative totals.
    let metrics = rec.metrics.lock().unwrap().clone();
    let mut calls = None;
    let mut hist_count = None;
    let mut lost_seen = false;
    for req in &metrics {
        for rm in &req.resource_metrics {
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    match (m.name.as_str(), &m.data) {
                        ("gprobe.calls", Some(Data::Sum(s))) => {
                            for p in &s.data_points {
                                assert_eq!(
                                    attr_str(&p.attributes, "code.function").as_deref(),
                                    Some("net/http.(*Client).Get")
                                );
                                use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
                                if let Some(Value::AsInt(v)) = p.value {
                                    calls = Some(v);
                                }
                            }
                        }
                        ("gprobe.call.duration", Some(Data::ExponentialHistogram(h))) => {
                            hist_count = h.data_points.last().map(|p| p.count);
                        }
                        ("gprobe.events.lost", Some(Data::Sum(_))) => lost_seen = true,
                        _ => {}
                    }
                }
            }
        }
    }
    assert_eq!(
        calls,
        Some(5),
        "{protocol}: gprobe.calls; {} metric requests; gprobe stderr:\n{}",
        metrics.len(),
        run.stderr
    );
    assert_eq!(
        hist_count,
        Some(5),
        "{protocol}: gprobe.call.duration count"
    );
    assert!(lost_seen, "{protocol}: gprobe.events.lost exported");
}

#[test]
fn spans_and_metrics_reach_an_otlp_grpc_receiver() {
    require_trace("otlp grpc");
    check("grpc");
}

#[test]
fn spans_and_metrics_reach_an_otlp_http_protobuf_receiver() {
    require_trace("otlp http");
    check("http/protobuf");
}

/// The spans of nested calls and of a goroutine a call started reach the receiver as
/// trees: each child's parent span id is its parent call's span, in the parent's trace.
#[test]
fn nested_calls_and_their_goroutines_reach_the_receiver_as_span_trees() {
    require_trace("nested_calls_and_their_goroutines_reach_the_receiver_as_span_trees");
    let rt = receiver_runtime();
    let (rec, endpoint) = grpc_receiver(&rt);
    let bin = program("e2e/testdata/nest", GoVersion::Go127, false);
    let _guard = serial();
    let spec = SpecBuilder::new("nest")
        .executable(&bin)
        .events_per_second(0)
        .probe(ProbeBuilder::new("main.handle").capture(["id"]).latency())
        .probe(ProbeBuilder::new("main.step").capture(["id"]).latency())
        .probe(ProbeBuilder::new("main.bg").capture(["id"]).latency())
        .yaml();
    let g = Gprobe::start(&spec, &["--otlp-endpoint", &endpoint]);
    run_program(&bin, &["-requests", "10", "-workers", "3"]);
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);

    use gprobe_e2e::otlp_receiver::{attr, spans};
    use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
    let spans: Vec<_> = spans(&rec).into_iter().map(|(_, s)| s).collect();
    assert_eq!(spans.len(), 10 + 20 + 10, "every call's span arrived");
    let id = |s: &opentelemetry_proto::tonic::trace::v1::Span| match attr(
        &s.attributes,
        "gprobe.args.id",
    ) {
        Some(AnyValue::IntValue(i)) => *i,
        other => panic!("no gprobe.args.id in {s:?}: {other:?}"),
    };
    let by_span: std::collections::HashMap<&[u8], &_> =
        spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let mut roots = BTreeSet::new();
    for s in &spans {
        if s.name == "main.handle" {
            assert!(s.parent_span_id.is_empty(), "a handle is a root: {s:?}");
            roots.insert(id(s));
            continue;
        }
        let p = by_span[s.parent_span_id.as_slice()];
        assert_eq!(p.name, "main.handle", "{} under {}", s.name, p.name);
        assert_eq!(id(p), id(s));
        assert_eq!(p.trace_id, s.trace_id);
    }
    assert_eq!(roots, (1..=10).collect());
}
