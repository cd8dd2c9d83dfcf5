//! `gprobe agent`: cluster mode on one node. ProbeSpecs come from the API server (or files),
//! containers from the node's runtime over CRI; the same pipeline as local mode attaches
//! and exports; a ProbeAttachment per spec reports what is attached here.

pub mod api;
pub mod health;
pub mod select;
mod specs;

use crate::discover::cgroup::{container_of_pid, pids_of_container};
use crate::discover::cri::{Container, CriClient, CriError};
use crate::discover::{inspect, ProcEvent, ProcInfo};
use crate::events::Resource;
use crate::pipeline::{
    log_report, warn_new_losses, Pipeline, PipelineError, PipelineOptions, RunSummary,
};
use crate::session::{AttachReport, ProbeState};
use api::SpecEvent;
use gprobe_crds::{ContainerRef, LinkState, LinkStatus, ProbeAttachmentStatus, ProbeSpec};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub node_name: String,
    pub cri_socket: PathBuf,
    /// ProbeSpecs from YAML files in this folder instead of the API server.
    pub spec_dir: Option<PathBuf>,
    pub pipeline: PipelineOptions,
    pub container_poll: Duration,
    /// Also write the attachment report (per spec) as JSON here, rewritten on change.
    pub report_file: Option<PathBuf>,
    pub health_addr: Option<SocketAddr>,
    pub duration: Option<Duration>,
}

#[derive(Debug, Error)]
pub enum AgentError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Cri(#[from] CriError),
    #[error("connecting to the Kubernetes API server: {0}; in a pod, check the ServiceAccount; elsewhere give --spec-dir")]
    Kube(#[source] kube::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A container seen on this node.
struct Known {
    info: Container,
    /// Its processes (host pids) and the specs each was added with.
    pids: HashMap<u32, Vec<u32>>,
}

struct SpecEntry {
    id: u32,
    spec: ProbeSpec,
}

struct Agent {
    pipeline: Pipeline,
    node: String,
    specs: HashMap<(String, String), SpecEntry>,
    containers: HashMap<String, Known>,
}

fn key_of(spec: &ProbeSpec) -> (String, String) {
    (
        spec.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        spec.metadata.name.clone().unwrap_or_default(),
    )
}

/// Resource attributes of a container process (OpenTelemetry semantic conventions).
pub fn container_resource(c: &Container, p: &ProcInfo, node: &str) -> Resource {
    let (image_name, tag) = split_image(&c.image);
    let service = if c.name.is_empty() {
        image_name.rsplit('/').next().unwrap_or("").to_string()
    } else {
        c.name.clone()
    };
    Resource {
        attributes: vec![
            ("service.name", service),
            ("process.pid", p.pid.to_string()),
            ("process.executable.path", p.exe.display().to_string()),
            ("container.id", c.id.clone()),
            ("container.image.name", image_name),
            ("container.image.tag", tag),
            ("k8s.namespace.name", c.pod_namespace.clone()),
            ("k8s.pod.name", c.pod_name.clone()),
            ("k8s.pod.uid", c.pod_uid.clone()),
            ("k8s.container.name", c.name.clone()),
            ("k8s.node.name", node.to_string()),
        ],
    }
}

/// `registry:5000/repo/name:tag` -> (`registry:5000/repo/name`, `tag`); a digest counts as no tag.
pub fn split_image(image: &str) -> (String, String) {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last = no_digest.rsplit('/').next().unwrap_or(no_digest);
    match last.rsplit_once(':') {
        Some((_, tag)) => (
            no_digest[..no_digest.len() - tag.len() - 1].to_string(),
            tag.to_string(),
        ),
        None => (
            no_digest.to_string(),
            if image.contains('@') {
                String::new()
            } else {
                "latest".into()
            },
        ),
    }
}

impl Agent {
    /// The ids of the specs selecting container `c` whose executable glob accepts `p`.
    fn specs_for(&self, c: &Container, p: &ProcInfo) -> Vec<u32> {
        let exe = p.exe.to_string_lossy();
        let mut ids: Vec<u32> = self
            .specs
            .values()
            .filter(|e| {
                select::selects_container(&e.spec, c) && select::selects_executable(&e.spec, &exe)
            })
            .map(|e| e.id)
            .collect();
        ids.sort_unstable();
        ids
    }

    fn add_pid(&mut self, cid: &str, pid: u32) {
        let Some(known) = self.containers.get(cid) else {
            return;
        };
        let info = match inspect(pid) {
            Ok(i) => i,
            Err(e) => {
                tracing::debug!("{e}");
                return;
            }
        };
        let ids = self.specs_for(&known.info, &info);
        let current = known.pids.get(&pid).cloned();
        if current.as_ref() == Some(&ids) {
            return;
        }
        if current.is_some() {
            self.pipeline.session.remove_process(pid);
        }
        let res = container_resource(&known.info, &info, &self.node);
        for r in self.pipeline.session.add_process(&info, &ids, res) {
            log_report(&r);
        }
        if let Some(k) = self.containers.get_mut(cid) {
            k.pids.insert(pid, ids);
        }
    }

    /// Re-evaluates every process of every container (after specs changed).
    fn rematch_all(&mut self) {
        let all: Vec<(String, Vec<u32>)> = self
            .containers
            .iter()
            .map(|(id, k)| (id.clone(), k.pids.keys().copied().collect()))
            .collect();
        for (cid, pids) in all {
            for pid in pids {
                self.add_pid(&cid, pid);
            }
        }
    }

    /// Brings the known containers in line with the runtime's; true if any came or went.
    fn sync_containers(&mut self, running: Vec<Container>) -> bool {
        let mut changed = false;
        let live: HashSet<String> = running.iter().map(|c| c.id.clone()).collect();
        let gone: Vec<String> = self
            .containers
            .keys()
            .filter(|id| !live.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(k) = self.containers.remove(&id) {
                changed = true;
                for pid in k.pids.keys() {
                    self.pipeline.session.remove_process(*pid);
                }
                tracing::info!(
                    "container {} ({}/{}) is gone",
                    &id[..12.min(id.len())],
                    k.info.pod_namespace,
                    k.info.pod_name
                );
            }
        }
        for c in running {
            if self.containers.contains_key(&c.id) {
                continue;
            }
            changed = true;
            let id = c.id.clone();
            let mut pids: Vec<u32> = pids_of_container(&id);
            if c.pid != 0 && !pids.contains(&c.pid) {
                pids.push(c.pid);
            }
            self.containers.insert(
                id.clone(),
                Known {
                    info: c,
                    pids: HashMap::new(),
                },
            );
            for pid in pids {
                // Track every process (even unselected ones) so spec changes can re-match.
                if let Some(k) = self.containers.get_mut(&id) {
                    k.pids.insert(pid, Vec::new());
                }
                self.add_pid_force(&id, pid);
            }
        }
        changed
    }

    fn add_pid_force(&mut self, cid: &str, pid: u32) {
        // A freshly tracked pid is registered with no specs; add_pid compares and attaches.
        if let Some(k) = self.containers.get_mut(cid) {
            k.pids.remove(&pid);
        }
        self.add_pid(cid, pid);
        if let Some(k) = self.containers.get_mut(cid) {
            k.pids.entry(pid).or_default();
        }
    }

    fn on_proc_event(&mut self, ev: ProcEvent) {
        match ev {
            ProcEvent::Exec(pid) => {
                if let Some(cid) = container_of_pid(pid) {
                    if self.containers.contains_key(&cid) {
                        if let Some(k) = self.containers.get_mut(&cid) {
                            if k.pids.contains_key(&pid) {
                                // exec'd a new program: start over for this pid
                                k.pids.remove(&pid);
                                self.pipeline.session.remove_process(pid);
                            }
                        }
                        self.add_pid_force(&cid, pid);
                    }
                }
            }
            ProcEvent::Exit(pid) => {
                for k in self.containers.values_mut() {
                    if k.pids.remove(&pid).is_some() {
                        self.pipeline.session.remove_process(pid);
                        break;
                    }
                }
            }
        }
    }

    fn apply_spec_event(&mut self, ev: SpecEvent) {
        match ev {
            SpecEvent::Upsert(spec) => self.upsert(*spec),
            SpecEvent::Delete { namespace, name } => {
                if let Some(e) = self.specs.remove(&(namespace.clone(), name.clone())) {
                    self.pipeline.session.remove_spec(e.id);
                    tracing::info!("ProbeSpec {namespace}/{name} deleted: its probes are detached");
                    self.rematch_all();
                }
            }
            SpecEvent::Resync(all) => {
                let keep: HashSet<(String, String)> = all.iter().map(key_of).collect();
                let gone: Vec<_> = self
                    .specs
                    .keys()
                    .filter(|k| !keep.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    self.apply_spec_event(SpecEvent::Delete {
                        namespace: k.0,
                        name: k.1,
                    });
                }
                for s in all {
                    self.upsert(s);
                }
            }
        }
    }

    fn upsert(&mut self, spec: ProbeSpec) {
        let key = key_of(&spec);
        if let Some(old) = self.specs.get(&key) {
            if old.spec.spec == spec.spec && old.spec.metadata.uid == spec.metadata.uid {
                // Status or metadata changes only.
                if let Some(e) = self.specs.get_mut(&key) {
                    e.spec = spec;
                }
                return;
            }
            let old_id = old.id;
            self.pipeline.session.remove_spec(old_id);
            self.specs.remove(&key);
        }
        let (id, msgs) = self.pipeline.session.add_spec(spec.clone());
        for m in &msgs {
            tracing::error!("{}/{}: {m}", key.0, key.1);
        }
        match id {
            Some(id) => {
                tracing::info!("ProbeSpec {}/{} active", key.0, key.1);
                self.specs.insert(key, SpecEntry { id, spec });
            }
            None => tracing::error!("ProbeSpec {}/{} is invalid and ignored", key.0, key.1),
        }
        self.rematch_all();
    }

    /// What this node has for each spec, as ProbeAttachment status.
    fn attachment_status(&self) -> Vec<(ProbeSpec, ProbeAttachmentStatus)> {
        let report = self.pipeline.session.report();
        let counters = self.pipeline.session.counters();
        let stats = &self.pipeline.stats;
        let now = rfc3339_now();
        let mut out = Vec::new();
        let mut entries: Vec<&SpecEntry> = self.specs.values().collect();
        entries.sort_by_key(|e| e.id);
        for e in entries {
            let name = e.spec.display_name();
            let mut st = ProbeAttachmentStatus {
                observed_generation: e.spec.metadata.generation,
                update_time: Some(now.clone()),
                ..Default::default()
            };
            let mut cids: Vec<&String> = self.containers.keys().collect();
            cids.sort();
            for cid in cids {
                let k = &self.containers[cid];
                let pids: Vec<u32> = k
                    .pids
                    .iter()
                    .filter(|(_, ids)| ids.contains(&e.id))
                    .map(|(p, _)| *p)
                    .collect();
                if pids.is_empty() {
                    continue;
                }
                st.containers.push(ContainerRef {
                    namespace: k.info.pod_namespace.clone(),
                    pod: k.info.pod_name.clone(),
                    pod_uid: k.info.pod_uid.clone(),
                    container: k.info.name.clone(),
                    container_id: cid.clone(),
                    image: k.info.image.clone(),
                    pid: if k.info.pid != 0 { k.info.pid } else { pids[0] },
                });
                for probe in &e.spec.spec.probes {
                    let rows: Vec<&AttachReport> = report
                        .iter()
                        .filter(|r| {
                            r.spec == name
                                && r.symbol == probe.symbol
                                && r.pids.iter().any(|p| pids.contains(p))
                        })
                        .collect();
                    let failed = rows.iter().find_map(|r| match &r.state {
                        ProbeState::Failed(m) => Some(m.clone()),
                        _ => None,
                    });
                    let hits: u64 = pids
                        .iter()
                        .map(|p| stats.delivered_from(name, &probe.symbol, *p))
                        .sum();
                    let c = counters
                        .get(&(Arc::from(name), Arc::from(probe.symbol.as_str())))
                        .copied()
                        .unwrap_or_default();
                    st.links.push(LinkStatus {
                        container: cid.clone(),
                        pod: k.info.pod_name.clone(),
                        symbol: probe.symbol.clone(),
                        state: if failed.is_some() || rows.is_empty() {
                            LinkState::AttachError
                        } else {
                            LinkState::Attached
                        },
                        message: failed
                            .or_else(|| rows.is_empty().then(|| "not attached yet".to_string())),
                        hits,
                        lost: c.lost,
                        throttled: c.throttled,
                    });
                }
            }
            st.bound_links();
            out.push((e.spec.clone(), st));
        }
        out
    }
}

/// Writes each spec's attachment status where it goes (API server, report file) if it
/// changed since the last time.
async fn publish(
    agent: &Agent,
    client: Option<&kube::Client>,
    report_file: Option<&std::path::Path>,
    health: &health::Health,
    last_report: &mut BTreeMap<(String, String), ProbeAttachmentStatus>,
) {
    let statuses = agent.attachment_status();
    health.set_attached(
        statuses
            .iter()
            .map(|(_, s)| {
                s.links
                    .iter()
                    .filter(|l| l.state == LinkState::Attached)
                    .count()
            })
            .sum(),
    );
    for (spec, st) in &statuses {
        let key = key_of(spec);
        let mut cmp = st.clone();
        cmp.update_time = None;
        if last_report.get(&key) == Some(&cmp) {
            continue;
        }
        if let Some(c) = client {
            if let Err(e) = api::apply_attachment(c, spec, &agent.node, st).await {
                tracing::warn!("updating the ProbeAttachment of {}/{}: {e}", key.0, key.1);
                continue;
            }
        }
        last_report.insert(key, cmp);
    }
    if let Some(path) = report_file {
        let doc: BTreeMap<String, &ProbeAttachmentStatus> = statuses
            .iter()
            .map(|(s, st)| {
                let (ns, name) = key_of(s);
                (format!("{ns}/{name}"), st)
            })
            .collect();
        let tmp = path.with_extension("tmp");
        if let Ok(text) = serde_json::to_vec_pretty(&doc) {
            if std::fs::write(&tmp, text)
                .and_then(|_| std::fs::rename(&tmp, path))
                .is_err()
            {
                tracing::warn!("writing {} failed", path.display());
            }
        }
    }
}

fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Runs the node agent until SIGINT/SIGTERM (or `duration`).
pub async fn run(
    opts: AgentOptions,
    out: Box<dyn std::io::Write + Send>,
) -> Result<RunSummary, AgentError> {
    let mut cri = CriClient::connect(&opts.cri_socket).await?;
    let (stx, mut srx) = mpsc::channel(64);
    let client = match &opts.spec_dir {
        Some(dir) => {
            tokio::spawn(specs::watch_dir(dir.clone(), stx));
            None
        }
        None => {
            let client = kube::Client::try_default()
                .await
                .map_err(AgentError::Kube)?;
            tokio::spawn(api::watch_specs(client.clone(), stx));
            Some(client)
        }
    };
    let pipeline = Pipeline::start(&opts.pipeline, out)?;
    let health = health::Health::default();
    if let Some(addr) = opts.health_addr {
        tokio::spawn(health::serve(addr, health.clone()));
    }
    let mut agent = Agent {
        pipeline,
        node: opts.node_name.clone(),
        specs: HashMap::new(),
        containers: HashMap::new(),
    };
    let mut stop = crate::pipeline::StopSignal::new(opts.duration)?;
    let mut poll = tokio::time::interval(opts.container_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut report_tick = tokio::time::interval(Duration::from_secs(2));
    let mut last_lost = HashMap::new();
    let mut last_report: BTreeMap<(String, String), ProbeAttachmentStatus> = BTreeMap::new();
    loop {
        tokio::select! {
            ev = srx.recv() => match ev {
                Some(ev) => agent.apply_spec_event(ev),
                None => break,
            },
            ev = agent.pipeline.proc_events.recv() => match ev {
                Some(ev) => agent.on_proc_event(ev),
                None => break,
            },
            _ = poll.tick() => match cri.running().await {
                Ok(running) => {
                    health.set_ready(true);
                    if agent.sync_containers(running) {
                        // Report new and removed containers now, not at the next tick.
                        publish(&agent, client.as_ref(), opts.report_file.as_deref(), &health, &mut last_report).await;
                    }
                }
                Err(e) => {
                    health.set_ready(false);
                    tracing::warn!("{e}");
                }
            },
            _ = report_tick.tick() => {
                warn_new_losses(&agent.pipeline.session.counters(), &mut last_lost);
                publish(&agent, client.as_ref(), opts.report_file.as_deref(), &health, &mut last_report).await;
            }
            _ = stop.wait() => break,
        }
    }
    Ok(agent.pipeline.stop().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_split_into_name_and_tag() {
        assert_eq!(
            split_image("registry.example:5000/shop/cart:v1.2"),
            ("registry.example:5000/shop/cart".into(), "v1.2".into())
        );
        assert_eq!(split_image("nginx"), ("nginx".into(), "latest".into()));
        assert_eq!(split_image("r/x@sha256:abc"), ("r/x".into(), "".into()));
        assert_eq!(
            split_image("localhost:5000/x"),
            ("localhost:5000/x".into(), "latest".into())
        );
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T",
            "{t}"
        );
    }
}
