//! The engine's state machine with a fake kernel and a fake resolver: process start and
//! exit, spec add/change/delete, attach failures, detach, holds, counts.

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
    /// Live links: id -> (pid, sites).
    links: BTreeMap<u64, (u32, usize)>,
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
}

#[derive(Debug, Clone, Default)]
struct FakeTracer(Rc<RefCell<Kernel>>);

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
        let ret = (!plan.ret_offsets.is_empty()).then(id);
        Ok(ProbeConfig {
            entry,
            extra_entries: vec![],
            ret,
        })
    }

    fn loader_config(&mut self) -> Result<CfgId, TraceError> {
        let mut k = self.0.borrow_mut();
        k.configs.insert(loader::LOADER_CFG);
        Ok(loader::LOADER_CFG)
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
        k.log.push(("attach", pid));
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
        k.links.insert(id, (pid, sites.len()));
        Ok(FakeLinks(id))
    }

    fn detach(&mut self, links: FakeLinks) {
        assert!(
            self.0.borrow_mut().links.remove(&links.0).is_some(),
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
}

/// Plans every symbol except `main.missing`; counts the binaries it opened.
#[derive(Debug, Clone, Default)]
struct FakeResolver(Rc<RefCell<usize>>);

fn plan(symbol: &str, rets: usize) -> ProbePlan {
    ProbePlan {
        symbol: symbol.into(),
        entry_offset: 0x1000,
        ret_offsets: (0..rets as u64).map(|i| 0x1010 + i).collect(),
        entry_captures: vec![],
        return_captures: vec![],
        signature_source: crate::plan::SignatureSource::Signature,
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

    fn newproc_plan(&mut self, _path: &Path) -> Option<ProbePlan> {
        None
    }

    fn through_gone_process(&self, path: &Path) -> bool {
        path.starts_with("/proc/66/")
    }

    fn propagate_plan(
        &mut self,
        path: &Path,
    ) -> Result<crate::resolve::propagate::PropagatePlan, String> {
        // Pid 20 runs a program that makes no requests.
        if path.to_string_lossy().contains("/proc/20/") {
            return Err("it makes no net/http client requests".into());
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
            .then_some(loader::LOADER_OFFSET)
    }
}

fn spec(name: &str, ns: Option<&str>, selector: &str, probes: &str) -> ProbeSpec {
    let ns = ns.map(|n| format!(", namespace: {n}")).unwrap_or_default();
    gprobe_crds::load_specs(
        &format!("apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: {name}{ns}}}\nspec:\n  selector: {selector}\n  probes: {probes}\n"),
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

mod cluster;
mod holds;
mod loader;
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

#[test]
fn a_held_process_is_attached_before_it_is_resumed_and_others_are_left_alone() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: \"**/shop\"}", TWO))
        .unwrap();
    assert_eq!(
        w.kernel.borrow().comms,
        BTreeSet::from(["shop".to_string()])
    );
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, true));
    w.engine
        .process_seen(proc(11, "/app/other", 8), exec(&w, 11, true));
    let k = w.kernel.borrow();
    assert_eq!(
        k.log,
        [
            ("attach", 10),
            ("attach", 10),
            ("resume", 10),
            ("resume", 11)
        ],
        "probes first, then the process runs; an unselected one is resumed at once"
    );
    // main.a: 1 site; main.b (latency): entry + 2 RETs.
    let mut sites: Vec<usize> = k.links.values().map(|(_, n)| *n).collect();
    sites.sort();
    assert_eq!(sites, [1, 3]);
    assert!(k.links.values().all(|(p, _)| *p == 10), "nothing in pid 11");
    assert!(
        k.inos.contains(&7),
        "the next process of this file is held too"
    );
    drop(k);
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (1, 1, 0));
}

#[test]
fn exit_detaches_flushes_the_reader_and_the_next_process_reuses_the_plans() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 2);
    let cfgs = w.kernel.borrow().configs.len();
    assert_eq!(cfgs, 3, "main.a entry, main.b entry and return");
    w.engine.process_exited(10);
    assert_eq!(live_links(&w, 10), 0);
    assert_eq!(w.exits.try_recv(), Ok(10));
    assert_eq!(
        w.kernel.borrow().configs.len(),
        3,
        "kept for the next process"
    );
    w.engine
        .process_seen(proc(12, "/app/shop", 7), exec(&w, 12, true));
    assert_eq!(live_links(&w, 12), 2);
    assert_eq!(*w.opened.borrow(), 1, "the binary was resolved once");
    // Idle binaries are freed after the TTL; their counts stay.
    w.kernel.borrow_mut().counts.insert(
        1,
        KernelCounts {
            hits: 5,
            lost: 2,
            ..Default::default()
        },
    );
    w.engine.process_exited(12);
    w.engine.tick(Instant::now() + Duration::from_secs(61));
    assert!(w.kernel.borrow().configs.is_empty());
    let key = ProbeKey {
        spec: "s".into(),
        index: 0,
        symbol: "main.a".into(),
    };
    assert_eq!(w.stats.probe(&key).lost, 2);
    assert_eq!(w.stats.probe(&key).hits, 5);
}

#[test]
fn spec_add_change_and_delete() {
    let mut w = world(Mode::Local);
    let id = w
        .engine
        .add_spec(spec(
            "s",
            None,
            "{executable: /app/shop}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    assert!(matches!(
        w.engine.add_spec(spec(
            "s",
            None,
            "{executable: /app/shop}",
            "[{symbol: main.a}]"
        )),
        Err(SpecRejected::Duplicate { .. })
    ));
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 1);
    // The same spec again changes nothing.
    assert!(!w.engine.upsert_spec(spec(
        "s",
        None,
        "{executable: /app/shop}",
        "[{symbol: main.a}]"
    )));
    assert_eq!(live_links(&w, 10), 1);
    // A changed spec replaces the old one's probes in the processes it selects, which
    // stay tracked (not counted again, not reported as exited).
    assert!(w.engine.upsert_spec(spec(
        "s",
        None,
        "{executable: /app/shop}",
        "[{symbol: main.a}, {symbol: main.c}]"
    )));
    assert_eq!(
        live_links(&w, 10),
        2,
        "old probes detached, new ones attached"
    );
    assert_eq!(
        w.kernel.borrow().configs.len(),
        2,
        "old configurations freed"
    );
    assert!(
        w.engine.find_spec(&SpecKey {
            namespace: None,
            name: "s".into()
        }) != Some(id)
    );
    assert!(w.engine.is_tracked(10));
    assert!(w.exits.try_recv().is_err());
    assert_eq!(w.stats.processes().matched, 1);
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 2);
    let id2 = w.engine.spec_ids()[0];
    w.engine.remove_spec(id2);
    assert_eq!(live_links(&w, 10), 0);
    assert!(w.kernel.borrow().configs.is_empty(), "configurations freed");
    assert!(!w.engine.is_tracked(10));
    assert!(w.kernel.borrow().comms.is_empty());
}

#[test]
fn a_probe_that_fails_is_reported_and_the_others_run() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "s",
            None,
            "{executable: /app/shop}",
            "[{symbol: main.missing}, {symbol: main.a}, {symbol: main.b, latency: true}]",
        ))
        .unwrap();
    // main.b's second RET cannot be placed: the whole probe is refused, nothing half-done.
    w.kernel.borrow_mut().bad_offset = Some(0x1011);
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, true));
    assert_eq!(live_links(&w, 10), 1, "main.a only");
    let probes = w.stats.probes();
    let by_symbol = |s: &str| {
        probes
            .iter()
            .find(|(k, _)| &*k.symbol == s)
            .unwrap()
            .1
            .clone()
    };
    assert!(by_symbol("main.a").attached);
    assert!(!by_symbol("main.missing").attached);
    assert!(by_symbol("main.missing")
        .error
        .unwrap()
        .contains("no function table"));
    assert!(by_symbol("main.b").error.unwrap().contains("0x1011"));
    let snap = w.engine.snapshot();
    assert_eq!(snap.specs[0].processes[0].probes.len(), 3);
    assert_eq!(w.kernel.borrow().resumed, [10]);
    assert_eq!(w.stats.processes().traced, 1);
}

#[test]
fn a_process_gone_before_or_during_attach_is_missed_unless_held_and_blames_no_probe() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    // Not held, gone at its first attach.
    w.kernel.borrow_mut().gone.insert(10);
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, false));
    // Not held, gone after its first probe was attached: that one is detached again.
    w.kernel.borrow_mut().gone_after.insert(11, 1);
    w.engine
        .process_seen(proc(11, "/app/shop", 7), exec(&w, 11, false));
    // Held (stopped before its first instruction) and killed meanwhile: none of its calls
    // can have been missed.
    w.kernel.borrow_mut().gone.insert(12);
    w.engine
        .process_seen(proc(12, "/app/shop", 7), exec(&w, 12, true));
    for pid in [10, 11, 12] {
        assert_eq!(live_links(&w, pid), 0);
        assert!(!w.engine.is_tracked(pid));
    }
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (3, 1, 2));
    let reasons: Vec<(u32, &str)> = ps
        .missed
        .iter()
        .map(|m| (m.pid, m.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (10, "exited before gprobe could attach"),
            (11, "exited while its probes were being attached")
        ]
    );
    assert_eq!(
        w.kernel.borrow().resumed,
        [12],
        "the hold is released anyway"
    );
    for (k, p) in w.stats.probes() {
        assert_eq!(
            p.error, None,
            "{k}: a process that exits is no probe's fault"
        );
    }
    assert!(w.kernel.borrow().traced.is_empty());
    // A process gone before it could even be inspected counts when its path matches;
    // missed unless it was held.
    w.engine.process_exec_gone(13, Path::new("/app/shop"), None);
    w.engine.process_exec_gone(14, Path::new("/bin/true"), None);
    let h = hold(&w, 15, HoldKind::Exec);
    w.engine
        .process_exec_gone(15, Path::new("/app/shop"), Some(h));
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (5, 2, 3));
    assert_eq!(ps.missed[2].pid, 13);
}

#[test]
fn a_binary_read_through_a_process_that_exited_is_planned_again_for_the_next_one() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(66, "/app/shop", 7), exec(&w, 66, false));
    assert!(!w.engine.is_tracked(66));
    // The next process of the same file is planned through itself, not refused with the
    // error of the first (before: "cannot read ...; check that the file exists" for every
    // process of the file until the spec changed).
    w.engine
        .process_seen(proc(67, "/app/shop", 7), exec(&w, 67, true));
    assert_eq!(live_links(&w, 67), 2);
    assert_eq!(*w.opened.borrow(), 2, "planned again, through pid 67");
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (2, 1, 1));
    assert_eq!(ps.missed[0].reason, "exited before gprobe could attach");
    for (k, p) in w.stats.probes() {
        assert_eq!(
            p.error, None,
            "{k}: a process that exits is no probe's fault"
        );
    }
}

#[test]
fn a_process_not_held_at_exec_is_traced_but_listed_as_missed() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "s",
            None,
            "{executable: \"/app/*\"}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    assert!(
        w.kernel.borrow().comms.is_empty(),
        "no literal name to hold by"
    );
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, false));
    assert_eq!(live_links(&w, 10), 1);
    let ps = w.stats.processes();
    assert_eq!((ps.traced, ps.missed_total), (0, 1));
    assert!(
        ps.missed[0].reason.contains("not held at exec"),
        "{}",
        ps.missed[0].reason
    );
    // From now on this file's processes are held.
    assert!(w.kernel.borrow().inos.contains(&7));
}

#[test]
fn exec_into_a_new_program_replaces_the_old_ones_probes() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "s",
            None,
            "{executable: \"/app/*\"}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    let mut other = proc(10, "/app/cart", 9);
    other.start_time = proc(10, "", 0).start_time; // exec keeps the start time
    w.engine.process_exited(10); // what the driver does on exec
    w.engine.process_seen(other, exec(&w, 10, true));
    assert_eq!(live_links(&w, 10), 1);
    assert_eq!(w.kernel.borrow().links.len(), 1);
    assert_eq!(w.exits.try_recv(), Ok(10));
}
