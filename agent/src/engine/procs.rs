//! Processes: selecting them, planning their binary's probes, attaching and detaching.

use super::error::ProbeError;
use super::resource::resource_of;
use super::tracer::{PlanRequest, Resolver, Site, TraceError, Tracer};
use super::{Attachment, BinState, Engine, Origin, Planned, ProcState, SpecId};
use crate::attach::perf::ProbePoint;
use crate::discover::ProcInfo;
use crate::events::ProbeMeta;
use crate::plan::ProbePlan;
use crate::stats::Missed;
use crate::util::printable;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The uprobes of a plan, each with the configuration it runs.
fn sites(plan: &ProbePlan, cfg: super::ProbeConfig) -> Vec<Site> {
    let mut v = vec![Site {
        point: ProbePoint {
            offset: plan.entry_offset,
            ret: false,
            ref_ctr_offset: 0,
        },
        cfg: cfg.entry,
    }];
    if let Some(r) = cfg.ret {
        v.extend(plan.ret_offsets.iter().map(|&offset| Site {
            point: ProbePoint {
                offset,
                ret: false,
                ref_ctr_offset: 0,
            },
            cfg: r,
        }));
    }
    v
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// The specs that select `info`.
    fn matching_specs(&self, info: &ProcInfo) -> BTreeSet<SpecId> {
        let container = info
            .container_id
            .as_deref()
            .and_then(|id| self.containers.get(id));
        self.specs
            .iter()
            .filter(|(_, s)| s.selector.selects(info, container))
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn is_tracked(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// A process to consider: selects it (or not), attaches the probes of every spec that
    /// selects it, resumes it if it was held at exec, and counts it.
    pub fn process_seen(&mut self, info: ProcInfo, origin: Origin) {
        let pid = info.pid;
        let held = matches!(origin, Origin::Exec { held: true, .. });
        let wanted = self.matching_specs(&info);
        if let Some(p) = self.procs.get(&pid) {
            if p.info.start_time != info.start_time || p.info.key != info.key {
                // A new program in this pid (exec, or pid reuse): start over.
                self.untrack(pid);
            } else {
                let gone: Vec<SpecId> = p.specs.difference(&wanted).copied().collect();
                for sid in gone {
                    self.drop_spec_from_process(pid, sid);
                }
            }
        }
        if wanted.is_empty() {
            if held {
                self.tracer.resume(pid);
            }
            return;
        }
        let new_process = !self.procs.contains_key(&pid);
        let todo: Vec<SpecId> = match self.procs.get(&pid) {
            Some(p) => wanted.difference(&p.specs).copied().collect(),
            None => wanted.iter().copied().collect(),
        };
        let names = self.stat_names(&wanted);
        if new_process {
            self.stats.process_matched(&names);
            let container = info
                .container_id
                .as_deref()
                .and_then(|id| self.containers.get(id));
            let res = resource_of(&self.mode, &info, container);
            self.registry.set_process(pid, Some(Arc::new(res)));
            self.procs.insert(
                pid,
                ProcState {
                    info: info.clone(),
                    specs: BTreeSet::new(),
                    links: Vec::new(),
                },
            );
        }
        self.plan_binary(&info, &todo);
        let mut attached = 0usize;
        let mut first_error: Option<Arc<ProbeError>> = None;
        let mut gone = false;
        for sid in todo {
            let n_probes = self.specs.get(&sid).map_or(0, |s| s.probes.len());
            for pi in 0..n_probes {
                match self.attach_one(&info, sid, pi) {
                    Ok(()) => attached += 1,
                    Err(e) if e.is_process_gone() => gone = true,
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
                if gone {
                    break;
                }
            }
            if let Some(p) = self.procs.get_mut(&pid) {
                p.specs.insert(sid);
            }
            if gone {
                break;
            }
        }
        if held {
            self.tracer.resume(pid);
            if let Origin::Exec { at, .. } = origin {
                tracing::debug!(
                    "pid {pid} resumed {} µs after its exec event arrived",
                    at.elapsed().as_micros()
                );
            }
        }
        if gone {
            self.untrack(pid);
            if new_process {
                self.missed(&names, &info, "exited before gprobe could attach".into());
            }
            return;
        }
        if !new_process {
            return;
        }
        match (origin, attached, first_error) {
            (_, 0, Some(e)) => {
                self.missed(&names, &info, format!("no probe could be attached: {e}"))
            }
            (_, 0, None) => self.missed(&names, &info, "no probe could be attached".into()),
            (Origin::Exec { held: false, at }, _, _) => self.missed(
                &names,
                &info,
                format!(
                    "attached {} ms after it started: it was not held at exec (its executable's name or file was not known yet), so its first calls were not seen",
                    at.elapsed().as_millis()
                ),
            ),
            _ => self.stats.process_traced(&names),
        }
    }

    /// A process that exec'd and was gone before it could be inspected: counted as missed
    /// when the path it was started with is one a selector names.
    pub fn process_exec_gone(&mut self, pid: u32, exec_path: &Path) {
        let info = ProcInfo {
            pid,
            exe: exec_path.to_path_buf(),
            exec_path: None,
            exe_link: exec_path.to_path_buf(),
            key: crate::discover::FileKey { dev: 0, ino: 0 },
            exe_ino: 0,
            comm: String::new(),
            container_id: None,
            start_time: 0,
        };
        let specs = self.matching_specs(&info);
        if !specs.is_empty() {
            let names = self.stat_names(&specs);
            self.stats.process_matched(&names);
            self.missed(
                &names,
                &info,
                "exited before gprobe could inspect it".into(),
            );
        }
    }

    /// The names specs' counts are kept under.
    fn stat_names(&self, specs: &BTreeSet<SpecId>) -> Vec<Arc<str>> {
        specs
            .iter()
            .filter_map(|id| self.specs.get(id))
            .map(|s| Arc::from(s.key.to_string()))
            .collect()
    }

    fn missed(&self, specs: &[Arc<str>], info: &ProcInfo, reason: String) {
        tracing::warn!(
            "pid {} ({}): not traced from its first call: {reason}",
            info.pid,
            printable(&info.exe.to_string_lossy())
        );
        self.stats.process_missed(
            specs,
            Missed {
                pid: info.pid,
                executable: info.exe.to_string_lossy().into_owned(),
                reason,
            },
        );
    }

    /// A process exited: its links go, its calls in flight are flushed as unfinished.
    pub fn process_exited(&mut self, pid: u32) {
        if self.procs.contains_key(&pid) {
            self.untrack(pid);
        }
    }

    /// Forgets a process: detaches its links and tells the reader it is gone.
    pub(super) fn untrack(&mut self, pid: u32) {
        let Some(p) = self.procs.remove(&pid) else {
            return;
        };
        self.dirty = true;
        for a in p.links {
            if let Ok((links, _)) = a.outcome {
                self.tracer.detach(links);
            }
        }
        if let Some(bin) = self.binaries.get_mut(&p.info.key) {
            bin.pids.remove(&pid);
            if bin.pids.is_empty() {
                bin.idle_since = Some(Instant::now());
            }
        }
        if let Some(tx) = &self.exits {
            let _ = tx.send(pid);
        }
    }

    pub(super) fn drop_spec_from_process(&mut self, pid: u32, sid: SpecId) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        p.specs.remove(&sid);
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut p.links)
            .into_iter()
            .partition(|a| a.spec == sid);
        p.links = keep;
        let empty = p.specs.is_empty();
        for a in gone {
            if let Ok((links, _)) = a.outcome {
                self.tracer.detach(links);
            }
        }
        if empty {
            self.untrack(pid);
        }
    }

    /// Plans (once per binary) the probes of `specs` that are not planned yet.
    fn plan_binary(&mut self, info: &ProcInfo, specs: &[SpecId]) {
        let bin = self.binaries.entry(info.key).or_insert_with(|| BinState {
            attach_path: info.exe_link.clone(),
            display: info.exe.clone(),
            exe_ino: info.exe_ino,
            probes: HashMap::new(),
            pids: BTreeSet::new(),
            idle_since: None,
        });
        // The process that first showed this file may be gone: attach through a live one.
        bin.attach_path = info.exe_link.clone();
        bin.pids.insert(info.pid);
        bin.idle_since = None;
        let mut todo: Vec<(SpecId, usize)> = Vec::new();
        for sid in specs {
            let Some(spec) = self.specs.get(sid) else {
                continue;
            };
            for pi in 0..spec.probes.len() {
                if !bin.probes.contains_key(&(*sid, pi)) {
                    todo.push((*sid, pi));
                }
            }
        }
        let watch_changed = !self.watch_inos.contains(&info.exe_ino);
        if todo.is_empty() {
            if watch_changed {
                self.update_watch();
            }
            return;
        }
        // Invalid probes are settled without reading the binary.
        let mut requests = Vec::new();
        let mut asked = Vec::new();
        for &(sid, pi) in &todo {
            let spec = &self.specs[&sid];
            let sp = &spec.probes[pi];
            match &sp.invalid {
                Some(e) => {
                    bin.probes.insert((sid, pi), Err(e.clone()));
                }
                None => {
                    requests.push(PlanRequest {
                        probe: &sp.probe,
                        limits: &spec.spec.spec.limits,
                    });
                    asked.push((sid, pi));
                }
            }
        }
        let results = if requests.is_empty() {
            Vec::new()
        } else {
            self.resolver.plan(&info.exe_link, &info.exe, &requests)
        };
        drop(requests);
        for ((sid, pi), res) in asked.into_iter().zip(results) {
            let spec = &self.specs[&sid];
            let sp = &spec.probes[pi];
            let outcome = res.and_then(|plan| {
                for w in &plan.warnings {
                    tracing::warn!(
                        "{} in {}: {w}",
                        sp.key,
                        printable(&info.exe.to_string_lossy())
                    );
                }
                let cfg = self
                    .tracer
                    .add_probe(&plan, spec.spec.spec.limits.events_per_second)
                    .map_err(|e| Arc::new(ProbeError::Trace(e)))?;
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
                    })
                };
                self.registry
                    .set_probe(cfg.entry, Some(meta(&plan.entry_captures)));
                if let Some(r) = cfg.ret {
                    self.registry
                        .set_probe(r, Some(meta(&plan.return_captures)));
                }
                Ok(Planned {
                    sites: sites(&plan, cfg),
                    cfg,
                })
            });
            if let Err(e) = &outcome {
                tracing::error!(
                    "{} in {}: {e}",
                    sp.key,
                    printable(&info.exe.to_string_lossy())
                );
                self.stats.set_error(&sp.key, e.to_string());
            }
            if let Some(bin) = self.binaries.get_mut(&info.key) {
                bin.probes.insert((sid, pi), outcome);
            }
        }
        if watch_changed {
            self.update_watch();
        }
    }

    /// Attaches probe `pi` of spec `sid` in process `info`; records the outcome.
    fn attach_one(
        &mut self,
        info: &ProcInfo,
        sid: SpecId,
        pi: usize,
    ) -> Result<(), Arc<ProbeError>> {
        let pid = info.pid;
        let spec = &self.specs[&sid];
        let key = spec.probes[pi].key.clone();
        let bin = self
            .binaries
            .get(&info.key)
            .expect("plan_binary made the binary's state");
        let outcome = match bin.probes.get(&(sid, pi)) {
            Some(Ok(planned)) => {
                let n = planned.sites.len();
                self.tracer
                    .attach(pid, &bin.attach_path, &planned.sites)
                    .map(|l| (l, n))
                    .map_err(|e| match e {
                        TraceError::ProcessGone => Arc::new(ProbeError::Trace(e)),
                        e => Arc::new(ProbeError::Trace(e)),
                    })
            }
            Some(Err(e)) => Err(e.clone()),
            None => return Ok(()),
        };
        let result = match &outcome {
            Ok((_, n)) => {
                tracing::info!(
                    "attached {} to {} ({n} uprobe{}; pid {pid})",
                    key,
                    printable(&bin.display.to_string_lossy()),
                    if *n == 1 { "" } else { "s" }
                );
                self.stats.set_attached(&key);
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
                outcome,
            });
        }
        result
    }
}
