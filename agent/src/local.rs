//! `gprobe run`: local mode. Selects processes of this machine by `selector.executable`,
//! attaches, and streams calls to stdout (and OTLP) until stopped.

use crate::discover::{inspect, list_pids, ProcEvent, ProcInfo};
use crate::events::Resource;
use crate::pipeline::{
    log_report, warn_new_losses, Pipeline, PipelineError, PipelineOptions, RunSummary,
};
use crate::session::Session;
use gprobe_crds::glob::Glob;
use gprobe_crds::{load_specs, LoadError, ProbeSpec};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub spec_files: Vec<PathBuf>,
    pub duration: Option<Duration>,
    pub pipeline: PipelineOptions,
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
    Pipeline(#[from] PipelineError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
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

/// Resource attributes of a process of this host.
pub fn process_resource(p: &ProcInfo) -> Resource {
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

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Runs local mode until SIGINT/SIGTERM or the duration elapses.
pub async fn run(opts: RunOptions, out: Box<dyn Write + Send>) -> Result<RunSummary, RunError> {
    let specs = load_all(&opts.spec_files)?;
    let mut pipeline = Pipeline::start(&opts.pipeline, out)?;
    let session = &mut pipeline.session;
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

    // Process events were subscribed before this /proc scan: a process exec'd in between is
    // seen twice (harmless), never zero times.
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
                for r in session.add_process(&info, &ids, process_resource(&info)) {
                    log_report(&r);
                }
            }
            Err(e) => tracing::debug!("{e}"),
        }
    };
    for pid in list_pids() {
        consider(session, pid);
    }
    if session.report().is_empty() {
        tracing::info!("no running process matches yet; waiting for one to start");
    }

    let mut stop = crate::pipeline::StopSignal::new(opts.duration)?;
    let mut stats_tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_lost = crate::pipeline::LastLosses::new();
    loop {
        tokio::select! {
            ev = pipeline.proc_events.recv() => match ev {
                Some(ProcEvent::Exec(pid)) => consider(&mut pipeline.session, pid),
                Some(ProcEvent::Exit(pid)) => pipeline.session.remove_process(pid),
                None => break,
            },
            _ = stats_tick.tick() => warn_new_losses(&pipeline.session.counters(), &mut last_lost),
            _ = stop.wait() => break,
        }
    }

    Ok(pipeline.stop().await?)
}
