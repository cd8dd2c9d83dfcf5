//! The running pipeline both modes share: BPF loaded, the engine on its thread, the
//! process-event feed, the ring-buffer reader and the export stage.

use crate::attach::{BpfTracer, LoadError, LoadOptions};
use crate::discover::{self, ProcEvent};
use crate::engine::driver::{self, EngineHandle, Input};
use crate::engine::{Engine, EngineOptions, Mode, SpecRejected};
use crate::events::reader::{self, Processor, ReaderStats, Registry};
use crate::events::{CallRecord, Clock};
use crate::export::otlp::{OtlpConfig, OtlpError, OtlpExporter};
use crate::export::{Exporters, Format};
use crate::plan::BinaryResolver;
use crate::stats::{ProbeStats, Stats};
use gprobe_crds::ProbeSpec;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Otlp(#[from] OtlpError),
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
    pub engine: EngineHandle,
    pub stats: Stats,
    reader_task: JoinHandle<std::io::Result<ReaderStats>>,
    exporter_task: JoinHandle<Exporters>,
    watcher_task: JoinHandle<std::io::Result<()>>,
    stop_tx: watch::Sender<bool>,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct RunSummary {
    pub stats: Stats,
    pub reader: ReaderStats,
    /// Every uprobe was detached before the deadline.
    pub detached: bool,
}

impl Pipeline {
    /// Loads the BPF programs, starts the engine with `specs` (matching the processes that
    /// run now) and the reader, exporter and process-event tasks. Must run inside the
    /// tokio runtime. Returns the specs that were refused.
    pub fn start(
        opts: &PipelineOptions,
        mode: Mode,
        specs: Vec<ProbeSpec>,
        out: Box<dyn Write + Send>,
    ) -> Result<(Pipeline, Vec<SpecRejected>), PipelineError> {
        let (tracer, rings) = BpfTracer::load(&opts.load)?;
        let registry = Arc::new(Registry::default());
        let stats = Stats::new();
        let otlp = match &opts.otlp {
            Some(cfg) => Some(OtlpExporter::new(cfg, Default::default())?),
            None => None,
        };
        let mut exporters = Exporters::new(opts.format, out, otlp, stats.clone());
        let (tx, mut rx) = mpsc::channel::<Vec<CallRecord>>(64);
        let exporter_task = tokio::spawn(async move {
            while let Some(batch) = rx.recv().await {
                if let Err(e) = exporters.export(&batch).await {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        break;
                    }
                    tracing::error!("writing output failed: {e}");
                }
            }
            let _ = exporters.finish().await;
            exporters
        });

        let (exit_tx, exit_rx) = std::sync::mpsc::channel();
        let mut engine = Engine::new(
            tracer,
            BinaryResolver,
            mode,
            EngineOptions::default(),
            registry.clone(),
            stats.clone(),
        );
        engine.set_exit_sink(exit_tx);
        // Process events flow before the first /proc scan: a process exec'd meanwhile is
        // seen twice (harmless), never zero times.
        let (in_tx, in_rx) = std::sync::mpsc::channel();
        let feed = in_tx.clone();
        let watcher_task = tokio::spawn(discover::watch_processes(rings.procs, move |ev| {
            let input = match ev {
                ProcEvent::Exec {
                    pid,
                    held,
                    filename,
                } => Input::Exec {
                    pid,
                    held,
                    filename,
                    at: Instant::now(),
                },
                ProcEvent::Exit(pid) => Input::Exit { pid },
            };
            feed.send(input).is_ok()
        }));
        let (handle, rejected) = driver::spawn(engine, specs, in_tx, in_rx)?;

        let (stop_tx, stop_rx) = watch::channel(false);
        let processor = Processor::new(registry, Clock::new(), 65_536).with_stats(stats.clone());
        let reader_task = tokio::spawn(reader::run(
            rings.events,
            processor,
            tx,
            stop_rx,
            exit_rx,
            opts.poll_interval,
        ));
        Ok((
            Pipeline {
                engine: handle,
                stats,
                reader_task,
                exporter_task,
                watcher_task,
                stop_tx,
            },
            rejected,
        ))
    }

    /// Detaches every probe (waiting for the kernel until `deadline`), drains the ring
    /// buffer, flushes the exporters.
    pub async fn stop(self, deadline: Instant) -> Result<RunSummary, PipelineError> {
        // Detaching may take most of the budget; draining and flushing need the rest.
        let detach_by = deadline
            .checked_sub(Duration::from_millis(2500))
            .filter(|d| *d > Instant::now())
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(500));
        let detached = self.engine.stop(detach_by).await;
        if !detached {
            tracing::warn!("some uprobes were still being detached when gprobe stopped waiting; the kernel removes them when gprobe exits");
        }
        self.watcher_task.abort();
        let _ = self.stop_tx.send(true);
        let reader = match self.reader_task.await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(PipelineError::Io(e)),
            Err(e) => return Err(PipelineError::Io(std::io::Error::other(e.to_string()))),
        };
        let _exporters = self
            .exporter_task
            .await
            .map_err(|e| PipelineError::Io(std::io::Error::other(e.to_string())))?;
        Ok(RunSummary {
            stats: self.stats,
            reader,
            detached,
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

/// Per probe: the counters as last seen.
pub type LastCounts = std::collections::BTreeMap<crate::stats::ProbeKey, ProbeStats>;

/// Logs when counters show new losses.
pub fn warn_new_losses(stats: &Stats, last: &mut LastCounts) {
    for (k, c) in stats.probes() {
        let prev = last.insert(k.clone(), c.clone()).unwrap_or_default();
        let new = |a: u64, b: u64| a.saturating_sub(b);
        if c.lost > prev.lost {
            tracing::warn!(
                "{k}: {} calls lost (ring buffer full; raise --ring-buffer-size)",
                new(c.lost, prev.lost)
            );
        }
        if c.returns_lost > prev.returns_lost {
            tracing::warn!(
                "{k}: {} returns lost (ring buffer full; raise --ring-buffer-size): those calls will be reported unfinished",
                new(c.returns_lost, prev.returns_lost)
            );
        }
        if c.throttled > prev.throttled {
            tracing::warn!(
                "{k}: {} calls over limits.eventsPerSecond not recorded",
                new(c.throttled, prev.throttled)
            );
        }
        if c.too_deep > prev.too_deep {
            tracing::warn!(
                "{k}: {} calls nested deeper than {} in one goroutine not recorded",
                new(c.too_deep, prev.too_deep),
                crate::attach::abi::GP_MAX_DEPTH
            );
        }
    }
}

impl RunSummary {
    /// True when some probe was attached to some process at some time.
    pub fn any_attached(&self) -> bool {
        self.stats.probes().values().any(|p| p.attached)
    }

    /// Why nothing was attached, for the error line at exit.
    pub fn why_nothing_attached(&self) -> String {
        let probes = self.stats.probes();
        let errors: Vec<String> = probes
            .iter()
            .filter_map(|(k, p)| p.error.as_ref().map(|e| format!("{k}: {e}")))
            .collect();
        if !errors.is_empty() {
            return errors.join("; ");
        }
        if self.stats.processes().matched == 0 {
            return "no process matched the selectors while gprobe ran (check selector.executable against the program's path)".into();
        }
        "the matched processes exited before gprobe could attach".into()
    }

    /// The summary as the JSON object of DESIGN.md, written atomically to `path`.
    pub fn write_json(&self, path: &std::path::Path) -> std::io::Result<()> {
        let probes: Vec<serde_json::Value> = self
            .stats
            .probes()
            .iter()
            .map(|(k, p)| {
                serde_json::json!({
                    "spec": &*k.spec, "symbol": &*k.symbol, "attached": p.attached,
                    "error": p.error, "delivered": p.delivered, "lost": p.lost,
                    "throttled": p.throttled, "unfinished": p.unfinished,
                    "abandoned": p.abandoned, "returns_lost": p.returns_lost,
                    "too_deep": p.too_deep,
                })
            })
            .collect();
        let ps = self.stats.processes();
        let (exported, dropped, errors) = self.stats.otlp_counts();
        let doc = serde_json::json!({
            "probes": probes,
            "processes": {
                "matched": ps.matched, "traced": ps.traced, "missed_total": ps.missed_total,
                "missed": ps.missed.iter().map(|m| serde_json::json!({
                    "pid": m.pid, "executable": m.executable, "reason": m.reason,
                })).collect::<Vec<_>>(),
            },
            "otlp": {"spans_exported": exported, "spans_dropped": dropped, "export_errors": errors},
        });
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&doc)?)?;
        std::fs::rename(&tmp, path)
    }

    /// The end-of-run report: per probe, calls delivered and every way a call was not.
    pub fn render(&self) -> String {
        let probes = self.stats.probes();
        let mut s = String::from("gprobe summary:\n");
        if !probes.values().any(|p| p.attached) {
            s += "  no probe was attached\n";
        }
        for (k, c) in &probes {
            s += &format!(
                "  {k}: {} calls delivered, {} lost (ring buffer full), {} throttled (eventsPerSecond)\n",
                c.delivered, c.lost, c.throttled
            );
            if c.returns_lost > 0 {
                s += &format!(
                    "    {} of the delivered calls lost their return (ring buffer full) and are reported unfinished\n",
                    c.returns_lost
                );
            }
            if c.too_deep > 0 {
                s += &format!(
                    "    {} calls nested deeper than {} in one goroutine were not recorded\n",
                    c.too_deep,
                    crate::attach::abi::GP_MAX_DEPTH
                );
            }
            if let (Some(e), false) = (&c.error, c.attached) {
                s += &format!("  failed: {k}: {e}\n");
            }
        }
        let p = self.reader.pairing;
        if p.abandoned > 0 || p.orphan_returns > 0 {
            s += &format!(
                "  {} calls abandoned in flight (never returned), {} returns without their entry\n",
                p.abandoned, p.orphan_returns
            );
        }
        s
    }
}
