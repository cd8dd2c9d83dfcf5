//! The running pipeline both modes share: BPF loaded, the engine on its thread, the
//! process-event feed, the ring-buffer reader and the export stage.

use crate::attach::{BpfTracer, LoadError, LoadOptions};
use crate::discover::{self, ProcEvent};
use crate::engine::driver::{self, EngineHandle, Input};
use crate::engine::{Engine, EngineOptions, Hold, Mode, SpecRejected};
use crate::events::reader::{self, Processor, ReaderStats, Registry};
use crate::events::Clock;
use crate::export::otlp::OtlpConfig;
use crate::export::{self, ExportError, ExportHandle, ExportOptions, Format};
use crate::resolve::resolver::BinaryResolver;
use crate::stats::{ProbeStats, Stats};
use gprobe_crds::ProbeSpec;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Error)]
pub enum PipelineError {
    #[error(transparent)]
    Load(#[from] LoadError),
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
    /// Select this process only (`gprobe run --pid`).
    pub only_pid: Option<u32>,
    /// Also hands the calls delivered to this (the cluster agent's trace streams).
    pub tap: Option<Arc<dyn crate::export::tap::Tap>>,
}

pub struct Pipeline {
    pub engine: EngineHandle,
    pub stats: Stats,
    reader_task: JoinHandle<std::io::Result<ReaderStats>>,
    export: ExportHandle,
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
        // Before anything is planned: where the probes go depends on it.
        match tracer.measure_sites() {
            Ok(k) => crate::resolve::sites::set_kernel(k),
            Err(e) => tracing::warn!(
                "{e}: which instructions this kernel emulates under a uprobe is unknown, so every \
                probe stays on its usual site (after Go's stack check, a C function's first \
                    byte), and sites show as unmeasured"
            ),
        }
        let registry = Arc::new(Registry::default());
        let stats = Stats::new();
        let kernel = crate::attach::features::probe();
        tracing::info!("{}", kernel.summary());
        stats.set_kernel_features(kernel.clone());
        stats.set_propagation_dry_run(opts.load.propagate_dry_run);
        let (tx, export) = export::start(
            ExportOptions {
                tap: opts.tap.clone(),
                ..ExportOptions::new(opts.format, opts.otlp.clone())
            },
            out,
            stats.clone(),
        )?;

        let (exit_tx, exit_rx) = std::sync::mpsc::channel();
        let mut engine = Engine::new(
            tracer,
            BinaryResolver::default(),
            mode,
            EngineOptions {
                only_pid: opts.only_pid,
                ..EngineOptions::default()
            },
            registry.clone(),
            stats.clone(),
        );
        engine.set_exit_sink(exit_tx);
        // Process events flow before the first /proc scan: a process exec'd meanwhile is
        // seen twice (harmless), never zero times.
        let (in_tx, in_rx) = std::sync::mpsc::channel();
        let feed = in_tx.clone();
        let watcher_task = tokio::spawn(discover::watch_processes(rings.procs, move |ev| {
            let hold = |h: Option<u64>| h.map(Hold::new);
            let input = match ev {
                ProcEvent::Exec {
                    pid,
                    hold: h,
                    filename,
                    ino,
                } => Input::Exec {
                    pid,
                    hold: hold(h),
                    filename,
                    ino,
                    at: Instant::now(),
                },
                ProcEvent::Exit(pid) => Input::Exit { pid },
                ProcEvent::Loader { pid, hold: h } => Input::Loader { pid, hold: hold(h) },
                ProcEvent::Fork { pid, ppid, hold: h } => Input::Fork {
                    pid,
                    ppid,
                    hold: hold(h),
                    at: Instant::now(),
                },
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
                export,
                watcher_task,
                stop_tx,
            },
            rejected,
        ))
    }

    /// Turns true when the reader of the output went away (broken pipe).
    pub fn output_closed(&self) -> watch::Receiver<bool> {
        self.export.output_closed()
    }

    /// Detaches every probe (waiting for the kernel until `deadline`), drains the ring
    /// buffer, flushes the exporters.
    pub async fn stop(self, deadline: Instant) -> Result<RunSummary, PipelineError> {
        // Detaching may take most of the budget; draining and flushing need the rest.
        let detach_by = deadline
            .checked_sub(Duration::from_millis(2500))
            .filter(|d| *d > Instant::now())
            .unwrap_or_else(|| Instant::now() + Duration::from_millis(500));
        let t0 = Instant::now();
        let detached = self.engine.stop(detach_by).await;
        if detached {
            tracing::info!("every uprobe detached in {} ms", t0.elapsed().as_millis());
        } else {
            tracing::warn!(
                "some uprobes were still being detached when gprobe stopped waiting; \
                the kernel removes them when gprobe exits"
            );
        }
        self.watcher_task.abort();
        let _ = self.stop_tx.send(true);
        let reader = match self.reader_task.await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(PipelineError::Io(e)),
            Err(e) => return Err(PipelineError::Io(std::io::Error::other(e.to_string()))),
        };
        let finished = self
            .export
            .finish(tokio::time::Instant::from_std(deadline))
            .await;
        if let Some(o) = &finished.otlp {
            if o.spans_abandoned > 0 {
                tracing::warn!(
                    "{} spans were not exported before the deadline (the OTLP collector is slow or down)",
                    o.spans_abandoned
                );
            }
        }
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

    /// Counts the duration from now: the streams are made before a slow start, so that a
    /// signal arriving meanwhile is kept, but the run's duration starts once it traces.
    pub fn restart_duration(&mut self, duration: Option<Duration>) {
        self.deadline = duration.map(|d| tokio::time::Instant::now() + d);
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
                "{k}: {} returns lost (ring buffer full; raise --ring-buffer-size): those calls \
                will be reported unfinished",
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
                crate::abi::GP_MAX_DEPTH
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
            // Each is in the summary just printed.
            return format!(
                "every probe failed ({} error{} in the summary above)",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
        }
        if self.stats.processes().matched == 0 {
            return "no process matched the selectors while gprobe ran (check selector.executable \
                against the program's path)"
                .into();
        }
        "the matched processes exited before gprobe could attach".into()
    }

    /// The end-of-run report (README, docs/DESIGN.md): stderr text and `--summary-file` JSON.
    pub fn summary(&self) -> crate::export::summary::Summary {
        crate::export::summary::Summary::from_stats(&self.stats)
    }
}
