//! Outgoing requests carry the spans of `propagate: true` probes: in a process with such a
//! probe, gprobe places its own probes (planned in `resolve/propagate.rs`): where net/http
//! starts a request (and at its returns, where the request is forgotten), where it hands
//! the request to a connection, and where it writes the request's headers (BPF's
//! gprobe_propagate). They are removed with the last propagating probe of the process.

use super::aux_state::PropagateProbes;
use super::tracer::ProbePoint;
use super::tracer::{ProbeConfig, Site};
use super::{Engine, Resolver, TraceError, Tracer};
use crate::discover::FileKey;
use crate::plan::Returns;
use crate::resolve::propagate::PropagateError;
use crate::stats::PropagationCounts;
use std::path::Path;

/// Why no propagation probes are placed in an executable (said in the agent's log).
#[derive(Debug, thiserror::Error)]
enum NoPropagation {
    #[error(transparent)]
    Plan(PropagateError),
    #[error(transparent)]
    Config(TraceError),
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
                .map_err(NoPropagation::Plan)
                .and_then(|plan| {
                    let (cfg, why) = self
                        .tracer
                        .propagate_config(&plan)
                        .map_err(NoPropagation::Config)?;
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
                        slot: 0,
                    }];
                    // The round trip's returns (uprobes on its RET instructions).
                    let rets = match &plan.out.returns {
                        Returns::RetSites(rets) => rets.as_slice(),
                        _ => &[],
                    };
                    sites.extend(cfg.ret.iter().flat_map(|&done| {
                        rets.iter().map(move |&o| Site {
                            point: point(o),
                            cfg: done,
                            slot: 0,
                        })
                    }));
                    // The header writer and the connection hand-off: both or neither.
                    if let [w, conn] = cfg.extra_entries[..] {
                        sites.push(Site {
                            point: point(plan.write_offset),
                            cfg: w,
                            slot: 0,
                        });
                        sites.push(Site {
                            point: point(plan.conn.entry_offset),
                            cfg: conn,
                            slot: 0,
                        });
                    }
                    Ok(PropagateProbes { cfg, sites, why })
                })
                .map_err(|why| {
                    if !self.resolver.through_gone_process(path) {
                        tracing::warn!(
                            "propagate: requests from {shown} carry no traceparent: {why}"
                        )
                    }
                })
                .ok();
            if planned.is_none() && self.resolver.through_gone_process(path) {
                return None;
            }
            self.propagate.insert(key, planned);
        }
        self.propagate.get(&key).and_then(Option::as_ref)
    }

    /// The counts of the propagation probes, into the stats.
    pub(super) fn refresh_propagation(&self) {
        if self.propagate.is_empty() {
            return;
        }
        let (mut counts, mut why) = (PropagationCounts::default(), None);
        for p in self.propagate.values().flatten() {
            counts += self.propagation_counts(p);
            why = why.or_else(|| p.why.clone());
        }
        self.stats.set_propagation(counts, why);
    }

    /// Requests made inside propagating spans, traceparents written, and requests whose
    /// headers could not be searched, by `p`'s probes.
    fn propagation_counts(&self, p: &PropagateProbes) -> PropagationCounts {
        let one = |id| ProbeConfig {
            entry: id,
            extra_entries: vec![],
            ret: None,
        };
        let out = self.tracer.counters(&one(p.cfg.entry));
        let writer = p
            .cfg
            .extra_entries
            .first()
            .map(|&w| self.tracer.counters(&one(w)));
        PropagationCounts {
            requests: out.emitted,
            written: writer.map_or(0, |w| w.emitted),
            // The writer counts the traceparents it wrote as not sampled as `filtered`.
            unsampled: writer.map_or(0, |w| w.filtered),
            incomplete: out.incomplete,
        }
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
            let counts = self.propagation_counts(&n);
            self.stats.retire_propagation(counts);
            self.free_probe(n.cfg);
        }
    }
}
