//! What the engine keeps for overhead budgets (`budget.rs` uses it): a leaf apart from
//! the `impl Engine` there, so that the engine's state does not import the file that
//! imports the engine.

use super::spec_id::SpecId;
use super::tracer::CfgId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) id: u32,
    /// What the slot had cost at the last tick (ns).
    pub(super) last_ns: u64,
    /// The CPU time its process had used at the last tick (ns), where it can be read.
    pub(super) last_cpu_ns: Option<u64>,
    /// Since when it has been over budget, at every tick since.
    pub(super) over_since: Option<Instant>,
    /// The highest share of a CPU estimated over one tick (percent).
    pub(super) peak: f64,
}

/// A (process, spec) pair whose probes were taken off: until when (`None` once they are
/// back on), the wait of that time (doubled the next time), and whether only its returns
/// are off.
#[derive(Debug, Clone, Copy)]
pub(super) struct Backoff {
    pub(super) until: Option<Instant>,
    pub(super) wait: Duration,
    pub(super) returns_only: bool,
}

#[derive(Debug, Default)]
pub(super) struct Budgets {
    pub(super) slots: HashMap<(u32, SpecId), Slot>,
    pub(super) free: Vec<u32>,
    pub(super) next: u32,
    pub(super) backoff: HashMap<(u32, SpecId), Backoff>,
    /// Processes whose returns were just switched off, and the entry configurations of
    /// those probes: their calls in flight in BPF are forgotten at the next tick (by then
    /// no program that read the switch still on is running).
    pub(super) forget: Vec<(u32, Vec<CfgId>)>,
    pub(super) last_tick: Option<Instant>,
    pub(super) unmeasured_said: bool,
}

impl Budgets {
    /// Whether `(pid, sid)` waits out a back-off with all its probes off.
    pub(super) fn waiting(&self, pid: u32, sid: SpecId, now: Instant) -> bool {
        self.backoff
            .get(&(pid, sid))
            .filter(|b| !b.returns_only)
            .and_then(|b| b.until)
            .is_some_and(|until| now < until)
    }

    /// Whether `(pid, sid)` has its return probes off (until its back-off ends).
    pub(super) fn returns_off(&self, pid: u32, sid: SpecId) -> bool {
        self.backoff
            .get(&(pid, sid))
            .is_some_and(|b| b.returns_only && b.until.is_some())
    }
}
