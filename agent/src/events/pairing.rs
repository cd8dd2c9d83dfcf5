//! Joins ENTRY and RETURN records of latency probes by the call id BPF gave them.
//!
//! BPF pairs by goroutine (runtime.g in R14), so a goroutine that parks and resumes on
//! another thread is still measured right; here the call id only joins the two records.
//! Entries whose return never comes (a panic unwound them, or the RETURN record was lost
//! and counted in BPF) are bounded: past `capacity` the oldest are dropped and counted.

use super::call::CallRecord;
use super::value::Value;
use std::collections::{HashMap, VecDeque};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PairingStats {
    /// Entries evicted because too many calls were in flight.
    pub abandoned: u64,
    /// Returns whose entry was not (or no longer) pending.
    pub orphan_returns: u64,
}

#[derive(Debug)]
pub struct Pairing {
    pending: HashMap<u64, CallRecord>,
    order: VecDeque<u64>,
    capacity: usize,
    pub stats: PairingStats,
}

impl Pairing {
    pub fn new(capacity: usize) -> Self {
        Self {
            pending: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            stats: PairingStats::default(),
        }
    }

    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Remembers an entry until its return; returns the entry evicted to make room, if any
    /// (it is abandoned: counted, never reported). An id already pending (BPF never gives
    /// one twice while it is in flight; a kernel that ran two hits on one per-CPU stack did)
    /// pushes out the entry that had it, returned the same way: counted, never silently lost.
    pub fn entry(&mut self, call_id: u64, rec: CallRecord) -> Option<CallRecord> {
        if let Some(old) = self.pending.insert(call_id, rec) {
            self.stats.abandoned += 1;
            return Some(old);
        }
        self.order.push_back(call_id);
        let mut evicted = None;
        while self.pending.len() > self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    if let Some(r) = self.pending.remove(&old) {
                        self.stats.abandoned += 1;
                        evicted = Some(r);
                    }
                }
                None => break,
            }
        }
        // Completed calls leave their ids in `order`; compact it now and then.
        if self.order.len() > 2 * self.capacity.max(1024) {
            let pending = &self.pending;
            self.order.retain(|id| pending.contains_key(id));
        }
        evicted
    }

    pub fn ret(
        &mut self,
        call_id: u64,
        duration_ns: u64,
        returns: Vec<Value>,
    ) -> Option<CallRecord> {
        match self.pending.remove(&call_id) {
            Some(mut rec) => {
                rec.duration_ns = Some(duration_ns);
                rec.returns = Some(returns);
                Some(rec)
            }
            None => {
                self.stats.orphan_returns += 1;
                None
            }
        }
    }

    /// The calls of process `pid` still in flight (it exited: they never return), oldest
    /// first, marked unfinished.
    pub fn drain_pid(&mut self, pid: u32) -> Vec<CallRecord> {
        self.drain_where(|r| r.pid == pid)
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    /// The calls in flight for which `f` holds (their returns can no longer be seen), with
    /// their call ids, oldest first, marked unfinished.
    pub fn drain_where(&mut self, f: impl Fn(&CallRecord) -> bool) -> Vec<(u64, CallRecord)> {
        let mut ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, r)| f(r))
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            return Vec::new();
        }
        let pos: HashMap<u64, usize> = self
            .order
            .iter()
            .enumerate()
            .map(|(i, id)| (*id, i))
            .collect();
        ids.sort_by_key(|id| pos.get(id).copied().unwrap_or(usize::MAX));
        ids.into_iter()
            .filter_map(|id| Some((id, self.pending.remove(&id)?)))
            .map(|(id, mut r)| {
                r.unfinished = true;
                (id, r)
            })
            .collect()
    }

    /// Calls still in flight, oldest first, marked unfinished.
    pub fn drain_unfinished(&mut self) -> Vec<CallRecord> {
        let mut out = Vec::new();
        for id in self.order.drain(..) {
            if let Some(mut rec) = self.pending.remove(&id) {
                rec.unfinished = true;
                out.push(rec);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ProbeMeta, Resource};
    use std::sync::Arc;

    fn rec(pid: u32) -> CallRecord {
        CallRecord {
            probe: Arc::new(ProbeMeta::simple("s", "main.f", true)),
            pid,
            tid: pid,
            start_time_unix_nano: 1,
            duration_ns: None,
            args: vec![],
            returns: None,
            resource: Arc::new(Resource::default()),
            unfinished: false,
            span: Default::default(),
        }
    }

    #[test]
    fn returns_complete_their_entries_once() {
        let mut p = Pairing::new(10);
        p.entry(7, rec(1));
        p.entry(8, rec(2));
        let r = p.ret(8, 500, vec![]).unwrap();
        assert_eq!((r.pid, r.duration_ns), (2, Some(500)));
        assert!(p.ret(8, 500, vec![]).is_none());
        assert_eq!(p.stats.orphan_returns, 1);
        let left = p.drain_unfinished();
        assert_eq!(left.len(), 1);
        assert!(left[0].unfinished);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn an_exited_process_calls_in_flight_come_out_at_once_in_order() {
        let mut p = Pairing::new(10);
        p.entry(1, rec(5));
        p.entry(2, rec(6));
        p.entry(3, rec(5));
        let gone = p.drain_pid(5);
        assert_eq!(gone.len(), 2);
        assert!(gone.iter().all(|r| r.unfinished && r.pid == 5));
        assert!(p.ret(1, 1, vec![]).is_none());
        assert!(p.ret(2, 1, vec![]).is_some(), "other processes keep theirs");
        assert!(p.drain_pid(5).is_empty());
    }

    #[test]
    fn an_entry_whose_id_is_pending_pushes_out_the_other_counted() {
        let mut p = Pairing::new(10);
        assert!(p.entry(7, rec(1)).is_none());
        let old = p.entry(7, rec(2)).expect("the entry that had the id");
        assert_eq!(old.pid, 1);
        assert_eq!(p.stats.abandoned, 1);
        assert_eq!(p.ret(7, 5, vec![]).map(|r| r.pid), Some(2));
        assert!(p.drain_unfinished().is_empty());
    }

    #[test]
    fn abandoned_entries_are_bounded_and_counted() {
        let mut p = Pairing::new(3);
        for id in 0..10 {
            let evicted = p.entry(id, rec(id as u32));
            assert_eq!(evicted.map(|r| r.pid), id.checked_sub(3).map(|x| x as u32));
        }
        assert_eq!(p.in_flight(), 3);
        assert_eq!(p.stats.abandoned, 7);
        assert!(p.ret(9, 1, vec![]).is_some());
        assert!(p.ret(0, 1, vec![]).is_none());
        // Many completed calls do not grow the bookkeeping without bound.
        for id in 100..100_000u64 {
            p.entry(id, rec(1));
            p.ret(id, 1, vec![]);
        }
        assert!(p.order.len() <= 2 * 1024 + 1, "{}", p.order.len());
    }
}
