//! The engine's state machine with a fake kernel and a fake resolver: process start and
//! exit, spec add/change/delete, attach failures, detach, holds, counts. This file holds
//! the fakes and the helpers every test uses (`world`, `spec`, `proc`, `hold`, `exec`); the
//! tests are in its submodules, one topic each.

use super::*;
use crate::discover::FileKey;
use crate::plan::ProbePlan;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

/// What the fake kernel saw, shared with the test.
#[derive(Debug, Default)]
struct Kernel {
    next_cfg: CfgId,
    configs: BTreeSet<CfgId>,
    /// Live links: id -> (pid, sites); the links of return sites apart, in `ret_links`.
    links: BTreeMap<u64, (u32, usize)>,
    ret_links: BTreeMap<u64, (u32, usize)>,
    /// The return configurations handed out.
    ret_cfgs: BTreeSet<CfgId>,
    next_link: u64,
    /// Pids whose attach fails as if the process had exited.
    gone: BTreeSet<u32>,
    /// Pids that exit after this many more attaches succeed.
    gone_after: BTreeMap<u32, usize>,
    /// Attaching a site at this offset fails.
    bad_offset: Option<u64>,
    resumed: Vec<u32>,
    held: BTreeMap<u32, Held>,
    /// Holds of agents that died, handed over once.
    adopted: Vec<Held>,
    /// Pids marked as traced (their children are held at fork).
    traced: BTreeSet<u32>,
    proc_counts: crate::engine::tracer::ProcCounts,
    /// The order of attach and resume calls: ("attach" | "resume", pid).
    log: Vec<(&'static str, u32)>,
    comms: BTreeSet<String>,
    inos: BTreeSet<u64>,
    counts: BTreeMap<CfgId, KernelCounts>,
    /// What each budget slot has cost (set by the test).
    budget: BTreeMap<u32, u64>,
    /// The CPU time each process has used (ns, set by the test; none: unknown).
    cpu: BTreeMap<u32, u64>,
    /// The budget slot of each attach: (pid, slot).
    slots: Vec<(u32, u32)>,
    /// Budget slots whose returns are off.
    returns_off: BTreeSet<u32>,
    /// What forget_calls was asked: (pid, entry configurations).
    forgotten: Vec<(u32, Vec<CfgId>)>,
}

#[derive(Debug, Clone, Default)]
struct FakeTracer(Rc<RefCell<Kernel>>);

/// The fake loader hook's configuration and file offset.
const LOADER_CFG: CfgId = 1 << 20;
const LOADER_OFFSET: u64 = 0x2060;
/// The pids whose executable has runtime.newproc1 (the newproc tests').
const NEWPROC_PIDS: [u32; 2] = [80, 81];

#[derive(Debug)]
struct FakeLinks(u64);

impl Tracer for FakeTracer {
    type Links = FakeLinks;

    fn add_probe(&mut self, plan: &ProbePlan, _rate: u32) -> Result<ProbeConfig, TraceError> {
        let mut k = self.0.borrow_mut();
        let mut id = || {
            k.next_cfg += 1;
            let id = k.next_cfg;
            k.configs.insert(id);
            id
        };
        let entry = id();
        let ret = plan.has_return().then(id);
        k.ret_cfgs.extend(ret);
        Ok(ProbeConfig {
            entry,
            extra_entries: vec![],
            ret,
        })
    }

    fn loader_config(&mut self) -> Result<CfgId, TraceError> {
        let mut k = self.0.borrow_mut();
        k.configs.insert(LOADER_CFG);
        Ok(LOADER_CFG)
    }

    fn propagate_config(
        &mut self,
        _plan: &crate::resolve::propagate::PropagatePlan,
    ) -> Result<(ProbeConfig, Option<String>), TraceError> {
        let mut k = self.0.borrow_mut();
        let mut id = || {
            k.next_cfg += 1;
            let id = k.next_cfg;
            k.configs.insert(id);
            id
        };
        let (entry, done, write, conn) = (id(), id(), id(), id());
        let cfg = ProbeConfig {
            entry,
            extra_entries: vec![write, conn],
            ret: Some(done),
        };
        Ok((cfg, None))
    }

    fn forget_spans(&mut self, pid: u32) {
        self.0.borrow_mut().log.push(("forget_spans", pid));
    }

    fn remove_probe(&mut self, cfg: ProbeConfig) {
        let mut k = self.0.borrow_mut();
        for id in cfg.ids() {
            k.configs.remove(&id);
        }
    }

    fn attach(&mut self, pid: u32, _t: &Path, sites: &[Site]) -> Result<FakeLinks, TraceError> {
        let mut k = self.0.borrow_mut();
        let returns = sites.iter().all(|s| k.ret_cfgs.contains(&s.cfg));
        k.log
            .push((if returns { "attach returns" } else { "attach" }, pid));
        if k.gone.contains(&pid) {
            return Err(TraceError::ProcessGone);
        }
        if let Some(n) = k.gone_after.get_mut(&pid) {
            if *n == 0 {
                return Err(TraceError::ProcessGone);
            }
            *n -= 1;
        }
        if let Some(bad) = k.bad_offset {
            if let Some(s) = sites.iter().find(|s| s.point.offset == bad) {
                return Err(TraceError::Attach {
                    path: "/x".into(),
                    offset: s.point.offset,
                    source: crate::attach::perf::PerfError::NoRefCtr,
                });
            }
        }
        assert!(
            sites.iter().all(|s| k.configs.contains(&s.cfg)),
            "sites run stored configs"
        );
        k.next_link += 1;
        let id = k.next_link;
        if returns {
            k.ret_links.insert(id, (pid, sites.len()));
        } else {
            k.links.insert(id, (pid, sites.len()));
        }
        if let Some(s) = sites.first() {
            k.slots.push((pid, s.slot));
        }
        Ok(FakeLinks(id))
    }

    fn detach(&mut self, links: FakeLinks) {
        assert!(
            {
                let mut k = self.0.borrow_mut();
                k.links.remove(&links.0).is_some() || k.ret_links.remove(&links.0).is_some()
            },
            "detached twice"
        );
    }

    fn counters(&self, cfg: &ProbeConfig) -> KernelCounts {
        self.0
            .borrow()
            .counts
            .get(&cfg.entry)
            .copied()
            .unwrap_or_default()
    }

    fn resume(&mut self, pid: u32, hold: Hold) {
        let mut k = self.0.borrow_mut();
        // As the kernel's map: only a hold still there is ended.
        if !hold.adopted {
            match k.held.get(&pid) {
                Some(h) if h.hold == hold => {
                    k.held.remove(&pid);
                }
                _ => return,
            }
        }
        k.log.push(("resume", pid));
        k.resumed.push(pid);
    }

    fn held(&self) -> Vec<Held> {
        self.0.borrow().held.values().copied().collect()
    }

    fn take_adopted(&mut self) -> Vec<Held> {
        std::mem::take(&mut self.0.borrow_mut().adopted)
    }

    fn set_traced(&mut self, pid: u32, traced: bool) {
        let mut k = self.0.borrow_mut();
        if traced {
            k.traced.insert(pid);
        } else {
            k.traced.remove(&pid);
        }
    }

    fn proc_counts(&self) -> crate::engine::tracer::ProcCounts {
        self.0.borrow().proc_counts
    }

    fn set_exec_watch(
        &mut self,
        inos: &BTreeSet<u64>,
        comms: &BTreeSet<String>,
    ) -> Result<(), TraceError> {
        let mut k = self.0.borrow_mut();
        k.inos = inos.clone();
        k.comms = comms.clone();
        Ok(())
    }

    fn keep_holding(&mut self, _until: u64) {}

    fn wait_detached(&mut self, _deadline: Instant) -> bool {
        true
    }

    fn budget_spent(&self, slot: u32) -> u64 {
        self.0.borrow().budget.get(&slot).copied().unwrap_or(0)
    }

    fn process_cpu_ns(&self, pid: u32) -> Option<u64> {
        self.0.borrow().cpu.get(&pid).copied()
    }

    fn clear_budget(&mut self, slot: u32) {
        let mut k = self.0.borrow_mut();
        k.budget.remove(&slot);
        k.returns_off.remove(&slot);
    }

    fn set_returns_off(&mut self, slot: u32, off: bool) -> Result<(), TraceError> {
        let mut k = self.0.borrow_mut();
        if off {
            k.returns_off.insert(slot);
        } else {
            k.returns_off.remove(&slot);
        }
        Ok(())
    }

    fn forget_calls(&mut self, pid: u32, func_ids: &[CfgId]) {
        self.0.borrow_mut().forgotten.push((pid, func_ids.to_vec()));
    }
}

/// Plans every symbol except `main.missing`; counts the binaries it opened.
#[derive(Debug, Clone, Default)]
struct FakeResolver(Rc<RefCell<usize>>);

fn plan(symbol: &str, rets: usize) -> ProbePlan {
    ProbePlan {
        symbol: symbol.into(),
        entry_offset: 0x1000,
        returns: crate::plan::Returns::ret_sites((0..rets as u64).map(|i| 0x1010 + i).collect()),
        entry_captures: vec![],
        return_captures: vec![],
        signature_source: crate::plan::SignatureSource::Signature,
        // Measured, so that budgets apply.
        costs: crate::resolve::sites::SiteCosts {
            entry: crate::resolve::sites::SiteClass::Emulated,
            ret: (rets > 0).then_some(crate::resolve::sites::SiteClass::SingleStepped),
        },
        ..Default::default()
    }
}

impl Resolver for FakeResolver {
    fn plan(
        &mut self,
        open: &Path,
        path: &Path,
        probes: &[PlanRequest<'_>],
    ) -> Vec<Result<ProbePlan, Arc<ProbeError>>> {
        *self.0.borrow_mut() += 1;
        // Pid 66 exits while its binary is read through /proc/66/exe.
        if open.starts_with("/proc/66/") {
            let gone = Arc::new(ProbeError::Trace(TraceError::ProcessGone));
            return probes.iter().map(|_| Err(gone.clone())).collect();
        }
        probes
            .iter()
            .map(|r| match r.probe.symbol.as_str() {
                "main.missing" => Err(Arc::new(ProbeError::Binary(
                    crate::resolve::ResolveError::NoFunctions { path: path.into() },
                ))),
                s => Ok(plan(s, if r.probe.latency { 2 } else { 0 })),
            })
            .collect()
    }

    fn newproc_plan(&mut self, path: &Path) -> Option<ProbePlan> {
        // Only the pids of the newproc tests run a Go runtime with runtime.newproc1.
        NEWPROC_PIDS
            .iter()
            .any(|pid| path.starts_with(format!("/proc/{pid}/")))
            .then(|| plan("runtime.newproc1", 2))
    }

    fn through_gone_process(&self, path: &Path) -> bool {
        path.starts_with("/proc/66/")
    }

    fn propagate_plan(
        &mut self,
        path: &Path,
    ) -> Result<crate::resolve::propagate::PropagatePlan, crate::resolve::propagate::PropagateError>
    {
        // Pid 20 runs a program that makes no requests.
        if path.to_string_lossy().contains("/proc/20/") {
            return Err(crate::resolve::propagate::PropagateError::NoClientRequests);
        }
        Ok(crate::resolve::propagate::PropagatePlan {
            out: plan("net/http.(*Transport).roundTrip", 2),
            conn: plan("net/http.(*persistConn).roundTrip", 0),
            write_offset: 0x2000,
            writer_type: 0x4000,
        })
    }

    fn loader_hook(&mut self, path: &Path) -> Option<u64> {
        path.to_string_lossy()
            .contains("ld-linux")
            .then_some(LOADER_OFFSET)
    }
}

fn spec(name: &str, ns: Option<&str>, selector: &str, probes: &str) -> ProbeSpec {
    let ns = ns.map(|n| format!(", namespace: {n}")).unwrap_or_default();
    gprobe_crds::load_specs(
        &format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: \
            {name}{ns}}}\nspec:\n  selector: {selector}\n  probes: {probes}\n"
        ),
        "t",
    )
    .unwrap()
    .remove(0)
}

fn proc(pid: u32, exe: &str, ino: u64) -> ProcInfo {
    ProcInfo {
        pid,
        exe: exe.into(),
        exec_path: None,
        exe_link: format!("/proc/{pid}/exe").into(),
        key: FileKey { dev: 1, ino },
        exe_ino: ino,
        comm: exe.rsplit('/').next().unwrap().into(),
        container_id: None,
        start_time: 100 + pid as u64,
        libraries: Vec::new(),
    }
}

mod attach;
mod budget;
mod cluster;
mod holds;
// `loader`, `newproc`, `propagate`: the tests of gprobe's auxiliary probes (the probes:
// `crate::auxiliary`).
mod loader;
mod missed;
mod newproc;
mod propagate;
mod respec;

struct World {
    engine: Engine<FakeTracer, FakeResolver>,
    kernel: Rc<RefCell<Kernel>>,
    opened: Rc<RefCell<usize>>,
    stats: Stats,
    exits: std::sync::mpsc::Receiver<u32>,
}

fn world(mode: Mode) -> World {
    let tracer = FakeTracer::default();
    let resolver = FakeResolver::default();
    let (kernel, opened) = (tracer.0.clone(), resolver.0.clone());
    let stats = Stats::new();
    let mut engine = Engine::new(
        tracer,
        resolver,
        mode,
        EngineOptions {
            binary_ttl: Duration::from_secs(60),
            hold_timeout: Duration::from_secs(2),
            only_pid: None,
        },
        Arc::new(Registry::default()),
        stats.clone(),
    );
    let (tx, exits) = std::sync::mpsc::channel();
    engine.set_exit_sink(tx);
    World {
        engine,
        kernel,
        opened,
        stats,
        exits,
    }
}

const TWO: &str = "[{symbol: main.a}, {symbol: main.b, latency: true}]";

fn live_links(w: &World, pid: u32) -> usize {
    w.kernel
        .borrow()
        .links
        .values()
        .filter(|(p, _)| *p == pid)
        .count()
}

/// Holds `pid` in the fake kernel (as the exec hook would) and returns its hold.
fn hold(w: &World, pid: u32, kind: HoldKind) -> Hold {
    let hold = Hold::new(monotonic_ns());
    w.kernel
        .borrow_mut()
        .held
        .insert(pid, Held { pid, hold, kind });
    hold
}

/// An exec event: held (the hook stopped `pid`) or not.
fn exec(w: &World, pid: u32, held: bool) -> Origin {
    Origin::Exec {
        hold: held.then(|| hold(w, pid, HoldKind::Exec)),
        at: Instant::now(),
    }
}
