//! Calls a predicate leaves out are not exported over OTLP either: the spans a real
//! receiver gets are exactly the JSONL records, and the calls the predicate holds for;
//! `gprobe.calls` and `gprobe.call.duration` still count every call, the kept ones apart.

use super::go::{builds, calls, go_id, handle, named, ID, SRC, SYMBOL};
use super::{assert_kept, records, spec, trace_with};
use gprobe_e2e::harness::{program, require_trace};
use gprobe_e2e::otlp_receiver::{attr, attr_str, grpc_receiver, receiver_runtime, spans};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as NumberValue;

#[test]
fn only_the_calls_a_predicate_keeps_are_exported_as_spans() {
    require_trace("otlp");
    let rt = receiver_runtime();
    let (rec, endpoint) = grpc_receiver(&rt);
    let (v, stripped) = builds()[0];
    let bin = program(SRC, v, stripped);
    let when = r#"hasPrefix(path, "/api/") && err == nil"#;
    let specs = [spec(
        "otlp-api",
        &bin,
        handle(stripped, &[ID]).latency().when(when),
    )];
    let otlp = ["--otlp-endpoint", &endpoint, "--metrics-interval", "1s"];
    let (run, out) = trace_with(&specs, &otlp, &bin, &["-n", "50"]);
    let calls = calls(&out);
    let kept: Vec<bool> = calls
        .iter()
        .map(|c| c.path.starts_with("/api/") && !c.err)
        .collect();
    assert_kept(&run, SYMBOL, "otlp-api", &named(&calls), &kept, go_id, when);

    let mut want: Vec<i64> = calls
        .iter()
        .zip(&kept)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c.id)
        .collect();
    let mut exported: Vec<i64> = spans(&rec)
        .iter()
        .map(|(_, s)| {
            assert_eq!(s.name, SYMBOL);
            assert_eq!(
                attr_str(&s.attributes, "gprobe.probe").as_deref(),
                Some("otlp-api")
            );
            match attr(&s.attributes, &format!("gprobe.args.{ID}")) {
                Some(AnyValue::IntValue(i)) => *i,
                other => panic!("no gprobe.args.{ID} in {s:?}: {other:?}"),
            }
        })
        .collect();
    want.sort_unstable();
    exported.sort_unstable();
    assert_eq!(exported, want, "spans exported (left), calls kept (right)");
    let mut jsonl: Vec<i64> = records(&run, SYMBOL, "otlp-api")
        .iter()
        .map(|r| r["args"][ID].as_i64().unwrap())
        .collect();
    jsonl.sort_unstable();
    assert_eq!(jsonl, want);
    // gprobe.calls counts every call: the kept ones as gprobe.sampled = true, the others
    // as false (the last export holds the totals).
    let mut counted = std::collections::BTreeMap::<bool, i64>::new();
    // gprobe.call.duration too: every call seen returning (all of them here), by sampled.
    let mut timed = std::collections::BTreeMap::<bool, u64>::new();
    for req in rec.metrics.lock().unwrap().iter() {
        for m in req
            .resource_metrics
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
        {
            let sampled_of = |attrs: &[KeyValue]| -> Option<bool> {
                if attr_str(attrs, "gprobe.probe").as_deref() != Some("otlp-api") {
                    return None;
                }
                match attr(attrs, "gprobe.sampled") {
                    Some(AnyValue::BoolValue(b)) => Some(*b),
                    other => panic!("gprobe.sampled is {other:?}: {attrs:?}"),
                }
            };
            if m.name == "gprobe.call.duration" {
                let Some(Data::ExponentialHistogram(h)) = &m.data else {
                    panic!("gprobe.call.duration is not an exponential histogram: {m:?}");
                };
                for p in &h.data_points {
                    if let Some(sampled) = sampled_of(&p.attributes) {
                        timed.insert(sampled, p.count);
                    }
                }
                continue;
            }
            if m.name != "gprobe.calls" {
                continue;
            }
            let Some(Data::Sum(sum)) = &m.data else {
                panic!("gprobe.calls is not a sum: {m:?}");
            };
            for p in &sum.data_points {
                if let (Some(sampled), Some(NumberValue::AsInt(v))) =
                    (sampled_of(&p.attributes), p.value)
                {
                    counted.insert(sampled, v);
                }
            }
        }
    }
    let kept_n = want.len() as i64;
    assert_eq!(
        counted,
        [(false, calls.len() as i64 - kept_n), (true, kept_n)].into(),
        "gprobe.calls by gprobe.sampled"
    );
    assert_eq!(
        timed,
        [
            (false, (calls.len() - want.len()) as u64),
            (true, want.len() as u64)
        ]
        .into(),
        "gprobe.call.duration's counts by gprobe.sampled"
    );
    let s = run.summary();
    assert_eq!(s.otlp.spans_exported, want.len() as u64, "{:?}", s.otlp);
    assert_eq!(
        (s.otlp.spans_dropped, s.otlp.export_errors),
        (0, 0),
        "{:?}",
        s.otlp
    );
}
