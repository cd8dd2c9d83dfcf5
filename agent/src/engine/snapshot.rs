//! What the engine holds, as a value others can read (cluster status, tests).

use super::error::ProbeError;
use super::tracer::{Resolver, Tracer};
use super::{Engine, SpecKey};
use crate::discover::cri::Container;
use crate::stats::ProbeKey;
use gprobe_crds::ProbeSpec;
use std::path::PathBuf;
use std::sync::Arc;

/// One probe in one process.
#[derive(Debug, Clone)]
pub enum ProbeOutcome {
    Attached { uprobes: usize },
    Failed(Arc<ProbeError>),
}

#[derive(Debug, Clone)]
pub struct ProcView {
    pub pid: u32,
    pub exe: PathBuf,
    pub container_id: Option<String>,
    /// By probe index of the spec.
    pub probes: Vec<(usize, ProbeOutcome)>,
}

#[derive(Debug, Clone)]
pub struct SpecView {
    pub key: SpecKey,
    pub spec: Arc<ProbeSpec>,
    /// By probe index.
    pub probes: Vec<ProbeKey>,
    /// The processes it selects, by pid.
    pub processes: Vec<ProcView>,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub specs: Vec<SpecView>,
    /// The containers the runtime reported (cluster mode), sorted by id.
    pub containers: Vec<Container>,
}

impl<T: Tracer, R: Resolver> Engine<T, R> {
    pub fn snapshot(&self) -> Snapshot {
        let mut specs = Vec::new();
        for (sid, s) in &self.specs {
            let mut processes: Vec<ProcView> = self
                .procs
                .iter()
                .filter(|(_, p)| p.specs.contains(sid))
                .map(|(pid, p)| ProcView {
                    pid: *pid,
                    exe: p.info.exe.clone(),
                    container_id: p.info.container_id.clone(),
                    probes: p
                        .links
                        .iter()
                        .filter(|a| a.spec == *sid)
                        .map(|a| {
                            (
                                a.probe,
                                match &a.outcome {
                                    Ok((_, n)) => ProbeOutcome::Attached { uprobes: *n },
                                    Err(e) => ProbeOutcome::Failed(e.clone()),
                                },
                            )
                        })
                        .collect(),
                })
                .collect();
            processes.sort_by_key(|p| p.pid);
            specs.push(SpecView {
                key: s.key.clone(),
                spec: s.spec.clone(),
                probes: s.probes.iter().map(|p| p.key.clone()).collect(),
                processes,
            });
        }
        let mut containers: Vec<Container> = self.containers.values().cloned().collect();
        containers.sort_by(|a, b| a.id.cmp(&b.id));
        Snapshot { specs, containers }
    }
}
