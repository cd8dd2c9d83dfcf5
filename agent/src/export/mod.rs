//! The export stage: where calls go. JSON lines or a table on the output (stdout), OTLP
//! spans and metrics, and the end-of-run summary.
//!
//! ```text
//!                  Sender<Vec<CallRecord>>          (bounded: a slow stdout holds the reader)
//! events reader ───────────────────────────► output thread: JSONL/table, Stats::add_delivered,
//!                                                  │        call-duration histogram
//!                                                  │ try, never wait (bounded; overflow
//!                                                  ▼ dropped and counted in Stats)
//!                                            OTLP span task: batches, flush timer, export
//!                                            with a timeout, failures counted and logged
//! ```
//!
//! Nothing on the output path waits for the collector: a slow or dead collector costs the
//! OTLP queue's bound in memory, spans dropped (counted in `Stats::otlp()`), and at most
//! `finish`'s deadline at exit. Counts live in [`Stats`] only; metrics and the summary read
//! them there.
//!
//! Use: [`start`] inside the tokio runtime, send batches on the returned sender, drop every
//! sender when no more calls come (after the reader's last batch), then
//! [`ExportHandle::finish`] with a deadline (e.g. `Instant::now() + FINISH_WITHIN`).

pub mod hist;
pub mod jsonl;
pub mod otlp;
pub mod ratelimit;
pub mod summary;
pub mod table;
pub mod tap;
mod writer;
pub use writer::Format;

use crate::events::CallRecord;
use crate::stats::Stats;
use std::io::Write;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// What [`finish`](ExportHandle::finish) is given at exit, so that gprobe stops within 5 s
/// whatever the collector does.
pub const FINISH_WITHIN: Duration = Duration::from_millis(4500);

/// Batches the output channel holds before the sender waits (the output is slow).
pub const DEFAULT_CHANNEL_BATCHES: usize = 64;

#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub format: Format,
    /// OTLP export, with its queue and batch tuning; `None` for none.
    pub otlp: Option<otlp::OtlpConfig>,
    /// Capacity of the channel to the output thread, in batches.
    pub channel_batches: usize,
    /// Also hands every batch delivered to this (the cluster agent's trace streams).
    pub tap: Option<std::sync::Arc<dyn tap::Tap>>,
}

impl ExportOptions {
    pub fn new(format: Format, otlp: Option<otlp::OtlpConfig>) -> Self {
        Self {
            format,
            otlp,
            channel_batches: DEFAULT_CHANNEL_BATCHES,
            tap: None,
        }
    }
}

#[derive(Debug, Error)]
pub enum ExportError {
    #[error(transparent)]
    Otlp(#[from] otlp::OtlpError),
    #[error("starting the output thread failed: {0}")]
    Thread(#[source] std::io::Error),
}

/// How the output ended.
#[derive(Debug, Default)]
pub enum OutputEnd {
    /// Every call sent was written (or the reader of stdout went away first).
    #[default]
    Complete,
    /// Writing failed (the first error; later calls were still counted and exported).
    Failed(std::io::Error),
    /// The output thread had not finished by the deadline: the calls it had not written
    /// yet are missing from the output.
    Late,
    /// The output thread panicked.
    Panicked,
}

/// What [`ExportHandle::finish`] could not complete by its deadline; every count is in
/// [`Stats`].
#[derive(Debug, Default)]
pub struct Finished {
    pub output: OutputEnd,
    /// OTLP, when it was configured.
    pub otlp: Option<otlp::OtlpFinished>,
}

/// The running export stage.
pub struct ExportHandle {
    output: oneshot::Receiver<writer::WriterEnd>,
    closed: tokio::sync::watch::Receiver<bool>,
    otlp: Option<otlp::OtlpHandle>,
}

/// Starts the export stage: an output thread for `opts.format` on `out`, and OTLP export
/// when `opts.otlp` is set (which needs the tokio runtime). Send batches of calls on the
/// returned sender; every batch is counted once in `Stats::add_delivered`.
pub fn start(
    opts: ExportOptions,
    out: Box<dyn Write + Send>,
    stats: Stats,
) -> Result<(mpsc::Sender<Vec<CallRecord>>, ExportHandle), ExportError> {
    let (sink, otlp) = match &opts.otlp {
        Some(cfg) => {
            let (sink, handle) = otlp::start(cfg, stats.clone())?;
            (Some(sink), Some(handle))
        }
        None => (None, None),
    };
    let (tx, rx) = mpsc::channel(opts.channel_batches.max(1));
    let (done_tx, done_rx) = oneshot::channel();
    let (closed_tx, closed) = tokio::sync::watch::channel(false);
    let w = writer::Writer {
        format: opts.format,
        out,
        stats,
        otlp: sink,
        tap: opts.tap,
        closed: closed_tx,
    };
    std::thread::Builder::new()
        .name("gprobe-output".into())
        .spawn(move || {
            crate::priority::raise();
            let _ = done_tx.send(w.run(rx));
        })
        .map_err(ExportError::Thread)?;
    Ok((
        tx,
        ExportHandle {
            output: done_rx,
            closed,
            otlp,
        },
    ))
}

impl ExportHandle {
    /// Turns true when the reader of the output went away (broken pipe).
    pub fn output_closed(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closed.clone()
    }

    /// How full the OTLP span queue is, and was at most (`None` without OTLP).
    pub fn otlp_queue(&self) -> Option<otlp::QueueLevel> {
        self.otlp.as_ref().map(|o| o.level())
    }

    /// Ends the stage by `deadline`, whatever the collector does: waits for the output
    /// thread to write every call sent (drop every sender first, or it waits for more
    /// until the deadline), then, at the same time, for the span task to export what it
    /// holds and for the final metrics export. What is not done by the deadline is
    /// abandoned (spans counted as dropped) and reported in the result.
    pub async fn finish(self, deadline: Instant) -> Finished {
        if let Some(o) = &self.otlp {
            // Exports already in flight are cut at the deadline too.
            o.set_deadline(deadline);
        }
        let output = match tokio::time::timeout_at(deadline, self.output).await {
            Ok(Ok(writer::WriterEnd { error: None })) => OutputEnd::Complete,
            Ok(Ok(writer::WriterEnd { error: Some(e) })) => OutputEnd::Failed(e),
            Ok(Err(_)) => OutputEnd::Panicked,
            Err(_) => {
                tracing::warn!(
                    "the output was not written completely by the shutdown deadline \
                     (output blocked?)"
                );
                OutputEnd::Late
            }
        };
        let otlp = match self.otlp {
            Some(o) => Some(o.finish(deadline).await),
            None => None,
        };
        Finished { output, otlp }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_left_out;
