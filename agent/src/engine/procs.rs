//! Processes: selecting them, planning their binary's probes, attaching and detaching.

use super::resource::resource_of;
use super::tracer::{Resolver, Tracer};
use super::{Engine, Origin, ProcState, SpecId};
use crate::discover::ProcInfo;
use crate::stats::Missed;
use crate::util::printable;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// The specs that select `info`.
    pub(super) fn matching_specs(&self, info: &ProcInfo) -> BTreeSet<SpecId> {
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

    /// Whether `pid` is traced running the image `info` describes already: an exec event
    /// that arrived after the startup scan had found the process, or a re-exec of the same
    /// file, whose uprobes stay (they follow the process into its new memory map).
    pub fn traces_image(&self, info: &ProcInfo) -> bool {
        self.procs
            .get(&info.pid)
            .is_some_and(|p| p.info.key == info.key && p.info.start_time == info.start_time)
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
                    files: BTreeSet::new(),
                    loader: None,
                    newproc: None,
                    propagate: None,
                },
            );
        }
        let out = self.attach_specs(&info, &todo);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.specs.extend(todo.iter().copied());
        }
        if !out.gone {
            self.watch_loader(pid);
            self.watch_newproc(pid);
            self.watch_propagate(pid);
        }
        let (attached, first_error, gone) = (out.count, out.first_error, out.gone);
        // Probes on libraries not loaded yet attach when they are: not a failure.
        let waiting = attached == 0 && first_error.is_none() && self.has_library_probes(pid);
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
            _ if waiting => self.stats.process_traced(&names),
            (_, 0, Some(e)) => {
                self.missed(&names, &info, format!("no probe could be attached: {e}"))
            }
            (_, 0, None) => self.missed(&names, &info, "no probe could be attached".into()),
            (Origin::Fork { at }, _, _) => self.missed(
                &names,
                &info,
                format!(
                    "forked by a traced process and attached {} ms later: a forked process cannot be held, so its first calls were not seen",
                    at.elapsed().as_millis()
                ),
            ),
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
            libraries: Vec::new(),
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
        if p.propagate.is_some() {
            // Its pid (and a g address) may come back in another process.
            self.tracer.forget_spans(pid);
        }
        for l in [p.loader, p.newproc, p.propagate].into_iter().flatten() {
            self.tracer.detach(l);
        }
        for a in p.links {
            if let Ok((links, _)) = a.outcome {
                self.tracer.detach(links);
            }
        }
        for key in &p.files {
            if let Some(bin) = self.binaries.get_mut(key) {
                bin.pids.remove(&pid);
                if bin.pids.is_empty() {
                    bin.idle_since = Some(Instant::now());
                }
            }
        }
        if let Some(tx) = &self.exits {
            let _ = tx.send(pid);
        }
    }

    pub(super) fn drop_spec_from_process(&mut self, pid: u32, sid: SpecId) {
        match self.detach_spec(pid, sid) {
            Some(true) => self.untrack(pid),
            Some(false) => self.watch_propagate(pid),
            None => {}
        }
    }
}
