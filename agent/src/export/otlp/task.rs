//! The OTLP span task: takes calls from the [`SpanQueue`](super::queue::SpanQueue), builds
//! spans, and exports them in batches: when a batch is full, at least every flush interval
//! (even with no new calls), and when the queue closes. One export is in flight at a time,
//! each bounded by the export timeout and by the shutdown deadline; a failure is counted
//! and logged when it happens (rate-limited), and its spans are counted as dropped.

use super::queue::Held;
use super::spans::SpanBuilder;
use crate::events::{CallRecord, Resource};
use crate::export::ratelimit::{suppressed_note, LogLimiter, WARN_EVERY};
use crate::stats::Stats;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SpanExporter as _;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, Instant, MissedTickBehavior};

/// When the task must be done: set by `finish`, `None` while running.
pub(crate) type Deadline = watch::Receiver<Option<Instant>>;

pub(crate) struct SpanTask {
    pub(crate) exporter: opentelemetry_otlp::SpanExporter,
    pub(crate) endpoint: String,
    pub(crate) rx: mpsc::UnboundedReceiver<Vec<CallRecord>>,
    pub(crate) held: Arc<Held>,
    pub(crate) stats: Stats,
    pub(crate) batch: usize,
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
    pub(crate) deadline: Deadline,
}

/// How one bounded wait ended.
enum Bounded<T> {
    Done(T),
    TimedOut,
    Deadline,
}

/// Runs `fut` until it completes, `timeout` after `started` passes, or the shutdown
/// deadline (which may be set while waiting) passes.
async fn bounded<F: Future>(
    fut: F,
    started: Instant,
    timeout: Duration,
    deadline: &mut Deadline,
) -> Bounded<F::Output> {
    tokio::pin!(fut);
    loop {
        let stop = *deadline.borrow();
        let limit = stop.map_or(started + timeout, |d| d.min(started + timeout));
        tokio::select! {
            r = &mut fut => return Bounded::Done(r),
            _ = sleep_until(limit) => {
                return if stop.is_some_and(|d| d <= started + timeout) {
                    Bounded::Deadline
                } else {
                    Bounded::TimedOut
                };
            }
            Ok(()) = deadline.changed() => {}
        }
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d).await,
        None => std::future::pending().await,
    }
}

impl SpanTask {
    /// Runs until the queue closes or the deadline passes; returns how many spans it
    /// dropped at the end because the deadline had passed.
    pub(crate) async fn run(mut self) -> usize {
        let mut builder = SpanBuilder::new();
        let mut warn = LogLimiter::new(WARN_EVERY);
        let mut tick = tokio::time::interval_at(Instant::now() + self.interval, self.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let stop = *self.deadline.borrow();
            tokio::select! {
                biased;
                _ = until(stop) => break,
                Ok(()) = self.deadline.changed() => {}
                // Before new calls: under a steady stream the timer still fires.
                _ = tick.tick() => {
                    if !builder.is_empty() {
                        self.flush(&mut builder, &mut warn).await;
                    }
                }
                msg = self.rx.recv() => match msg {
                    Some(calls) => {
                        builder.record(&calls);
                        drop(calls);
                        while builder.len() >= self.batch {
                            self.flush(&mut builder, &mut warn).await;
                        }
                    }
                    None => {
                        // No more calls: export what is left, batch by batch.
                        while !builder.is_empty() && !self.past_deadline() {
                            self.flush(&mut builder, &mut warn).await;
                        }
                        break;
                    }
                },
            }
        }
        // Whatever is still here could not be exported in time.
        self.rx.close();
        let mut left = builder.clear();
        while let Ok(calls) = self.rx.try_recv() {
            left += calls.len();
        }
        if left > 0 {
            self.drop_spans(left);
            tracing::warn!(
                "OTLP: {left} spans not exported by the shutdown deadline are dropped \
                 (collector at {} slow or unreachable)",
                self.endpoint
            );
        }
        if warn.suppressed() > 0 {
            tracing::warn!(
                "OTLP: {} more export failures were not logged (every {}s at most)",
                warn.suppressed(),
                WARN_EVERY.as_secs()
            );
        }
        let _ = self.exporter.shutdown();
        left
    }

    fn past_deadline(&self) -> bool {
        self.deadline.borrow().is_some_and(|d| d <= Instant::now())
    }

    fn drop_spans(&self, n: usize) {
        self.stats
            .otlp()
            .spans_dropped
            .fetch_add(n as u64, Ordering::Relaxed);
        self.held.release(n);
    }

    /// Exports up to one batch of the oldest spans, one request per process. The requests
    /// of a flush share one timeout.
    async fn flush(&mut self, builder: &mut SpanBuilder, warn: &mut LogLimiter) {
        let started = Instant::now();
        for (resource, spans) in builder.take(self.batch) {
            let n = spans.len();
            let otlp = self.stats.otlp();
            let failure = if started + self.timeout <= Instant::now() || self.past_deadline() {
                Some("not attempted: the flush ran out of time".to_string())
            } else {
                self.exporter.set_resource(&sdk_resource(&resource));
                let export = self.exporter.export(spans);
                match bounded(export, started, self.timeout, &mut self.deadline).await {
                    Bounded::Done(Ok(())) => None,
                    Bounded::Done(Err(e)) => Some(e.to_string()),
                    Bounded::TimedOut => Some(format!(
                        "no answer within {:.1}s",
                        self.timeout.as_secs_f64()
                    )),
                    Bounded::Deadline => Some("stopped at the shutdown deadline".into()),
                }
            };
            match failure {
                None => {
                    otlp.spans_exported.fetch_add(n as u64, Ordering::Relaxed);
                    self.held.release(n);
                }
                Some(e) => {
                    otlp.export_errors.fetch_add(1, Ordering::Relaxed);
                    self.drop_spans(n);
                    if let Some(suppressed) = warn.allow() {
                        tracing::warn!(
                            "OTLP: exporting {n} spans to {} failed: {e}; they are dropped{}",
                            self.endpoint,
                            suppressed_note(suppressed, WARN_EVERY)
                        );
                    }
                }
            }
        }
    }
}

fn sdk_resource(res: &Resource) -> opentelemetry_sdk::Resource {
    opentelemetry_sdk::Resource::builder_empty()
        .with_attributes(
            res.attributes
                .iter()
                .map(|(k, v)| KeyValue::new(*k, v.clone())),
        )
        .build()
}
