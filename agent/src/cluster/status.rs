//! ProbeAttachment status: what the engine's snapshot and the counts say this node has
//! for each spec.

use crate::engine::snapshot::{ProbeOutcome, Snapshot};
use crate::resolve::sites;
use crate::stats::Stats;
use gprobe_crds::{
    ContainerRef, LinkState, LinkStatus, MissedProcess, MissingFeature, NodeKernel,
    ProbeAttachmentStatus, ProbeSpec, MAX_MISSED,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::sync::Arc;

/// The status of every spec's ProbeAttachment on this node, as of `now`.
pub fn attachment_statuses(
    snap: &Snapshot,
    stats: &Stats,
    now: Time,
) -> Vec<(Arc<ProbeSpec>, ProbeAttachmentStatus)> {
    let mut out = Vec::new();
    // Probes taken off a process for their cost, read once for every link below.
    let budget = stats.budget();
    let kernel = stats.kernel_features().map(|k| NodeKernel {
        release: k.release.clone(),
        missing: k
            .missing()
            .map(|n| MissingFeature {
                name: n.to_string(),
                instead: n.instead().unwrap_or("gprobe cannot trace").to_string(),
            })
            .collect(),
    });
    for s in &snap.specs {
        let mut st = ProbeAttachmentStatus {
            observed_generation: s.spec.metadata.generation,
            update_time: Some(now.clone()),
            kernel: kernel.clone(),
            ..Default::default()
        };
        for c in &snap.containers {
            let procs: Vec<_> = s
                .processes
                .iter()
                .filter(|p| p.container_id.as_deref() == Some(c.id.as_str()))
                .collect();
            if procs.is_empty() {
                continue;
            }
            st.containers.push(ContainerRef {
                namespace: c.pod_namespace.clone(),
                pod: c.pod_name.clone(),
                pod_uid: c.pod_uid.clone(),
                container: c.name.clone(),
                container_id: c.id.clone(),
                image: c.image.clone(),
                pid: if c.pid != 0 { c.pid } else { procs[0].pid },
            });
            for (pi, key) in s.probes.iter().enumerate() {
                let outcomes: Vec<&ProbeOutcome> = procs
                    .iter()
                    .flat_map(|p| p.probes.iter().filter(|(i, _)| *i == pi).map(|(_, o)| o))
                    .collect();
                let failed = outcomes.iter().find_map(|o| match o {
                    ProbeOutcome::Failed(e) => Some(e.to_string()),
                    ProbeOutcome::Attached { .. } => None,
                });
                let counts = stats.probe(key);
                // Probes taken off a process of this container for their cost.
                let taken_off = budget
                    .iter()
                    .filter(|((spec, pid), e)| {
                        *spec == s.key.to_string()
                            && e.off
                            && procs.iter().any(|p| p.pid == *pid)
                    })
                    .map(|((_, pid), e)| {
                        let what = match e.taken_off {
                            Some(crate::stats::TakenOff::Returns) => format!("return probes taken off \
                                pid {pid} for their cost (its calls are still recorded, without a \
                                    duration or results)"),
                            _ => format!("taken off pid {pid} for their cost"),
                        };
                        format!(
                            "{what}: about {:.1}% of a CPU, over limits.maxOverheadPercent; tried again after {} s",
                            e.percent, e.backoff_s
                        )
                    })
                    .next();
                st.links.push(LinkStatus {
                    container: c.id.clone(),
                    pod: c.pod_name.clone(),
                    symbol: key.symbol.to_string(),
                    state: if failed.is_some() || outcomes.is_empty() {
                        LinkState::AttachError
                    } else {
                        LinkState::Attached
                    },
                    message: failed
                        .or(taken_off)
                        .or_else(|| outcomes.is_empty().then(|| "not attached yet".to_string())),
                    hits: procs.iter().map(|p| stats.delivered_by(key, p.pid)).sum(),
                    lost: counts.lost,
                    throttled: counts.throttled,
                    site: counts.costs.map(|c| sites::describe(c, sites::kernel())),
                });
            }
        }
        let ps = stats.processes_of(&s.key.to_string());
        st.processes_matched = ps.matched;
        st.processes_traced = ps.traced;
        st.processes_missed = ps.missed_total;
        st.missed = ps
            .missed
            .iter()
            .rev()
            .take(MAX_MISSED)
            .map(|m| MissedProcess {
                pid: m.pid,
                executable: m.executable.clone(),
                reason: m.reason.clone(),
            })
            .collect();
        st.bound_links();
        out.push((s.spec.clone(), st));
    }
    out
}
