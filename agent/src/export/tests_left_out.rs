//! `gprobe.calls` counts every call of a probe with a `when:` or a `sample:`: the kept ones
//! as `gprobe.sampled` = true, those left out (from the counts) as false.

use super::tests::{attr, calls, received_metrics, receiver, start_otlp};
use super::*;
use crate::events::ProbeMeta;
use crate::stats::{KernelCounts, ProbeKey};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use std::collections::BTreeMap;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_left_out_by_when_and_sample_are_counted_apart_from_the_kept_ones() {
    let (endpoint, (_traces, mut metrics)) = receiver().await;
    let stats = Stats::new();
    let (tx, handle, _) = start_otlp(endpoint, &stats);
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
    for m in received_metrics(&mut metrics) {
        match (m.name.as_str(), &m.data) {
            ("gprobe.calls", Some(Data::Sum(s))) => {
                for dp in &s.data_points {
                    if let Some(Number::AsInt(v)) = dp.value {
                        calls_by.insert(attr(&dp.attributes, "gprobe.sampled"), v as u64);
                    }
                }
            }
            ("gprobe.call.duration", Some(Data::ExponentialHistogram(h))) => {
                durations = h.data_points.iter().map(|d| d.count).sum();
            }
            _ => {}
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_probe_is_one_probe_in_every_series() {
    // In cluster mode the counts are kept under `namespace/name`; every series says the
    // name, as spans and records do.
    let (endpoint, (_traces, mut metrics)) = receiver().await;
    let stats = Stats::new();
    let (tx, handle, _) = start_otlp(endpoint, &stats);
    let mut meta = ProbeMeta::simple("ledger-post-big", "main.post", true);
    meta.key.spec = "ledger-hi/ledger-post-big".into();
    meta.selects = true;
    let p = Arc::new(meta);
    stats.register(&p.key);
    stats.set_kernel(
        &p.key,
        KernelCounts {
            filtered: 7,
            ..Default::default()
        },
    );
    tx.send(calls(&p, 9, 2)).await.unwrap();
    drop(tx);
    handle.finish(Instant::now() + Duration::from_secs(5)).await;

    let mut probes: BTreeMap<(String, String), u64> = BTreeMap::new();
    for m in received_metrics(&mut metrics) {
        let points: Vec<_> = match &m.data {
            Some(Data::Sum(s)) => s.data_points.iter().map(|d| d.attributes.clone()).collect(),
            Some(Data::ExponentialHistogram(h)) => {
                h.data_points.iter().map(|d| d.attributes.clone()).collect()
            }
            _ => continue,
        };
        for a in points {
            if a.iter().any(|kv| kv.key == "gprobe.probe") {
                *probes
                    .entry((m.name.clone(), attr(&a, "gprobe.probe")))
                    .or_default() += 1;
            }
        }
    }
    let names: std::collections::BTreeSet<&str> = probes.keys().map(|(_, p)| p.as_str()).collect();
    assert_eq!(names, ["ledger-post-big"].into(), "{probes:?}");
    // Kept and left out, both under the name.
    assert_eq!(
        probes.get(&("gprobe.calls".into(), "ledger-post-big".into())),
        Some(&2),
        "{probes:?}"
    );
    assert!(
        probes.contains_key(&("gprobe.events.lost".into(), "ledger-post-big".into())),
        "{probes:?}"
    );
}
