//! Runs the engine on a thread of its own and feeds it: exec/exit events, spec changes,
//! the container runtime's containers, a periodic tick and the final stop. /proc is read
//! here, so the engine's state machine stays free of I/O.

use super::snapshot::Snapshot;
use super::{Engine, Mode, Origin, Resolver, SpecKey, Tracer};
use crate::discover::cgroup::pids_of_container;
use crate::discover::cri::Container;
use crate::discover::{inspect, libraries_of, list_pids, ProcError};
use gprobe_crds::ProbeSpec;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// A change of the ProbeSpecs the engine acts on.
#[derive(Debug, Clone)]
pub enum SpecEvent {
    Upsert(Box<ProbeSpec>),
    Delete {
        namespace: String,
        name: String,
    },
    /// The full set after a (re)list: anything not in it is gone.
    Resync(Vec<ProbeSpec>),
}

/// What the engine thread is told.
#[derive(Debug)]
pub enum Input {
    /// A process exec'd (`held`: the exec tracepoint stopped it) the file of inode `ino`.
    Exec {
        pid: u32,
        held: bool,
        filename: PathBuf,
        ino: u64,
        at: Instant,
    },
    Exit {
        pid: u32,
    },
    /// The dynamic loader of a watched process changed its list of objects (`held`: the
    /// process is stopped until the engine has looked).
    Loader {
        pid: u32,
        held: bool,
    },
    /// Process `ppid` forked `pid`.
    Fork {
        pid: u32,
        ppid: u32,
        at: Instant,
    },
    Spec(SpecEvent),
    Containers(Vec<Container>),
    /// gprobe is about to let `pid`, a child of its own, exec the program it starts (and
    /// holds it at that exec): its exec event is then not a process that ran unheld.
    Starting {
        pid: u32,
    },
    /// gprobe started `pid` itself and holds it at its exec: attach now what selects it,
    /// then answer (the caller resumes it).
    AttachStarted {
        pid: u32,
        done: oneshot::Sender<StartedReport>,
    },
    /// Resume held processes, detach everything (waiting for the kernel until `deadline`),
    /// then answer whether every detach finished.
    Stop {
        deadline: Instant,
        done: oneshot::Sender<bool>,
    },
}

/// What the engine did with a process gprobe started ([`Input::AttachStarted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StartedReport {
    /// Some spec selects it.
    pub selected: bool,
    /// Probes attached in it.
    pub attached: usize,
    /// Probes that could not be attached in it (the reasons are logged and in the summary).
    pub failed: usize,
}

/// The running engine thread.
pub struct EngineHandle {
    pub tx: mpsc::Sender<Input>,
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EngineHandle {
    /// Stops the engine (see [`Input::Stop`]); true when every uprobe was detached in time.
    pub async fn stop(mut self, deadline: Instant) -> bool {
        let (done, rx) = oneshot::channel();
        let ok = if self.tx.send(Input::Stop { deadline, done }).is_ok() {
            rx.await.unwrap_or(false)
        } else {
            false
        };
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        ok
    }
}

const TICK: Duration = Duration::from_secs(1);

/// Starts the engine thread with `specs` loaded and the processes running now matched,
/// reading its inputs from `rx` (`tx` is its sender, kept in the handle). Returns once that
/// first pass is done, with the specs that were refused.
pub fn spawn<T, R>(
    mut engine: Engine<T, R>,
    specs: Vec<ProbeSpec>,
    tx: mpsc::Sender<Input>,
    rx: mpsc::Receiver<Input>,
) -> std::io::Result<(EngineHandle, Vec<super::SpecRejected>)>
where
    T: Tracer + Send + 'static,
    R: Resolver + Send + 'static,
{
    let mut rejected = Vec::new();
    for s in specs {
        if let Err(e) = engine.add_spec(s) {
            rejected.push(e);
        }
    }
    engine.tick(Instant::now());
    scan(&mut engine);
    let (snap_tx, snapshot) = watch::channel(Arc::new(engine.snapshot()));
    let thread = std::thread::Builder::new()
        .name("gprobe-engine".into())
        .spawn(move || run(engine, rx, snap_tx))?;
    Ok((
        EngineHandle {
            tx,
            snapshot,
            thread: Some(thread),
        },
        rejected,
    ))
}

/// Feeds every process that could be selected now: all of /proc in local mode, the
/// processes of known containers in cluster mode.
fn scan<T: Tracer, R: Resolver>(engine: &mut Engine<T, R>) {
    let me = std::process::id();
    let pids: Vec<u32> = match engine.mode() {
        Mode::Local => list_pids(),
        Mode::Cluster { .. } => {
            let ids: Vec<String> = engine.containers().map(|c| c.id.clone()).collect();
            ids.iter().flat_map(|id| pids_of_container(id)).collect()
        }
    };
    for pid in pids {
        if pid == me {
            continue;
        }
        if let Ok(info) = inspect(pid, None) {
            engine.process_seen(info, Origin::Running);
        }
    }
}

fn run<T: Tracer, R: Resolver>(
    mut engine: Engine<T, R>,
    rx: mpsc::Receiver<Input>,
    snap: watch::Sender<Arc<Snapshot>>,
) {
    let mut next_tick = Instant::now() + TICK;
    // Pids gprobe starts itself (`gprobe run -- CMD`) until they are attached.
    let mut starting = std::collections::BTreeSet::new();
    loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        let input = match rx.recv_timeout(wait) {
            Ok(i) => Some(i),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                engine.shutdown(Instant::now() + Duration::from_secs(2));
                return;
            }
        };
        let mut changed = false;
        match input {
            Some(Input::Exec {
                pid,
                held,
                filename,
                ino,
                at,
            }) => {
                let origin = match starting.contains(&pid) {
                    true => Origin::Started,
                    false => Origin::Exec { held, at },
                };
                on_exec(&mut engine, pid, held, filename, ino, origin)
            }
            Some(Input::Starting { pid }) => {
                starting.insert(pid);
            }
            Some(Input::Exit { pid }) => engine.process_exited(pid),
            Some(Input::Loader { pid, held }) => {
                engine.loader_event(pid, held, libraries_of(pid));
            }
            // Only the children of traced processes: they run the same program.
            Some(Input::Fork { pid, ppid, at }) if engine.is_tracked(ppid) => {
                if let Ok(info) = inspect(pid, None) {
                    engine.process_seen(info, Origin::Fork { at });
                }
            }
            Some(Input::Fork { .. }) => {}
            Some(Input::Spec(ev)) => {
                if apply_spec_event(&mut engine, ev) {
                    scan(&mut engine);
                }
                changed = true;
            }
            Some(Input::Containers(list)) => {
                let fresh = engine.set_containers(list);
                for id in &fresh {
                    for pid in pids_of_container(id) {
                        if let Ok(info) = inspect(pid, None) {
                            engine.process_seen(info, Origin::Running);
                        }
                    }
                }
                changed = true;
            }
            Some(Input::AttachStarted { pid, done }) => {
                starting.remove(&pid);
                let _ = done.send(attach_started(&mut engine, pid));
            }
            Some(Input::Stop { deadline, done }) => {
                let ok = engine.shutdown(deadline);
                let _ = snap.send(Arc::new(engine.snapshot()));
                let _ = done.send(ok);
                return;
            }
            None => {}
        }
        let now = Instant::now();
        if now >= next_tick {
            engine.tick(now);
            // Libraries loaded since (dlopen): attach the probes that name them.
            for pid in engine.pids_with_library_probes() {
                engine.libraries_changed(pid, libraries_of(pid));
            }
            next_tick = now + TICK;
        }
        if engine.take_dirty() || changed {
            let _ = snap.send(Arc::new(engine.snapshot()));
        }
    }
}

fn attach_started<T: Tracer, R: Resolver>(engine: &mut Engine<T, R>, pid: u32) -> StartedReport {
    match inspect(pid, None) {
        Ok(info) => engine.process_seen(info, Origin::Started),
        Err(e) => tracing::debug!("{e}"),
    }
    match engine.procs.get(&pid) {
        None => StartedReport::default(),
        Some(p) => StartedReport {
            selected: true,
            attached: p.links.iter().filter(|a| a.outcome.is_ok()).count(),
            failed: p.links.iter().filter(|a| a.outcome.is_err()).count(),
        },
    }
}

fn on_exec<T: Tracer, R: Resolver>(
    engine: &mut Engine<T, R>,
    pid: u32,
    held: bool,
    filename: PathBuf,
    ino: u64,
    origin: Origin,
) {
    let inspected = inspect(pid, Some(&filename));
    if let Ok(info) = &inspected {
        if superseded(held, ino, info.exe_ino) {
            // The pid has exec'd again since (a wrapper such as `taskset` or `env` exec'ing
            // the program): /proc shows the next program, whose own exec event follows.
            // Taking it now would report that program as not held at exec.
            tracing::debug!(
                "pid {pid}: exec of {} superseded by a later exec",
                filename.display()
            );
            return;
        }
        if engine.traces_image(info) {
            if held {
                engine.resume_held(pid);
            }
            return;
        }
    }
    // A new program in a traced pid: the old one's probes and calls in flight end here.
    engine.process_exited(pid);
    match inspected {
        Ok(info) => {
            engine.process_seen(info, origin);
            // A process gprobe starts is resumed by gprobe, but the exec watch may have
            // stopped it as well.
            if held && origin == Origin::Started {
                engine.resume_held(pid);
            }
        }
        Err(ProcError::Gone { .. }) => {
            engine.process_exec_gone(pid, &filename);
            if held {
                engine.resume_held(pid);
            }
        }
        Err(e) => {
            tracing::debug!("{e}");
            if held {
                engine.resume_held(pid);
            }
        }
    }
}

/// Whether an exec event is older than the program /proc now shows in its pid: the file
/// /proc shows is not the one exec'd. A held process cannot have exec'd again (it is
/// stopped at that exec); an inode of 0 is unknown.
fn superseded(held: bool, event_ino: u64, exe_ino: u64) -> bool {
    !held && event_ino != 0 && exe_ino != 0 && event_ino != exe_ino
}

/// Applies a spec change; true when processes should be matched again.
fn apply_spec_event<T: Tracer, R: Resolver>(engine: &mut Engine<T, R>, ev: SpecEvent) -> bool {
    match ev {
        SpecEvent::Upsert(spec) => engine.upsert_spec(*spec),
        SpecEvent::Delete { namespace, name } => {
            let key = SpecKey {
                namespace: Some(namespace),
                name,
            };
            match engine.find_spec(&key) {
                Some(id) => {
                    engine.remove_spec(id);
                    false
                }
                None => false,
            }
        }
        SpecEvent::Resync(all) => {
            let keep: Vec<SpecKey> = all.iter().map(|s| engine.spec_key(s)).collect();
            for id in engine.spec_ids() {
                if !keep.contains(&engine.spec_key_of(id)) {
                    engine.remove_spec(id);
                }
            }
            let mut any = false;
            for s in all {
                any |= engine.upsert_spec(s);
            }
            any
        }
    }
}

#[cfg(test)]
mod exec_tests {
    use super::superseded;

    #[test]
    fn an_exec_event_of_another_file_than_the_pid_now_runs_is_superseded() {
        // `taskset -c 0 ./loop`: the event of taskset's exec, read after loop's exec.
        assert!(superseded(false, 11, 22));
        assert!(!superseded(false, 22, 22), "the program /proc shows");
        assert!(
            !superseded(true, 11, 22),
            "a held process has not exec'd again"
        );
        assert!(
            !superseded(false, 0, 22) && !superseded(false, 11, 0),
            "unknown inodes"
        );
    }
}
