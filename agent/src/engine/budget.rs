//! Overhead budgets (`limits.maxOverheadPercent`): what one spec's probes cost one process,
//! and taking them off a process that stays over.
//!
//! Each (process, spec) pair gets a budget slot when its probes are attached; the slot is
//! in every site's BPF cookie, and each hit adds its site's measured cost (`cost_ns` of the
//! configuration: an emulated or a single-stepped trap, `resolve/sites.rs`) to the slot in
//! the kernel. Every tick the engine reads what each slot cost since the last one. A pair
//! over its share of one CPU for [`WINDOW`] in a row loses its return probes first, where
//! it has any (a Go return is a single-stepped trap, its entry an emulated one): its
//! entries go on recording every call, without a duration or results. Still over for
//! another window, it loses all of that spec's probes. Either is said once and counted in
//! the summary's `budget`, and undone after a back-off that doubles from
//! [`FIRST_BACKOFF`]. Other processes keep their probes. Where the kernel's sites were not
//! measured, costs are unknown and no budget applies (said once).

use super::budget_state::{Backoff, Slot};
use super::{Engine, Resolver, Site, SpecId, Tracer};
use crate::stats::TakenOff;
use crate::util::printable;
use std::time::{Duration, Instant};

/// How long a process must stay over budget before its probes go.
pub const WINDOW: Duration = Duration::from_secs(10);

/// The first wait before probes taken off are tried again; it doubles each time.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(60);

/// The longest wait between tries.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

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
                tracing::warn!(
                    "what a probe costs is unknown on this kernel (its uprobe sites \
                    could not be measured): limits.maxOverheadPercent is not enforced"
                );
            }
            return 0;
        }
        if let Some(s) = self.budgets.slots.get(&(pid, sid)) {
            return s.id;
        }
        let b = &mut self.budgets;
        let id = match b.free.pop() {
            Some(id) => id,
            None if b.next + 1 < crate::abi::GP_MAX_BUDGET_SLOTS as u32 => {
                b.next += 1;
                b.next
            }
            None => return 0,
        };
        self.tracer.clear_budget(id);
        let last_ns = self.tracer.budget_spent(id);
        let last_cpu_ns = self.tracer.process_cpu_ns(pid);
        self.budgets.slots.insert(
            (pid, sid),
            Slot {
                id,
                last_ns,
                last_cpu_ns,
                over_since: None,
                peak: 0.0,
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
            if !self.stopping {
                self.stats.budget_process_exited(pid);
            }
        }
    }

    /// Reads every slot: takes the probes off pairs over budget for [`WINDOW`], and puts
    /// them back on pairs whose back-off ended.
    pub(super) fn check_budgets(&mut self, now: Instant) {
        for (pid, func_ids) in std::mem::take(&mut self.budgets.forget) {
            self.tracer.forget_calls(pid, &func_ids);
        }
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
            // Each hit counts its site's cost as measured when gprobe started: a hit that
            // costs less than that (warm caches, a machine busier at the measurement) makes
            // the estimate exceed the time the process ran, a single thread over 100% of a
            // CPU. Its probes cannot have cost it more than the CPU time it used.
            let cpu = self.tracer.process_cpu_ns(pid);
            let ran = cpu
                .zip(slot.last_cpu_ns)
                .map(|(now_ns, then_ns)| now_ns.saturating_sub(then_ns));
            slot.last_cpu_ns = cpu;
            let delta = ran.map_or(delta, |ran| delta.min(ran));
            let percent = 100.0 * delta as f64 / elapsed;
            if percent > slot.peak {
                // Listed in the summary with the process, whether taken off or not.
                slot.peak = percent;
                if let (Some(spec), Some(p)) = (self.specs.get(&sid), self.procs.get(&pid)) {
                    let exe = p.info.exe.to_string_lossy();
                    self.stats
                        .budget_seen(&spec.key.to_string(), pid, &exe, percent);
                }
            }
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
        let prev = self.budgets.backoff.get(&(pid, sid)).copied();
        let has_returns = self
            .procs
            .get(&pid)
            .is_some_and(|p| p.links.iter().any(|a| a.spec == sid && a.rets.is_some()));
        let what = if has_returns {
            TakenOff::Returns
        } else {
            TakenOff::All
        };
        // Returns off and still over: the rest goes now, back when the returns would have.
        let wait = match prev {
            Some(b) if b.returns_only && b.until.is_some() => b.wait,
            Some(b) => (b.wait * 2).min(MAX_BACKOFF),
            None => FIRST_BACKOFF,
        };
        let until = match prev {
            Some(Backoff {
                returns_only: true,
                until: Some(until),
                ..
            }) => until,
            _ => now + wait,
        };
        self.budgets.backoff.insert(
            (pid, sid),
            Backoff {
                until: Some(until),
                wait,
                returns_only: what == TakenOff::Returns,
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
        let left = until.saturating_duration_since(now).as_secs();
        let taken = match what {
            TakenOff::Returns => {
                "its return probes detached from that process (its calls are \
                still recorded, without a duration or results; those a `when:` needs the \
                return for are counted undecided)"
            }
            TakenOff::All => "detached from that process",
        };
        tracing::warn!(
            "{name}: its probes cost pid {pid} ({}) about {percent:.1}% of a CPU for {} s, over \
            limits.maxOverheadPercent ({limit}%): {taken}, tried again in {left} s",
            printable(&exe),
            WINDOW.as_secs(),
        );
        self.stats
            .budget_detached(&name, pid, &exe, percent, what, wait);
        self.dirty = true;
        match what {
            TakenOff::Returns => self.returns_off(pid, sid),
            TakenOff::All => {
                self.detach_links_of(pid, sid);
                if let Some(s) = self.budgets.slots.remove(&(pid, sid)) {
                    self.budgets.free.push(s.id);
                }
            }
        }
    }

    /// Switches the returns of spec `sid` in `pid` off, then detaches them: a return that
    /// fires meanwhile does nothing (gprobe.bpf.c), so none can take a call entered since.
    fn returns_off(&mut self, pid: u32, sid: SpecId) {
        let Some(slot) = self.budgets.slots.get_mut(&(pid, sid)) else {
            return;
        };
        // A new window for what the entries cost alone.
        slot.over_since = None;
        let id = slot.id;
        if let Err(e) = self.tracer.set_returns_off(id, true) {
            tracing::warn!(
                "pid {pid}: switching its return probes off failed ({e}): all of the \
                spec's probes are taken off instead"
            );
            if let Some(b) = self.budgets.backoff.get_mut(&(pid, sid)) {
                b.returns_only = false;
            }
            self.detach_links_of(pid, sid);
            return;
        }
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let mut func_ids = Vec::new();
        let mut gone = Vec::new();
        for a in p.links.iter_mut().filter(|a| a.spec == sid) {
            if let Some(r) = a.rets.take() {
                gone.push(r);
                let entry = self
                    .binaries
                    .get(&a.file)
                    .and_then(|b| b.probes.get(&(sid, a.probe)))
                    .and_then(|p| p.as_ref().ok())
                    .map(|p| p.cfg.entry);
                func_ids.extend(entry);
            }
        }
        for r in gone {
            self.tracer.detach(r);
        }
        self.budgets.forget.push((pid, func_ids));
    }

    /// Puts spec `sid` back on `pid` after its back-off (the process still runs and the
    /// spec still selects it): its returns, or all of its probes.
    fn retry_budget(&mut self, pid: u32, sid: SpecId) {
        let Some(info) = self.procs.get(&pid).map(|p| p.info.clone()) else {
            self.budgets.backoff.remove(&(pid, sid));
            return;
        };
        if !self.procs.get(&pid).is_some_and(|p| p.specs.contains(&sid)) {
            self.budgets.backoff.remove(&(pid, sid));
            return;
        }
        let mut returns_only = false;
        // Kept (without `until`) so that the next time over budget waits twice as long.
        if let Some(b) = self.budgets.backoff.get_mut(&(pid, sid)) {
            b.until = None;
            returns_only = b.returns_only;
        }
        if returns_only {
            tracing::info!(
                "pid {pid}: its back-off over, the return probes taken off for their cost are attached again"
            );
            self.returns_on(pid, sid);
        } else {
            tracing::info!(
                "pid {pid}: its back-off over, the probes taken off for their cost are attached again"
            );
            self.attach_specs(&info, &[sid]);
        }
        if let Some(spec) = self.specs.get(&sid) {
            self.stats.budget_retried(&spec.key.to_string(), pid);
        }
    }

    /// Attaches the returns of spec `sid` in `pid` again, then switches them on: until
    /// then its entries open no call, so a return finds none to take (counted unpaired).
    fn returns_on(&mut self, pid: u32, sid: SpecId) {
        let Some(slot) = self.budgets.slots.get(&(pid, sid)).map(|s| s.id) else {
            return;
        };
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let todo: Vec<(usize, crate::discover::FileKey)> = p
            .links
            .iter()
            .filter(|a| a.spec == sid && a.rets.is_none() && a.outcome.is_ok())
            .map(|a| (a.probe, a.file))
            .collect();
        let mut attached = Vec::new();
        for (pi, file) in todo {
            let Some(bin) = self.binaries.get(&file) else {
                continue;
            };
            let Some(Ok(planned)) = bin.probes.get(&(sid, pi)) else {
                continue;
            };
            let sites: Vec<Site> = planned
                .sites
                .iter()
                .filter(|s| Some(s.cfg) == planned.cfg.ret)
                .map(|s| Site { slot, ..*s })
                .collect();
            if sites.is_empty() {
                continue;
            }
            match self.tracer.attach(pid, &bin.attach_path, &sites) {
                Ok(l) => attached.push((pi, file, l)),
                Err(e) => {
                    tracing::warn!("pid {pid}: attaching its return probes again failed: {e}")
                }
            }
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            for (pi, file, l) in attached {
                if let Some(a) = p
                    .links
                    .iter_mut()
                    .find(|a| a.spec == sid && a.probe == pi && a.file == file)
                {
                    a.rets = Some(l);
                }
            }
        }
        if let Err(e) = self.tracer.set_returns_off(slot, false) {
            tracing::warn!("pid {pid}: switching its return probes on failed: {e}");
        }
        self.dirty = true;
    }
}
