//! The engine's boundary to the kernel (`Tracer`) and to binary resolution (`Resolver`):
//! small traits so the engine's state machine can be tested with fakes.

use crate::plan::ProbePlan;
use crate::resolve::propagate::{PropagateError, PropagatePlan};
use crate::stats::KernelCounts;
use gprobe_crds::{Limits, Probe};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::error::{ProbeError, TraceError};

/// Where and how one uprobe is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbePoint {
    /// File offset of the instruction.
    pub offset: u64,
    /// A uretprobe (C functions only: never on Go).
    pub ret: bool,
    /// File offset of a USDT semaphore the kernel raises while the probe exists (0: none).
    pub ref_ctr_offset: u64,
}

/// A probe configuration's handle in the kernel (the uprobe cookie's low half, and each
/// record's probe id): unique over time, as a slot reused for another configuration gets a
/// new one (`abi::cfg_handle`).
pub type CfgId = u32;

/// The kernel-side configurations of one planned probe in one binary: the entry (or call)
/// configuration, one more per group of entry sites that read their captures elsewhere
/// (the copies of an inlined USDT probe), and, for probes that see returns, the return one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProbeConfig {
    pub entry: CfgId,
    pub extra_entries: Vec<CfgId>,
    pub ret: Option<CfgId>,
}

impl ProbeConfig {
    /// Every configuration id, the entry first.
    pub fn ids(&self) -> impl Iterator<Item = CfgId> + '_ {
        std::iter::once(self.entry)
            .chain(self.extra_entries.iter().copied())
            .chain(self.ret)
    }
}

/// One uprobe to place in a process: where, and which configuration it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    pub point: ProbePoint,
    pub cfg: CfgId,
    /// The budget slot its hits' cost is added to (the cookie's high half); 0: none.
    pub slot: u32,
}

/// A process held (stopped) until its probes are attached: by this agent's hooks, or left
/// by an agent that died.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hold {
    /// When it was held (CLOCK_MONOTONIC ns): names the hold, so that a late event of an
    /// old hold does not end a newer one of the same process.
    pub since_ns: u64,
    /// Left by an agent that died: in none of this agent's maps.
    pub adopted: bool,
}

impl Hold {
    pub fn new(since_ns: u64) -> Hold {
        Hold {
            since_ns,
            adopted: false,
        }
    }
}

/// Where a process was held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// At exec, before its first instruction.
    Exec,
    /// A child of traced process `ppid`, before its first instruction.
    Fork { ppid: u32 },
    /// In its dynamic loader, which is changing its list of libraries.
    Loader,
}

/// A held process, as the map of holds lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub pid: u32,
    pub hold: Hold,
    pub kind: HoldKind,
}

/// Counters of the process hooks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProcCounts {
    /// Process events (exec, fork, exit, loader) that found the ring buffer full.
    pub lost: u64,
    /// Holds the kernel refused (the stop signal could not be sent).
    pub hold_failed: u64,
    /// Held processes the exit hook resumed because the agent died.
    pub released: u64,
}

/// The kernel, as the engine changes it.
pub trait Tracer {
    /// What `attach` returns: the process's uprobes of one probe, detached when handed back.
    type Links: Send + 'static;

    /// Stores the configurations a planned probe runs in one binary; their counters start
    /// at zero.
    fn add_probe(&mut self, plan: &ProbePlan, rate_limit: u32) -> Result<ProbeConfig, TraceError>;

    /// The configuration of the dynamic loader hook (`PROBE_LOADER`: stop the process and
    /// report it), created on first use and shared by every process.
    fn loader_config(&mut self) -> Result<CfgId, TraceError>;

    /// The configurations of gprobe's propagation probes in one executable (`plan`): the
    /// request probe (`entry`) and its returns (`ret`), the header writer
    /// (`extra_entries[0]`) and the connection hand-off (`extra_entries[1]`). The writer
    /// runs a program that writes to traced processes, loaded on first use; where the
    /// kernel forbids that, there is neither writer nor hand-off, and the reason comes
    /// with the configuration.
    fn propagate_config(
        &mut self,
        plan: &PropagatePlan,
    ) -> Result<(ProbeConfig, Option<String>), TraceError>;

    /// Forgets the propagating spans BPF keeps open for process `pid`, and the outgoing
    /// requests it keeps for them (its propagating probes were removed, or it exited:
    /// their returns will not be seen).
    fn forget_spans(&mut self, pid: u32);

    /// Frees a probe's configurations once no process has links to them.
    fn remove_probe(&mut self, cfg: ProbeConfig);

    /// Places every site in process `pid`, through `target` (a path to its executable that
    /// is valid from here): all of them or, if one fails, none.
    fn attach(
        &mut self,
        pid: u32,
        target: &Path,
        sites: &[Site],
    ) -> Result<Self::Links, TraceError>;

    /// Removes links without making the caller wait for the kernel.
    fn detach(&mut self, links: Self::Links);

    /// The kernel's counters of a probe's configurations.
    fn counters(&self, cfg: &ProbeConfig) -> KernelCounts;

    /// Ends a hold: lets the process run on, unless that hold is over already (resumed,
    /// or the process exited), so a late event never resumes a newer hold, nor a process
    /// stopped by someone else.
    fn resume(&mut self, pid: u32, hold: Hold);

    /// The processes this agent holds and has not resumed yet.
    fn held(&self) -> Vec<Held>;

    /// The processes that agents which died left held (once: the engine owns them then).
    fn take_adopted(&mut self) -> Vec<Held>;

    /// Marks a process as traced (or no longer): the children it forks are held.
    fn set_traced(&mut self, pid: u32, traced: bool);

    /// The process hooks' counters.
    fn proc_counts(&self) -> ProcCounts;

    /// Which executables to hold at exec: by inode number of the executed file and by
    /// process name (the executed path's last component, at most 15 bytes).
    fn set_exec_watch(
        &mut self,
        inos: &BTreeSet<u64>,
        comms: &BTreeSet<String>,
    ) -> Result<(), TraceError>;

    /// Holds new processes until this CLOCK_MONOTONIC time (0: no more); a stopped or
    /// stuck agent thereby stops holding on its own, and a dead one at once.
    fn keep_holding(&mut self, until_ns: u64);

    /// Waits until the detaches in flight are done or `deadline` passes; true if done.
    fn wait_detached(&mut self, deadline: Instant) -> bool;

    /// What the probes attached with budget slot `slot` have cost their process so far
    /// (ns, estimated in the kernel: each hit adds its site's cost).
    fn budget_spent(&self, slot: u32) -> u64;

    /// The CPU time process `pid` has used so far (ns: all its threads, in user space and
    /// in the kernel, where its probes' traps run); `None` where it cannot be read. What
    /// its probes cost it cannot be more: the budget's estimate is bounded by it.
    fn process_cpu_ns(&self, _pid: u32) -> Option<u64> {
        None
    }

    /// Sets a budget slot back to 0, its returns on (before it is given to another pair).
    fn clear_budget(&mut self, slot: u32);

    /// Switches the return probes of a budget slot off (or back on): while off, its
    /// entries record whole calls without a duration, and its returns do nothing.
    fn set_returns_off(&mut self, slot: u32, off: bool) -> Result<(), TraceError>;

    /// Forgets the calls BPF keeps in flight for process `pid` in the probes whose first
    /// entry configurations are `func_ids` (their returns were taken off).
    fn forget_calls(&mut self, pid: u32, func_ids: &[CfgId]);
}

/// One probe of a spec to plan against a binary.
#[derive(Debug, Clone, Copy)]
pub struct PlanRequest<'a> {
    pub probe: &'a Probe,
    pub limits: &'a Limits,
}

/// Binary resolution, as the engine asks for it.
pub trait Resolver {
    /// Plans `probes` against the executable at `path`, which messages call `shown` (one
    /// result per request, in order).
    fn plan(
        &mut self,
        path: &Path,
        shown: &Path,
        probes: &[PlanRequest<'_>],
    ) -> Vec<Result<ProbePlan, Arc<ProbeError>>>;

    /// The file offset of `_dl_debug_state` in the dynamic loader at `path`, if it has one.
    fn loader_hook(&mut self, path: &Path) -> Option<u64>;

    /// gprobe's own probe on `runtime.newproc1` in the Go executable at `path` (entry:
    /// `callergp`; return: `r0`, the new goroutine), if it is Go and has the function.
    fn newproc_plan(&mut self, path: &Path) -> Option<ProbePlan>;

    /// gprobe's own probes that carry propagating spans to outgoing net/http requests in
    /// the Go executable at `path`, or why there can be none.
    fn propagate_plan(&mut self, path: &Path) -> Result<PropagatePlan, PropagateError>;

    /// True when `path` leads through a process that has exited (`/proc/PID/...`): what
    /// could not be read through it says nothing of the file, and is not remembered.
    fn through_gone_process(&self, _path: &Path) -> bool {
        false
    }

    /// The engine is done resolving for now (one input handled): what was opened for it
    /// is let go, so nothing stays open or mapped until the next resolution.
    fn release(&mut self) {}
}

/// CLOCK_MONOTONIC now, in ns (the clock of BPF's bpf_ktime_get_ns).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass it and nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
