//! `gprobe.calls` counts every call of a probe with a `when:` or a `sample:`: the kept ones
//! as `gprobe.sampled` = true, those left out (from the counts) as false.

use super::tests::{calls, otlp_cfg, receiver, Lines};
use super::*;
use crate::events::ProbeMeta;
use crate::stats::{KernelCounts, ProbeKey};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use std::collections::BTreeMap;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_left_out_by_when_and_sample_are_counted_apart_from_the_kept_ones() {
    let (endpoint, (_traces, mut metrics)) = receiver().await;
    let stats = Stats::new();
    let (out, _) = Lines::new();
    let (tx, handle) = start(
        ExportOptions::new(Format::Jsonl, Some(otlp_cfg(endpoint))),
        Box::new(out),
        stats.clone(),
    )
    .unwrap();
    let mut meta = ProbeMeta::simple("shop", "main.handle", true);
    meta.selects = true;
    let p = Arc::new(meta);
    let key: ProbeKey = p.key.clone();
    stats.set_kernel(
        &key,
        KernelCounts {
            filtered: 40,
            ..Default::default()
        },
    );
    for _ in 0..5 {
        stats.add_sampled_out(&key, Some(2_000));
    }
    tx.send(calls(&p, 9, 3)).await.unwrap();
    drop(tx);
    handle.finish(Instant::now() + Duration::from_secs(5)).await;

    // gprobe.sampled -> calls, and the histogram's count.
    let mut calls_by: BTreeMap<String, u64> = BTreeMap::new();
    let mut durations = 0;
    while let Ok(req) = metrics.try_recv() {
        for m in req
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
        {
            match (m.name.as_str(), &m.data) {
                ("gprobe.calls", Some(Data::Sum(s))) => {
                    for dp in &s.data_points {
                        let sampled = dp
                            .attributes
                            .iter()
                            .find(|a| a.key == "gprobe.sampled")
                            .and_then(|a| a.value.as_ref()?.value.clone())
                            .map(|v| match v {
                                Any::BoolValue(b) => b.to_string(),
                                other => format!("{other:?}"),
                            })
                            .unwrap_or_else(|| "absent".into());
                        if let Some(Number::AsInt(v)) = dp.value {
                            calls_by.insert(sampled, v as u64);
                        }
                    }
                }
                ("gprobe.call.duration", Some(Data::ExponentialHistogram(h))) => {
                    durations = h.data_points.iter().map(|d| d.count).sum();
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        calls_by,
        BTreeMap::from([("true".to_string(), 3), ("false".to_string(), 45)]),
        "3 kept, 40 filtered and 5 sampled out: every call counted"
    );
    // The kept calls' 3, and the 5 sampled out (the 40 filtered had no return seen).
    assert_eq!(durations, 3 + 5, "every duration seen is in the histogram");
}
