//! Runs the engine on a thread of its own and feeds it: exec/exit events, spec changes,
//! the container runtime's containers, a periodic tick and the final stop. /proc is read
//! here, so the engine's state machine stays free of I/O.

use super::snapshot::Snapshot;
use super::{Engine, Held, Hold, HoldKind, Mode, Origin, Resolver, SpecKey, Tracer};
use crate::discover::cri::Container;
use crate::discover::procs::start_time;
use crate::discover::{inspect, libraries_of, list_pids, pids_of_container, ProcError};
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
    /// A process exec'd the file of inode `ino` (`hold`: the exec hook stopped it).
    Exec {
        pid: u32,
        hold: Option<Hold>,
        filename: PathBuf,
        ino: u64,
        at: Instant,
    },
    Exit {
        pid: u32,
    },
    /// The dynamic loader of a watched process changed its list of objects (`hold`: the
    /// process is stopped until the engine has looked).
    Loader {
        pid: u32,
        hold: Option<Hold>,
    },
    /// Process `ppid` forked `pid` (`hold`: the fork hook stopped the child).
    Fork {
        pid: u32,
        ppid: u32,
        hold: Option<Hold>,
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
/// How often the map of holds is read for holds not handled yet.
const HOLD_POLL: Duration = Duration::from_millis(100);
/// How long after process events were lost the rescan comes (once the queue is empty): the
/// events read before the loss are handled first.
const RESCAN_AFTER: Duration = Duration::from_millis(250);

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
    engine.adopt_holds();
    scan(&mut engine);
    // Held by an agent that died and not among what this one may select: let them run.
    engine.release_adopted();
    engine.resolver.release();
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

/// The pids of every process that could be selected now: all of /proc in local mode, the
/// processes of known containers in cluster mode.
fn candidates<T: Tracer, R: Resolver>(engine: &Engine<T, R>) -> Vec<u32> {
    match engine.mode() {
        Mode::Local => list_pids(),
        Mode::Cluster { .. } => {
            let ids: Vec<String> = engine.containers().map(|c| c.id.clone()).collect();
            ids.iter().flat_map(|id| pids_of_container(id)).collect()
        }
    }
}

/// Feeds every process that could be selected now (a process an agent that died left held
/// is taken over: attached, then resumed).
fn scan<T: Tracer, R: Resolver>(engine: &mut Engine<T, R>) {
    let me = std::process::id();
    for pid in candidates(engine) {
        if pid == me {
            continue;
        }
        let origin = engine
            .take_adopted(pid)
            .map_or(Origin::Running, |h| Origin::Adopted { hold: h.hold });
        match inspect(pid, None) {
            Ok(info) => engine.process_seen(info, origin),
            Err(_) => {
                if let Some(hold) = origin.hold() {
                    engine.resume_held(pid, hold);
                }
            }
        }
    }
}

/// After process events were lost: forgets traced processes that exited unseen, and finds
/// the ones that started unseen (counted missed).
fn rescan<T: Tracer, R: Resolver>(engine: &mut Engine<T, R>) {
    for (pid, start) in engine.traced_pids() {
        if start_time(pid) != Some(start) {
            engine.process_ended(pid);
        }
    }
    let held: std::collections::HashSet<u32> = engine.held_pids();
    let me = std::process::id();
    for pid in candidates(engine) {
        if pid == me || engine.is_tracked(pid) || held.contains(&pid) {
            continue;
        }
        if let Ok(info) = inspect(pid, None) {
            engine.process_seen(info, Origin::Unseen);
        }
    }
}

fn run<T: Tracer, R: Resolver>(
    mut engine: Engine<T, R>,
    rx: mpsc::Receiver<Input>,
    snap: watch::Sender<Arc<Snapshot>>,
) {
    // Processes held at exec or fork wait for this thread.
    crate::priority::raise();
    let mut next_tick = Instant::now() + TICK;
    // Pids gprobe starts itself (`gprobe run -- CMD`) until they are attached.
    let mut starting = std::collections::BTreeSet::new();
    let mut next_hold_poll = Instant::now() + HOLD_POLL;
    let mut rescan_at: Option<Instant> = None;
    loop {
        let wait = next_tick
            .min(next_hold_poll)
            .saturating_duration_since(Instant::now());
        let input = match rx.recv_timeout(wait) {
            Ok(i) => Some(i),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                engine.shutdown(Instant::now() + Duration::from_secs(2));
                return;
            }
        };
        let idle = input.is_none();
        let mut changed = false;
        match input {
            // A hold taken from the map before its event came was handled then: the event
            // is old news.
            Some(
                Input::Exec { pid, hold, .. }
                | Input::Loader { pid, hold }
                | Input::Fork { pid, hold, .. },
            ) if handled_already(&engine, pid, hold) => {}
            Some(Input::Exec {
                pid,
                hold,
                filename,
                ino,
                at,
            }) => {
                let origin = match starting.contains(&pid) {
                    true => Origin::Started,
                    false => Origin::Exec { hold, at },
                };
                on_exec(&mut engine, pid, hold, Some(filename), ino, origin)
            }
            Some(Input::Starting { pid }) => {
                starting.insert(pid);
            }
            Some(Input::Exit { pid }) => engine.process_ended(pid),
            Some(Input::Loader { pid, hold }) => {
                engine.loader_event(pid, hold, libraries_of(pid));
            }
            Some(Input::Fork {
                pid,
                ppid,
                hold,
                at,
            }) => on_fork(&mut engine, pid, ppid, hold, at),
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
        if now >= next_hold_poll {
            // Holds whose event was lost, or waits behind others: taken from the map.
            for h in engine.due_holds() {
                engine.mark_handled(h.pid, h.hold);
                on_hold(&mut engine, h);
            }
            next_hold_poll = Instant::now() + HOLD_POLL;
        }
        if now >= next_tick {
            engine.tick(now);
            // Libraries loaded since (dlopen): attach the probes that name them.
            for pid in engine.pids_with_library_probes() {
                engine.libraries_changed(pid, libraries_of(pid));
            }
            if engine.take_rescan() {
                rescan_at = Some(now + RESCAN_AFTER);
            }
            next_tick = now + TICK;
        }
        if idle && rescan_at.is_some_and(|t| now >= t) {
            rescan_at = None;
            rescan(&mut engine);
        }
        // Every resolution of this round is done: the files it opened are let go.
        engine.resolver.release();
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

/// Whether the hold an event reports was handled already (taken from the map of holds
/// before its event came).
fn handled_already<T: Tracer, R: Resolver>(
    engine: &Engine<T, R>,
    pid: u32,
    hold: Option<Hold>,
) -> bool {
    hold.is_some_and(|h| engine.was_handled(pid, h))
}

/// Handles a hold taken from the map as its event would have been.
fn on_hold<T: Tracer, R: Resolver>(engine: &mut Engine<T, R>, h: Held) {
    let at = Instant::now();
    match h.kind {
        HoldKind::Exec => {
            let origin = Origin::Exec {
                hold: Some(h.hold),
                at,
            };
            on_exec(engine, h.pid, Some(h.hold), None, 0, origin)
        }
        HoldKind::Fork { ppid } => on_fork(engine, h.pid, ppid, Some(h.hold), at),
        HoldKind::Loader => engine.loader_event(h.pid, Some(h.hold), libraries_of(h.pid)),
    }
}

fn on_fork<T: Tracer, R: Resolver>(
    engine: &mut Engine<T, R>,
    pid: u32,
    ppid: u32,
    hold: Option<Hold>,
    at: Instant,
) {
    // Only the children of traced processes: they run the same program.
    if !engine.is_tracked(ppid) {
        if let Some(h) = hold {
            engine.resume_held(pid, h);
        }
        return;
    }
    match inspect(pid, None) {
        Ok(info) => engine.process_seen(info, Origin::Fork { hold, at }),
        Err(e) => {
            tracing::debug!("{e}");
            engine.process_fork_gone(pid, ppid, hold);
            if let Some(h) = hold {
                engine.resume_held(pid, h);
            }
        }
    }
}

fn on_exec<T: Tracer, R: Resolver>(
    engine: &mut Engine<T, R>,
    pid: u32,
    hold: Option<Hold>,
    filename: Option<PathBuf>,
    ino: u64,
    origin: Origin,
) {
    let inspected = inspect(pid, filename.as_deref());
    if let Ok(info) = &inspected {
        if superseded(hold.is_some(), ino, info.exe_ino) {
            // The pid has exec'd again since (a wrapper such as `taskset` or `env` exec'ing
            // the program): /proc shows the next program, whose own exec event follows.
            // Taking it now would report that program as not held at exec.
            tracing::debug!(
                "pid {pid}: exec of {} superseded by a later exec",
                filename
                    .as_deref()
                    .unwrap_or(std::path::Path::new("?"))
                    .display()
            );
            return;
        }
        if engine.traces_image(info) {
            if let Some(h) = hold {
                engine.resume_held(pid, h);
            }
            return;
        }
    }
    // A new program in a traced pid: the old one's probes and calls in flight end here.
    engine.process_exited(pid);
    match inspected {
        Ok(info) => {
            engine.process_seen(info, origin);
            // A process gprobe starts is resumed by gprobe, but the exec hook may have
            // stopped it as well.
            if let (Some(h), Origin::Started) = (hold, origin) {
                engine.resume_held(pid, h);
            }
        }
        Err(ProcError::Gone { .. }) => {
            if let Some(f) = &filename {
                engine.process_exec_gone(pid, f, hold);
            }
            if let Some(h) = hold {
                engine.resume_held(pid, h);
            }
        }
        Err(e) => {
            tracing::debug!("{e}");
            if let Some(h) = hold {
                engine.resume_held(pid, h);
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
