//! Outgoing requests carry the spans of `propagate: true` probes: in a process with such a
//! probe, gprobe places its own two probes (`resolve/propagate.rs`, run by BPF's
//! gprobe_propagate): one where net/http sends a request, one where it writes the
//! request's headers. They are removed with the last propagating probe of the process.

use super::tracer::{ProbeConfig, Site};
use super::{Engine, Resolver, Tracer};
use crate::attach::perf::ProbePoint;
use crate::discover::FileKey;
use std::path::Path;

/// The propagation probes of one executable: configured once, placed per process.
pub(super) struct PropagateProbes {
    cfg: ProbeConfig,
    sites: Vec<Site>,
    /// Why there is no header writer, if so.
    why: Option<String>,
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    /// Whether a spec selecting `pid` has a propagating probe on its executable.
    fn wants_propagate(&self, pid: u32) -> bool {
        self.has_probe(pid, |sp| sp.probe.propagate && sp.library.is_none())
    }

    /// The propagation probes of the executable `key`, planned and configured once; why
    /// there are none (or no writer) is said once per executable.
    fn propagate_probes(&mut self, key: FileKey, path: &Path) -> Option<&PropagateProbes> {
        if !self.propagate.contains_key(&key) {
            let shown = path.display();
            let planned = self
                .resolver
                .propagate_plan(path)
                .and_then(|plan| {
                    let (cfg, why) = self
                        .tracer
                        .propagate_config(&plan)
                        .map_err(|e| e.to_string())?;
                    if let Some(why) = &why {
                        tracing::warn!(
                            "propagate: requests from {shown} carry no traceparent: {why}"
                        );
                    }
                    let point = |offset| ProbePoint {
                        offset,
                        ret: false,
                        ref_ctr_offset: 0,
                    };
                    let mut sites = vec![Site {
                        point: point(plan.out.entry_offset),
                        cfg: cfg.entry,
                    }];
                    sites.extend(cfg.extra_entries.first().map(|&w| Site {
                        point: point(plan.write_offset),
                        cfg: w,
                    }));
                    Ok(PropagateProbes { cfg, sites, why })
                })
                .map_err(|why| {
                    tracing::warn!("propagate: requests from {shown} carry no traceparent: {why}")
                })
                .ok();
            self.propagate.insert(key, planned);
        }
        self.propagate.get(&key).and_then(Option::as_ref)
    }

    /// The counts of the propagation probes, into the stats.
    pub(super) fn refresh_propagation(&self) {
        if self.propagate.is_empty() {
            return;
        }
        let (mut requests, mut written, mut why) = (0, 0, None);
        for p in self.propagate.values().flatten() {
            let (r, w) = self.propagation_counts(p);
            requests += r;
            written += w;
            why = why.or_else(|| p.why.clone());
        }
        self.stats.set_propagation(requests, written, why);
    }

    /// Requests made inside propagating spans, and traceparents written, by `p`'s probes.
    fn propagation_counts(&self, p: &PropagateProbes) -> (u64, u64) {
        let one = |id| ProbeConfig {
            entry: id,
            extra_entries: vec![],
            ret: None,
        };
        let requests = self.tracer.counters(&one(p.cfg.entry)).emitted;
        let written = p
            .cfg
            .extra_entries
            .first()
            .map_or(0, |&w| self.tracer.counters(&one(w)).emitted);
        (requests, written)
    }

    /// Places the propagation probes in `pid` when it has a propagating probe, and removes
    /// them when it has none any more.
    pub(super) fn watch_propagate(&mut self, pid: u32) {
        let wanted = self.wants_propagate(pid);
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        match (wanted, p.propagate.is_some()) {
            (true, false) => {}
            (false, true) => {
                if let Some(links) = p.propagate.take() {
                    self.tracer.detach(links);
                }
                // Spans its probes left open (their returns now unseen) must not be
                // carried by later requests.
                self.tracer.forget_spans(pid);
                return;
            }
            _ => return,
        }
        let (key, path) = (p.info.key, p.info.exe_link.clone());
        let Some(sites) = self.propagate_probes(key, &path).map(|n| n.sites.clone()) else {
            return;
        };
        match self.tracer.attach(pid, &path, &sites) {
            Ok(links) => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.propagate = Some(links);
                }
            }
            Err(e) => tracing::warn!("propagate: pid {pid}: {e}"),
        }
    }

    /// Frees the propagation configurations of an executable no process runs any more.
    pub(super) fn retire_propagate(&mut self, key: FileKey) {
        if let Some(Some(n)) = self.propagate.remove(&key) {
            let (requests, written) = self.propagation_counts(&n);
            self.stats.retire_propagation(requests, written);
            self.free_probe(n.cfg);
        }
    }
}
