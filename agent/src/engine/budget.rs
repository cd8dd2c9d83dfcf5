//! Overhead budgets (`limits.maxOverheadPercent`): what one spec's probes cost one process,
//! and taking them off a process that stays over.
//!
//! Each (process, spec) pair gets a budget slot when its probes are attached; the slot is
//! in every site's BPF cookie, and each hit adds its site's measured cost (`cost_ns` of the
//! configuration: an emulated or a single-stepped trap, `resolve/sites.rs`) to the slot in
//! the kernel. Every tick the engine reads what each slot cost since the last one: a pair
//! over its share of one CPU for [`WINDOW`] in a row has that spec's probes detached from
//! that process (said once, counted in the summary's `budget`), and attached again after a
//! back-off that doubles from [`FIRST_BACKOFF`]. Other processes keep their probes. Where
//! the kernel's sites were not measured, costs are unknown and no budget applies (said
//! once).

use super::{Engine, Resolver, SpecId, Tracer};
use crate::util::printable;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a process must stay over budget before its probes go.
pub const WINDOW: Duration = Duration::from_secs(10);

/// The first wait before probes taken off are tried again; it doubles each time.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(60);

/// The longest wait between tries.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

#[derive(Debug)]
struct Slot {
    id: u32,
    /// What the slot had cost at the last tick (ns).
    last_ns: u64,
    /// Since when it has been over budget, at every tick since.
    over_since: Option<Instant>,
}

/// A (process, spec) pair whose probes were taken off: until when (`None` once they are
/// back on), and the wait of that time (doubled the next time).
#[derive(Debug, Clone, Copy)]
struct Backoff {
    until: Option<Instant>,
    wait: Duration,
}

#[derive(Debug, Default)]
pub(super) struct Budgets {
    slots: HashMap<(u32, SpecId), Slot>,
    free: Vec<u32>,
    next: u32,
    backoff: HashMap<(u32, SpecId), Backoff>,
    last_tick: Option<Instant>,
    unmeasured_said: bool,
}

impl Budgets {
    /// Whether `(pid, sid)` waits out a back-off (its probes stay off until then).
    pub(super) fn waiting(&self, pid: u32, sid: SpecId, now: Instant) -> bool {
        self.backoff
            .get(&(pid, sid))
            .and_then(|b| b.until)
            .is_some_and(|until| now < until)
    }
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// The budget slot of spec `sid`'s probes in process `pid` (given on first use); 0 when
    /// no budget applies (the probe's costs are not `measured`, or every slot is in use).
    pub(super) fn budget_slot(&mut self, pid: u32, sid: SpecId, measured: bool) -> u32 {
        let limit = self
            .specs
            .get(&sid)
            .map_or(0.0, |s| s.spec.spec.limits.max_overhead_percent);
        if limit <= 0.0 {
            return 0;
        }
        if !measured {
            if !self.budgets.unmeasured_said {
                self.budgets.unmeasured_said = true;
                tracing::warn!("what a probe costs is unknown on this kernel (its uprobe sites could not be measured): limits.maxOverheadPercent is not enforced");
            }
            return 0;
        }
        if let Some(s) = self.budgets.slots.get(&(pid, sid)) {
            return s.id;
        }
        let b = &mut self.budgets;
        let id = match b.free.pop() {
            Some(id) => id,
            None if b.next + 1 < crate::attach::abi::GP_MAX_BUDGET_SLOTS as u32 => {
                b.next += 1;
                b.next
            }
            None => return 0,
        };
        self.tracer.clear_budget(id);
        let last_ns = self.tracer.budget_spent(id);
        self.budgets.slots.insert(
            (pid, sid),
            Slot {
                id,
                last_ns,
                over_since: None,
            },
        );
        id
    }

    /// Frees the budget slots of `pid` (all its specs, or only `sid`).
    pub(super) fn free_budget(&mut self, pid: u32, sid: Option<SpecId>) {
        let gone: Vec<(u32, SpecId)> = self
            .budgets
            .slots
            .keys()
            .filter(|(p, s)| *p == pid && sid.is_none_or(|x| x == *s))
            .copied()
            .collect();
        for k in gone {
            if let Some(s) = self.budgets.slots.remove(&k) {
                self.budgets.free.push(s.id);
            }
        }
        if sid.is_none() {
            self.budgets.backoff.retain(|(p, _), _| *p != pid);
        }
    }

    /// Reads every slot: takes the probes off pairs over budget for [`WINDOW`], and puts
    /// them back on pairs whose back-off ended.
    pub(super) fn check_budgets(&mut self, now: Instant) {
        let Some(last) = self.budgets.last_tick.replace(now) else {
            return;
        };
        let elapsed = now.saturating_duration_since(last).as_nanos() as f64;
        if elapsed <= 0.0 {
            return;
        }
        let mut over = Vec::new();
        for (&(pid, sid), slot) in &mut self.budgets.slots {
            let spent = self.tracer.budget_spent(slot.id);
            let delta = spent.saturating_sub(slot.last_ns);
            slot.last_ns = spent;
            let Some(limit) = self
                .specs
                .get(&sid)
                .map(|s| s.spec.spec.limits.max_overhead_percent)
            else {
                continue;
            };
            let percent = 100.0 * delta as f64 / elapsed;
            if percent > limit {
                let since = *slot.over_since.get_or_insert(last);
                if now.saturating_duration_since(since) >= WINDOW {
                    over.push((pid, sid, percent, limit));
                }
            } else {
                slot.over_since = None;
            }
        }
        for (pid, sid, percent, limit) in over {
            self.over_budget(pid, sid, percent, limit, now);
        }
        let due: Vec<(u32, SpecId)> = self
            .budgets
            .backoff
            .iter()
            .filter(|(_, b)| b.until.is_some_and(|until| now >= until))
            .map(|(k, _)| *k)
            .collect();
        for (pid, sid) in due {
            self.retry_budget(pid, sid);
        }
    }

    fn over_budget(&mut self, pid: u32, sid: SpecId, percent: f64, limit: f64, now: Instant) {
        let wait = self
            .budgets
            .backoff
            .get(&(pid, sid))
            .map_or(FIRST_BACKOFF, |b| (b.wait * 2).min(MAX_BACKOFF));
        // The back-off entry stays until the retry; the slot goes with the links.
        self.budgets.backoff.insert(
            (pid, sid),
            Backoff {
                until: Some(now + wait),
                wait,
            },
        );
        let Some(spec) = self.specs.get(&sid) else {
            return;
        };
        let name = spec.key.to_string();
        let exe = self
            .procs
            .get(&pid)
            .map(|p| p.info.exe.to_string_lossy().into_owned())
            .unwrap_or_default();
        tracing::warn!(
            "{name}: its probes cost pid {pid} ({}) about {percent:.1}% of a CPU for {} s, over limits.maxOverheadPercent ({limit}%): detached from that process, tried again in {} s",
            printable(&exe),
            WINDOW.as_secs(),
            wait.as_secs()
        );
        self.stats.budget_detached(&name, pid, &exe, percent, wait);
        self.detach_links_of(pid, sid);
        self.dirty = true;
        let freed = self.budgets.slots.remove(&(pid, sid));
        if let Some(s) = freed {
            self.budgets.free.push(s.id);
        }
    }

    /// Attaches spec `sid` to `pid` again after its back-off (the process still runs and
    /// the spec still selects it).
    fn retry_budget(&mut self, pid: u32, sid: SpecId) {
        let Some(info) = self.procs.get(&pid).map(|p| p.info.clone()) else {
            self.budgets.backoff.remove(&(pid, sid));
            return;
        };
        if !self.procs.get(&pid).is_some_and(|p| p.specs.contains(&sid)) {
            self.budgets.backoff.remove(&(pid, sid));
            return;
        }
        // Kept (without `until`) so that the next time over budget waits twice as long.
        if let Some(b) = self.budgets.backoff.get_mut(&(pid, sid)) {
            b.until = None;
        }
        tracing::info!(
            "pid {pid}: its back-off over, the probes taken off for their cost are attached again"
        );
        self.attach_specs(&info, &[sid]);
        self.stats.budget_retried(pid);
    }
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// Detaches spec `sid`'s links from `pid`; the spec still selects the process.
    fn detach_links_of(&mut self, pid: u32, sid: SpecId) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut p.links)
            .into_iter()
            .partition(|a| a.spec == sid);
        p.links = keep;
        for a in gone {
            if let Ok((links, _)) = a.outcome {
                self.tracer.detach(links);
            }
        }
    }
}
