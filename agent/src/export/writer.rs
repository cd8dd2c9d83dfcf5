//! The output thread: receives batches of calls, writes them as JSON lines or a table,
//! counts them as delivered, and hands them to OTLP without waiting for it.

use super::otlp::OtlpSink;
use super::ratelimit::{suppressed_note, LogLimiter, WARN_EVERY};
use super::{jsonl, table};
use crate::events::CallRecord;
use crate::stats::{DurationBuckets, ProbeKey, Stats};
use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::time::Duration;
use tokio::sync::mpsc;

pub(crate) struct Writer {
    pub(crate) format: Format,
    pub(crate) out: Box<dyn Write + Send>,
    pub(crate) stats: Stats,
    pub(crate) otlp: Option<OtlpSink>,
    pub(crate) tap: Option<std::sync::Arc<dyn super::tap::Tap>>,
    /// Turns true when the reader of the output went away (broken pipe).
    pub(crate) closed: tokio::sync::watch::Sender<bool>,
}

/// How often the output thread wakes without calls, with OTLP.
const TICK: Duration = Duration::from_secs(1);

/// Output format on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Table,
    None,
}

/// How the output thread ended.
#[derive(Debug)]
pub(crate) struct WriterEnd {
    /// The first error writing the output, other than a closed pipe.
    pub(crate) error: Option<std::io::Error>,
}

struct State {
    buf: Vec<u8>,
    table: table::Table,
    /// The reader of stdout went away: nothing more is written (OTLP goes on).
    closed: bool,
    first_error: Option<std::io::Error>,
    write_warn: LogLimiter,
    queue_warn: LogLimiter,
    /// Spans dropped at the OTLP queue since the last warning.
    dropped_unlogged: u64,
}

impl Writer {
    /// Runs until every sender of `rx` is gone, then flushes and closes the OTLP queue.
    pub(crate) fn run(mut self, mut rx: mpsc::Receiver<Vec<CallRecord>>) -> WriterEnd {
        let mut st = State {
            buf: Vec::with_capacity(256 << 10),
            table: table::Table::default(),
            closed: false,
            first_error: None,
            write_warn: LogLimiter::new(WARN_EVERY),
            queue_warn: LogLimiter::new(WARN_EVERY),
            dropped_unlogged: 0,
        };
        // Table rows wait a moment for calls that ended before them (table.rs): the
        // thread then wakes when the oldest is due, with a timer of its own; with OTLP, at
        // least every second, to count the calls probes left out (`OtlpSink::tick`).
        let timer = match (self.format, &self.otlp) {
            (Format::Table, _) | (_, Some(_)) => tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .ok(),
            _ => None,
        };
        loop {
            let due = st.table.next_due();
            let next = match &timer {
                Some(rt) if due.is_some() || self.otlp.is_some() => {
                    let mut wait = TICK;
                    if let Some(due) = due {
                        wait = wait.min(Duration::from_nanos(due.saturating_sub(unix_now_ns())));
                    }
                    match rt.block_on(async { tokio::time::timeout(wait, rx.recv()).await }) {
                        Ok(b) => b,
                        Err(_) => {
                            self.write_table(Some(unix_now_ns()), &mut st);
                            if let Some(otlp) = &mut self.otlp {
                                otlp.tick();
                            }
                            continue;
                        }
                    }
                }
                _ => {
                    if due.is_some() {
                        // No timer: rows are written as they come, each batch in order.
                        self.write_table(None, &mut st);
                    }
                    rx.blocking_recv()
                }
            };
            match next {
                Some(batch) => self.batch(batch, &mut st),
                None => break,
            }
        }
        if let Some(otlp) = &mut self.otlp {
            otlp.tick();
        }
        self.write_table(None, &mut st);
        if !st.closed {
            if let Err(e) = self.out.flush() {
                self.write_failed(e, &mut st);
            }
        }
        if st.dropped_unlogged > 0 {
            tracing::warn!(
                "OTLP: {} more spans dropped, export queue full (collector slow or unreachable)",
                st.dropped_unlogged
            );
        }
        // Dropping the sink closes the queue: the span task exports what is left and ends.
        drop(self.otlp.take());
        WriterEnd {
            error: st.first_error,
        }
    }

    fn batch(&mut self, batch: Vec<CallRecord>, st: &mut State) {
        if !st.closed && self.format != Format::None {
            // One write per batch: a batch is a natural flush point, so tailing readers see
            // calls within a poll period.
            st.buf.clear();
            match self.format {
                Format::Jsonl => {
                    for rec in &batch {
                        jsonl::write_record(rec, &mut st.buf);
                    }
                }
                // Written when due (`write_table`).
                Format::Table => st.table.push(batch.clone(), unix_now_ns()),
                Format::None => {}
            }
            if !st.buf.is_empty() {
                if let Err(e) = self.out.write_all(&st.buf).and_then(|()| self.out.flush()) {
                    self.write_failed(e, st);
                }
            }
            if st.buf.capacity() > 4 << 20 {
                // One huge batch must not pin its buffer for the rest of the run.
                st.buf = Vec::with_capacity(256 << 10);
            }
        }
        self.count(&batch);
        if let Some(tap) = &self.tap {
            tap.send(&batch);
        }
        if let Some(otlp) = &mut self.otlp {
            let dropped = otlp.send(batch);
            if dropped > 0 {
                st.dropped_unlogged += dropped;
                if let Some(suppressed) = st.queue_warn.allow() {
                    tracing::warn!(
                        "OTLP: export queue full (collector slow or unreachable): {} spans \
                         dropped{}",
                        std::mem::take(&mut st.dropped_unlogged),
                        if suppressed > 0 {
                            format!(" in the last {}s", WARN_EVERY.as_secs())
                        } else {
                            String::new()
                        }
                    );
                }
            }
        }
    }

    /// Writes the table rows due at `now` (all with `None`).
    fn write_table(&mut self, now: Option<u64>, st: &mut State) {
        if st.closed || self.format != Format::Table {
            return;
        }
        st.buf.clear();
        st.table.write_due(now, &mut st.buf);
        if st.buf.is_empty() {
            return;
        }
        if let Err(e) = self.out.write_all(&st.buf).and_then(|()| self.out.flush()) {
            self.write_failed(e, st);
        }
    }

    /// Adds the batch to the delivered counts, once per probe and pid, and the durations
    /// of its calls, once per probe.
    fn count(&self, batch: &[CallRecord]) {
        let mut counts: HashMap<(usize, u32), (&ProbeKey, u64)> = HashMap::new();
        let mut durations: HashMap<usize, (&ProbeKey, DurationBuckets)> = HashMap::new();
        for rec in batch {
            let probe = std::sync::Arc::as_ptr(&rec.probe) as usize;
            counts
                .entry((probe, rec.pid))
                .or_insert((&rec.probe.key, 0))
                .1 += 1;
            if let Some(ns) = rec.duration_ns {
                durations
                    .entry(probe)
                    .or_insert_with(|| (&rec.probe.key, DurationBuckets::default()))
                    .1
                    .add_ns(ns);
            }
        }
        self.stats
            .add_delivered(counts.into_iter().map(|((_, pid), (key, n))| (key, pid, n)));
        if !durations.is_empty() {
            self.stats.add_delivered_durations(durations.into_values());
        }
    }

    fn write_failed(&self, e: std::io::Error, st: &mut State) {
        if e.kind() == ErrorKind::BrokenPipe {
            // Whoever read the output (`| head`) is done with it: not an error.
            st.closed = true;
            tracing::info!(
                "the output was closed (its reader exited): calls are no longer written{}",
                if self.otlp.is_some() {
                    " (OTLP export goes on)"
                } else {
                    ""
                }
            );
            let _ = self.closed.send(true);
            return;
        }
        if let Some(suppressed) = st.write_warn.allow() {
            tracing::error!(
                "writing the output failed: {e}{}",
                suppressed_note(suppressed, WARN_EVERY)
            );
        }
        st.first_error.get_or_insert(e);
    }
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
