//! Processes: selecting them, planning their binary's probes, attaching and detaching.

use super::resource::resource_of;
use super::tracer::{Resolver, Tracer};
use super::{Attachment, Engine, Origin, ProcState, SpecId};
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
        if self.opts.only_pid.is_some_and(|p| p != info.pid) {
            return BTreeSet::new();
        }
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
    /// selects it, ends its hold if it was held, and counts it.
    pub fn process_seen(&mut self, info: ProcInfo, origin: Origin) {
        let pid = info.pid;
        let hold = origin.hold();
        // Resumed at the hold deadline before it was handled: it ran unwatched meanwhile.
        let overdue = self.take_overdue(pid);
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
            if let Some(h) = hold {
                self.tracer.resume(pid, h);
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
            // Before it runs: the children it forks from now on are held.
            self.tracer.set_traced(pid, true);
        }
        let (attached, first_error, gone) = (out.count, out.first_error, out.gone);
        // Probes on libraries not loaded yet attach when they are: not a failure.
        let waiting = attached == 0 && first_error.is_none() && self.has_library_probes(pid);
        if let Some(h) = hold {
            self.tracer.resume(pid, h);
            tracing::debug!(
                "pid {pid} resumed after a hold of {} µs",
                super::monotonic_ns().saturating_sub(h.since_ns) / 1000
            );
        }
        // Held since before its first instruction, and not let go by the deadline: none of
        // its calls can have come before its probes.
        let held_throughout = hold.is_some() && overdue.is_none();
        if gone {
            self.untrack(pid);
            if !new_process {
                return;
            }
            if held_throughout {
                // It died while held (SIGKILL): it ran none of its code.
                self.stats.process_traced(&names);
            } else if attached == 0 {
                self.missed(&names, &info, "exited before gprobe could attach".into());
            } else {
                self.missed(
                    &names,
                    &info,
                    "exited while its probes were being attached".into(),
                );
            }
            return;
        }
        if !new_process {
            return;
        }
        let ms = |at: Instant| at.elapsed().as_millis();
        match (origin, attached, first_error) {
            _ if waiting => self.stats.process_traced(&names),
            // The probe's error was said where it arose (once per spec or binary, or for
            // this process when the kernel refused): not again here.
            (_, 0, Some(e)) => self.missed_said(&names, &info, not_attached(&e)),
            (_, 0, None) => self.missed(&names, &info, "no probe could be attached".into()),
            _ if overdue.is_some() => self.missed(
                &names,
                &info,
                format!(
                    "held {} ms, past the hold deadline ({} ms): it was resumed before its probes \
                    were attached, so its first calls may not have been seen",
                    overdue.unwrap_or_default(),
                    self.opts.hold_timeout.as_millis()
                ),
            ),
            (Origin::Fork { hold: None, at }, _, _) => self.missed(
                &names,
                &info,
                format!(
                    "forked by a traced process and attached {} ms later: it was not held at \
                    fork, so its first calls may not have been seen",
                    ms(at)
                ),
            ),
            (Origin::Exec { hold: None, at }, _, _) => self.missed(
                &names,
                &info,
                format!(
                    "attached {} ms after it started: it was not held at exec (its executable's \
                    name or file was not known yet), so its first calls may not have been seen",
                    ms(at)
                ),
            ),
            (Origin::Unseen, _, _) => self.missed(
                &names,
                &info,
                "its start was not reported (process events were lost: the process ring buffer \
                was full), so its first calls may not have been seen"
                    .into(),
            ),
            _ => self.stats.process_traced(&names),
        }
    }

    /// A process that exec'd and was gone before it could be inspected: counted when the
    /// path it was started with is one a selector names; missed unless it was held (then it
    /// ran none of its code).
    pub fn process_exec_gone(&mut self, pid: u32, exec_path: &Path, hold: Option<super::Hold>) {
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
        self.gone_before_inspection(&info, &specs, hold);
    }

    /// A child of a traced process that was gone before it could be inspected: it ran the
    /// parent's program, so the parent's specs select it.
    pub fn process_fork_gone(&mut self, pid: u32, ppid: u32, hold: Option<super::Hold>) {
        let Some(parent) = self.procs.get(&ppid) else {
            return;
        };
        let specs = parent.specs.clone();
        let info = ProcInfo {
            pid,
            start_time: 0,
            libraries: Vec::new(),
            ..parent.info.clone()
        };
        self.gone_before_inspection(&info, &specs, hold);
    }

    fn gone_before_inspection(
        &mut self,
        info: &ProcInfo,
        specs: &BTreeSet<SpecId>,
        hold: Option<super::Hold>,
    ) {
        let overdue = self.take_overdue(info.pid);
        if specs.is_empty() {
            return;
        }
        let names = self.stat_names(specs);
        self.stats.process_matched(&names);
        if hold.is_some() && overdue.is_none() {
            self.stats.process_traced(&names);
        } else {
            self.missed(&names, info, "exited before gprobe could inspect it".into());
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
        self.missed_said(specs, info, reason);
    }

    /// Counts a missed process whose cause was logged already.
    fn missed_said(&self, specs: &[Arc<str>], info: &ProcInfo, reason: String) {
        tracing::debug!(
            "pid {} ({}): not traced: {reason}",
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

    /// A process exited (its exit event): its links go, its calls in flight are flushed as
    /// unfinished, and nothing kept about it outlives it.
    pub fn process_ended(&mut self, pid: u32) {
        self.forget_hold_state(pid);
        self.process_exited(pid);
    }

    /// A process's program ended (it exited or exec'd another): its links go, its calls in
    /// flight are flushed as unfinished.
    pub fn process_exited(&mut self, pid: u32) {
        if self.procs.contains_key(&pid) {
            self.untrack(pid);
        }
    }

    /// The pids traced now, with their start times (a rescan checks they still run).
    pub fn traced_pids(&self) -> Vec<(u32, u64)> {
        self.procs
            .iter()
            .map(|(pid, p)| (*pid, p.info.start_time))
            .collect()
    }

    /// Forgets a process: detaches its links and tells the reader it is gone.
    pub(super) fn untrack(&mut self, pid: u32) {
        let Some(p) = self.procs.remove(&pid) else {
            return;
        };
        self.dirty = true;
        self.free_budget(pid, None);
        self.tracer.set_traced(pid, false);
        if p.propagate.is_some() {
            // Its pid (and a g address) may come back in another process.
            self.tracer.forget_spans(pid);
        }
        for l in [p.loader, p.newproc, p.propagate].into_iter().flatten() {
            self.tracer.detach(l);
        }
        for l in p.links.into_iter().flat_map(Attachment::into_links) {
            self.tracer.detach(l);
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
            // gprobe's own probes follow the specs left: the newproc and loader hooks go
            // with the last spec that wanted them, as the propagation probes do.
            Some(false) => self.rewatch(pid),
            None => {}
        }
    }
}

/// Why no probe of a process was attached: a cause of this process (the kernel refused)
/// in full; a cause of the spec or the binary, which every process of it shares and the
/// probe's own error holds, by reference only.
fn not_attached(e: &super::ProbeError) -> String {
    match e {
        super::ProbeError::Trace(t) => format!("no probe could be attached: {t}"),
        _ => "no probe could be attached (each probe's error is in the summary)".into(),
    }
}
