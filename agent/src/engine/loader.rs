//! Libraries loaded after a process started (dlopen, and the libraries of its start when
//! it was held at exec): a uprobe on the dynamic loader's `_dl_debug_state`, which the
//! loader calls before and after every change of its list of objects (the `r_brk` hook
//! that debuggers use). The BPF program stops the process there and reports it; the engine
//! attaches the probes of the libraries that came, then resumes it, so a library's first
//! call is seen. Only processes with a probe on a library are watched; the 1 s rescan of
//! their maps stays as a fallback (a loader without the hook, such as a static binary's).

use super::tracer::ProbePoint;
use super::tracer::Site;
use super::{Engine, Resolver, Tracer};
use crate::discover::MappedFile;
use std::path::Path;

/// Whether `path` is a dynamic loader (glibc's ld-linux*.so*, musl's ld-musl-*.so*).
pub(super) fn is_loader(path: &Path) -> bool {
    path.file_name()
        .map(|n| n.to_string_lossy())
        .is_some_and(|n| n.starts_with("ld-linux") || n.starts_with("ld-musl"))
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// Watches the loader of `pid` when a spec selecting it probes a library and the
    /// loader is not watched yet.
    pub(super) fn watch_loader(&mut self, pid: u32) {
        if !self.has_library_probes(pid) {
            return;
        }
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        if p.loader.is_some() {
            return;
        }
        let Some(ld) = p.info.libraries.iter().find(|m| is_loader(&m.path)) else {
            return;
        };
        let path = p.info.host_path(&ld.path);
        let offset = match self.loader_hooks.get(&ld.key) {
            Some(o) => *o,
            None => {
                let o = self.resolver.loader_hook(&path);
                if o.is_none() && self.resolver.through_gone_process(&path) {
                    return;
                }
                if o.is_none() {
                    tracing::warn!(
                        "{}: no _dl_debug_state in this dynamic loader; libraries loaded later \
                        are found by a rescan every second, so their first calls may be missed",
                        crate::util::printable(&ld.path.to_string_lossy())
                    );
                }
                self.loader_hooks.insert(ld.key, o);
                o
            }
        };
        let Some(offset) = offset else {
            return;
        };
        let cfg = match self.tracer.loader_config() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("cannot watch the dynamic loader of pid {pid}: {e}");
                return;
            }
        };
        let site = Site {
            point: ProbePoint {
                offset,
                ret: false,
                ref_ctr_offset: 0,
            },
            cfg,
            slot: 0,
        };
        match self.tracer.attach(pid, &path, &[site]) {
            Ok(links) => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.loader = Some(links);
                }
            }
            Err(e) => tracing::debug!("watching the dynamic loader of pid {pid}: {e}"),
        }
    }

    /// Says once per probe that its `library` is not loaded in a process it selects: a
    /// misspelt glob would otherwise wait in silence.
    pub(super) fn library_not_loaded(
        &mut self,
        info: &crate::discover::ProcInfo,
        sid: super::SpecId,
        pi: usize,
    ) {
        // Held at exec, only the loader is mapped: the libraries come in a moment.
        if info.libraries.iter().all(|m| is_loader(&m.path))
            || !self.libraries_missing_said.insert((sid, pi))
        {
            return;
        }
        let sp = &self.specs[&sid].probes[pi];
        let glob = sp.probe.library.as_deref().unwrap_or_default();
        let mapped: Vec<String> = info
            .libraries
            .iter()
            .filter_map(|m| m.path.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .take(12)
            .collect();
        tracing::warn!(
            "{}: no library of pid {} matches library {:?} yet; it is attached when one is loaded \
            (dlopen). Loaded now: {}{}",
            sp.key,
            info.pid,
            crate::util::printable(glob),
            crate::util::printable(&mapped.join(", ")),
            if info.libraries.len() > 12 {
                ", ..."
            } else {
                ""
            }
        );
    }

    /// The loader of `pid` changed its list of objects: attaches the probes of libraries
    /// that came, then resumes the process if the loader hook stopped it.
    pub fn loader_event(
        &mut self,
        pid: u32,
        hold: Option<super::Hold>,
        libraries: Vec<MappedFile>,
    ) {
        self.libraries_changed(pid, libraries);
        if let Some(h) = hold {
            self.tracer.resume(pid, h);
        }
    }
}
