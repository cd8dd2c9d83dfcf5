//! `gprobe agent`: cluster mode on one node. ProbeSpecs come from the API server (or files),
//! containers from the node's runtime over CRI; the engine (the same as local mode's)
//! attaches and the pipeline exports; a ProbeAttachment per spec reports what is attached
//! here.

pub mod api;
pub mod health;
mod specs;
pub mod status;
pub mod traces;

use crate::attach::LoadError;
use crate::discover::cri::{CriClient, CriError};
use crate::engine::driver::{Input, SpecEvent};
use crate::engine::Mode;
use crate::pipeline::{warn_new_losses, Pipeline, PipelineError, PipelineOptions, RunSummary};
use gprobe_crds::ProbeAttachmentStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub node_name: String,
    pub cri_socket: PathBuf,
    /// ProbeSpecs from YAML files in this folder instead of the API server.
    pub spec_dir: Option<PathBuf>,
    /// How often `spec_dir` is read again.
    pub spec_dir_interval: Duration,
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
    #[error(
        "connecting to the Kubernetes API server: {0}; in a pod, check the ServiceAccount; \
        elsewhere give --spec-dir"
    )]
    Kube(#[source] kube::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where statuses go, and what was last written and when (so unchanged ones are not
/// rewritten, and changed counts alone only every [`COUNTS_EVERY`]).
struct Publisher<'a> {
    node: &'a str,
    client: Option<&'a kube::Client>,
    report_file: Option<&'a Path>,
    traces: &'a traces::Traces,
    last: BTreeMap<String, (ProbeAttachmentStatus, Instant)>,
    /// The ProbeAttachment objects this agent has applied, by key, with the uid of the spec
    /// they were applied for: later writes of their status are one request.
    applied: BTreeMap<String, String>,
}

/// How often a ProbeAttachment is written when only its links' counts (hits, lost,
/// throttled) changed. Every call changes them: written at each 2 s report, a busy node
/// would send the API server two writes per spec every 2 s (about 500 a minute per spec in
/// the cluster e2e), 10,000 a second from 1,000 nodes with 10 specs. Anything else (a link
/// attached or failed, a container, a process traced or missed, a new generation) is
/// written at once.
const COUNTS_EVERY: Duration = Duration::from_secs(30);

/// Whether `status` (its update time cleared) is to be written, given what was last
/// written for its spec and when.
fn write_due(
    last: Option<&(ProbeAttachmentStatus, Instant)>,
    status: &ProbeAttachmentStatus,
    now: Instant,
) -> bool {
    let Some((prev, at)) = last else {
        return true;
    };
    if prev == status {
        return false;
    }
    let counts_only = without_counts(prev) == without_counts(status);
    !counts_only || now.duration_since(*at) >= COUNTS_EVERY
}

fn without_counts(status: &ProbeAttachmentStatus) -> ProbeAttachmentStatus {
    let mut s = status.clone();
    for l in &mut s.links {
        (l.hits, l.lost, l.throttled) = (0, 0, 0);
    }
    s
}

/// A spec's key in what was written: `namespace/name`.
fn spec_key(spec: &gprobe_crds::ProbeSpec) -> String {
    let ns = spec.metadata.namespace.as_deref().unwrap_or("default");
    format!("{ns}/{}", spec.display_name())
}

impl Publisher<'_> {
    /// Writes each spec's attachment status where it goes if it changed.
    async fn publish(&mut self, pipeline: &Pipeline, health: &health::Health) {
        let snap = pipeline.engine.snapshot.borrow().clone();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let statuses = status::attachment_statuses(&snap, &pipeline.stats, now);
        self.traces.set_statuses(&statuses);
        health.set_attached(
            statuses
                .iter()
                .map(|(_, s)| {
                    s.links
                        .iter()
                        .filter(|l| l.state == gprobe_crds::LinkState::Attached)
                        .count()
                })
                .sum(),
        );
        for (spec, st) in &statuses {
            let key = spec_key(spec);
            let mut cmp = st.clone();
            cmp.update_time = None;
            let now = Instant::now();
            if !write_due(self.last.get(&key), &cmp, now) {
                continue;
            }
            if let Some(c) = self.client {
                let uid = spec.metadata.uid.clone().unwrap_or_default();
                let object_applied = self.applied.get(&key) == Some(&uid);
                if let Err(e) = api::apply_attachment(c, spec, self.node, st, object_applied).await
                {
                    tracing::warn!("updating the ProbeAttachment of {key}: {e}");
                    self.applied.remove(&key);
                    continue;
                }
                self.applied.insert(key.clone(), uid);
            }
            self.last.insert(key, (cmp, now));
        }
        let live: BTreeSet<String> = statuses.iter().map(|(s, _)| spec_key(s)).collect();
        self.last.retain(|k, _| live.contains(k));
        self.applied.retain(|k, _| live.contains(k));
        if let Some(path) = self.report_file {
            let doc: BTreeMap<String, &ProbeAttachmentStatus> =
                statuses.iter().map(|(s, st)| (spec_key(s), st)).collect();
            let tmp = path.with_extension("tmp");
            if let Ok(text) = serde_json::to_vec_pretty(&doc) {
                if let Err(e) = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path))
                {
                    tracing::warn!("writing {}: {e}", path.display());
                }
            }
        }
    }
}

/// Runs the node agent until SIGINT/SIGTERM (or `duration`).
pub async fn run(
    mut opts: AgentOptions,
    out: Box<dyn std::io::Write + Send>,
) -> Result<RunSummary, AgentError> {
    let mut cri = CriClient::connect(&opts.cri_socket).await?;
    let (stx, mut srx) = mpsc::channel::<SpecEvent>(64);
    let client = match &opts.spec_dir {
        Some(dir) => {
            tokio::spawn(specs::watch_dir(dir.clone(), opts.spec_dir_interval, stx));
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
    let mode = Mode::Cluster {
        node: opts.node_name.clone(),
    };
    let health = health::Health::default();
    let traces = traces::Traces::new(&opts.node_name);
    health.set_traces(traces.clone());
    opts.pipeline.tap = Some(std::sync::Arc::new(traces.clone()));
    if let Some(addr) = opts.health_addr {
        tokio::spawn(health::serve(addr, health.clone()));
    }
    let pipeline = match Pipeline::start(&opts.pipeline, mode, Vec::new(), out) {
        Ok((pipeline, _)) => pipeline,
        Err(PipelineError::Load(e @ (LoadError::Kernel(_) | LoadError::Program { .. }))) => {
            // A DaemonSet's pod on a node whose kernel gprobe cannot trace on (a feature
            // missing, or its verifier refusing the program): restarting would not help, so
            // it stays up, not ready, and says why (log, /readyz).
            let why = e.to_string();
            tracing::error!("{why}; the agent stays up, not ready, until it is stopped");
            health.set_unable(&why);
            let mut stop = crate::pipeline::StopSignal::new(opts.duration)?;
            stop.wait().await;
            return Ok(RunSummary::default());
        }
        Err(e) => return Err(e.into()),
    };
    // /readyz says what the kernel lacks and what gprobe does instead.
    if let Some(k) = pipeline.stats.kernel_features() {
        health.set_detail(&[k.summary()]);
    }
    traces.set_stats(pipeline.stats.clone());
    let mut publisher = Publisher {
        node: &opts.node_name,
        client: client.as_ref(),
        report_file: opts.report_file.as_deref(),
        traces: &traces,
        last: BTreeMap::new(),
        applied: BTreeMap::new(),
    };
    let mut stop = crate::pipeline::StopSignal::new(opts.duration)?;
    let mut poll = tokio::time::interval(opts.container_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut report_tick = tokio::time::interval(Duration::from_secs(2));
    let mut snapshots = pipeline.engine.snapshot.clone();
    let mut last_counts = crate::pipeline::LastCounts::new();
    let to_engine = |input: Input| pipeline.engine.tx.send(input).is_ok();
    loop {
        tokio::select! {
            ev = srx.recv() => match ev {
                Some(ev) => {
                    traces.spec_event(&ev);
                    if !to_engine(Input::Spec(ev)) {
                        break;
                    }
                }
                None => break,
            },
            _ = poll.tick() => match cri.running().await {
                Ok(running) => {
                    health.set_ready(true);
                    if !to_engine(Input::Containers(running)) {
                        break;
                    }
                }
                Err(e) => {
                    health.set_ready(false);
                    tracing::warn!("{e}");
                }
            },
            // The engine changed what is attached: report now, not at the next tick.
            r = snapshots.changed() => {
                if r.is_err() {
                    break;
                }
                publisher.publish(&pipeline, &health).await;
            }
            _ = report_tick.tick() => {
                warn_new_losses(&pipeline.stats, &mut last_counts);
                publisher.publish(&pipeline, &health).await;
            }
            _ = stop.wait() => break,
        }
    }
    Ok(pipeline
        .stop(Instant::now() + crate::local::STOP_BUDGET)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gprobe_crds::{LinkState, LinkStatus};

    fn status(hits: u64, state: LinkState) -> ProbeAttachmentStatus {
        ProbeAttachmentStatus {
            links: vec![LinkStatus {
                container: "app".into(),
                pod: "shop/web-1".into(),
                symbol: "main.handle".into(),
                state,
                message: None,
                hits,
                lost: 0,
                throttled: 0,
                site: None,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn counts_alone_are_written_every_30_s_anything_else_at_once() {
        let t0 = Instant::now();
        let first = status(10, LinkState::Attached);
        assert!(write_due(None, &first, t0), "a spec's first status");
        let last = (first.clone(), t0);
        assert!(
            !write_due(Some(&last), &first, t0 + COUNTS_EVERY),
            "unchanged"
        );
        let busier = status(9_000, LinkState::Attached);
        assert!(!write_due(
            Some(&last),
            &busier,
            t0 + Duration::from_secs(29)
        ));
        assert!(write_due(Some(&last), &busier, t0 + COUNTS_EVERY));
        let failed = status(10, LinkState::AttachError);
        assert!(
            write_due(Some(&last), &failed, t0 + Duration::from_millis(1)),
            "a link failed"
        );
    }
}
