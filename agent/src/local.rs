//! `gprobe run`: local mode. Selects processes of this machine by `selector.executable`,
//! attaches, and streams calls to stdout (and OTLP) until stopped; or, with a command,
//! starts it held until its probes are attached and stops when it exits.

use crate::command::{self, ChildStdout, CommandError, ExitedWith, Received};
use crate::discover::procs::start_time;
use crate::engine::driver::Input;
use crate::engine::select::Selector;
use crate::engine::Mode;
use crate::export::hist::HistProbes;
use crate::pipeline::{warn_new_losses, Pipeline, PipelineError, PipelineOptions, RunSummary};
use crate::util::printable;
use gprobe_crds::{load_specs, LoadError, ProbeSpec};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub spec_files: Vec<PathBuf>,
    /// Specs given whole (`gprobe trace`), run with those of the files.
    pub specs: Vec<ProbeSpec>,
    pub duration: Option<Duration>,
    /// Print the histograms of `hist: true` probes this often too (besides at the end and
    /// on SIGUSR1).
    pub hist_interval: Option<Duration>,
    pub pipeline: PipelineOptions,
    /// `-- CMD ARGS...`: the program to start and trace.
    pub command: Option<CommandOptions>,
}

#[derive(Debug, Clone)]
pub struct CommandOptions {
    pub argv: Vec<OsString>,
    pub stdout: ChildStdout,
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
    /// Every spec selects containers only, which local mode cannot see.
    #[error("no ProbeSpec selects anything on this machine:\n  {}", .0.join("\n  "))]
    SelectsNothing(Vec<String>),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A signal stopped gprobe before the command was started.
    #[error("stopped by {} before the command was started", command::signal_name(*.0))]
    Interrupted(i32),
    /// `--pid` names no running process.
    #[error("--pid {0}: no such process")]
    NoProcess(u32),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What a run did, and how its command ended.
#[derive(Debug)]
pub struct RunOutcome {
    pub summary: RunSummary,
    /// The command's end (`-- CMD`).
    pub command: Option<ExitedWith>,
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

/// Why a spec selects nothing on this machine, if so: its selector names containers
/// (images, pod labels, container names), which only cluster mode sees.
pub fn selects_nothing_locally(spec: &ProbeSpec) -> Option<String> {
    let sel = Selector::new(spec, None).ok()?;
    if !sel.needs_container() {
        return None;
    }
    let s = &spec.spec.selector;
    let mut fields = Vec::new();
    if !s.images.is_empty() {
        fields.push("selector.images");
    }
    if s.pod_selector.is_some() {
        fields.push("selector.podSelector");
    }
    if !s.container_names.is_empty() {
        fields.push("selector.containerNames");
    }
    Some(format!(
        "{}: {} select{} containers, which `gprobe run` does not see: this spec selects nothing on this machine. \
         Use `gprobe agent` on a Kubernetes node, or select processes by selector.executable alone.",
        spec.display_name(),
        fields.join(" and "),
        if fields.len() == 1 { "s" } else { "" }
    ))
}

/// Writes to stderr (the histograms: stdout carries the calls); a closed stderr is not worth
/// a panic.
fn say(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Why `--pid PID` makes the run select nothing, if it does: no spec's selector matches
/// that process (said at once: no other process may be traced).
fn pid_not_selected(pid: u32, specs: &[ProbeSpec]) -> Option<String> {
    let info = crate::discover::inspect(pid, None).ok()?;
    let selected = specs
        .iter()
        .any(|s| Selector::new(s, None).is_ok_and(|sel| sel.selects(&info, None)));
    (!selected).then(|| {
        format!(
            "--pid {pid}: no ProbeSpec's selector matches it ({}): check selector.executable",
            printable(&info.exe.to_string_lossy())
        )
    })
}

/// What ends a run.
enum Stop {
    /// SIGINT, SIGTERM or `--duration`.
    Signal(crate::pipeline::StopSignal),
    /// With a command: signals read by gprobe's signal thread (see `command::block`).
    Command(UnboundedReceiver<Received>),
}

/// Runs local mode until SIGINT/SIGTERM or the duration elapses, or, with a command, until
/// the command exits. `signals` are the blocked signals (`command::block`), required with a
/// command.
pub async fn run(
    opts: RunOptions,
    out: Box<dyn Write + Send>,
    signals: Option<UnboundedReceiver<Received>>,
) -> Result<RunOutcome, RunError> {
    // Before the slow start (BPF load, /proc scan): a SIGINT or SIGTERM sent meanwhile
    // stops the run cleanly once it is ready, instead of killing it without its stop (or
    // being ignored, where a shell ignored SIGINT for a background job).
    let mut stop = match signals {
        Some(rx) => Stop::Command(rx),
        None => Stop::Signal(crate::pipeline::StopSignal::new(opts.duration)?),
    };
    let mut specs = load_all(&opts.spec_files)?;
    specs.extend(opts.specs.iter().cloned());
    let only = match opts.pipeline.only_pid {
        Some(pid) => Some((pid, start_time(pid).ok_or(RunError::NoProcess(pid))?)),
        None => None,
    };
    let hist = HistProbes::of(&specs);
    // Said at once, rather than waiting for processes that cannot come.
    let mut blind = Vec::new();
    specs.retain(|s| match selects_nothing_locally(s) {
        Some(why) => {
            blind.push(why);
            false
        }
        None => true,
    });
    if let Some((pid, _)) = only {
        if let Some(why) = pid_not_selected(pid, &specs) {
            blind.push(why);
            return Err(RunError::SelectsNothing(blind));
        }
    }
    if specs.is_empty() && !blind.is_empty() {
        return Err(RunError::SelectsNothing(blind));
    }
    for why in &blind {
        tracing::error!("{why} (this ProbeSpec is skipped)");
    }
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
    let held = match &opts.command {
        None => {
            say_waiting(&pipeline);
            tracing::info!("ready: tracing (stop with Ctrl-C)");
            None
        }
        Some(c) => {
            if let Stop::Command(rx) = &mut stop {
                if let Ok(r) = rx.try_recv() {
                    let _ = pipeline.stop(Instant::now() + STOP_BUDGET).await;
                    return Err(RunError::Interrupted(r.signal));
                }
            }
            match start_command(&pipeline, c).await {
                Ok(h) => Some(h),
                Err(e) => {
                    let _ = pipeline.stop(Instant::now() + STOP_BUDGET).await;
                    return Err(e.into());
                }
            }
        }
    };

    let mut stats_tick = tokio::time::interval(Duration::from_secs(1));
    let mut hist_tick = opts
        .hist_interval
        .filter(|_| !hist.is_empty())
        .map(|d| tokio::time::interval_at(tokio::time::Instant::now() + d, d));
    // SIGUSR1 prints the histograms (only where there are some: it ends gprobe otherwise,
    // as it always has).
    let mut usr1 = match hist.is_empty() {
        true => None,
        false => Some(tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::user_defined1(),
        )?),
    };
    let mut last = crate::pipeline::LastCounts::new();
    let mut closed = pipeline.output_closed();
    // With OTLP, a closed output leaves the spans to deliver: the run goes on.
    let stop_when_closed = opts.pipeline.otlp.is_none();
    let mut output_open = true;
    let (mut exited, pid) = match held {
        Some(h) => (Some(h.exited), Some(h.pid)),
        None => (None, None),
    };
    let mut command_end = None;
    if let Stop::Signal(s) = &mut stop {
        s.restart_duration(opts.duration);
    }
    loop {
        tokio::select! {
            _ = stats_tick.tick() => {
                warn_new_losses(&pipeline.stats, &mut last);
                if let Some((pid, start)) = only {
                    if start_time(pid) != Some(start) {
                        tracing::info!("process {pid} has exited: stopping");
                        break;
                    }
                }
            }
            _ = async { hist_tick.as_mut().expect("an interval").tick().await },
                if hist_tick.is_some() => say(&hist.render(&pipeline.stats)),
            _ = async { usr1.as_mut().expect("a signal stream").recv().await },
                if usr1.is_some() => say(&hist.render(&pipeline.stats)),
            ev = next_stop(&mut stop) => {
                let StopEvent::Signal(r) = ev else { break };
                let pid = pid.expect("signals are read only with a command");
                if r.from_terminal {
                    tracing::info!(
                        "{} from the terminal: the command received it too; tracing until it exits",
                        command::signal_name(r.signal)
                    );
                } else {
                    tracing::info!(
                        "{}: passed on to the command (pid {pid}); tracing until it exits",
                        command::signal_name(r.signal)
                    );
                    command::forward(pid, r.signal);
                }
            }
            r = async { exited.as_mut().expect("a command").await }, if exited.is_some() => {
                match r {
                    Ok(Ok(e)) => {
                        tracing::info!("the command (pid {}) ended: {e}", pid.unwrap_or(0));
                        command_end = Some(e);
                    }
                    Ok(Err(e)) => tracing::error!("{e}"),
                    Err(_) => tracing::error!("{}", CommandError::Thread),
                }
                break;
            }
            r = closed.changed(), if output_open => {
                if r.is_err() || !*closed.borrow() {
                    output_open = r.is_ok();
                    continue;
                }
                output_open = false;
                if stop_when_closed && exited.is_none() {
                    tracing::info!("nothing is left to write calls to: stopping");
                    break;
                }
            }
        }
    }
    let summary = pipeline.stop(Instant::now() + STOP_BUDGET).await?;
    // The final counters: losses since the last tick are logged too (a short run can end
    // before the next one).
    warn_new_losses(&summary.stats, &mut last);
    if !hist.is_empty() {
        say(&hist.render(&summary.stats));
    }
    Ok(RunOutcome {
        summary,
        command: command_end,
    })
}

enum StopEvent {
    /// Stop now.
    Stop,
    /// A signal while a command runs: the command decides when the run ends.
    Signal(Received),
}

async fn next_stop(stop: &mut Stop) -> StopEvent {
    match stop {
        Stop::Signal(s) => {
            s.wait().await;
            StopEvent::Stop
        }
        Stop::Command(rx) => match rx.recv().await {
            Some(r) => StopEvent::Signal(r),
            None => std::future::pending().await,
        },
    }
}

/// The specs that wait for their first process, said once at start.
fn say_waiting(pipeline: &Pipeline) {
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
            // Nothing is wrong: the program has not started yet.
            tracing::info!(
                "{}: no running process matches {what} yet; waiting for one to start",
                s.key
            );
        }
    }
}

/// Starts the command held at its exec, has the engine attach the probes that select it,
/// then lets it run.
async fn start_command(
    pipeline: &Pipeline,
    c: &CommandOptions,
) -> Result<command::Held, CommandError> {
    let tx = pipeline.engine.tx.clone();
    let held = command::start(&c.argv, c.stdout, move |pid| {
        let _ = tx.send(Input::Starting { pid });
    })?;
    let shown = printable(&held.path.to_string_lossy()).into_owned();
    let t0 = Instant::now();
    let (done, report) = tokio::sync::oneshot::channel();
    let asked = pipeline
        .engine
        .tx
        .send(Input::AttachStarted {
            pid: held.pid,
            done,
        })
        .is_ok();
    // None: the engine is gone; Err: the hold limit passed.
    let report = match asked {
        false => Ok(None),
        true => tokio::time::timeout(command::HOLD_LIMIT, report)
            .await
            .map(Result::ok),
    };
    match report {
        Ok(Some(r)) if !r.selected => tracing::warn!(
            "no ProbeSpec selects the command {shown} (check selector.executable): it runs untraced, \
             and gprobe traces what the selectors match until it exits"
        ),
        Ok(Some(r)) if r.attached == 0 => tracing::warn!(
            "no probe could be attached to the command {shown} (pid {}): the errors above say why",
            held.pid
        ),
        Ok(Some(r)) => tracing::info!(
            "started {shown} (pid {}): {} probe{} attached in {} ms, before its first instruction ran",
            held.pid,
            r.attached,
            if r.attached == 1 { "" } else { "s" },
            t0.elapsed().as_millis()
        ),
        Ok(None) => tracing::error!("the engine stopped before attaching to the command"),
        Err(_) => tracing::warn!(
            "the command {shown} was held {} s without its probes attached: it runs on, and its \
            first calls may be missed",
            command::HOLD_LIMIT.as_secs()
        ),
    }
    held.release();
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ProbeSpec {
        load_specs(yaml, "t.yaml").unwrap().remove(0)
    }

    #[test]
    fn container_selectors_select_nothing_here() {
        let head = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: \
            s}\nspec:\n  probes: [{symbol: main.f}]\n";
        let images = spec(&format!(
            "{head}  selector: {{images: [\"registry.example/shop:*\"]}}\n"
        ));
        let why = selects_nothing_locally(&images).unwrap();
        assert!(
            why.starts_with("s: selector.images selects containers")
                && why.contains("selects nothing on this machine"),
            "{why}"
        );
        let both = spec(&format!(
            "{head}  selector: {{executable: /bin/x, podSelector: {{matchLabels: {{app: a}}}}}}\n"
        ));
        assert!(selects_nothing_locally(&both)
            .unwrap()
            .contains("selector.podSelector selects"));
        let exe = spec(&format!("{head}  selector: {{executable: /bin/x}}\n"));
        assert_eq!(selects_nothing_locally(&exe), None);
    }
}
