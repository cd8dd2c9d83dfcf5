//! The running pipeline both modes share: BPF loaded, the session that attaches, the ring
//! buffer reader, the exporters, and the process events feed.

use crate::attach::{AttachError, LoadOptions, Tracer};
use crate::discover::{self, ProcEvent};
use crate::events::reader::{self, Processor, ReaderStats, Registry};
use crate::events::Clock;
use crate::export::otlp::{OtlpConfig, OtlpError};
use crate::export::{ExportError, ExportHandle, ExportOptions, Format};
use crate::session::{AttachReport, LossCounters, ProbeCounters, ProbeState, Session};
use crate::stats::Stats;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error(transparent)]
    Otlp(#[from] OtlpError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub format: Format,
    pub otlp: Option<OtlpConfig>,
    pub load: LoadOptions,
    pub poll_interval: Duration,
}

pub struct Pipeline {
    pub session: Session,
    /// Exec and exit of every process on the host.
    pub proc_events: mpsc::Receiver<ProcEvent>,
    /// Every count: calls delivered per probe and pid (by the export stage), OTLP.
    pub stats: Stats,
    reader_task: JoinHandle<std::io::Result<ReaderStats>>,
    export: ExportHandle,
    watcher_task: JoinHandle<std::io::Result<()>>,
    stop_tx: watch::Sender<bool>,
}

/// Calls delivered per (spec, symbol).
pub type Delivered = HashMap<(Arc<str>, Arc<str>), u64>;

/// What a run did, printed on stderr at the end.
#[derive(Debug, Default)]
pub struct RunSummary {
    pub delivered: Delivered,
    pub counters: HashMap<(Arc<str>, Arc<str>), ProbeCounters>,
    pub reader: ReaderStats,
    pub attach: Vec<AttachReport>,
    pub spans_exported: u64,
    pub otlp_errors: u64,
}

impl Pipeline {
    /// Loads the BPF programs and starts the reader, exporter and process-event tasks.
    /// Must run inside the tokio runtime.
    pub fn start(
        opts: &PipelineOptions,
        out: Box<dyn Write + Send>,
    ) -> Result<Pipeline, PipelineError> {
        let (tracer, rings) = Tracer::load(&opts.load)?;
        let registry = Arc::new(Registry::default());
        let losses: LossCounters = Default::default();
        let session = Session::new(tracer, registry.clone(), losses.clone());
        let stats = Stats::new();
        let (tx, export) = crate::export::start(
            ExportOptions::new(opts.format, opts.otlp.clone()),
            out,
            stats.clone(),
        )?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let processor = Processor::new(registry, Clock::new(), 65_536);
        let reader_task = tokio::spawn(reader::run(
            rings.events,
            processor,
            tx,
            stop_rx,
            opts.poll_interval,
        ));
        let (ptx, proc_events) = mpsc::channel(4096);
        let watcher_task = tokio::spawn(discover::watch_processes(rings.procs, ptx));
        Ok(Pipeline {
            session,
            proc_events,
            stats,
            reader_task,
            export,
            watcher_task,
            stop_tx,
        })
    }

    /// Detaches every probe, drains the ring buffer, flushes the exporters.
    pub async fn stop(mut self) -> Result<RunSummary, PipelineError> {
        let attach = self.session.report();
        self.session.detach_all();
        let counters = self.session.counters();
        self.watcher_task.abort();
        let _ = self.stop_tx.send(true);
        let reader = match self.reader_task.await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(PipelineError::Io(e)),
            Err(e) => return Err(PipelineError::Io(std::io::Error::other(e.to_string()))),
        };
        // Write errors and what OTLP could not do in time were logged when they happened.
        self.export
            .finish(tokio::time::Instant::now() + crate::export::FINISH_WITHIN)
            .await;
        let (spans_exported, _, otlp_errors) = self.stats.otlp_counts();
        let mut delivered = Delivered::new();
        for (k, p) in self.stats.probes() {
            *delivered.entry((k.spec, k.symbol)).or_default() += p.delivered;
        }
        Ok(RunSummary {
            delivered,
            counters,
            reader,
            attach,
            spans_exported,
            otlp_errors,
        })
    }
}

/// What ends a run: SIGINT, SIGTERM or the optional duration. The signal streams are made
/// once, so a signal that arrives while the loop is busy is not missed.
pub struct StopSignal {
    sigint: tokio::signal::unix::Signal,
    sigterm: tokio::signal::unix::Signal,
    deadline: Option<tokio::time::Instant>,
}

impl StopSignal {
    pub fn new(duration: Option<Duration>) -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            sigint: signal(SignalKind::interrupt())?,
            sigterm: signal(SignalKind::terminate())?,
            deadline: duration.map(|d| tokio::time::Instant::now() + d),
        })
    }

    pub async fn wait(&mut self) {
        let deadline = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.sigint.recv() => {}
            _ = self.sigterm.recv() => {}
            _ = deadline => {}
        }
    }
}

/// Logs one attach outcome.
pub fn log_report(r: &AttachReport) {
    match &r.state {
        ProbeState::Attached { uprobes } => tracing::info!(
            "attached {} / {} to {} ({} uprobe{}; pid {})",
            r.spec,
            r.symbol,
            r.binary.display(),
            uprobes,
            if *uprobes == 1 { "" } else { "s" },
            r.pids
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        ProbeState::Failed(e) => {
            tracing::error!("{} / {} in {}: {e}", r.spec, r.symbol, r.binary.display())
        }
    }
}

/// Per (spec, symbol): the counters as last seen.
pub type LastLosses = HashMap<(Arc<str>, Arc<str>), ProbeCounters>;

/// Logs when counters show new losses.
pub fn warn_new_losses(
    counters: &HashMap<(Arc<str>, Arc<str>), ProbeCounters>,
    last: &mut LastLosses,
) {
    for (k, c) in counters {
        let prev = last.insert(k.clone(), *c).unwrap_or_default();
        if c.lost > prev.lost {
            tracing::warn!(
                "{} / {}: {} calls lost (ring buffer full; raise --ring-buffer-size)",
                k.0,
                k.1,
                c.lost - prev.lost
            );
        }
        if c.returns_lost > prev.returns_lost {
            tracing::warn!(
                "{} / {}: {} returns lost (ring buffer full; raise --ring-buffer-size): \
                 those calls will be reported unfinished",
                k.0,
                k.1,
                c.returns_lost - prev.returns_lost
            );
        }
        if c.throttled > prev.throttled {
            tracing::warn!(
                "{} / {}: {} calls over limits.eventsPerSecond not recorded",
                k.0,
                k.1,
                c.throttled - prev.throttled
            );
        }
    }
}

impl RunSummary {
    /// The end-of-run report: per probe, calls delivered and every way a call was not.
    pub fn render(&self) -> String {
        let mut keys: Vec<&(Arc<str>, Arc<str>)> =
            self.counters.keys().chain(self.delivered.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut s = String::from("gprobe summary:\n");
        if keys.is_empty() {
            s += "  no probe was attached\n";
        }
        for k in keys {
            let c = self.counters.get(k).copied().unwrap_or_default();
            let d = self.delivered.get(k).copied().unwrap_or(0);
            s += &format!(
                "  {} / {}: {} calls delivered, {} lost (ring buffer full), {} throttled (eventsPerSecond)\n",
                k.0, k.1, d, c.lost, c.throttled
            );
            if c.returns_lost > 0 {
                s += &format!(
                    "    {} of the delivered calls lost their return (ring buffer full) and are reported unfinished\n",
                    c.returns_lost
                );
            }
        }
        let p = self.reader.pairing;
        if p.abandoned > 0 || p.orphan_returns > 0 {
            s += &format!(
                "  {} calls abandoned in flight (never returned), {} returns without their entry\n",
                p.abandoned, p.orphan_returns
            );
        }
        for r in &self.attach {
            if let ProbeState::Failed(e) = &r.state {
                s += &format!(
                    "  failed: {} / {} in {}: {e}\n",
                    r.spec,
                    r.symbol,
                    r.binary.display()
                );
            }
        }
        if self.spans_exported > 0 || self.otlp_errors > 0 {
            s += &format!(
                "  OTLP: {} spans exported, {} failed exports\n",
                self.spans_exported, self.otlp_errors
            );
        }
        s
    }
}
