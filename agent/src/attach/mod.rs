//! The one module that talks to aya and the kernel's BPF and perf interfaces: loads
//! gprobe's BPF object, writes probe configurations and the exec watch, attaches uprobes to
//! single processes and detaches them (off the caller's thread), reads counters. It is the
//! engine's [`Tracer`].

mod budget;
mod configs;
pub mod detach;
pub mod encode;
pub mod error;
pub mod features;
#[cfg(test)]
mod filter_run;
mod forget;
pub mod guardian;
mod holdmaps;
pub mod hooks;
pub mod multi;
pub mod object;
pub mod perf;
pub mod pins;
mod pod;
mod propagate;
pub mod ring;
pub mod selftest;
mod sites;
mod slots;
mod sys;

use crate::abi::{self, GpProbeCfg, GpStats, GP_MAX_PROBES};
use crate::engine::tracer::{Held, Hold, ProcCounts};
use crate::engine::{CfgId, ProbeConfig, Site, TraceError, Tracer};
use crate::kernel::FeatureName;
use crate::plan::ProbePlan;
use crate::resolve::propagate::PropagatePlan;
use crate::stats::KernelCounts;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap};
use aya::programs::UProbe;
use aya::{Btf, Ebpf, EbpfLoader};
use detach::DetachPool;
pub use error::MapError;
use multi::MultiProgram;
pub use object::LoadError;
use object::{take, trace_map_err, uprobe_object, UPROBE_PROG};
use object::{PROPAGATE_DRY_PROG, PROPAGATE_PROG};
pub use slots::Link;
use slots::Slots;
use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A site's BPF cookie: its configuration in the low half, its budget slot in the high one.
fn cookie(s: &Site) -> u64 {
    s.cfg as u64 | (s.slot as u64) << 32
}

/// Options fixed when the BPF object is loaded.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Size of the events ring buffer in bytes (a power of two, multiple of the page size).
    pub ring_buffer_bytes: u32,
    /// Wake the reader once about this many bytes were written on one CPU (0: the kernel's
    /// per-record wake-ups).
    pub wakeup_bytes: u64,
    /// `propagate`: run the header writer without its writes (gprobe_propagate_dry), to
    /// check propagation where the kernel forbids them: what would be written is counted.
    pub propagate_dry_run: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            ring_buffer_bytes: 4 << 20,
            wakeup_bytes: 256 << 10,
            propagate_dry_run: false,
        }
    }
}

/// The two ring buffers the programs write to.
pub struct RingBuffers {
    pub events: ring::Ring,
    pub procs: ring::Ring,
}

/// Loaded BPF programs and maps.
pub struct BpfTracer {
    /// The uprobe program for uprobe_multi links; `None` where the kernel has none.
    multi: Option<MultiProgram>,
    ebpf: Ebpf,
    probes: Array<MapData, GpProbeCfg>,
    stats: PerCpuArray<MapData, GpStats>,
    /// The maps of the process hooks: holds, watched executables, traced parents.
    procs: holdmaps::HoldMaps,
    /// The layouts of error captures' types (resolve/go/types/errtable.rs), by table.
    errtypes: BpfHashMap<MapData, abi::GpErrKey, abi::GpErrType>,
    /// The `when:` predicates of the configurations that have one, by slot.
    filters: BpfHashMap<MapData, u32, abi::GpFilter>,
    /// The durations of the calls a `when:` left out, by return configuration's slot.
    left_out: PerCpuHashMap<MapData, u32, abi::GpDurations>,
    /// What each (process, spec) pair's probes cost, and which have their returns off.
    budget: budget::BudgetMaps,
    /// The exec, fork and exit hooks: detached when this is dropped.
    hooks: hooks::Hooks,
    /// The slots of `probes`: which are free, and which links run each.
    slots: Slots,
    pool: DetachPool<Link>,
    cpus: usize,
    /// The dynamic loader hook's configuration, once one process needed it.
    loader_cfg: Option<CfgId>,
    /// Whether gprobe_propagate loaded (tried on first use), and the configurations it runs.
    propagate_loaded: Option<Result<(), error::WriterRefused>>,
    propagate_cfgs: BTreeSet<CfgId>,
    /// The header writer's program: gprobe_propagate, or its dry run.
    propagate_prog: &'static str,
    /// The guardian exited, and holding stopped (said once).
    guardian_lost: bool,
    /// Where probes are found by their address: kernels without BPF cookies (sites.rs).
    sites: Option<Arc<sites::SiteTable>>,
}

impl BpfTracer {
    /// Hands links to the detach threads, said first to the address table (kernels without
    /// cookies: a probe that comes to their addresses waits for them, sites.rs).
    fn drop_links(&self, links: Vec<Link>) {
        for l in &links {
            l.retire();
        }
        self.pool.drop_all(links);
    }

    /// Loads the programs, attaches the process hooks (exec, fork, exit), pins the map of
    /// held processes (taking over what agents that died left in theirs) and returns the
    /// ring buffers.
    pub fn load(opts: &LoadOptions) -> Result<(BpfTracer, RingBuffers), LoadError> {
        let kernel = features::probe();
        if let Some(why) = kernel.blocker() {
            return Err(LoadError::Kernel(why));
        }
        let memlock = features::raise_memlock_if_charged(kernel);
        if let Err(why) = &memlock {
            tracing::warn!("{why}");
        }
        let wakeup = opts.wakeup_bytes;
        let bpf_object = uprobe_object(kernel);
        let cookies = object::has_cookies(kernel);
        let mut ebpf = EbpfLoader::new()
            .verifier_log_level(object::verifier_log_level())
            .map_max_entries("events", opts.ring_buffer_bytes)
            .override_global("wakeup_bytes", &wakeup, true)
            .load(bpf_object)
            .map_err(|e| match memlock {
                Err(why) => LoadError::Memlock(why),
                Ok(()) => LoadError::Load(Box::new(e)),
            })?;
        let btf = Btf::from_sys_fs().map_err(|e| LoadError::Btf(Box::new(e)))?;
        let hooks = hooks::Hooks::load(&ebpf, &btf, kernel.has(FeatureName::TaskKfuncs))?;
        if let hooks::HookMode::Guardian(why) = &hooks.mode {
            tracing::info!(
                "process hooks without kfuncs ({why}): processes are held at exec only, and \
                a guardian process (pid {}) resumes them if gprobe is killed",
                hooks.guardian_pid().unwrap_or(0)
            );
        }
        // Pinned before anything is held: a later agent finds what this one leaves.
        let (pin, orphans) = match ebpf.map("held").map(pins::HeldPin::pin) {
            Some(Ok((pin, orphans))) => (Some(pin), orphans),
            Some(Err(e)) => {
                tracing::warn!(
                    "{e}; if gprobe is killed, a later gprobe cannot find the \
                    processes it held (the kernel still resumes them)"
                );
                (None, Vec::new())
            }
            None => (None, Vec::new()),
        };
        let up: &mut UProbe = ebpf
            .program_mut(UPROBE_PROG)
            .and_then(|p| p.try_into().ok())
            .expect("BPF object has its uprobe program");
        up.load().map_err(|e| LoadError::Program {
            program: if cookies {
                UPROBE_PROG
            } else {
                "gprobe_uprobe (built for kernels without BPF cookies: README, Kernels)"
            },
            source: Box::new(e),
        })?;
        let multi = match MultiProgram::load(bpf_object, &ebpf, UPROBE_PROG) {
            // Without cookies probes are found by address: each needs its own perf event.
            Ok(_) if !kernel.has(FeatureName::UprobeMulti) || !cookies => None,
            Ok(m) => Some(m),
            Err(e) => {
                tracing::info!(
                    "uprobe_multi links are not available ({e}); using a perf event \
                    per uprobe (slower to attach and to detach)"
                );
                None
            }
        };
        let rings = RingBuffers {
            events: ring::Ring::new(take(&mut ebpf, "events")?),
            procs: ring::Ring::new(take(&mut ebpf, "proc_events")?),
        };
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| LoadError::Cpus(e))?;
        let sites = if cookies {
            None
        } else {
            Some(sites::SiteTable::new(take(&mut ebpf, "sites")?))
        };
        let tracer = BpfTracer {
            multi,
            probes: take(&mut ebpf, "probes")?,
            stats: take(&mut ebpf, "stats")?,
            procs: holdmaps::HoldMaps::take(&mut ebpf, pin, orphans)?,
            errtypes: take(&mut ebpf, "errtypes")?,
            filters: take(&mut ebpf, "filters")?,
            left_out: take(&mut ebpf, "left_out")?,
            budget: budget::BudgetMaps::take(&mut ebpf)?,
            hooks,
            ebpf,
            slots: Slots::new(GP_MAX_PROBES),
            pool: DetachPool::new(),
            cpus,
            loader_cfg: None,
            propagate_loaded: None,
            propagate_prog: if opts.propagate_dry_run {
                PROPAGATE_DRY_PROG
            } else {
                PROPAGATE_PROG
            },
            propagate_cfgs: BTreeSet::new(),
            guardian_lost: false,
            sites,
        };
        Ok((tracer, rings))
    }

    /// Measures which instructions this kernel emulates under a uprobe, and what a hit
    /// costs ([`selftest`]), with the tracer's program; its uprobes are detached off this
    /// thread.
    pub fn measure_sites(
        &self,
    ) -> Result<crate::resolve::sites::KernelSites, selftest::SelfTestError> {
        let up: &UProbe = self
            .ebpf
            .program(UPROBE_PROG)
            .and_then(|p| p.try_into().ok())
            .expect("BPF object has its uprobe program");
        let prog = up.fd().expect("the uprobe program is loaded");
        let (k, links) = selftest::measure(|path, offsets| {
            selftest::place(self.multi.as_ref(), prog.as_fd(), path, offsets)
        })?;
        self.drop_links(links);
        Ok(k)
    }

    /// Places `sites` in `pid`, run by the program `prog_name`: all or none.
    fn attach_program(
        &mut self,
        pid: u32,
        target: &Path,
        sites: &[Site],
        prog_name: &'static str,
    ) -> Result<Vec<Link>, TraceError> {
        let gone = || process_gone(pid);
        if let (Some(m), UPROBE_PROG) = (&self.multi, prog_name) {
            let mut links = Vec::with_capacity(2);
            // One link for entry uprobes, one for uretprobes (a link is one or the other);
            // returns first, as `sites` orders them.
            for ret in [true, false] {
                let group: Vec<(u64, u64, u64)> = sites
                    .iter()
                    .filter(|s| s.point.ret == ret)
                    .map(|s| (s.point.offset, cookie(s), s.point.ref_ctr_offset))
                    .collect();
                if group.is_empty() {
                    continue;
                }
                match m.attach(target, &group, pid, ret) {
                    Ok(fd) => links.push(self.slots.links().multi(
                        fd,
                        sites.iter().filter(|s| s.point.ret == ret).map(|s| s.cfg),
                    )),
                    Err(e) => {
                        self.drop_links(links);
                        if gone() {
                            return Err(TraceError::ProcessGone);
                        }
                        return Err(TraceError::Attach {
                            path: target.display().to_string(),
                            offset: group[0].0,
                            source: perf::PerfError::Link(e),
                        });
                    }
                }
            }
            return Ok(links);
        }
        let up: &UProbe = self
            .ebpf
            .program(prog_name)
            .and_then(|p| p.try_into().ok())
            .expect("BPF object has its uprobe programs");
        let prog = up.fd().expect("the uprobe program is loaded");
        if self.sites.is_some() && sites.iter().any(|s| s.point.ret) {
            return Err(TraceError::Attach {
                path: target.display().to_string(),
                offset: sites
                    .iter()
                    .find(|s| s.point.ret)
                    .map_or(0, |s| s.point.offset),
                source: perf::PerfError::ReturnWithoutCookie,
            });
        }
        // Without cookies: the target's mappings in the process, read once for its sites.
        let mapped = match &self.sites {
            Some(_) => match sites::TargetMappings::read(pid, target) {
                Ok(m) => Some(m),
                Err(_) if gone() => return Err(TraceError::ProcessGone),
                Err(e) => {
                    return Err(TraceError::Attach {
                        path: target.display().to_string(),
                        offset: sites.first().map_or(0, |s| s.point.offset),
                        source: perf::PerfError::Site(e),
                    })
                }
            },
            None => None,
        };
        let identify = match (&self.sites, &mapped) {
            (Some(table), Some(mapped)) => perf::Identify::Address(table, mapped),
            _ => perf::Identify::Cookie,
        };
        let mut links = Vec::with_capacity(sites.len());
        for s in sites {
            match perf::attach(prog.as_fd(), target, s.point, pid, cookie(s), identify) {
                Ok(l) => links.push(self.slots.links().perf(l, s.cfg)),
                Err(e) => {
                    self.drop_links(links);
                    let gone = match &e {
                        perf::PerfError::Open(io)
                        | perf::PerfError::Link(io)
                        | perf::PerfError::SetBpf(io) => {
                            matches!(io.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT))
                        }
                        // The file no longer mapped: it may have exited.
                        perf::PerfError::Site(_) => true,
                        _ => false,
                    } && gone();
                    return Err(if gone {
                        TraceError::ProcessGone
                    } else {
                        TraceError::Attach {
                            path: target.display().to_string(),
                            offset: s.point.offset,
                            source: e,
                        }
                    });
                }
            }
        }
        Ok(links)
    }
}

impl Tracer for BpfTracer {
    type Links = Vec<Link>;

    fn add_probe(&mut self, plan: &ProbePlan, rate_limit: u32) -> Result<ProbeConfig, TraceError> {
        self.add_probe_configs(plan, rate_limit)
    }

    fn loader_config(&mut self) -> Result<CfgId, TraceError> {
        if let Some(id) = self.loader_cfg {
            return Ok(id);
        }
        let id = self.add_config(&GpProbeCfg {
            kind: abi::PROBE_LOADER,
            ..Default::default()
        })?;
        self.loader_cfg = Some(id);
        Ok(id)
    }

    fn propagate_config(
        &mut self,
        plan: &PropagatePlan,
    ) -> Result<(ProbeConfig, Option<String>), TraceError> {
        self.add_propagate_configs(plan)
    }

    fn forget_spans(&mut self, pid: u32) {
        forget::spans(&mut self.ebpf, pid);
    }

    fn remove_probe(&mut self, cfg: ProbeConfig) {
        // Returns first: an entry seen once its return configuration is freed leaves a
        // call open that no return takes; the other way round, a return could take an
        // earlier call's.
        let entries = std::iter::once(cfg.entry).chain(cfg.extra_entries.iter().copied());
        let ids: Vec<CfgId> = cfg.ret.into_iter().chain(entries).collect();
        for id in ids {
            self.propagate_cfgs.remove(&id);
            self.remove_config(id);
        }
    }

    fn attach(&mut self, pid: u32, target: &Path, sites: &[Site]) -> Result<Vec<Link>, TraceError> {
        // The header writer runs its own program, through a perf event: the uprobe_multi
        // loader holds the main program only.
        let (writers, sites): (Vec<Site>, Vec<Site>) = sites
            .iter()
            .partition(|s| self.propagate_cfgs.contains(&s.cfg));
        let mut links = Vec::new();
        if !sites.is_empty() {
            links = self.attach_program(pid, target, &sites, UPROBE_PROG)?;
        }
        if !writers.is_empty() {
            match self.attach_program(pid, target, &writers, self.propagate_prog) {
                Ok(l) => links.extend(l),
                Err(e) => {
                    self.drop_links(links);
                    return Err(e);
                }
            }
        }
        Ok(links)
    }

    fn detach(&mut self, links: Vec<Link>) {
        self.drop_links(links);
    }

    fn counters(&self, cfg: &ProbeConfig) -> KernelCounts {
        self.kernel_counts(cfg)
    }

    fn resume(&mut self, pid: u32, hold: Hold) {
        self.procs.resume(pid, hold);
    }

    fn held(&self) -> Vec<Held> {
        self.procs.held()
    }

    fn take_adopted(&mut self) -> Vec<Held> {
        self.procs.take_adopted()
    }

    fn set_traced(&mut self, pid: u32, traced: bool) {
        self.procs.set_traced(pid, traced);
    }

    fn proc_counts(&self) -> ProcCounts {
        self.procs.proc_counts()
    }

    fn set_exec_watch(
        &mut self,
        inos: &BTreeSet<u64>,
        comms: &BTreeSet<String>,
    ) -> Result<(), TraceError> {
        self.procs.set_exec_watch(inos, comms)
    }

    fn keep_holding(&mut self, until_ns: u64) {
        // A hold nobody could undo if this agent died is not made: without the guardian
        // (killed on its own), the lease ends.
        if until_ns != 0 && !self.hooks.holds_are_guarded() {
            if !self.guardian_lost {
                self.guardian_lost = true;
                tracing::warn!(
                    "the guardian process of held processes has exited: gprobe holds no \
                    process from now on (calls before it attaches to a new process are missed)"
                );
            }
            self.procs.keep_holding(0);
            return;
        }
        self.procs.keep_holding(until_ns);
    }

    fn budget_spent(&self, slot: u32) -> u64 {
        self.budget.spent(slot)
    }

    fn clear_budget(&mut self, slot: u32) {
        self.budget.clear(slot);
    }

    fn process_cpu_ns(&self, pid: u32) -> Option<u64> {
        // utime + stime of /proc/PID/stat: every thread's, the exited ones' included.
        let stat = procfs::process::Process::new(pid as i32)
            .ok()?
            .stat()
            .ok()?;
        let ticks = stat.utime.checked_add(stat.stime)?;
        let per_s = procfs::ticks_per_second().max(1);
        Some(ticks.saturating_mul(1_000_000_000) / per_s)
    }

    fn set_returns_off(&mut self, slot: u32, off: bool) -> Result<(), TraceError> {
        self.budget
            .set_returns_off(slot, off)
            .map_err(trace_map_err("returns_off"))
    }

    fn forget_calls(&mut self, pid: u32, func_ids: &[CfgId]) {
        forget::calls(&mut self.ebpf, pid, func_ids);
    }

    fn wait_detached(&mut self, deadline: Instant) -> bool {
        self.pool.wait_idle(deadline)
    }
}

/// Whether `pid` has exited, or is exiting: an exiting process is still in /proc (a zombie
/// until reaped) but has no memory map, so its executable can no longer be resolved and
/// attaching fails (ENOENT); that is the process's doing, not the probe's.
fn process_gone(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("Z" | "X" | "x"))
        || std::fs::read_link(format!("/proc/{pid}/exe")).is_err()
}

impl Drop for BpfTracer {
    fn drop(&mut self) {
        // Never leave a process stopped behind.
        self.procs.release_all();
    }
}
