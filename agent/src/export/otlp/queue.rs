//! The bounded hand-off from the output thread to the OTLP task. The bound is on spans the
//! OTLP stage holds in every form (queued calls, spans waiting for a batch, the batch being
//! exported), so a slow or dead collector costs at most that much memory; what does not fit
//! is dropped at once and counted, never waited for.

use crate::events::CallRecord;
use crate::stats::Stats;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// How many spans the OTLP stage holds, against its capacity.
#[derive(Debug)]
pub struct Held {
    count: AtomicUsize,
    peak: AtomicUsize,
    capacity: usize,
}

/// A reading of [`Held`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLevel {
    pub held: usize,
    /// The most ever held at once; never above `capacity`.
    pub peak: usize,
    pub capacity: usize,
}

impl Held {
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            count: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            capacity,
        })
    }

    /// Reserves room for up to `n` spans; returns how many fit.
    fn reserve(&self, n: usize) -> usize {
        let mut cur = self.count.load(Ordering::Relaxed);
        loop {
            let take = n.min(self.capacity.saturating_sub(cur));
            if take == 0 {
                return 0;
            }
            match self.count.compare_exchange_weak(
                cur,
                cur + take,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(cur + take, Ordering::Relaxed);
                    return take;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// `n` spans left the stage: exported or dropped (and counted as such).
    pub(crate) fn release(&self, n: usize) {
        self.count.fetch_sub(n, Ordering::AcqRel);
    }

    pub fn level(&self) -> QueueLevel {
        QueueLevel {
            held: self.count.load(Ordering::Acquire),
            peak: self.peak.load(Ordering::Relaxed),
            capacity: self.capacity,
        }
    }
}

/// The sending side, owned by the output thread. Dropping it tells the OTLP task that no
/// more calls come: it exports what it holds and ends.
#[derive(Debug)]
pub struct SpanQueue {
    tx: mpsc::UnboundedSender<Vec<CallRecord>>,
    held: Arc<Held>,
    stats: Stats,
}

impl SpanQueue {
    pub(crate) fn new(
        held: Arc<Held>,
        stats: Stats,
    ) -> (Self, mpsc::UnboundedReceiver<Vec<CallRecord>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx, held, stats }, rx)
    }

    /// Hands `batch` to the OTLP task without waiting. What does not fit under the bound
    /// (or arrives after the task ended) is dropped and counted in
    /// `Stats::otlp().spans_dropped`; returns how many spans that was.
    pub fn push(&self, mut batch: Vec<CallRecord>) -> u64 {
        let n = batch.len();
        let fit = self.held.reserve(n);
        batch.truncate(fit);
        let mut dropped = n - fit;
        if fit > 0 {
            if let Err(mpsc::error::SendError(back)) = self.tx.send(batch) {
                self.held.release(back.len());
                dropped += back.len();
            }
        }
        if dropped > 0 {
            self.stats
                .otlp()
                .spans_dropped
                .fetch_add(dropped as u64, Ordering::Relaxed);
        }
        dropped as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ProbeMeta, Resource};

    fn batch(n: usize) -> Vec<CallRecord> {
        let probe = Arc::new(ProbeMeta::simple("p", "main.f", false));
        (0..n)
            .map(|i| CallRecord {
                probe: probe.clone(),
                pid: 1,
                tid: i as u32,
                start_time_unix_nano: 0,
                duration_ns: None,
                args: vec![],
                returns: None,
                resource: Arc::new(Resource::default()),
                unfinished: false,
                span: Default::default(),
            })
            .collect()
    }

    #[test]
    fn what_does_not_fit_is_dropped_and_counted() {
        let stats = Stats::new();
        let held = Held::new(10);
        let (q, mut rx) = SpanQueue::new(held.clone(), stats.clone());
        assert_eq!(q.push(batch(4)), 0);
        assert_eq!(q.push(batch(8)), 2, "the first 6 fit");
        assert_eq!(q.push(batch(1)), 1);
        assert_eq!(rx.try_recv().unwrap().len(), 4);
        assert_eq!(rx.try_recv().unwrap().len(), 6);
        assert!(rx.try_recv().is_err());
        assert_eq!(
            held.level(),
            QueueLevel {
                held: 10,
                peak: 10,
                capacity: 10
            }
        );
        // Room comes back only when the task has exported or dropped what it holds.
        held.release(5);
        assert_eq!(q.push(batch(7)), 2);
        assert_eq!(stats.otlp_counts().1, 5);
        // After the task ended, everything is dropped, counted, and gives its room back.
        drop(rx);
        held.release(10);
        assert_eq!(q.push(batch(3)), 3);
        assert_eq!(held.level().held, 0);
        assert_eq!(stats.otlp_counts().1, 8);
        assert_eq!(held.level().peak, 10);
    }
}
