//! Processes held (stopped) until their probes are attached: at exec, children of traced
//! processes at fork, and in the dynamic loader. The kernel's map of holds is the engine's
//! queue of work: a hold is normally handled when its event arrives, and otherwise (the
//! event was lost, or waits behind many others) taken from the map. A hold never lasts past
//! the hold deadline: a slow agent lets the process run and counts it missed. Holds that an
//! agent which died left are taken over at start. Process events lost from a full ring are
//! counted, and a rescan then looks for what they announced.

use super::tracer::{Held, HoldKind, Resolver, Tracer};
use super::{monotonic_ns, Engine};
use std::collections::HashSet;
use std::time::Duration;

/// A hold not handled after this long is taken from the map: its event was lost, or
/// waits behind many others.
pub const QUEUE_AFTER: Duration = Duration::from_millis(100);

/// Most processes remembered as resumed at the deadline before they were handled.
const MAX_OVERDUE: usize = 4096;

/// Most holds remembered as handled from the map before their event came.
const MAX_HANDLED: usize = 16384;

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// Ends a hold (see [`Tracer::resume`]).
    pub fn resume_held(&mut self, pid: u32, hold: super::Hold) {
        self.tracer.resume(pid, hold);
    }

    /// The holds to handle now, oldest first: those held longer than [`QUEUE_AFTER`]. The
    /// ones past the hold deadline are resumed instead (and counted missed when handled).
    pub fn due_holds(&mut self) -> Vec<Held> {
        let now = monotonic_ns();
        let (queue_after, deadline) = (
            QUEUE_AFTER.as_nanos() as u64,
            self.opts.hold_timeout.as_nanos() as u64,
        );
        let mut due = Vec::new();
        for h in self.tracer.held() {
            let age = now.saturating_sub(h.hold.since_ns);
            if age >= deadline {
                self.past_deadline(h, age);
            } else if age >= queue_after {
                due.push(h);
            }
        }
        due.sort_by_key(|h| h.hold.since_ns);
        due
    }

    /// Notes that a hold taken from the map is handled now.
    pub fn mark_handled(&mut self, pid: u32, hold: super::Hold) {
        let key = (pid, hold.since_ns);
        if self.holds.handled.insert(key) {
            self.holds.handled_order.push_back(key);
            while self.holds.handled_order.len() > MAX_HANDLED {
                if let Some(old) = self.holds.handled_order.pop_front() {
                    self.holds.handled.remove(&old);
                }
            }
        }
    }

    /// Whether a hold was handled from the map already.
    pub fn was_handled(&self, pid: u32, hold: super::Hold) -> bool {
        self.holds.handled.contains(&(pid, hold.since_ns))
    }

    /// The pids held now (by this agent).
    pub fn held_pids(&self) -> HashSet<u32> {
        self.tracer.held().into_iter().map(|h| h.pid).collect()
    }

    /// Resumes the holds past the hold deadline.
    pub(super) fn enforce_hold_deadline(&mut self) {
        let now = monotonic_ns();
        let deadline = self.opts.hold_timeout.as_nanos() as u64;
        for h in self.tracer.held() {
            let age = now.saturating_sub(h.hold.since_ns);
            if age >= deadline {
                self.past_deadline(h, age);
            }
        }
    }

    fn past_deadline(&mut self, h: Held, age_ns: u64) {
        let ms = age_ns / 1_000_000;
        let what = match h.kind {
            HoldKind::Exec => "at exec",
            HoldKind::Fork { .. } => "at fork",
            HoldKind::Loader => "in its dynamic loader",
        };
        tracing::warn!(
            "pid {}: held {what} for {ms} ms, past the hold deadline ({} ms): resumed before its probes were attached",
            h.pid,
            self.opts.hold_timeout.as_millis()
        );
        self.tracer.resume(h.pid, h.hold);
        if h.kind != HoldKind::Loader && self.holds.overdue.len() < MAX_OVERDUE {
            self.holds.overdue.insert(h.pid, ms);
        }
    }

    /// How long `pid` had been held when the deadline resumed it before it was handled
    /// (taken: asked once, when it is).
    pub(super) fn take_overdue(&mut self, pid: u32) -> Option<u64> {
        self.holds.overdue.remove(&pid)
    }

    /// Takes over the holds that agents which died left: the next scan handles them.
    pub fn adopt_holds(&mut self) {
        for h in self.tracer.take_adopted() {
            self.holds.adopted.insert(h.pid, h);
        }
    }

    /// The hold an agent that died left on `pid`, if any (taken).
    pub fn take_adopted(&mut self, pid: u32) -> Option<Held> {
        self.holds.adopted.remove(&pid)
    }

    /// Resumes the adopted holds the scan did not handle (gone, or outside what this agent
    /// may select).
    pub fn release_adopted(&mut self) {
        for (pid, h) in std::mem::take(&mut self.holds.adopted) {
            self.tracer.resume(pid, h.hold);
        }
    }

    /// Resumes every process held (stopping).
    pub(super) fn release_all_holds(&mut self) {
        for h in self.tracer.held() {
            self.tracer.resume(h.pid, h.hold);
        }
        self.release_adopted();
    }

    /// Reads the process hooks' counters into the stats; lost events call for a rescan.
    pub(super) fn refresh_proc_counts(&mut self) {
        let c = self.tracer.proc_counts();
        if c.lost > self.holds.events_lost {
            tracing::warn!(
                "{} process events lost (the process ring buffer was full): looking for processes that started unseen",
                c.lost - self.holds.events_lost
            );
            self.holds.events_lost = c.lost;
            self.holds.rescan = true;
        }
        self.stats.set_process_events_lost(c.lost);
    }

    /// True (once) when process events were lost since the last call: the caller rescans.
    pub fn take_rescan(&mut self) -> bool {
        std::mem::take(&mut self.holds.rescan)
    }

    /// Forgets what is kept about a process that exited.
    pub(super) fn forget_hold_state(&mut self, pid: u32) {
        self.holds.overdue.remove(&pid);
    }
}
