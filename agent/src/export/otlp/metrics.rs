//! OTLP metrics, read from [`Stats`] (the one owner of counts) by observable instruments,
//! plus the call-duration histogram, recorded by the output thread for every delivered
//! call (spans dropped under back-pressure still count in it).
//!
//! | metric                       | kind                 | attributes                          |
//! |------------------------------|----------------------|-------------------------------------|
//! | `gprobe.calls`               | observable counter   | `gprobe.probe`, `code.function`     |
//! | `gprobe.call.duration` (s)   | histogram            | `gprobe.probe`, `code.function`     |
//! | `gprobe.events.lost`         | observable counter   | the probe's, and `reason`           |
//! | `gprobe.spans.dropped`       | observable counter   |                                     |
//! | `gprobe.processes.matched`, `.traced`, `.missed` | observable counters |            |
//!
//! `reason` is `ring_buffer_full`, `rate_limited`, `too_deep` or `return_lost`.

use super::spans::{probe_attributes, PerProbe};
use crate::events::CallRecord;
use crate::stats::{ProbeStats, Stats};
use opentelemetry::metrics::{Histogram, Meter, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Per probe counts summed by (spec, symbol): the metrics' attribute set. Two probes of
/// one spec on one symbol would otherwise report the same series twice.
fn by_symbol(stats: &Stats) -> BTreeMap<(Arc<str>, Arc<str>), ProbeStats> {
    let mut out: BTreeMap<(Arc<str>, Arc<str>), ProbeStats> = BTreeMap::new();
    for (k, p) in stats.probes() {
        let s = out.entry((k.spec.clone(), k.symbol.clone())).or_default();
        s.delivered += p.delivered;
        s.lost += p.lost;
        s.throttled += p.throttled;
        s.too_deep += p.too_deep;
        s.returns_lost += p.returns_lost;
    }
    out
}

fn attrs(spec: &Arc<str>, symbol: &Arc<str>) -> [KeyValue; 2] {
    [
        KeyValue::new("gprobe.probe", spec.clone()),
        KeyValue::new("code.function", symbol.clone()),
    ]
}

/// Registers the observable instruments, all reading `stats`.
pub(crate) fn observe(meter: &Meter, stats: &Stats) {
    let st = stats.clone();
    meter
        .u64_observable_counter("gprobe.calls")
        .with_description("Calls of traced functions delivered, per probe and symbol")
        .with_unit("{call}")
        .with_callback(move |obs| {
            for ((spec, symbol), p) in by_symbol(&st) {
                obs.observe(p.delivered, &attrs(&spec, &symbol));
            }
        })
        .build();
    let st = stats.clone();
    meter
        .u64_observable_counter("gprobe.events.lost")
        .with_description(
            "Calls not delivered, by reason: ring buffer full (ring_buffer_full), over \
             limits.eventsPerSecond (rate_limited), nested too deep (too_deep); and \
             delivered calls whose return was lost (return_lost)",
        )
        .with_unit("{call}")
        .with_callback(move |obs| {
            for ((spec, symbol), p) in by_symbol(&st) {
                let [a, b] = attrs(&spec, &symbol);
                for (n, reason) in [
                    (p.lost, "ring_buffer_full"),
                    (p.throttled, "rate_limited"),
                    (p.too_deep, "too_deep"),
                    (p.returns_lost, "return_lost"),
                ] {
                    obs.observe(n, &[a.clone(), b.clone(), KeyValue::new("reason", reason)]);
                }
            }
        })
        .build();
    let st = stats.clone();
    meter
        .u64_observable_counter("gprobe.spans.dropped")
        .with_description(
            "Spans not exported: the export queue was full or an export failed \
             (collector slow or unreachable)",
        )
        .with_unit("{span}")
        .with_callback(move |obs| {
            obs.observe(st.otlp().spans_dropped.load(Ordering::Relaxed), &[]);
        })
        .build();
    type Field = fn(&crate::stats::ProcessStats) -> u64;
    let processes: [(&'static str, &'static str, Field); 3] = [
        (
            "gprobe.processes.matched",
            "Processes a selector matched",
            |p| p.matched,
        ),
        (
            "gprobe.processes.traced",
            "Matched processes traced from their first call (or from gprobe's start)",
            |p| p.traced,
        ),
        (
            "gprobe.processes.missed",
            "Matched processes not traced from their first call",
            |p| p.missed_total,
        ),
    ];
    for (name, description, field) in processes {
        let st = stats.clone();
        meter
            .u64_observable_counter(name)
            .with_description(description)
            .with_unit("{process}")
            .with_callback(move |obs| obs.observe(field(&st.processes()), &[]))
            .build();
    }
}

/// Records `gprobe.call.duration` for every call with a duration.
pub struct DurationRecorder {
    histogram: Histogram<f64>,
    attrs: PerProbe<[KeyValue; 2]>,
}

impl DurationRecorder {
    pub(crate) fn new(meter: &Meter) -> Self {
        Self {
            histogram: meter
                .f64_histogram("gprobe.call.duration")
                .with_description(
                    "Duration of traced calls, entry to return (probes with latency: true)",
                )
                .with_unit("s")
                .build(),
            attrs: PerProbe::default(),
        }
    }

    pub fn record(&mut self, batch: &[CallRecord]) {
        self.attrs.prune();
        for rec in batch {
            if let Some(d) = rec.duration_ns {
                let attrs = self.attrs.get(&rec.probe, || probe_attributes(&rec.probe));
                self.histogram.record(d as f64 / 1e9, attrs);
            }
        }
    }
}

/// The meter provider, shut down within a deadline by [`Metrics::shutdown`].
pub(crate) struct Metrics {
    provider: Option<SdkMeterProvider>,
}

impl Metrics {
    pub(crate) fn new(provider: SdkMeterProvider) -> Self {
        Self {
            provider: Some(provider),
        }
    }

    pub(crate) fn meter(&self) -> Option<Meter> {
        self.provider.as_ref().map(|p| p.meter("gprobe"))
    }

    /// Pushes the final metrics. The SDK's shutdown blocks (up to its own 5 s, plus an
    /// export in progress), so it runs on a thread of its own, abandoned if it is not done
    /// by `deadline`. Returns whether it was done in time.
    pub(crate) async fn shutdown(mut self, deadline: tokio::time::Instant) -> bool {
        let Some(provider) = self.provider.take() else {
            return true;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("gprobe-metrics-shutdown".into())
            .spawn(move || {
                let _ = tx.send(provider.shutdown());
            });
        if let Err(e) = spawned {
            tracing::warn!("OTLP: final metrics not sent: starting a thread failed: {e}");
            return false;
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(()))) => true,
            Ok(Ok(Err(e))) => {
                tracing::warn!("OTLP: sending the final metrics failed: {e}");
                true
            }
            Ok(Err(_)) => {
                tracing::warn!("OTLP: the metrics shutdown thread ended without a result");
                true
            }
            Err(_) => {
                tracing::warn!(
                    "OTLP: the final metrics were not sent by the shutdown deadline \
                     (collector slow or unreachable); gprobe exits without them"
                );
                false
            }
        }
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        // Not shut down (the export stage was dropped without `finish`): the provider's own
        // drop would block the dropping thread while it pushes the final metrics.
        if let Some(p) = self.provider.take() {
            let _ = std::thread::Builder::new()
                .name("gprobe-metrics-drop".into())
                .spawn(move || drop(p));
        }
    }
}
