//! OTLP metrics, read from [`Stats`] (the one owner of counts) by observable instruments,
//! plus the call-duration histogram, recorded by the output thread for every delivered
//! call (spans dropped under back-pressure still count in it).
//!
//! | metric                       | kind                 | attributes                          |
//! |------------------------------|----------------------|-------------------------------------|
//! | `gprobe.calls`               | counter              | `gprobe.probe`, `code.function`, labels |
//! | `gprobe.call.duration` (s)   | exponential histogram | `gprobe.probe`, `code.function`, labels |
//! | `gprobe.metrics.overflow`    | observable counter   | the probe's                         |
//! | `gprobe.events.lost`         | observable counter   | the probe's, and `reason`           |
//! | `gprobe.joins.incomplete`    | observable counter   | the probe's                         |
//! | `gprobe.spans.dropped`       | observable counter   |                                     |
//! | `gprobe.processes.matched`, `.traced`, `.missed` | observable counters |            |
//! | `gprobe.budget.detached`     | observable counter   | `gprobe.spec`                       |
//!
//! `reason` is `ring_buffer_full`, `rate_limited`, `too_deep` or `return_lost`. The labels
//! are a probe's `metrics.labels`: the captured values as `gprobe.args.NAME` /
//! `gprobe.returns.NAME`, at most `maxSeries` combinations per probe, further ones counted
//! under `other` (and in `gprobe.metrics.overflow`).
//!
//! A probe with a `when:` or a `sample:` counts every call in `gprobe.calls` all the same:
//! its kept calls with `gprobe.sampled` = `true` (and its labels, which only kept calls
//! have), the calls it left out (`filtered`, `sampled_out`, `undecided`) with `gprobe.sampled` =
//! `false`, without labels; so does `gprobe.call.duration`, the durations of the calls
//! left out (where their return was seen) each standing at the middle of its power-of-two
//! bucket (BPF counts them by floor(log2(ns))).

use super::spans::{probe_attributes, PerProbe};
use crate::events::{CallRecord, Value, ValueKind};
use crate::stats::{DurationBuckets, ProbeStats, Stats};
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{Aggregation, Instrument, SdkMeterProvider, Stream};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Per probe counts summed by (spec, symbol): the metrics' attribute set. Two probes of
/// one spec on one symbol would otherwise report the same series twice.
fn by_symbol(stats: &Stats) -> BTreeMap<(Arc<str>, Arc<str>), ProbeStats> {
    let mut out: BTreeMap<(Arc<str>, Arc<str>), ProbeStats> = BTreeMap::new();
    for (k, p) in stats.probes() {
        // By name, as the spans and the kept calls' series say (`namespace/name` would
        // show one probe as two on a dashboard).
        let s = out.entry((k.name.clone(), k.symbol.clone())).or_default();
        s.delivered += p.delivered;
        s.lost += p.lost;
        s.throttled += p.throttled;
        s.too_deep += p.too_deep;
        s.returns_lost += p.returns_lost;
        s.join_incomplete += p.join_incomplete;
        s.filtered += p.filtered;
        s.sampled_out += p.sampled_out;
        s.undecided += p.undecided;
        s.filtered_durations += p.filtered_durations;
        s.sampled_out_durations += p.sampled_out_durations;
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
        .u64_observable_counter("gprobe.joins.incomplete")
        .with_description(
            "Calls whose request's header map could not be searched to the end for an \
             incoming traceparent (more headers than gprobe searches, or unreadable \
             memory): their spans may start a trace of their own",
        )
        .with_unit("{request}")
        .with_callback(move |obs| {
            for ((spec, symbol), p) in by_symbol(&st) {
                obs.observe(p.join_incomplete, &attrs(&spec, &symbol));
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
    let st = stats.clone();
    meter
        .u64_observable_counter("gprobe.budget.detached")
        .with_description(
            "Times a spec's probes were taken off a process for their cost \
            (limits.maxOverheadPercent); gprobe.probes: returns (the return probes alone) or all",
        )
        .with_unit("{detach}")
        .with_callback(move |obs| {
            let mut per_spec: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
            for ((spec, _), e) in st.budget() {
                *per_spec.entry((spec.clone(), "returns")).or_default() += e.returns_detached;
                *per_spec.entry((spec, "all")).or_default() += e.detached;
            }
            for ((spec, what), n) in per_spec {
                obs.observe(
                    n,
                    &[
                        KeyValue::new("gprobe.spec", spec),
                        KeyValue::new("gprobe.probes", what),
                    ],
                );
            }
        })
        .build();
}

/// How often a stream of batches adds the calls left out to the metrics (the output
/// thread's tick does too, when no batch comes, and at the end).
const LEFT_OUT_EVERY: Duration = Duration::from_secs(1);

/// Calls counted under `other`, per (spec, symbol): shared by the recorder and the
/// observable counter that reports them.
type OverflowCounts = Arc<Mutex<BTreeMap<(Arc<str>, Arc<str>), Arc<AtomicU64>>>>;

/// What one probe's calls are counted under: its attributes and the label combinations
/// seen so far.
struct ProbeSeries {
    base: [KeyValue; 2],
    seen: HashSet<Vec<String>>,
    overflow: Arc<AtomicU64>,
}

/// Records `gprobe.calls` and `gprobe.call.duration` for every delivered call, with the
/// probe's metric labels.
pub struct CallRecorder {
    calls: Counter<u64>,
    histogram: Histogram<f64>,
    probes: PerProbe<ProbeSeries>,
    /// Overflowed calls per (spec, symbol), read by `gprobe.metrics.overflow`.
    overflow: OverflowCounts,
    /// Where the calls left out by `when:` and `sample:` are counted.
    stats: Stats,
    /// Those already added to `gprobe.calls` and `gprobe.call.duration`, per (spec, symbol).
    left_out: BTreeMap<(Arc<str>, Arc<str>), (u64, DurationBuckets)>,
    /// When they were last added: a batch adds them at most once a second (reading them
    /// copies every probe's counts).
    left_out_at: Instant,
}

/// A captured value as a metric attribute's value.
fn label_value(kind: &ValueKind) -> String {
    match kind {
        ValueKind::Bool(b) => b.to_string(),
        ValueKind::Int(i) => i.to_string(),
        ValueKind::Uint(u) => u.to_string(),
        ValueKind::Float(f) => f.to_string(),
        ValueKind::Pointer(p) => format!("{p:#x}"),
        ValueKind::Str { text, .. } => text.to_string(),
        ValueKind::Bytes { bytes, .. } => String::from_utf8_lossy(bytes).into_owned(),
        ValueKind::Interface { nil } => (if *nil { "nil" } else { "non-nil" }).to_string(),
        ValueKind::Null => "nil".to_string(),
        // A slice as its JSONL text: a label is one string.
        ValueKind::Array { .. } => {
            let mut out = Vec::new();
            crate::export::jsonl::write_value(&mut out, kind);
            String::from_utf8_lossy(&out).into_owned()
        }
        ValueKind::Fault => "<unreadable>".to_string(),
        ValueKind::Invalid => "<invalid>".to_string(),
    }
}

/// The label attributes of one call: each label's value, found among the arguments
/// (`gprobe.args.NAME`) or results (`gprobe.returns.NAME`); empty where the call has none
/// (an unfinished call's results).
fn labels_of(rec: &CallRecord, labels: &[Arc<str>]) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|l| {
            let find = |vals: &[Value]| {
                vals.iter()
                    .find(|v| *v.name == **l)
                    .map(|v| label_value(&v.kind))
            };
            if let Some(v) = find(&rec.args) {
                (format!("gprobe.args.{l}"), v)
            } else if let Some(v) = rec.returns.as_deref().and_then(find) {
                (format!("gprobe.returns.{l}"), v)
            } else {
                (format!("gprobe.args.{l}"), String::new())
            }
        })
        .collect()
}

impl CallRecorder {
    pub(crate) fn new(meter: &Meter, stats: Stats) -> Self {
        let overflow: OverflowCounts = Arc::default();
        let ov = overflow.clone();
        meter
            .u64_observable_counter("gprobe.metrics.overflow")
            .with_description(
                "Calls counted under the label value `other`: their probe already had \
                 metrics.maxSeries label combinations",
            )
            .with_unit("{call}")
            .with_callback(move |obs| {
                for ((spec, symbol), n) in ov.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    obs.observe(n.load(Ordering::Relaxed), &attrs(spec, symbol));
                }
            })
            .build();
        Self {
            calls: meter
                .u64_counter("gprobe.calls")
                .with_description("Calls of traced functions delivered, per probe and symbol")
                .with_unit("{call}")
                .build(),
            histogram: meter
                .f64_histogram("gprobe.call.duration")
                .with_description(
                    "Duration of traced calls, entry to return (probes with latency: true)",
                )
                .with_unit("s")
                .build(),
            probes: PerProbe::default(),
            overflow,
            stats,
            left_out: BTreeMap::new(),
            left_out_at: Instant::now(),
        }
    }

    /// Adds the calls left out by `when:` and `sample:` since the last time to
    /// `gprobe.calls`, as `gprobe.sampled` = `false`.
    pub fn count_left_out(&mut self) {
        self.left_out_at = Instant::now();
        for ((spec, symbol), p) in by_symbol(&self.stats) {
            let total = p.filtered + p.sampled_out + p.undecided;
            let mut durations = p.filtered_durations;
            durations += p.sampled_out_durations;
            let (calls, seen) = self
                .left_out
                .entry((spec.clone(), symbol.clone()))
                .or_default();
            if total <= *calls && durations == *seen {
                continue;
            }
            let [a, b] = attrs(&spec, &symbol);
            let attrs = [a, b, KeyValue::new("gprobe.sampled", false)];
            if total > *calls {
                self.calls.add(total - *calls, &attrs);
                *calls = total;
            }
            // The SDK's histogram takes values one at a time: each bucket's new calls at
            // its middle (a few hundred thousand a second cost it a few ms).
            for (i, (now, before)) in durations.0.iter().zip(seen.0).enumerate() {
                for _ in before..*now {
                    self.histogram.record(DurationBuckets::middle_s(i), &attrs);
                }
            }
            *seen = durations;
        }
    }

    pub fn record(&mut self, batch: &[CallRecord]) {
        self.probes.prune();
        let mut attrs = Vec::new();
        for rec in batch {
            let overflow = &self.overflow;
            let ps = self.probes.get(&rec.probe, || ProbeSeries {
                base: probe_attributes(&rec.probe),
                seen: HashSet::new(),
                overflow: overflow
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry((rec.probe.spec.clone(), rec.probe.symbol.clone()))
                    .or_default()
                    .clone(),
            });
            attrs.clear();
            attrs.extend_from_slice(&ps.base);
            if rec.probe.selects {
                attrs.push(KeyValue::new("gprobe.sampled", true));
            }
            if let Some(m) = &rec.probe.metrics {
                let labels = labels_of(rec, &m.labels);
                let values: Vec<String> = labels.iter().map(|(_, v)| v.clone()).collect();
                let known = ps.seen.contains(&values);
                if known || ps.seen.len() < m.max_series {
                    if !known {
                        ps.seen.insert(values);
                    }
                    attrs.extend(labels.into_iter().map(|(k, v)| KeyValue::new(k, v)));
                } else {
                    ps.overflow.fetch_add(1, Ordering::Relaxed);
                    attrs.extend(labels.into_iter().map(|(k, _)| KeyValue::new(k, "other")));
                }
            }
            self.calls.add(1, &attrs);
            if let Some(d) = rec.duration_ns {
                self.histogram.record(d as f64 / 1e9, &attrs);
            }
        }
        if self.left_out_at.elapsed() >= LEFT_OUT_EVERY {
            self.count_left_out();
        }
    }
}

/// `gprobe.call.duration` as an exponential histogram (fine buckets at every scale, no
/// boundaries to choose); the SDK's default would be fixed buckets.
pub(crate) fn exponential_durations(i: &Instrument) -> Option<Stream> {
    if i.name() != "gprobe.call.duration" {
        return None;
    }
    Stream::builder()
        .with_aggregation(Aggregation::Base2ExponentialHistogram {
            max_size: 160,
            max_scale: 20,
            record_min_max: true,
        })
        .build()
        .ok()
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
