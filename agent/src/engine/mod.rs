//! The engine: the one owner of which specs are active, which processes are selected and
//! what is attached where, for both modes. It changes the kernel only through a [`Tracer`]
//! (install or remove one probe's uprobes in one process, all or nothing) and reads binaries
//! only through a [`Resolver`]; tests replace both with fakes.
//!
//! It never blocks on the kernel's slow paths: detaching is handed to the tracer, which
//! does it on other threads. The [`driver`] runs it on a thread of its own, fed by /proc,
//! the exec/exit tracepoints, the spec source and (in cluster mode) the container runtime.

mod attaching;
mod aux_state;
mod budget;
mod budget_state;
pub mod driver;
pub mod error;
mod hold_state;
mod holds;
// `loader`, `newproc`, `propagate`: the engine's part of gprobe's auxiliary probes (the
// probes: `crate::auxiliary`).
mod loader;
mod newproc;
mod plancache;
mod propagate;
mod respec;
mod spec_id;
mod specs;
pub use crate::auxiliary::loader::LibraryGlob;
pub use spec_id::SpecId;
pub use tracer::monotonic_ns;
mod procs;
pub mod resource;
pub mod select;
pub mod snapshot;
pub mod tracer;

#[cfg(test)]
mod tests;

pub use error::{ProbeError, TraceError};
pub use tracer::{
    CfgId, Held, Hold, HoldKind, PlanRequest, ProbeConfig, ProbePoint, Resolver, Site, Tracer,
};

use crate::discover::cri::Container;
use crate::discover::{FileKey, ProcInfo};
use crate::events::reader::Registry;
use crate::stats::{KernelCounts, ProbeKey, Stats};
use gprobe_crds::{Probe, ProbeSpec, SpecIssue};
use select::Selector;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which spec: its namespace (cluster mode) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpecKey {
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for SpecKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Local mode matches processes of this machine by executable; cluster mode matches
/// containers the runtime reports, in the spec's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Local,
    Cluster { node: String },
}

/// How a process came to the engine's attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Found running (at start, or when a spec or container appeared).
    Running,
    /// Just exec'd; `hold` when the exec hook stopped it before its first instruction.
    Exec { hold: Option<Hold>, at: Instant },
    /// Forked by a traced process; `hold` when the fork hook stopped it before its first
    /// instruction.
    Fork { hold: Option<Hold>, at: Instant },
    /// Found held by an agent that died (stopped since), at this agent's start.
    Adopted { hold: Hold },
    /// Found by a rescan after process events were lost: it started while gprobe ran, and
    /// its start was not reported.
    Unseen,
    /// Started by gprobe itself (`gprobe run -- CMD`), which holds it at its exec until
    /// the engine has attached (and resumes it; the engine does not).
    Started,
}

impl Origin {
    /// The hold to end once the process's probes are attached.
    pub fn hold(&self) -> Option<Hold> {
        match *self {
            Origin::Exec { hold, .. } | Origin::Fork { hold, .. } => hold,
            Origin::Adopted { hold } => Some(hold),
            Origin::Running | Origin::Unseen | Origin::Started => None,
        }
    }
}

/// Why a spec was not taken.
#[derive(Debug, thiserror::Error)]
pub enum SpecRejected {
    #[error("{key}: {}", issues.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid {
        key: SpecKey,
        issues: Vec<SpecIssue>,
    },
    #[error("{key}: a ProbeSpec of this name is already loaded; names must be unique (is the same file given twice?)")]
    Duplicate { key: SpecKey },
}

struct SpecProbe {
    key: ProbeKey,
    probe: Probe,
    library: Option<LibraryGlob>,
    /// A validation problem: this probe never attaches.
    invalid: Option<Arc<ProbeError>>,
}

struct SpecState {
    key: SpecKey,
    spec: Arc<ProbeSpec>,
    /// `metadata.name`: the `"probe"` of every record.
    name: Arc<str>,
    selector: Selector,
    probes: Vec<SpecProbe>,
}

/// A probe planned in one binary, its configurations stored in the kernel.
struct Planned {
    cfg: ProbeConfig,
    sites: Vec<Site>,
    /// The file's type names, where the probe shows dynamic types (see attach_one).
    types: Option<Arc<crate::events::DynTypes>>,
    /// How the kernel runs its sites (what a call costs the program).
    costs: crate::resolve::sites::SiteCosts,
}

/// A file probes are planned in: an executable or a shared library.
struct BinState {
    /// A path to the file valid from here (a live process's /proc/PID/exe, or the library
    /// through /proc/PID/root).
    attach_path: PathBuf,
    display: PathBuf,
    /// An executable's inode number as exec sees it (exec holds); `None` for a library.
    exe_ino: Option<u64>,
    probes: HashMap<(SpecId, usize), Result<Planned, Arc<ProbeError>>>,
    /// Plans kept for the next version of a spec.
    plans: plancache::PlanCache,
    pids: BTreeSet<u32>,
    /// Since when no process runs it; its configurations are freed after a while.
    idle_since: Option<Instant>,
}

/// One probe of one spec in one file of one process.
struct Attachment<L> {
    spec: SpecId,
    probe: usize,
    file: FileKey,
    outcome: Result<(L, usize), Arc<ProbeError>>,
    /// Its return sites, attached apart from the entry so that a budget can take them off
    /// alone (`None`: it has none, or they are off).
    rets: Option<L>,
}

impl<L> Attachment<L> {
    /// Every link it holds: its returns, then its entry.
    fn into_links(self) -> impl Iterator<Item = L> {
        self.rets
            .into_iter()
            .chain(self.outcome.ok().map(|(l, _)| l))
    }
}

struct ProcState<L> {
    info: ProcInfo,
    specs: BTreeSet<SpecId>,
    links: Vec<Attachment<L>>,
    /// The files it has probes planned in (its executable, libraries).
    files: BTreeSet<FileKey>,
    /// The uprobe on its dynamic loader (processes with library probes: `auxiliary/loader/`).
    loader: Option<L>,
    /// The probe on runtime.newproc1 (Go processes with latency probes: `auxiliary/newproc/`).
    newproc: Option<L>,
    /// The outgoing-request probes (processes with `propagate` probes: `auxiliary/propagate/`).
    propagate: Option<L>,
}

/// Tunables, with defaults that suit both modes.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// How long a binary's plans and configurations are kept after its last process
    /// exits (so the next process of it attaches without resolving again).
    pub binary_ttl: Duration,
    /// The hold deadline: a held process the engine has not resumed by then is resumed
    /// anyway (and counted missed), so a slow agent never stalls the program it holds.
    pub hold_timeout: Duration,
    /// Select this process only (`--pid`): the specs' selectors must match it too.
    pub only_pid: Option<u32>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            binary_ttl: Duration::from_secs(60),
            hold_timeout: Duration::from_secs(2),
            only_pid: None,
        }
    }
}

pub struct Engine<T: Tracer, R: Resolver> {
    tracer: T,
    resolver: R,
    mode: Mode,
    opts: EngineOptions,
    specs: BTreeMap<SpecId, SpecState>,
    next_spec: u32,
    binaries: HashMap<FileKey, BinState>,
    procs: HashMap<u32, ProcState<T::Links>>,
    containers: HashMap<String, Container>,
    registry: Arc<Registry>,
    stats: Stats,
    /// Kernel counters of configurations already freed, so totals never go back.
    retired: HashMap<ProbeKey, KernelCounts>,
    /// Processes that exited: the reader flushes their calls still in flight.
    exits: Option<std::sync::mpsc::Sender<u32>>,
    /// `_dl_debug_state`'s file offset in each dynamic loader seen (None: it has none).
    loader_hooks: HashMap<FileKey, Option<u64>>,
    /// Library probes said to wait for their library (`auxiliary/loader/`: once each).
    libraries_missing_said: std::collections::HashSet<(SpecId, usize)>,
    /// runtime.newproc1's probe per executable (None: it has none, or it is not Go).
    newproc: HashMap<FileKey, Option<aux_state::NewprocPlan>>,
    propagate: HashMap<FileKey, Option<aux_state::PropagateProbes>>,
    watch_inos: BTreeSet<u64>,
    watch_comms: BTreeSet<String>,
    /// Holds, their deadlines and lost process events (`holds.rs`).
    holds: hold_state::HoldState,
    /// What each spec's probes cost each process (`budget.rs`).
    budgets: budget_state::Budgets,
    /// What a snapshot would show changed since the last [`Engine::take_dirty`].
    dirty: bool,
    /// Shutting down: processes are let go, not gone (the summary still lists them).
    stopping: bool,
}

/// Most inode numbers watched for exec holds (the BPF map's size).
const MAX_WATCHED_INOS: usize = 4096;

impl<T: Tracer, R: Resolver> Engine<T, R> {
    pub fn new(
        tracer: T,
        resolver: R,
        mode: Mode,
        opts: EngineOptions,
        registry: Arc<Registry>,
        stats: Stats,
    ) -> Self {
        Self {
            tracer,
            resolver,
            mode,
            opts,
            specs: BTreeMap::new(),
            next_spec: 1,
            binaries: HashMap::new(),
            procs: HashMap::new(),
            containers: HashMap::new(),
            registry,
            stats,
            retired: HashMap::new(),
            exits: None,
            loader_hooks: HashMap::new(),
            libraries_missing_said: Default::default(),
            newproc: HashMap::new(),
            propagate: HashMap::new(),
            watch_inos: BTreeSet::new(),
            watch_comms: BTreeSet::new(),
            holds: hold_state::HoldState::default(),
            budgets: budget_state::Budgets::default(),
            dirty: true,
            stopping: false,
        }
    }

    /// True (once) when specs, containers or attachments changed since the last call.
    pub fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    /// Where exited pids go (the reader flushes their calls in flight).
    pub fn set_exit_sink(&mut self, tx: std::sync::mpsc::Sender<u32>) {
        self.exits = Some(tx);
    }

    pub fn tracer(&self) -> &T {
        &self.tracer
    }

    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// Replaces the containers the runtime reports; returns the ids of new ones (their
    /// processes are fed by the caller).
    pub fn set_containers(&mut self, list: Vec<Container>) -> Vec<String> {
        let mut fresh = Vec::new();
        let live: BTreeSet<&str> = list.iter().map(|c| c.id.as_str()).collect();
        let gone: Vec<String> = self
            .containers
            .keys()
            .filter(|id| !live.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            self.dirty = true;
            if let Some(c) = self.containers.remove(&id) {
                tracing::info!(
                    "container {} ({}/{}) is gone",
                    &id[..12.min(id.len())],
                    c.pod_namespace,
                    c.pod_name
                );
            }
            let pids: Vec<u32> = self
                .procs
                .iter()
                .filter(|(_, p)| p.info.container_id.as_deref() == Some(id.as_str()))
                .map(|(pid, _)| *pid)
                .collect();
            for pid in pids {
                self.process_exited(pid);
            }
        }
        for c in list {
            if self.containers.get(&c.id) != Some(&c) {
                self.dirty = true;
            }
            if !self.containers.contains_key(&c.id) {
                fresh.push(c.id.clone());
            }
            self.containers.insert(c.id.clone(), c);
        }
        fresh
    }

    pub fn containers(&self) -> impl Iterator<Item = &Container> {
        self.containers.values()
    }

    /// The exec watch: names of literal executables in the selectors, and the inode
    /// numbers of the binaries of selected processes.
    fn update_watch(&mut self) {
        let comms: BTreeSet<String> = self
            .specs
            .values()
            .filter_map(|s| s.selector.literal_exe_name())
            .map(|n| n.chars().take(15).collect())
            .collect();
        let mut inos: BTreeSet<u64> = self.binaries.values().filter_map(|b| b.exe_ino).collect();
        for s in self.specs.values() {
            // An exact path: hold its processes from the first one.
            if let Some(p) = s.selector.exact_exe_path() {
                if let Ok(m) = std::fs::metadata(p) {
                    inos.insert(std::os::unix::fs::MetadataExt::ino(&m));
                }
            }
        }
        while inos.len() > MAX_WATCHED_INOS {
            inos.pop_first();
        }
        if comms != self.watch_comms || inos != self.watch_inos {
            if let Err(e) = self.tracer.set_exec_watch(&inos, &comms) {
                tracing::warn!(
                    "updating the exec watch failed: {e}; new processes may be traced late"
                );
            }
            self.watch_comms = comms;
            self.watch_inos = inos;
        }
    }

    /// Reads the kernel's counters into [`Stats`] (totals per probe, including freed
    /// configurations).
    pub fn refresh_counters(&mut self) {
        let mut totals: HashMap<ProbeKey, KernelCounts> = self.retired.clone();
        for bin in self.binaries.values() {
            for ((sid, pi), planned) in &bin.probes {
                let (Ok(p), Some(spec)) = (planned, self.specs.get(sid)) else {
                    continue;
                };
                *totals.entry(spec.probes[*pi].key.clone()).or_default() +=
                    self.tracer.counters(&p.cfg);
            }
        }
        for (k, c) in totals {
            self.stats.set_kernel(&k, c);
        }
        self.refresh_propagation();
    }

    /// Periodic work: renews the lease of holds, resumes holds past their deadline, frees
    /// binaries idle for too long, refreshes counters.
    pub fn tick(&mut self, now: Instant) {
        self.tracer
            .keep_holding(monotonic_ns() + hold_state::LEASE.as_nanos() as u64);
        self.enforce_hold_deadline();
        self.refresh_proc_counts();
        let ttl = self.opts.binary_ttl;
        let idle: Vec<FileKey> = self
            .binaries
            .iter()
            .filter(|(_, b)| b.idle_since.is_some_and(|t| now.duration_since(t) >= ttl))
            .map(|(k, _)| *k)
            .collect();
        for k in idle {
            self.retire_binary(k);
        }
        self.refresh_counters();
        self.check_budgets(now);
        // Per-process delivery counts of exited processes (their last records were read
        // long before this tick).
        let procs = &self.procs;
        self.stats.retain_pids(|pid| procs.contains_key(&pid));
    }

    /// Frees a probe's configurations in the kernel; their decoders go once the reader
    /// has read what they wrote (kept until the id was reused, they piled up with every
    /// spec change).
    fn free_probe(&mut self, cfg: ProbeConfig) {
        let ids: Vec<CfgId> = cfg.ids().collect();
        self.tracer.remove_probe(cfg);
        for id in ids {
            self.registry.retire(id);
        }
    }

    /// Frees a binary's configurations; their counters are kept.
    fn retire_binary(&mut self, key: FileKey) {
        self.retire_newproc(key);
        self.retire_propagate(key);
        let Some(bin) = self.binaries.remove(&key) else {
            return;
        };
        for ((sid, pi), planned) in bin.probes {
            let Ok(p) = planned else { continue };
            if let Some(spec) = self.specs.get(&sid) {
                *self.retired.entry(spec.probes[pi].key.clone()).or_default() +=
                    self.tracer.counters(&p.cfg);
            }
            self.free_probe(p.cfg);
        }
    }

    /// Stops: resumes held processes, detaches everything (waiting until `deadline` for
    /// the kernel), and leaves the final counters in [`Stats`].
    pub fn shutdown(&mut self, deadline: Instant) -> bool {
        self.stopping = true;
        self.tracer.keep_holding(0);
        self.release_all_holds();
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.untrack(pid);
        }
        self.refresh_counters();
        let keys: Vec<FileKey> = self.binaries.keys().copied().collect();
        for k in keys {
            self.retire_binary(k);
        }
        self.tracer.wait_detached(deadline)
    }
}
