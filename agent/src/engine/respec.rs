//! A ProbeSpec that changed: its probes leave every process and the new version's come,
//! while the processes stay tracked. Forgetting them and finding them again would count
//! each as matched once more per change, and would tell the reader they exited (which
//! forgets their resource attributes, racing the new ones in).

use super::{Engine, Resolver, SpecId, Tracer};
use gprobe_crds::ProbeSpec;

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// Replaces spec `old` by `spec`, a changed version of it. True when processes should
    /// be matched again (the new selector may take in others).
    pub(super) fn replace_spec(&mut self, old: SpecId, spec: ProbeSpec) -> bool {
        // Silenced before their links go (Engine::free_spec_probes says why).
        self.free_spec_probes(old);
        let pids: Vec<u32> = self
            .procs
            .iter()
            .filter(|(_, p)| p.specs.contains(&old))
            .map(|(pid, _)| *pid)
            .collect();
        for &pid in &pids {
            self.detach_spec(pid, old);
        }
        self.forget_spec(old);
        let key = self.spec_key(&spec);
        let new = match self.add_spec(spec) {
            Ok(id) => {
                tracing::info!("{key}: active");
                Some(id)
            }
            Err(e) => {
                tracing::error!("{e} (this ProbeSpec is ignored)");
                None
            }
        };
        for pid in pids {
            let Some(info) = self.procs.get(&pid).map(|p| p.info.clone()) else {
                continue;
            };
            if let Some(id) = new.filter(|id| self.matching_specs(&info).contains(id)) {
                let out = self.attach_specs(&info, &[id]);
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.specs.insert(id);
                }
                if out.gone {
                    self.untrack(pid);
                    continue;
                }
            }
            if self.procs.get(&pid).is_some_and(|p| p.specs.is_empty()) {
                self.untrack(pid);
                continue;
            }
            self.rewatch(pid);
        }
        self.dirty = true;
        new.is_some()
    }

    /// Detaches spec `sid`'s links from process `pid` and takes the spec off it: `None` if
    /// the process is not tracked, else whether it has no spec left.
    pub(super) fn detach_spec(&mut self, pid: u32, sid: SpecId) -> Option<bool> {
        self.free_budget(pid, Some(sid));
        let p = self.procs.get_mut(&pid)?;
        p.specs.remove(&sid);
        let empty = p.specs.is_empty();
        self.detach_links_of(pid, sid);
        Some(empty)
    }

    /// gprobe's own probes in `pid` (dynamic loader, runtime.newproc1, propagation) follow
    /// its specs: removed where no spec wants them any more, placed where one now does.
    pub(super) fn rewatch(&mut self, pid: u32) {
        let (loader, newproc) = (self.has_library_probes(pid), self.wants_newproc(pid));
        if let Some(p) = self.procs.get_mut(&pid) {
            let unwanted = [
                (!loader).then(|| p.loader.take()),
                (!newproc).then(|| p.newproc.take()),
            ];
            for links in unwanted.into_iter().flatten().flatten() {
                self.tracer.detach(links);
            }
        }
        self.watch_loader(pid);
        self.watch_newproc(pid);
        self.watch_propagate(pid);
    }
}
