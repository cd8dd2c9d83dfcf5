//! `gprobe run`: local mode. Selects processes of this machine by `selector.executable`,
//! attaches, and streams calls to stdout (and OTLP) until stopped.

use crate::attach::{AttachError, LoadOptions, Tracer};
use crate::discover::{self, inspect, list_pids, ProcEvent, ProcInfo};
use crate::events::reader::{self, Processor, ReaderStats, Registry};
use crate::events::{Clock, Resource};
use crate::export::otlp::{LossCounters, OtlpConfig, OtlpError, OtlpExporter};
use crate::export::{Delivered, Exporters, Format};
use crate::session::{AttachReport, ProbeCounters, ProbeState, Session};
use gprobe_crds::glob::Glob;
use gprobe_crds::{load_specs, LoadError, ProbeSpec};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{mpsc, watch};

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub spec_files: Vec<PathBuf>,
    pub duration: Option<Duration>,
    pub format: Format,
    pub otlp: Option<OtlpConfig>,
    pub load: LoadOptions,
    /// How often the ring buffer is read even without a wake-up.
    pub poll_interval: Duration,
}

#[derive(Debug, Error)]
pub enum RunError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Spec(#[from] LoadError),
    #[error("no ProbeSpec can run:\n  {}", .0.join("\n  "))]
    NothingToRun(Vec<String>),
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error(transparent)]
    Otlp(#[from] OtlpError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

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

/// A spec compiled for local matching.
struct LocalSpec {
    id: u32,
    exe: Option<Glob>,
    runtime_only: bool,
}

fn load_all(files: &[PathBuf]) -> Result<Vec<ProbeSpec>, RunError> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|source| RunError::Read {
            path: f.clone(),
            source,
        })?;
        out.extend(load_specs(&text, &f.display().to_string())?);
    }
    Ok(out)
}

fn resource_of(p: &ProcInfo) -> Resource {
    let name = p
        .exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Resource {
        attributes: vec![
            ("service.name", name),
            ("process.pid", p.pid.to_string()),
            ("process.executable.path", p.exe.display().to_string()),
            ("host.name", hostname()),
        ],
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn log_report(r: &AttachReport) {
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

/// Runs local mode until SIGINT/SIGTERM or the duration elapses.
pub async fn run(opts: RunOptions, out: Box<dyn Write + Send>) -> Result<RunSummary, RunError> {
    let specs = load_all(&opts.spec_files)?;
    let (tracer, rings) = Tracer::load(&opts.load)?;
    let registry = Arc::new(Registry::default());
    let losses: LossCounters = Default::default();
    let mut session = Session::new(tracer, registry.clone(), losses.clone());

    let mut local = Vec::new();
    let mut rejected = Vec::new();
    for spec in specs {
        let sel = spec.spec.selector.clone();
        let name = spec.display_name().to_string();
        let (id, msgs) = session.add_spec(spec);
        let Some(id) = id else {
            rejected.extend(msgs);
            continue;
        };
        for m in msgs {
            tracing::error!("{m}");
        }
        let runtime_only =
            !sel.images.is_empty() || sel.pod_selector.is_some() || !sel.container_names.is_empty();
        if runtime_only {
            tracing::warn!(
                "{name}: selector.images/podSelector/containerNames select containers, which `gprobe run` cannot see; \
                 it matches processes by selector.executable only, so this spec selects nothing here. \
                 Use `gprobe agent` on a Kubernetes node, or select by executable."
            );
        }
        let exe = sel.executable.as_deref().and_then(|e| Glob::new(e).ok());
        local.push(LocalSpec {
            id,
            exe,
            runtime_only,
        });
    }
    if local.is_empty() {
        return Err(RunError::NothingToRun(rejected));
    }
    for m in rejected {
        tracing::error!("{m} (this spec is skipped)");
    }

    let otlp = match &opts.otlp {
        Some(cfg) => Some(OtlpExporter::new(cfg, losses.clone())?),
        None => None,
    };
    let mut exporters = Exporters::new(opts.format, out, otlp);
    let (tx, mut rx) = mpsc::channel::<Vec<crate::events::CallRecord>>(64);
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
    let (stop_tx, stop_rx) = watch::channel(false);
    let processor = Processor::new(registry.clone(), Clock::new(), 65_536);
    let reader_task = tokio::spawn(reader::run(
        rings.events,
        processor,
        tx,
        stop_rx,
        opts.poll_interval,
    ));

    // Process events first, then the /proc scan: a process exec'd in between is seen twice
    // (harmless), never zero times.
    let (ptx, mut prx) = mpsc::channel(4096);
    let watcher = tokio::spawn(discover::watch_processes(rings.procs, ptx));
    let me = std::process::id();
    let matches = |info: &ProcInfo| -> Vec<u32> {
        local
            .iter()
            .filter(|s| {
                !s.runtime_only
                    && s.exe
                        .as_ref()
                        .is_some_and(|g| g.matches(&info.exe.to_string_lossy()))
            })
            .map(|s| s.id)
            .collect()
    };
    let consider = |session: &mut Session, pid: u32| {
        if pid == me {
            return;
        }
        match inspect(pid) {
            Ok(info) => {
                let ids = matches(&info);
                if ids.is_empty() {
                    if session.is_traced(pid) {
                        // exec'd into something else
                        session.remove_process(pid);
                    }
                    return;
                }
                if session.is_traced(pid) {
                    session.remove_process(pid);
                }
                for r in session.add_process(&info, &ids, resource_of(&info)) {
                    log_report(&r);
                }
            }
            Err(e) => tracing::debug!("{e}"),
        }
    };
    for pid in list_pids() {
        consider(&mut session, pid);
    }
    if session.report().is_empty() {
        tracing::info!("no running process matches yet; waiting for one to start");
    }

    let deadline = async {
        match opts.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    // Streams, created once, so a signal that arrives while the loop is busy is not missed.
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut stats_tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_lost: HashMap<(Arc<str>, Arc<str>), (u64, u64)> = HashMap::new();
    loop {
        tokio::select! {
            ev = prx.recv() => match ev {
                Some(ProcEvent::Exec(pid)) => consider(&mut session, pid),
                Some(ProcEvent::Exit(pid)) => session.remove_process(pid),
                None => break,
            },
            _ = stats_tick.tick() => {
                for (k, c) in session.counters() {
                    let prev = last_lost.insert(k.clone(), (c.lost, c.throttled)).unwrap_or((0, 0));
                    if c.lost > prev.0 {
                        tracing::warn!("{} / {}: {} calls lost (ring buffer full; raise --ring-buffer-size)", k.0, k.1, c.lost - prev.0);
                    }
                    if c.throttled > prev.1 {
                        tracing::warn!("{} / {}: {} calls over limits.eventsPerSecond not recorded", k.0, k.1, c.throttled - prev.1);
                    }
                }
            }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = &mut deadline => break,
        }
    }

    // Stop: detach first (no new events), then drain what the ring buffer holds.
    let attach = session.report();
    session.detach_all();
    let counters = session.counters();
    watcher.abort();
    let _ = stop_tx.send(true);
    let reader_stats = match reader_task.await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(RunError::Io(e)),
        Err(e) => return Err(RunError::Io(std::io::Error::other(e.to_string()))),
    };
    let exporters = exporter_task
        .await
        .map_err(|e| RunError::Io(std::io::Error::other(e.to_string())))?;
    let (spans_exported, otlp_errors) = exporters
        .otlp
        .as_ref()
        .map(|o| (o.spans_exported, o.export_errors))
        .unwrap_or((0, 0));
    Ok(RunSummary {
        delivered: exporters.delivered,
        counters,
        reader: reader_stats,
        attach,
        spans_exported,
        otlp_errors,
    })
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
        }
        let p = self.reader.pairing;
        if p.abandoned > 0 || p.orphan_returns > 0 {
            s += &format!(
                "  {} calls abandoned in flight (never returned), {} returns without their entry\n",
                p.abandoned, p.orphan_returns
            );
        }
        let failed: Vec<_> = self
            .attach
            .iter()
            .filter_map(|r| match &r.state {
                ProbeState::Failed(e) => Some(format!(
                    "  failed: {} / {} in {}: {e}",
                    r.spec,
                    r.symbol,
                    r.binary.display()
                )),
                _ => None,
            })
            .collect();
        for f in failed {
            s += &f;
            s.push('\n');
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
