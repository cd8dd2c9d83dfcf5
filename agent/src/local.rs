//! `gprobe run`: local mode. Selects processes of this machine by `selector.executable`,
//! attaches, and streams calls to stdout (and OTLP) until stopped.

use crate::engine::Mode;
use crate::pipeline::{warn_new_losses, Pipeline, PipelineError, PipelineOptions, RunSummary};
use gprobe_crds::{load_specs, LoadError, ProbeSpec};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
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

/// How long stopping may take in all (detach, drain, flush): a supervisor's grace period
/// is commonly 10-30 s.
pub const STOP_BUDGET: Duration = Duration::from_secs(5);

fn load_all(files: &[PathBuf]) -> Result<Vec<ProbeSpec>, RunError> {
    let mut out = Vec::new();
    for f in files {
        let meta = std::fs::metadata(f).map_err(|source| RunError::Read {
            path: f.clone(),
            source,
        })?;
        if meta.len() > gprobe_crds::MAX_SPEC_BYTES as u64 {
            return Err(RunError::Spec(LoadError::TooLarge {
                source_name: f.display().to_string(),
                bytes: meta.len() as usize,
            }));
        }
        let text = std::fs::read_to_string(f).map_err(|source| RunError::Read {
            path: f.clone(),
            source,
        })?;
        out.extend(load_specs(&text, &f.display().to_string())?);
    }
    Ok(out)
}

/// Runs local mode until SIGINT/SIGTERM or the duration elapses.
pub async fn run(opts: RunOptions, out: Box<dyn Write + Send>) -> Result<RunSummary, RunError> {
    // Before the slow start (BPF load, /proc scan): a SIGINT or SIGTERM sent meanwhile
    // stops the run cleanly once it is ready, instead of killing it without its stop (or
    // being ignored, where a shell ignored SIGINT for a background job).
    let mut stop = crate::pipeline::StopSignal::new(opts.duration)?;
    let specs = load_all(&opts.spec_files)?;
    let n_specs = specs.len();
    let (pipeline, rejected) = Pipeline::start(&opts.pipeline, Mode::Local, specs, out)?;
    if rejected.len() == n_specs {
        let msgs = rejected.iter().map(|r| r.to_string()).collect();
        let _ = pipeline.stop(Instant::now() + STOP_BUDGET).await;
        return Err(RunError::NothingToRun(msgs));
    }
    for r in &rejected {
        tracing::error!("{r} (this ProbeSpec is skipped)");
    }
    let snap = pipeline.engine.snapshot.borrow().clone();
    for s in &snap.specs {
        if s.processes.is_empty() {
            let what = s
                .spec
                .spec
                .selector
                .executable
                .as_deref()
                .map(|g| format!("selector.executable {g:?}"))
                .unwrap_or_else(|| "its selector".into());
            tracing::warn!(
                "{}: no running process matches {what} yet; waiting for one to start",
                s.key
            );
        }
    }
    tracing::info!("ready: tracing (stop with Ctrl-C)");

    stop.restart_duration(opts.duration);
    let mut stats_tick = tokio::time::interval(Duration::from_secs(1));
    let mut last = crate::pipeline::LastCounts::new();
    loop {
        tokio::select! {
            _ = stats_tick.tick() => warn_new_losses(&pipeline.stats, &mut last),
            _ = stop.wait() => break,
        }
    }
    let summary = pipeline.stop(Instant::now() + STOP_BUDGET).await?;
    // The final counters: losses since the last tick are logged too (a short run can end
    // before the next one).
    warn_new_losses(&summary.stats, &mut last);
    Ok(summary)
}
