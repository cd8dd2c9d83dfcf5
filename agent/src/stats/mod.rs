//! The one owner of every count gprobe reports: per probe (delivered, lost, throttled, ...),
//! per process (matched, traced, missed with the reason) and OTLP export. Stages add to it;
//! the summary, the metrics and the cluster status read it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Which probe: the spec (its `namespace/name` in cluster mode, its name locally), the
/// probe's index in the spec, and its symbol (or USDT probe name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeKey {
    pub spec: Arc<str>,
    /// The spec's `metadata.name`: the `gprobe.probe` of every metric and span, as the
    /// `"probe"` of a record.
    pub name: Arc<str>,
    pub index: u16,
    pub symbol: Arc<str>,
}

impl std::fmt::Display for ProbeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} / {}", self.spec, self.symbol)
    }
}

/// Counts of one probe, over every binary and process it was attached to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProbeStats {
    /// Attached to at least one process at some time.
    pub attached: bool,
    /// How the kernel runs its sites, as last attached.
    pub costs: Option<crate::resolve::sites::SiteCosts>,
    /// The latest reason it could not be attached somewhere (`None` if it never failed).
    pub error: Option<String>,
    /// Calls delivered to the output (JSONL/table and OTLP's queue).
    pub delivered: u64,
    /// Calls not delivered: their record found the ring buffer full.
    pub lost: u64,
    /// Calls over `limits.eventsPerSecond`, not recorded.
    pub throttled: u64,
    /// Calls delivered without their return (the RETURN record found the ring full).
    pub returns_lost: u64,
    /// Calls still in flight when their process exited or gprobe stopped.
    pub unfinished: u64,
    /// Entries evicted from the pairing table (too many calls in flight at once).
    pub abandoned: u64,
    /// Calls nested deeper than the pairing stack in one goroutine: not recorded.
    pub too_deep: u64,
    /// Calls that failed the probe's `when:` (decided in the kernel): not delivered.
    pub filtered: u64,
    /// Calls that passed `when:` and were left out by `sample:` (decided by trace id).
    pub sampled_out: u64,
    /// Calls whose `when:` needed their return, which never came (its record lost to a full
    /// ring buffer, or the process ended in the call): not delivered.
    pub undecided: u64,
    /// Of `undecided`, those counted in the kernel (`gp_stats.undecided`) so far.
    pub kernel_undecided: u64,
    /// The durations of the calls delivered whose return was seen.
    pub delivered_durations: DurationBuckets,
    /// The durations of the calls `when:` left out whose return was seen (counted in BPF).
    pub filtered_durations: DurationBuckets,
    /// The durations of the calls `sample:` left out.
    pub sampled_out_durations: DurationBuckets,
    /// Uprobe hits seen in the kernel.
    pub hits: u64,
    /// Calls whose request's header map could not be searched to the end (too many headers,
    /// or memory that could not be read): an incoming traceparent may have been missed.
    pub join_incomplete: u64,
}

/// Kernel-side counters of one probe (summed over its configurations).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelCounts {
    pub hits: u64,
    /// Records written (or, for the propagation probes, requests handled).
    pub emitted: u64,
    pub lost: u64,
    pub throttled: u64,
    pub returns_lost: u64,
    pub too_deep: u64,
    /// Header maps not searched to the end (`gp_stats.incomplete`).
    pub incomplete: u64,
    /// Calls that failed the probe's `when:` (`gp_stats.filtered`).
    pub filtered: u64,
    /// Their durations, where their return was seen (map `left_out`).
    pub filtered_durations: DurationBuckets,
    /// Calls whose `when:` nothing left to read could decide (`gp_stats.undecided`).
    pub undecided: u64,
}

/// Call durations by floor(log2(ns)): bucket i holds [2^i, 2^(i+1)) ns (and 0 ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationBuckets(pub [u64; crate::abi::DUR_BUCKETS]);

impl Default for DurationBuckets {
    fn default() -> Self {
        Self([0; crate::abi::DUR_BUCKETS])
    }
}

impl DurationBuckets {
    pub fn add_ns(&mut self, ns: u64) {
        self.0[ns.max(1).ilog2() as usize] += 1;
    }

    /// A duration that stands for bucket `i`: its middle, in seconds.
    pub fn middle_s(i: usize) -> f64 {
        1.5 * (1u64 << i.min(62)) as f64 / 1e9
    }
}

impl ProbeStats {
    /// Every call that returned, by duration: those delivered and those `when:` or
    /// `sample:` left out (what happened, not only what was kept).
    pub fn durations(&self) -> gprobe_crds::hist::Log2Hist {
        let mut h = gprobe_crds::hist::Log2Hist::default();
        for d in [
            &self.delivered_durations,
            &self.filtered_durations,
            &self.sampled_out_durations,
        ] {
            for (i, n) in d.0.iter().enumerate() {
                h.add(i, *n);
            }
        }
        h
    }
}

impl std::ops::AddAssign for DurationBuckets {
    fn add_assign(&mut self, o: Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

impl std::ops::AddAssign for KernelCounts {
    fn add_assign(&mut self, o: Self) {
        self.hits += o.hits;
        self.emitted += o.emitted;
        self.lost += o.lost;
        self.throttled += o.throttled;
        self.returns_lost += o.returns_lost;
        self.too_deep += o.too_deep;
        self.incomplete += o.incomplete;
        self.filtered += o.filtered;
        self.filtered_durations += o.filtered_durations;
        self.undecided += o.undecided;
    }
}

/// A matched process that was not traced from its first call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missed {
    pub pid: u32,
    pub executable: String,
    pub reason: String,
}

/// At most this many missed processes are kept by name (the count is exact).
pub const MAX_MISSED_LISTED: usize = 100;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessStats {
    /// Processes a selector matched.
    pub matched: u64,
    /// Of those, traced from their first call (or from gprobe's start, for processes that
    /// were already running).
    pub traced: u64,
    /// Of those, not traced from their first call: `missed_total` counts them all, the list
    /// keeps the latest [`MAX_MISSED_LISTED`].
    pub missed_total: u64,
    pub missed: VecDeque<Missed>,
    /// Process events (exec, fork, exit) that found the process ring buffer full: the
    /// processes they announced are looked for by a rescan (and counted missed).
    pub events_lost: u64,
}

#[derive(Debug, Default)]
pub struct OtlpStats {
    pub spans_exported: AtomicU64,
    /// Spans dropped: the export queue was full (collector slow or down) or a batch failed.
    pub spans_dropped: AtomicU64,
    pub export_errors: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    probes: Mutex<BTreeMap<ProbeKey, ProbeStats>>,
    /// Calls delivered per probe and process, for per-container reports.
    by_pid: Mutex<HashMap<(ProbeKey, u32), u64>>,
    processes: Mutex<ProcessStats>,
    /// The same, per spec (`ProbeKey::spec`): a process two specs select counts in both.
    processes_by_spec: Mutex<BTreeMap<Arc<str>, ProcessStats>>,
    otlp: OtlpStats,
    propagation: Mutex<Propagation>,
    /// What the running kernel offers (attach/features.rs), once the programs loaded.
    kernel: Mutex<Option<crate::kernel::KernelFeatures>>,
    /// Processes whose probes were taken off for their cost, by (spec, pid).
    budget: Mutex<BTreeMap<(String, u32), BudgetEntry>>,
}

/// What a budget takes off a process over it (engine/budget.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakenOff {
    /// The return probes: every call is still recorded, without a duration or results.
    Returns,
    /// Every probe of the spec.
    All,
}

impl TakenOff {
    pub fn as_str(self) -> &'static str {
        match self {
            TakenOff::Returns => "returns",
            TakenOff::All => "all",
        }
    }
}

/// A spec's probes in one process, measured against its budget
/// (`limits.maxOverheadPercent`): taken off for their cost, or not (yet).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetEntry {
    pub executable: String,
    /// The estimated share of one CPU when they were taken off the latest time (percent).
    pub percent: f64,
    /// The highest share estimated over one second (percent).
    pub peak_percent: f64,
    /// What was taken off the latest time (`None`: nothing yet).
    pub taken_off: Option<TakenOff>,
    /// How often its return probes alone were taken off, all of its probes were, and they
    /// were attached again.
    pub returns_detached: u64,
    pub detached: u64,
    pub retried: u64,
    /// Off now (waiting out its back-off).
    pub off: bool,
    /// The back-off of the latest time (s).
    pub backoff_s: u64,
}

impl BudgetEntry {
    fn new(exe: &str) -> Self {
        BudgetEntry {
            executable: exe.to_string(),
            percent: 0.0,
            peak_percent: 0.0,
            taken_off: None,
            returns_detached: 0,
            detached: 0,
            retried: 0,
            off: false,
            backoff_s: 0,
        }
    }
}

/// Outgoing requests made inside propagating spans (`propagate: true`), in processes with
/// such a probe: how many there were and how many carried a traceparent.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Propagation {
    /// Whether any process has a propagating probe.
    pub active: bool,
    pub requests: u64,
    pub written: u64,
    /// Of `written`, the traceparents that said the trace is not sampled (`sample:`).
    pub unsampled: u64,
    /// Requests made inside propagating spans whose header map could not be searched to
    /// the end: sent as they were (they may have had a traceparent of their own).
    pub incomplete: u64,
    /// Why none could be written (the kernel's refusal), if so.
    pub error: Option<String>,
    /// `--propagate-dry-run`: `written` counts the headers that would have been written.
    pub dry_run: bool,
    /// Counts of executables no longer traced, kept so totals never go back.
    retired: PropagationCounts,
}

/// The kernel's counts of the propagation probes of one or more executables.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PropagationCounts {
    pub requests: u64,
    pub written: u64,
    pub unsampled: u64,
    pub incomplete: u64,
}

impl std::ops::AddAssign for PropagationCounts {
    fn add_assign(&mut self, o: Self) {
        self.requests += o.requests;
        self.written += o.written;
        self.unsampled += o.unsampled;
        self.incomplete += o.incomplete;
    }
}

/// Shared handle to the counts.
#[derive(Debug, Default, Clone)]
pub struct Stats(Arc<Inner>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stats {
    pub fn new() -> Self {
        Self::default()
    }

    /// Spec `spec`'s probes were taken off `pid` for their cost.
    pub fn budget_detached(
        &self,
        spec: &str,
        pid: u32,
        exe: &str,
        percent: f64,
        what: TakenOff,
        backoff: std::time::Duration,
    ) {
        let mut b = lock(&self.0.budget);
        let e = b
            .entry((spec.to_string(), pid))
            .or_insert_with(|| BudgetEntry::new(exe));
        e.percent = percent;
        e.peak_percent = e.peak_percent.max(percent);
        e.taken_off = Some(what);
        e.off = true;
        match what {
            TakenOff::Returns => e.returns_detached += 1,
            TakenOff::All => e.detached += 1,
        }
        e.backoff_s = backoff.as_secs();
    }

    /// Spec `spec`'s probes were estimated to cost `pid` `percent` of a CPU over a second,
    /// more than before.
    pub fn budget_seen(&self, spec: &str, pid: u32, exe: &str, percent: f64) {
        let mut b = lock(&self.0.budget);
        let e = b
            .entry((spec.to_string(), pid))
            .or_insert_with(|| BudgetEntry::new(exe));
        e.peak_percent = e.peak_percent.max(percent);
    }

    /// `pid` exited: its entries go, unless its probes were ever taken off.
    pub fn budget_process_exited(&self, pid: u32) {
        lock(&self.0.budget).retain(|(_, p), e| *p != pid || e.taken_off.is_some());
    }

    /// The probes of spec `spec` taken off `pid` were attached again.
    pub fn budget_retried(&self, spec: &str, pid: u32) {
        if let Some(e) = lock(&self.0.budget).get_mut(&(spec.to_string(), pid)) {
            e.retried += 1;
            e.off = false;
        }
    }

    /// Every (spec, pid) whose probes were taken off for their cost.
    pub fn budget(&self) -> Vec<((String, u32), BudgetEntry)> {
        lock(&self.0.budget)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Makes `key` known (so the summary lists it even with no calls).
    pub fn register(&self, key: &ProbeKey) {
        lock(&self.0.probes).entry(key.clone()).or_default();
    }

    pub fn set_attached(&self, key: &ProbeKey, costs: crate::resolve::sites::SiteCosts) {
        let mut probes = lock(&self.0.probes);
        let p = probes.entry(key.clone()).or_default();
        p.attached = true;
        p.costs = Some(costs);
    }

    pub fn set_error(&self, key: &ProbeKey, error: String) {
        lock(&self.0.probes).entry(key.clone()).or_default().error = Some(error);
    }

    /// Calls delivered, per probe and pid, one batch at a time.
    pub fn add_delivered<'a>(&self, counts: impl IntoIterator<Item = (&'a ProbeKey, u32, u64)>) {
        let mut probes = lock(&self.0.probes);
        let mut by_pid = lock(&self.0.by_pid);
        for (key, pid, n) in counts {
            match probes.get_mut(key) {
                Some(p) => p.delivered += n,
                None => {
                    probes.entry(key.clone()).or_default().delivered += n;
                }
            }
            *by_pid.entry((key.clone(), pid)).or_default() += n;
        }
    }

    /// Durations of delivered calls, one batch's per probe at a time.
    pub fn add_delivered_durations<'a>(
        &self,
        durations: impl IntoIterator<Item = (&'a ProbeKey, DurationBuckets)>,
    ) {
        let mut probes = lock(&self.0.probes);
        for (key, d) in durations {
            match probes.get_mut(key) {
                Some(p) => p.delivered_durations += d,
                None => probes.entry(key.clone()).or_default().delivered_durations += d,
            }
        }
    }

    pub fn add_unfinished(&self, key: &ProbeKey, n: u64) {
        lock(&self.0.probes)
            .entry(key.clone())
            .or_default()
            .unfinished += n;
    }

    /// A call `sample:` left out, and its duration (none: unfinished, or no latency).
    pub fn add_sampled_out(&self, key: &ProbeKey, duration_ns: Option<u64>) {
        let mut probes = lock(&self.0.probes);
        let p = probes.entry(key.clone()).or_default();
        p.sampled_out += 1;
        if let Some(ns) = duration_ns {
            p.sampled_out_durations.add_ns(ns);
        }
    }

    pub fn add_undecided(&self, key: &ProbeKey, n: u64) {
        lock(&self.0.probes)
            .entry(key.clone())
            .or_default()
            .undecided += n;
    }

    pub fn add_abandoned(&self, key: &ProbeKey, n: u64) {
        lock(&self.0.probes)
            .entry(key.clone())
            .or_default()
            .abandoned += n;
    }

    /// The kernel's counters of a probe, as totals (they only grow).
    pub fn set_kernel(&self, key: &ProbeKey, k: KernelCounts) {
        let mut probes = lock(&self.0.probes);
        let p = probes.entry(key.clone()).or_default();
        p.hits = k.hits;
        p.lost = k.lost;
        p.throttled = k.throttled;
        p.returns_lost = k.returns_lost;
        p.too_deep = k.too_deep;
        p.join_incomplete = k.incomplete;
        p.filtered = k.filtered;
        p.filtered_durations = k.filtered_durations;
        // Added to the reader's (calls whose return never came): the kernel's is a total.
        p.undecided += k.undecided.saturating_sub(p.kernel_undecided);
        p.kernel_undecided = p.kernel_undecided.max(k.undecided);
    }

    /// Calls of `key` delivered from `pid` so far.
    pub fn delivered_by(&self, key: &ProbeKey, pid: u32) -> u64 {
        lock(&self.0.by_pid)
            .get(&(key.clone(), pid))
            .copied()
            .unwrap_or(0)
    }

    /// Keeps the per-pid counts of the processes `keep` accepts (the others exited).
    pub fn retain_pids(&self, keep: impl Fn(u32) -> bool) {
        lock(&self.0.by_pid).retain(|(_, pid), _| keep(*pid));
    }

    pub fn probes(&self) -> BTreeMap<ProbeKey, ProbeStats> {
        lock(&self.0.probes).clone()
    }

    pub fn probe(&self, key: &ProbeKey) -> ProbeStats {
        lock(&self.0.probes).get(key).cloned().unwrap_or_default()
    }

    /// Removes a probe whose spec is gone or changed (its probes are attached anew).
    pub fn forget_probe(&self, key: &ProbeKey) {
        lock(&self.0.probes).remove(key);
        lock(&self.0.by_pid).retain(|k, _| &k.0 != key);
    }

    /// Removes the process counts of a spec that is gone (cluster mode: a deleted
    /// ProbeSpec). A changed spec keeps them: its processes stay selected.
    pub fn forget_processes(&self, spec: &str) {
        lock(&self.0.processes_by_spec).remove(spec);
    }

    fn each_process_stats(&self, specs: &[Arc<str>], mut f: impl FnMut(&mut ProcessStats)) {
        f(&mut lock(&self.0.processes));
        let mut by = lock(&self.0.processes_by_spec);
        for s in specs {
            f(by.entry(s.clone()).or_default());
        }
    }

    /// A process that `specs` select.
    pub fn process_matched(&self, specs: &[Arc<str>]) {
        self.each_process_stats(specs, |p| p.matched += 1);
    }

    pub fn process_traced(&self, specs: &[Arc<str>]) {
        self.each_process_stats(specs, |p| p.traced += 1);
    }

    pub fn process_missed(&self, specs: &[Arc<str>], m: Missed) {
        self.each_process_stats(specs, |p| {
            p.missed_total += 1;
            if p.missed.len() == MAX_MISSED_LISTED {
                p.missed.pop_front();
            }
            p.missed.push_back(m.clone());
        });
    }

    pub fn processes(&self) -> ProcessStats {
        lock(&self.0.processes).clone()
    }

    /// The process events lost so far (a total: it only grows).
    pub fn set_process_events_lost(&self, n: u64) {
        lock(&self.0.processes).events_lost = n;
    }

    /// The processes one spec selected (`ProbeKey::spec` names it).
    pub fn processes_of(&self, spec: &str) -> ProcessStats {
        lock(&self.0.processes_by_spec)
            .get(spec)
            .cloned()
            .unwrap_or_default()
    }

    pub fn otlp(&self) -> &OtlpStats {
        &self.0.otlp
    }

    /// The propagation counts of the executables traced now.
    pub fn set_propagation(&self, now: PropagationCounts, error: Option<String>) {
        let mut p = lock(&self.0.propagation);
        p.active = true;
        let mut total = p.retired;
        total += now;
        p.requests = total.requests;
        p.written = total.written;
        p.unsampled = total.unsampled;
        p.incomplete = total.incomplete;
        if error.is_some() {
            p.error = error;
        }
    }

    pub fn set_kernel_features(&self, k: crate::kernel::KernelFeatures) {
        *lock(&self.0.kernel) = Some(k);
    }

    pub fn kernel_features(&self) -> Option<crate::kernel::KernelFeatures> {
        lock(&self.0.kernel).clone()
    }

    pub fn set_propagation_dry_run(&self, dry: bool) {
        lock(&self.0.propagation).dry_run = dry;
    }

    /// An executable's propagation probes were freed: its counts stay in the totals.
    pub fn retire_propagation(&self, counts: PropagationCounts) {
        lock(&self.0.propagation).retired += counts;
    }

    pub fn propagation(&self) -> Propagation {
        lock(&self.0.propagation).clone()
    }

    pub fn otlp_counts(&self) -> (u64, u64, u64) {
        let o = &self.0.otlp;
        (
            o.spans_exported.load(Ordering::Relaxed),
            o.spans_dropped.load(Ordering::Relaxed),
            o.export_errors.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests;
