//! The attach state machine shared by local and cluster mode: which specs are active,
//! which binaries are resolved, which probes are attached to which file, which processes
//! are let through the BPF pid filter.

use crate::attach::{Link, Tracer};
use crate::discover::{FileKey, ProcInfo};
use crate::events::reader::Registry;
use crate::events::{ProbeMeta, Resource};
use crate::plan::{plan_probe, ProbePlan};
use crate::resolve::Binary;
use gprobe_crds::{validate_spec, ProbeSpec};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// BPF-side counters per (spec, symbol): (lost, throttled), as of the last `counters()`.
pub type LossCounters = Arc<std::sync::Mutex<HashMap<(Arc<str>, Arc<str>), (u64, u64)>>>;

/// The outcome of attaching one probe of one spec to one binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeState {
    Attached { uprobes: usize },
    Failed(String),
}

/// One row of what is attached where (for logs, summaries and ProbeAttachment status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachReport {
    pub spec: String,
    pub symbol: String,
    pub binary: PathBuf,
    pub pids: Vec<u32>,
    pub state: ProbeState,
}

/// Counters of one probe (spec, symbol), summed over binaries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ProbeCounters {
    pub hits: u64,
    /// Calls not delivered: their CALL or ENTRY record found the ring buffer full.
    pub lost: u64,
    pub throttled: u64,
    /// Latency probes: calls delivered without their return (the RETURN record found the
    /// ring buffer full; the entry is reported as unfinished). Not in `lost`.
    pub returns_lost: u64,
}

struct ActiveSpec {
    spec: ProbeSpec,
    name: Arc<str>,
    /// Probe index -> validation problem (such probes never attach).
    invalid: HashMap<usize, String>,
}

struct Attached {
    entry_cfg: u32,
    ret_cfg: Option<u32>,
    links: Vec<Link>,
}

struct BinState {
    /// Tells this binary's configurations apart in the BPF pid filter.
    bin_id: u32,
    /// The file as the resolver reads it, while probes are being planned; `None` once
    /// they are (its mapping would otherwise stay resident for as long as the probes are
    /// attached: 16-21 MB for a kubectl-size binary). Re-opened for a new spec. An error
    /// is kept, so a bad file is not re-read for every process.
    binary: Option<Result<Arc<Binary>, String>>,
    /// A path to the file valid from here (a /proc/PID/exe of some process running it).
    attach_path: PathBuf,
    display_path: PathBuf,
    probes: BTreeMap<(u32, usize), Result<Attached, String>>,
    pids: HashSet<u32>,
}

struct ProcState {
    key: FileKey,
    specs: Vec<u32>,
}

pub struct Session {
    tracer: Tracer,
    registry: Arc<Registry>,
    specs: BTreeMap<u32, ActiveSpec>,
    next_spec_id: u32,
    next_bin_id: u32,
    binaries: HashMap<FileKey, BinState>,
    procs: HashMap<u32, ProcState>,
    /// Counters of configurations already detached, so totals never go backwards.
    retired: HashMap<(Arc<str>, Arc<str>), ProbeCounters>,
    losses: LossCounters,
}

impl Session {
    pub fn new(tracer: Tracer, registry: Arc<Registry>, losses: LossCounters) -> Self {
        Self {
            tracer,
            registry,
            specs: BTreeMap::new(),
            next_spec_id: 1,
            next_bin_id: 1,
            binaries: HashMap::new(),
            procs: HashMap::new(),
            retired: HashMap::new(),
            losses,
        }
    }

    /// Adds a spec; returns its id and the problems found. Spec-wide problems keep the
    /// spec out (`None`); a problem of one probe keeps only that probe out.
    pub fn add_spec(&mut self, spec: ProbeSpec) -> (Option<u32>, Vec<String>) {
        let issues = validate_spec(&spec);
        let name: Arc<str> = spec.display_name().into();
        let msgs: Vec<String> = issues.iter().map(|i| format!("{name}: {i}")).collect();
        if issues.iter().any(|i| i.probe.is_none()) {
            return (None, msgs);
        }
        let invalid = issues
            .into_iter()
            .filter_map(|i| i.probe.map(|p| (p, i.to_string())))
            .collect();
        let id = self.next_spec_id;
        self.next_spec_id += 1;
        self.specs.insert(
            id,
            ActiveSpec {
                spec,
                name,
                invalid,
            },
        );
        (Some(id), msgs)
    }

    pub fn spec(&self, id: u32) -> Option<&ProbeSpec> {
        self.specs.get(&id).map(|s| &s.spec)
    }

    pub fn spec_ids(&self) -> Vec<u32> {
        self.specs.keys().copied().collect()
    }

    /// Removes a spec: detaches its probes everywhere and closes its pid filter entries.
    pub fn remove_spec(&mut self, id: u32) {
        let Some(active) = self.specs.remove(&id) else {
            return;
        };
        let keys: Vec<FileKey> = self.binaries.keys().copied().collect();
        for key in keys {
            let bin = self.binaries.get_mut(&key).expect("key from the map");
            let gone: Vec<(u32, usize)> = bin
                .probes
                .keys()
                .filter(|(s, _)| *s == id)
                .copied()
                .collect();
            for k in gone {
                if let Some(Ok(att)) = bin.probes.remove(&k) {
                    retire(&mut self.tracer, &mut self.retired, &active, k.1, att);
                }
            }
        }
        for (pid, p) in self.procs.iter_mut() {
            if let Some(pos) = p.specs.iter().position(|s| *s == id) {
                p.specs.remove(pos);
                self.tracer.forget_pid(*pid, id);
            }
        }
    }

    /// Traces `proc` for `spec_ids` (the specs that selected it). Returns one line per
    /// probe whose state is new (attached or failed) for this binary.
    pub fn add_process(
        &mut self,
        proc: &ProcInfo,
        spec_ids: &[u32],
        resource: Resource,
    ) -> Vec<AttachReport> {
        let mut reports = Vec::new();
        if spec_ids.is_empty() {
            return reports;
        }
        self.registry
            .set_process(proc.pid, Some(Arc::new(resource)));
        let next_bin_id = &mut self.next_bin_id;
        let bin = self.binaries.entry(proc.key).or_insert_with(|| BinState {
            bin_id: {
                *next_bin_id += 1;
                *next_bin_id - 1
            },
            binary: None,
            attach_path: proc.exe_link.clone(),
            display_path: proc.exe.clone(),
            probes: BTreeMap::new(),
            pids: HashSet::new(),
        });
        // The first process of the file may be gone; attach through a live one.
        if !bin.attach_path.exists() {
            bin.attach_path = proc.exe_link.clone();
        }
        let needs_planning = spec_ids.iter().any(|sid| {
            self.specs.get(sid).is_some_and(|a| {
                (0..a.spec.spec.probes.len()).any(|pi| !bin.probes.contains_key(&(*sid, pi)))
            })
        });
        if needs_planning && bin.binary.is_none() {
            bin.binary = Some(
                Binary::open(&proc.exe_link)
                    .map(Arc::new)
                    .map_err(|e| e.to_string()),
            );
        }
        for &sid in spec_ids {
            let Some(active) = self.specs.get(&sid) else {
                continue;
            };
            for (pi, probe) in active.spec.spec.probes.iter().enumerate() {
                if bin.probes.contains_key(&(sid, pi)) {
                    continue;
                }
                let outcome = match (&bin.binary, active.invalid.get(&pi)) {
                    (_, Some(problem)) => Err(problem.clone()),
                    (None, None) => Err("internal: binary not opened for planning".to_string()),
                    (Some(Err(e)), _) => Err(e.clone()),
                    (Some(Ok(b)), None) => {
                        plan_probe(b, probe, active.spec.spec.limits.max_string_bytes)
                            .map_err(|e| e.to_string())
                            .and_then(|plan| {
                                attach_plan(
                                    &mut self.tracer,
                                    &self.registry,
                                    &bin.attach_path,
                                    sid,
                                    bin.bin_id,
                                    &active.name,
                                    probe.latency,
                                    active.spec.spec.limits.events_per_second,
                                    &plan,
                                )
                            })
                    }
                };
                reports.push(AttachReport {
                    spec: active.name.to_string(),
                    symbol: probe.symbol.clone(),
                    binary: bin.display_path.clone(),
                    pids: vec![proc.pid],
                    state: match &outcome {
                        Ok(a) => ProbeState::Attached {
                            uprobes: a.links.len(),
                        },
                        Err(e) => ProbeState::Failed(e.clone()),
                    },
                });
                bin.probes.insert((sid, pi), outcome);
            }
            if let Err(e) = self.tracer.allow_pid(proc.pid, sid, bin.bin_id) {
                tracing::warn!("pid {}: enabling the pid filter failed: {e}", proc.pid);
            }
        }
        if matches!(bin.binary, Some(Ok(_))) {
            bin.binary = None;
        }
        bin.pids.insert(proc.pid);
        self.procs.insert(
            proc.pid,
            ProcState {
                key: proc.key,
                specs: spec_ids.to_vec(),
            },
        );
        reports
    }

    pub fn is_traced(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// Forgets an exited process; detaches a binary's probes when its last process is gone.
    pub fn remove_process(&mut self, pid: u32) {
        let Some(p) = self.procs.remove(&pid) else {
            return;
        };
        for sid in &p.specs {
            self.tracer.forget_pid(pid, *sid);
        }
        // Keep the resource a little: records of this pid may still be in the ring buffer.
        let registry = self.registry.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            registry.set_process(pid, None);
        });
        let empty = match self.binaries.get_mut(&p.key) {
            Some(b) => {
                b.pids.remove(&pid);
                b.pids.is_empty()
            }
            None => false,
        };
        if empty {
            self.retire_binary(p.key);
        }
    }

    /// Detaches every probe of a binary; its counters move to `retired`.
    fn retire_binary(&mut self, key: FileKey) {
        let Some(bin) = self.binaries.remove(&key) else {
            return;
        };
        for ((sid, pi), att) in bin.probes {
            if let (Ok(att), Some(active)) = (att, self.specs.get(&sid)) {
                retire(&mut self.tracer, &mut self.retired, active, pi, att);
            }
        }
    }

    /// Current attach state, one row per (spec, probe, binary).
    pub fn report(&self) -> Vec<AttachReport> {
        let mut out = Vec::new();
        for bin in self.binaries.values() {
            for ((sid, pi), att) in &bin.probes {
                let Some(active) = self.specs.get(sid) else {
                    continue;
                };
                let mut pids: Vec<u32> = bin
                    .pids
                    .iter()
                    .copied()
                    .filter(|p| self.procs.get(p).is_some_and(|s| s.specs.contains(sid)))
                    .collect();
                pids.sort_unstable();
                out.push(AttachReport {
                    spec: active.name.to_string(),
                    symbol: active.spec.spec.probes[*pi].symbol.clone(),
                    binary: bin.display_path.clone(),
                    pids,
                    state: match att {
                        Ok(a) => ProbeState::Attached {
                            uprobes: a.links.len(),
                        },
                        Err(e) => ProbeState::Failed(e.clone()),
                    },
                });
            }
        }
        out.sort_by(|a, b| (&a.spec, &a.symbol, &a.binary).cmp(&(&b.spec, &b.symbol, &b.binary)));
        out
    }

    /// BPF counters per (spec, symbol), including detached configurations. Also refreshes
    /// the loss counters the metrics read.
    pub fn counters(&self) -> HashMap<(Arc<str>, Arc<str>), ProbeCounters> {
        let mut out = self.retired.clone();
        for bin in self.binaries.values() {
            for ((sid, pi), att) in &bin.probes {
                let (Ok(att), Some(active)) = (att, self.specs.get(sid)) else {
                    continue;
                };
                let symbol: Arc<str> = active.spec.spec.probes[*pi].symbol.as_str().into();
                let c = out.entry((active.name.clone(), symbol)).or_default();
                add_counters(c, &self.tracer, att);
            }
        }
        let mut l = self.losses.lock().unwrap_or_else(|e| e.into_inner());
        for (k, c) in &out {
            l.insert(k.clone(), (c.lost, c.throttled));
        }
        out
    }

    /// Detaches every probe (no new events after this returns).
    pub fn detach_all(&mut self) {
        let keys: Vec<FileKey> = self.binaries.keys().copied().collect();
        for key in keys {
            self.retire_binary(key);
        }
        for (pid, p) in self.procs.drain() {
            for sid in p.specs {
                self.tracer.forget_pid(pid, sid);
            }
        }
    }
}

fn add_counters(c: &mut ProbeCounters, tracer: &Tracer, att: &Attached) {
    let e = tracer.stats(att.entry_cfg);
    c.hits += e.hits;
    c.lost += e.lost;
    c.throttled += e.throttled;
    if let Some(r) = att.ret_cfg {
        // The ENTRY of such a call was delivered: it is not a lost call.
        c.returns_lost += tracer.stats(r).lost;
    }
}

/// Detaches probe `probe` of `spec`, keeping its counters in `retired`.
fn retire(
    tracer: &mut Tracer,
    retired: &mut HashMap<(Arc<str>, Arc<str>), ProbeCounters>,
    spec: &ActiveSpec,
    probe: usize,
    att: Attached,
) {
    let symbol: Arc<str> = spec.spec.spec.probes[probe].symbol.as_str().into();
    add_counters(
        retired.entry((spec.name.clone(), symbol)).or_default(),
        tracer,
        &att,
    );
    for link in att.links {
        tracer.detach(link);
    }
    // Records already in the ring buffer still decode: the metadata stays registered, and
    // freed ids are reused last (FIFO), long after the reader has seen newer records.
    tracer.remove_config(att.entry_cfg);
    if let Some(r) = att.ret_cfg {
        tracer.remove_config(r);
    }
}

#[allow(clippy::too_many_arguments)]
fn attach_plan(
    tracer: &mut Tracer,
    registry: &Registry,
    path: &std::path::Path,
    spec_id: u32,
    bin_id: u32,
    spec_name: &Arc<str>,
    latency: bool,
    rate_limit: u32,
    plan: &ProbePlan,
) -> Result<Attached, String> {
    let symbol: Arc<str> = plan.symbol.as_str().into();
    let meta = |caps: &[crate::plan::CapturePlan]| {
        Arc::new(ProbeMeta {
            key: crate::stats::ProbeKey {
                spec: spec_name.clone(),
                index: 0,
                symbol: symbol.clone(),
            },
            spec: spec_name.clone(),
            symbol: symbol.clone(),
            latency,
            redact: true,
            captures: caps
                .iter()
                .map(|c| (Arc::from(c.name.as_str()), c.decode))
                .collect(),
        })
    };
    // func_id pairs entry and return in BPF; the entry configuration id is unique.
    let (entry_cfg, ret_cfg) = plan.configs(spec_id, bin_id, 0, rate_limit);
    let entry_id = tracer.add_config(&entry_cfg).map_err(|e| e.to_string())?;
    let mut fixed_entry = entry_cfg;
    fixed_entry.func_id = entry_id;
    let mut ret_id = None;
    let setup = (|| {
        tracer.set_config(entry_id, &fixed_entry)?;
        if let Some(mut r) = ret_cfg {
            r.func_id = entry_id;
            ret_id = Some(tracer.add_config(&r)?);
        }
        Ok::<(), crate::attach::AttachError>(())
    })();
    if let Err(e) = setup {
        tracer.remove_config(entry_id);
        return Err(e.to_string());
    }
    registry.set_probe(entry_id, Some(meta(&plan.entry_captures)));
    if let Some(r) = ret_id {
        registry.set_probe(r, Some(meta(&plan.return_captures)));
    }
    let mut links = Vec::new();
    let mut sites = vec![(plan.entry_offset, entry_id)];
    if let Some(r) = ret_id {
        sites.extend(plan.ret_offsets.iter().map(|o| (*o, r)));
    }
    for (off, id) in sites {
        match tracer.attach(path, off, id) {
            Ok(l) => links.push(l),
            Err(e) => {
                for l in links {
                    tracer.detach(l);
                }
                tracer.remove_config(entry_id);
                if let Some(r) = ret_id {
                    tracer.remove_config(r);
                }
                return Err(format!("{}: {e}", plan.symbol));
            }
        }
    }
    Ok(Attached {
        entry_cfg: entry_id,
        ret_cfg: ret_id,
        links,
    })
}
