//! The calls the reader hands on, and what it knows about each probe and process: the
//! model that pairing, nesting and the exporters share.

use super::dyntypes::DynTypes;
use super::nesting::SpanIds;
use super::value::Value;
use crate::plan::Decode;
use crate::stats::ProbeKey;
use std::sync::Arc;

/// What the decoder knows about one probe configuration (one uprobe cookie).
#[derive(Debug)]
pub struct ProbeMeta {
    /// Which probe of which spec: what its counts are kept under.
    pub key: ProbeKey,
    /// The ProbeSpec's `metadata.name` (the `"probe"` of a record).
    pub spec: Arc<str>,
    pub symbol: Arc<str>,
    pub latency: bool,
    /// Replace URL credentials and secret-looking query values in captured strings.
    pub redact: bool,
    /// Decoders by capture index, for this configuration's captures.
    pub captures: Vec<(Arc<str>, Decode)>,
    /// The binary's type names, where a capture shows a dynamic type.
    pub types: Option<Arc<DynTypes>>,
    /// `metrics.labels`: captured values that cut the probe's metrics.
    pub metrics: Option<MetricLabels>,
    /// One of gprobe's own probes: its records feed the reader, never the output.
    pub internal: Option<InternalProbe>,
    /// `sample:`: the share of the calls kept, by trace id (`events/sampling.rs`).
    pub sample: Option<f64>,
    /// The probe has a `when:` or a `sample:`: the series of its kept calls say so
    /// (`gprobe.sampled`), and its calls left out are counted apart.
    pub selects: bool,
    /// Its `when:` is decided at the return (a result, the duration): a call whose return
    /// is never seen is undecided, and not delivered.
    pub when_at_return: bool,
}

/// gprobe's own probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InternalProbe {
    /// `runtime.newproc1`: entry `callergp`, return `r0` (the new goroutine).
    Newproc,
}

/// A probe's `metrics`: the captures that label its calls and durations, and how many
/// combinations of them are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricLabels {
    pub labels: Vec<Arc<str>>,
    pub max_series: usize,
}

impl ProbeMeta {
    /// Metadata for tests and benchmarks: spec `spec`, probe 0, no captures.
    pub fn simple(spec: &str, symbol: &str, latency: bool) -> Self {
        let (spec, symbol): (Arc<str>, Arc<str>) = (spec.into(), symbol.into());
        Self {
            key: ProbeKey {
                spec: spec.clone(),
                name: spec.clone(),
                index: 0,
                symbol: symbol.clone(),
            },
            spec,
            symbol,
            latency,
            redact: true,
            captures: Vec::new(),
            types: None,
            metrics: None,
            internal: None,
            sample: None,
            selects: false,
            when_at_return: false,
        }
    }
}

/// Attributes of the process (and container) a call came from.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resource {
    /// `(key, value)` in OpenTelemetry semantic-convention names.
    pub attributes: Vec<(&'static str, String)>,
}

impl Resource {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One completed (or, at shutdown, unfinished) call.
#[derive(Debug, Clone)]
pub struct CallRecord {
    /// The entry configuration's metadata: spec, symbol, argument decoders.
    pub probe: Arc<ProbeMeta>,
    pub pid: u32,
    pub tid: u32,
    pub start_time_unix_nano: u64,
    /// Present for probes with return uprobes.
    pub duration_ns: Option<u64>,
    pub args: Vec<Value>,
    /// `None` when the probe has no return uprobes.
    pub returns: Option<Vec<Value>>,
    pub resource: Arc<Resource>,
    /// The call had not returned when gprobe stopped.
    pub unfinished: bool,
    /// Its span: a child of the probed call open on the same goroutine when it started.
    pub span: SpanIds,
}

/// Converts BPF timestamps (CLOCK_MONOTONIC) to Unix time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    offset_ns: i128,
}

impl Clock {
    pub fn new() -> Self {
        let now = |id| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes the timespec we pass it and nothing else.
            unsafe { libc::clock_gettime(id, &mut ts) };
            ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
        };
        // Sample monotonic between two realtime reads to halve the error.
        let r1 = now(libc::CLOCK_REALTIME);
        let m = now(libc::CLOCK_MONOTONIC);
        let r2 = now(libc::CLOCK_REALTIME);
        Self {
            offset_ns: (r1 + r2) / 2 - m,
        }
    }

    pub fn to_unix_nanos(&self, monotonic_ns: u64) -> u64 {
        (monotonic_ns as i128 + self.offset_ns).max(0) as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
