//! Where a process's probes go (its executable, or the shared libraries a probe names),
//! planning them once per file, and attaching them in the process.

use super::error::ProbeError;
use super::tracer::ProbePoint;
use super::tracer::{PlanRequest, Resolver, Site, Tracer};
use super::{Attachment, BinState, Engine, Planned, SpecId};
use crate::discover::{FileKey, ProcInfo};
use crate::events::ProbeMeta;
use crate::plan::ProbePlan;
use crate::util::printable;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

/// A file of a process that probes are placed in: its executable or a library.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub key: FileKey,
    /// A path to it valid from here.
    pub attach_path: PathBuf,
    /// Its path as the process sees it.
    pub display: PathBuf,
    /// The executable's inode number as exec sees it (exec holds); `None` for a library.
    pub exe_ino: Option<u64>,
}

/// The uprobes of a plan, each with the configuration it runs: the return sites
/// (uretprobes for C), then every entry site (a USDT probe's with its semaphore).
pub(super) fn sites(plan: &ProbePlan, cfg: &super::ProbeConfig) -> Vec<Site> {
    let mut v = Vec::new();
    // Returns first: a link's sites are placed in this order, and an entry placed before
    // its returns could open a call that no return closes, left for a later return without
    // its entry to take.
    if let Some(r) = cfg.ret {
        v.extend(plan.ret_offsets().iter().map(|&offset| Site {
            point: ProbePoint {
                offset,
                ret: plan.uretprobe(),
                ref_ctr_offset: 0,
            },
            cfg: r,
            slot: 0,
        }));
    }
    let entry_cfgs = std::iter::once(cfg.entry).chain(cfg.extra_entries.iter().copied());
    for ((offsets, _), id) in plan.entry_groups().into_iter().zip(entry_cfgs) {
        v.extend(offsets.into_iter().map(|offset| Site {
            point: ProbePoint {
                offset,
                ret: false,
                ref_ctr_offset: plan.ref_ctr_offset,
            },
            cfg: id,
            slot: 0,
        }));
    }
    v
}

/// Outcome of attaching a process's probes.
#[derive(Debug, Default)]
pub(super) struct Attached {
    pub count: usize,
    pub first_error: Option<Arc<ProbeError>>,
    pub gone: bool,
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// The files probe `pi` of spec `sid` goes into in process `info`: the executable, or
    /// every mapped library its `library` glob matches (none yet: a library not loaded).
    pub(super) fn targets_of(&self, info: &ProcInfo, sid: SpecId, pi: usize) -> Vec<Target> {
        let sp = &self.specs[&sid].probes[pi];
        match &sp.library {
            None => vec![Target {
                key: info.key,
                attach_path: info.exe_link.clone(),
                display: info.exe.clone(),
                exe_ino: Some(info.exe_ino),
            }],
            Some(lib) => info
                .libraries
                .iter()
                .filter(|m| lib.matches(&m.path))
                .map(|m| Target {
                    key: m.key,
                    attach_path: info.host_path(&m.path),
                    display: m.path.clone(),
                    exe_ino: None,
                })
                .collect(),
        }
    }

    /// Plans and attaches, in process `info`, the probes of `specs` (each probe in each of
    /// its targets) that are not attached there yet.
    pub(super) fn attach_specs(&mut self, info: &ProcInfo, specs: &[SpecId]) -> Attached {
        let mut work: BTreeMap<FileKey, (Target, Vec<(SpecId, usize)>)> = BTreeMap::new();
        let done: BTreeSet<(SpecId, usize, FileKey)> = self
            .procs
            .get(&info.pid)
            .map(|p| p.links.iter().map(|a| (a.spec, a.probe, a.file)).collect())
            .unwrap_or_default();
        for &sid in specs {
            let n = self.specs.get(&sid).map_or(0, |s| s.probes.len());
            for pi in 0..n {
                let targets = self.targets_of(info, sid, pi);
                if targets.is_empty() {
                    self.library_not_loaded(info, sid, pi);
                }
                for t in targets {
                    if done.contains(&(sid, pi, t.key)) {
                        continue;
                    }
                    work.entry(t.key)
                        .or_insert_with(|| (t.clone(), Vec::new()))
                        .1
                        .push((sid, pi));
                }
            }
        }
        let mut out = Attached::default();
        for (_, (target, probes)) in work {
            if self.plan_in(&target, info, &probes) {
                out.gone = true;
                return out;
            }
            for (sid, pi) in probes {
                match self.attach_one(info, &target, sid, pi) {
                    Ok(()) => out.count += 1,
                    Err(e) if e.is_process_gone() => {
                        out.gone = true;
                        return out;
                    }
                    Err(e) => {
                        out.first_error.get_or_insert(e);
                    }
                }
            }
        }
        out
    }

    /// The process mapped or unmapped libraries: attaches library probes to new matches.
    pub fn libraries_changed(&mut self, pid: u32, libraries: Vec<crate::discover::MappedFile>) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if p.info.libraries == libraries {
            return;
        }
        p.info.libraries = libraries;
        let info = p.info.clone();
        let specs: Vec<SpecId> = p.specs.iter().copied().collect();
        let out = self.attach_specs(&info, &specs);
        if out.gone {
            self.untrack(pid);
        } else {
            self.watch_loader(pid);
        }
    }

    /// True when a probe of a spec selecting `pid` is on a library (whose loading must be
    /// watched).
    pub fn has_library_probes(&self, pid: u32) -> bool {
        self.has_probe(pid, |sp| sp.library.is_some())
    }

    /// Whether a spec selecting `pid` has a probe for which `f` holds.
    pub(super) fn has_probe(&self, pid: u32, f: impl Fn(&super::SpecProbe) -> bool) -> bool {
        self.procs.get(&pid).is_some_and(|p| {
            p.specs
                .iter()
                .any(|sid| self.specs.get(sid).is_some_and(|s| s.probes.iter().any(&f)))
        })
    }

    /// Pids with library probes.
    pub fn pids_with_library_probes(&self) -> Vec<u32> {
        self.procs
            .keys()
            .copied()
            .filter(|pid| self.has_library_probes(*pid))
            .collect()
    }

    /// Plans (once per file) the probes of `probes` not planned in `target` yet. True when
    /// the file could not be read because the process it was read through exited: nothing
    /// is remembered then (the next process of the file plans again), and the caller drops
    /// the process.
    fn plan_in(&mut self, target: &Target, info: &ProcInfo, probes: &[(SpecId, usize)]) -> bool {
        let bin = self.binaries.entry(target.key).or_insert_with(|| BinState {
            attach_path: target.attach_path.clone(),
            display: target.display.clone(),
            exe_ino: target.exe_ino,
            probes: HashMap::new(),
            plans: Default::default(),
            pids: BTreeSet::new(),
            idle_since: None,
        });
        // The process that first showed this file may be gone: attach through a live one.
        bin.attach_path = target.attach_path.clone();
        bin.pids.insert(info.pid);
        bin.idle_since = None;
        if let Some(p) = self.procs.get_mut(&info.pid) {
            p.files.insert(target.key);
        }
        let todo: Vec<(SpecId, usize)> = probes
            .iter()
            .filter(|k| !bin.probes.contains_key(k))
            .copied()
            .collect();
        let watch_changed = target
            .exe_ino
            .is_some_and(|i| !self.watch_inos.contains(&i));
        // Invalid probes are settled without reading the file, probes planned for an
        // earlier version of their spec from the cache.
        let mut requests = Vec::new();
        let mut asked = Vec::new();
        let mut planned = Vec::new();
        for &(sid, pi) in &todo {
            let spec = &self.specs[&sid];
            let sp = &spec.probes[pi];
            let limits = &spec.spec.spec.limits;
            match &sp.invalid {
                Some(e) => {
                    bin.probes.insert((sid, pi), Err(e.clone()));
                }
                None => match bin.plans.get(&sp.probe, limits.max_string_bytes) {
                    Some(plan) => planned.push(((sid, pi), plan)),
                    None => {
                        requests.push(PlanRequest {
                            probe: &sp.probe,
                            limits,
                        });
                        asked.push((sid, pi));
                    }
                },
            }
        }
        let results = if requests.is_empty() {
            Vec::new()
        } else {
            self.resolver
                .plan(&target.attach_path, &target.display, &requests)
        };
        if results
            .iter()
            .any(|r| r.as_ref().is_err_and(|e| e.is_process_gone()))
        {
            return true;
        }
        for (r, res) in requests.iter().zip(&results) {
            bin.plans.put(r.probe, r.limits.max_string_bytes, res);
        }
        drop(requests);
        planned.extend(asked.into_iter().zip(results));
        for ((sid, pi), res) in planned {
            let spec = &self.specs[&sid];
            let sp = &spec.probes[pi];
            let shown = printable(&target.display.to_string_lossy()).into_owned();
            let outcome = res.and_then(|plan| {
                for w in &plan.warnings {
                    tracing::warn!("{} in {shown}: {w}", sp.key);
                }
                let cfg = self
                    .tracer
                    .add_probe(&plan, spec.spec.spec.limits.events_per_second)
                    .map_err(|e| Arc::new(ProbeError::Trace(e)))?;
                let types = plan.type_names.clone().map(|names| {
                    Arc::new(crate::events::DynTypes::new(names, &target.attach_path))
                });
                let meta = |caps: &[crate::plan::CapturePlan]| {
                    Arc::new(ProbeMeta {
                        key: sp.key.clone(),
                        spec: spec.name.clone(),
                        symbol: sp.key.symbol.clone(),
                        latency: sp.probe.latency,
                        redact: sp.probe.redact,
                        captures: caps
                            .iter()
                            .map(|c| (Arc::from(c.name.as_str()), c.decode))
                            .collect(),
                        types: types.clone(),
                        metrics: sp
                            .probe
                            .metrics
                            .as_ref()
                            .filter(|m| !m.labels.is_empty())
                            .map(|m| crate::events::MetricLabels {
                                labels: m.labels.iter().map(|l| Arc::from(l.as_str())).collect(),
                                max_series: m.max_series() as usize,
                            }),
                        internal: None,
                        sample: sp.probe.sample,
                        selects: sp.probe.when.is_some() || sp.probe.sample.is_some(),
                        when_at_return: plan.filter.is_some_and(|f| f.ret.is_some()),
                    })
                };
                // Every entry group reads the same names with the same decoders.
                for id in std::iter::once(cfg.entry).chain(cfg.extra_entries.iter().copied()) {
                    self.registry
                        .set_probe(id, Some(meta(&plan.entry_captures)));
                }
                if let Some(r) = cfg.ret {
                    self.registry
                        .set_probe(r, Some(meta(&plan.return_captures)));
                }
                Ok(Planned {
                    sites: sites(&plan, &cfg),
                    cfg,
                    types,
                    costs: plan.costs,
                })
            });
            if let Err(e) = &outcome {
                tracing::error!("{} in {shown}: {e}", sp.key);
                self.stats.set_error(&sp.key, e.to_string());
            }
            if let Some(bin) = self.binaries.get_mut(&target.key) {
                bin.probes.insert((sid, pi), outcome);
            }
        }
        if watch_changed {
            self.update_watch();
        }
        false
    }

    /// Attaches probe `pi` of spec `sid` in process `info`, in `target`; records the
    /// outcome.
    fn attach_one(
        &mut self,
        info: &ProcInfo,
        target: &Target,
        sid: SpecId,
        pi: usize,
    ) -> Result<(), Arc<ProbeError>> {
        let pid = info.pid;
        let key = self.specs[&sid].probes[pi].key.clone();
        if self.budgets.waiting(pid, sid, std::time::Instant::now()) {
            // Taken off for its cost: back after the back-off (budget.rs).
            return Ok(());
        }
        let measured = self
            .binaries
            .get(&target.key)
            .and_then(|b| b.probes.get(&(sid, pi)))
            .and_then(|p| p.as_ref().ok())
            .is_some_and(|p| p.costs.entry != crate::resolve::sites::SiteClass::Unmeasured);
        let slot = self.budget_slot(pid, sid, measured);
        let bin = self
            .binaries
            .get(&target.key)
            .expect("plan_in made the file's state");
        // Its returns taken off for their cost (budget.rs): a new slot says so too.
        let returns_off = slot != 0
            && self.budgets.returns_off(pid, sid)
            && match self.tracer.set_returns_off(slot, true) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("{key} in pid {pid}: {e}: its return probes are attached");
                    false
                }
            };
        let mut costs = None;
        let mut rets = None;
        let outcome = match bin.probes.get(&(sid, pi)) {
            Some(Ok(planned)) => {
                costs = Some(planned.costs);
                // Returns apart from the entry (a budget may take them off alone), and
                // first: an entry placed before its returns could open a call that no
                // return closes.
                let (ret_sites, entry_sites): (Vec<Site>, Vec<Site>) = planned
                    .sites
                    .iter()
                    .map(|s| Site { slot, ..*s })
                    .partition(|s| Some(s.cfg) == planned.cfg.ret);
                let n = entry_sites.len() + if returns_off { 0 } else { ret_sites.len() };
                // The load bias is read now, while the process surely runs (a short-lived
                // PIE process may be gone when its records are decoded).
                if let Some(t) = &planned.types {
                    t.learn(pid);
                }
                let path = &bin.attach_path;
                let attached = if ret_sites.is_empty() || returns_off {
                    Ok(None)
                } else {
                    self.tracer.attach(pid, path, &ret_sites).map(Some)
                };
                attached
                    .and_then(|r| {
                        rets = r;
                        self.tracer.attach(pid, path, &entry_sites)
                    })
                    .map(|l| (l, n))
                    .map_err(|e| {
                        if let Some(r) = rets.take() {
                            self.tracer.detach(r);
                        }
                        Arc::new(ProbeError::Trace(e))
                    })
            }
            Some(Err(e)) => Err(e.clone()),
            None => return Ok(()),
        };
        let result = match &outcome {
            Ok((_, n)) => {
                let costs = costs.unwrap_or_default();
                tracing::info!(
                    "attached {key} to {} ({n} uprobe{}; {}; pid {pid})",
                    printable(&bin.display.to_string_lossy()),
                    if *n == 1 { "" } else { "s" },
                    crate::resolve::sites::describe(costs, crate::resolve::sites::kernel())
                );
                self.stats.set_attached(&key, costs);
                Ok(())
            }
            Err(e) if e.is_process_gone() => Err(e.clone()),
            Err(e) => {
                if matches!(**e, ProbeError::Trace(_)) {
                    tracing::error!("{key} in pid {pid}: {e}");
                    self.stats.set_error(&key, e.to_string());
                }
                Err(e.clone())
            }
        };
        self.dirty = true;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.links.push(Attachment {
                spec: sid,
                probe: pi,
                file: target.key,
                outcome,
                rets,
            });
        }
        result
    }
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// Detaches spec `sid`'s links from `pid`.
    pub(super) fn detach_links_of(&mut self, pid: u32, sid: SpecId) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut p.links)
            .into_iter()
            .partition(|a| a.spec == sid);
        p.links = keep;
        for l in gone.into_iter().flat_map(Attachment::into_links) {
            self.tracer.detach(l);
        }
        self.dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{EntrySite, Returns, SignatureSource};

    fn plan() -> ProbePlan {
        ProbePlan {
            symbol: "x".into(),
            entry_offset: 0x100,
            returns: Returns::None,
            entry_captures: vec![],
            return_captures: vec![],
            signature_source: SignatureSource::None,
            warnings: vec![],
            extra_entry_sites: vec![],
            ref_ctr_offset: 0,
            pairing: crate::plan::Pairing::Goroutine,
            type_names: None,
            role: crate::plan::Role::Traced,
            ..Default::default()
        }
    }

    #[test]
    fn c_returns_are_uretprobes_at_the_entry() {
        let p = ProbePlan {
            returns: Returns::Uretprobe(crate::plan::OutsideGoCode::assumed()),
            pairing: crate::plan::Pairing::Thread,
            ..plan()
        };
        let cfg = crate::engine::ProbeConfig {
            entry: 1,
            extra_entries: vec![],
            ret: Some(2),
        };
        let s = sites(&p, &cfg);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].point.offset, s[0].point.ret, s[0].cfg),
            (0x100, true, 2),
            "the return first"
        );
        assert_eq!(
            (s[1].point.offset, s[1].point.ret, s[1].cfg),
            (0x100, false, 1)
        );
    }

    #[test]
    fn usdt_sites_carry_the_semaphore_and_their_own_configuration() {
        let mut other = crate::plan::CapturePlan {
            name: "arg0".into(),
            decode: crate::plan::Decode::Int {
                size: 8,
                signed: true,
            },
            bpf: Default::default(),
        };
        let p = ProbePlan {
            ref_ctr_offset: 0x5000,
            extra_entry_sites: vec![
                EntrySite {
                    offset: 0x200,
                    captures: vec![],
                },
                EntrySite {
                    offset: 0x300,
                    captures: vec![{
                        other.bpf.size = 4;
                        other.clone()
                    }],
                },
            ],
            ..plan()
        };
        let cfg = crate::engine::ProbeConfig {
            entry: 1,
            extra_entries: vec![7],
            ret: None,
        };
        let s = sites(&p, &cfg);
        let got: Vec<(u64, u32, u64)> = s
            .iter()
            .map(|x| (x.point.offset, x.cfg, x.point.ref_ctr_offset))
            .collect();
        assert_eq!(
            got,
            [(0x100, 1, 0x5000), (0x200, 1, 0x5000), (0x300, 7, 0x5000)]
        );
    }
}
