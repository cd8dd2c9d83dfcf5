//! The lifecycle of specs: taking one in (validated, its probes registered in the counts,
//! its selector built), replacing or keeping it when it is seen again, and removing it,
//! which frees its probes' configurations before their links are detached. A changed
//! spec's probes are swapped by respec.rs.

use super::select::Selector;
use super::{
    Engine, LibraryGlob, Mode, ProbeError, Resolver, SpecId, SpecKey, SpecProbe, SpecRejected,
    SpecState, Tracer,
};
use crate::stats::ProbeKey;
use gprobe_crds::{validate_spec, ProbeSpec, SpecIssue};
use std::sync::Arc;

impl<T: Tracer, R: Resolver> Engine<T, R> {
    pub(super) fn spec_key(&self, spec: &ProbeSpec) -> SpecKey {
        SpecKey {
            namespace: match self.mode {
                Mode::Local => None,
                Mode::Cluster { .. } => Some(
                    spec.metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                ),
            },
            name: spec.display_name().to_string(),
        }
    }

    pub fn spec_ids(&self) -> Vec<SpecId> {
        self.specs.keys().copied().collect()
    }

    pub fn find_spec(&self, key: &SpecKey) -> Option<SpecId> {
        self.specs
            .iter()
            .find(|(_, s)| s.key == *key)
            .map(|(id, _)| *id)
    }

    /// Adds a spec. Spec-wide problems keep it out; a problem of one probe keeps only that
    /// probe out (reported, counted). Processes already running are matched by the caller
    /// feeding them again ([`Engine::process_seen`]).
    pub fn add_spec(&mut self, spec: ProbeSpec) -> Result<SpecId, SpecRejected> {
        let key = self.spec_key(&spec);
        if self.find_spec(&key).is_some() {
            return Err(SpecRejected::Duplicate { key });
        }
        let issues = validate_spec(&spec);
        if issues.iter().any(|i| i.probe.is_none()) {
            return Err(SpecRejected::Invalid {
                key,
                issues: issues.into_iter().filter(|i| i.probe.is_none()).collect(),
            });
        }
        let selector = match Selector::new(&spec, key.namespace.clone()) {
            Ok(s) => s,
            // validate_spec checks globs; this is the same check, kept typed.
            Err(e) => {
                return Err(SpecRejected::Invalid {
                    key,
                    issues: vec![SpecIssue {
                        probe: None,
                        field: "spec.selector".into(),
                        message: e.to_string(),
                    }],
                })
            }
        };
        let stats_name: Arc<str> = key.to_string().into();
        let spec_name: Arc<str> = key.name.as_str().into();
        let probes = spec
            .spec
            .probes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let pk = ProbeKey {
                    spec: stats_name.clone(),
                    name: spec_name.clone(),
                    index: i as u16,
                    symbol: p.point().into(),
                };
                self.stats.register(&pk);
                let invalid = issues
                    .iter()
                    .find(|is| is.probe == Some(i))
                    .map(|is| Arc::new(ProbeError::Invalid(is.clone())));
                if let Some(e) = &invalid {
                    tracing::error!("{pk}: {e} (this probe is skipped)");
                    self.stats.set_error(&pk, e.to_string());
                }
                SpecProbe {
                    key: pk,
                    probe: p.clone(),
                    library: p.library.as_deref().and_then(LibraryGlob::new),
                    invalid,
                }
            })
            .collect();
        if selector.needs_container() && self.mode == Mode::Local {
            tracing::warn!(
                "{key}: selector.images/podSelector/containerNames select containers, which `gprobe run` cannot see; \
                 it matches processes by selector.executable only, so this spec selects nothing here. \
                 Use `gprobe agent` on a Kubernetes node, or select by executable."
            );
        }
        let id = SpecId(self.next_spec);
        self.next_spec += 1;
        self.specs.insert(
            id,
            SpecState {
                key,
                name: spec.display_name().into(),
                spec: Arc::new(spec),
                selector,
                probes,
            },
        );
        self.update_watch();
        self.dirty = true;
        Ok(id)
    }

    pub(super) fn spec_key_of(&self, id: SpecId) -> SpecKey {
        self.specs[&id].key.clone()
    }

    /// Adds a spec, or replaces the one of the same key when it changed (a change of
    /// status or metadata only keeps it as it is). True when processes should be matched
    /// again.
    pub fn upsert_spec(&mut self, spec: ProbeSpec) -> bool {
        let key = self.spec_key(&spec);
        if let Some(id) = self.find_spec(&key) {
            let old = &self.specs[&id];
            if old.spec.spec == spec.spec && old.spec.metadata.uid == spec.metadata.uid {
                self.specs.get_mut(&id).expect("found").spec = Arc::new(spec);
                return false;
            }
            tracing::info!("ProbeSpec {key} changed: its probes are attached anew");
            return self.replace_spec(id, spec);
        }
        match self.add_spec(spec) {
            Ok(_) => {
                tracing::info!("{key}: active");
                true
            }
            Err(e) => {
                tracing::error!("{e} (this ProbeSpec is ignored)");
                false
            }
        }
    }

    /// Removes a spec: its probes are detached from every process and freed.
    pub fn remove_spec(&mut self, id: SpecId) {
        if let Some(s) = self.specs.get(&id) {
            tracing::info!("ProbeSpec {} deleted: its probes are detached", s.key);
        }
        self.drop_spec(id);
    }

    fn drop_spec(&mut self, id: SpecId) {
        self.free_spec_probes(id);
        let pids: Vec<u32> = self
            .procs
            .iter()
            .filter(|(_, p)| p.specs.contains(&id))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in pids {
            self.drop_spec_from_process(pid, id);
        }
        if let Some(s) = self.specs.get(&id) {
            self.stats.forget_processes(&s.key.to_string());
        }
        self.forget_spec(id);
    }

    /// Frees what spec `id` has in the kernel and in the counts, once no process has it.
    pub(super) fn forget_spec(&mut self, id: SpecId) {
        self.free_spec_probes(id);
        if let Some(s) = self.specs.remove(&id) {
            for p in &s.probes {
                self.retired.remove(&p.key);
                self.stats.forget_probe(&p.key);
            }
        }
        self.update_watch();
        self.dirty = true;
    }

    /// Frees the configurations of spec `id`'s probes: their programs write nothing from
    /// then on. Done before their links are detached: a link being detached stops running
    /// a function's entry and its returns at different moments, and a return seen without
    /// its entry would take the call left open by an earlier one (its duration, that
    /// call's arguments with this one's results).
    pub(super) fn free_spec_probes(&mut self, id: SpecId) {
        let mut freed = Vec::new();
        for bin in self.binaries.values_mut() {
            let gone: Vec<(SpecId, usize)> =
                bin.probes.keys().filter(|k| k.0 == id).copied().collect();
            for k in gone {
                if let Some(Ok(p)) = bin.probes.remove(&k) {
                    freed.push(p.cfg);
                }
            }
        }
        for cfg in freed {
            self.free_probe(cfg);
        }
    }
}
