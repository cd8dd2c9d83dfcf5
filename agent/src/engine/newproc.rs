//! Goroutines started inside a span stay in its trace: in a Go process with a latency
//! probe, gprobe places its own probe on `runtime.newproc1(fn, callergp, callerpc, ...)
//! *g`, which every `go` statement runs (on the system stack: entry and return pair on the
//! same g0). Its entry records the parent goroutine (`callergp`), its return the new one
//! (`r0`); the reader then makes the parent's open call the parent of the new goroutine's
//! first calls. Its records are never output.

use super::attaching::sites;
use super::aux_state::NewprocPlan;
use super::{Engine, Resolver, Tracer};
use crate::discover::FileKey;
use crate::events::{InternalProbe, ProbeMeta};
use crate::stats::ProbeKey;
use std::sync::Arc;

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// Whether a spec selecting `pid` has a latency probe on its executable (where calls
    /// open spans that goroutines may inherit).
    pub(super) fn wants_newproc(&self, pid: u32) -> bool {
        self.has_probe(pid, |sp| {
            sp.probe.latency && sp.library.is_none() && sp.probe.usdt.is_none()
        })
    }

    /// The newproc probe of the executable `key`, planned (once) and configured.
    fn newproc_plan(&mut self, key: FileKey, path: &std::path::Path) -> Option<&NewprocPlan> {
        if !self.newproc.contains_key(&key) {
            let planned = self.resolver.newproc_plan(path).and_then(|plan| {
                let cfg = match self.tracer.add_probe(&plan, 0) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!("runtime.newproc1 in {}: {e}", path.display());
                        return None;
                    }
                };
                let key = ProbeKey {
                    spec: Arc::from(""),
                    name: Arc::from(""),
                    index: 0,
                    symbol: Arc::from("runtime.newproc1"),
                };
                let meta = |caps: &[crate::plan::CapturePlan]| {
                    let mut m = ProbeMeta::simple("", "runtime.newproc1", true);
                    m.key = key.clone();
                    m.internal = Some(InternalProbe::Newproc);
                    m.captures = caps
                        .iter()
                        .map(|c| (Arc::from(c.name.as_str()), c.decode))
                        .collect();
                    Arc::new(m)
                };
                self.registry
                    .set_probe(cfg.entry, Some(meta(&plan.entry_captures)));
                if let Some(r) = cfg.ret {
                    self.registry
                        .set_probe(r, Some(meta(&plan.return_captures)));
                }
                Some(NewprocPlan {
                    sites: sites(&plan, &cfg),
                    cfg,
                })
            });
            if planned.is_none() && self.resolver.through_gone_process(path) {
                return None;
            }
            self.newproc.insert(key, planned);
        }
        self.newproc.get(&key).and_then(Option::as_ref)
    }

    /// Places the newproc probe in `pid` when it has a latency probe and is not watched yet.
    pub(super) fn watch_newproc(&mut self, pid: u32) {
        if !self.wants_newproc(pid) {
            return;
        }
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        if p.newproc.is_some() {
            return;
        }
        let (key, path) = (p.info.key, p.info.exe_link.clone());
        let Some(sites) = self.newproc_plan(key, &path).map(|n| n.sites.clone()) else {
            return;
        };
        match self.tracer.attach(pid, &path, &sites) {
            Ok(links) => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.newproc = Some(links);
                }
            }
            Err(e) => tracing::debug!("runtime.newproc1 in pid {pid}: {e}"),
        }
    }

    /// Frees the newproc configurations of an executable no process runs any more.
    pub(super) fn retire_newproc(&mut self, key: FileKey) {
        if let Some(Some(n)) = self.newproc.remove(&key) {
            self.free_probe(n.cfg);
        }
    }
}
