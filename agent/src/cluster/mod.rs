//! `gprobe agent`: cluster mode on one node. ProbeSpecs come from the API server (or files),
//! containers from the node's runtime over CRI; the engine (the same as local mode's)
//! attaches and the pipeline exports; a ProbeAttachment per spec reports what is attached
//! here.

pub mod api;
pub mod health;
mod specs;
pub mod status;

use crate::discover::cri::{CriClient, CriError};
use crate::engine::driver::{Input, SpecEvent};
use crate::engine::Mode;
use crate::pipeline::{warn_new_losses, Pipeline, PipelineError, PipelineOptions, RunSummary};
use gprobe_crds::ProbeAttachmentStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;
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

/// Where statuses go, and what was last written (so unchanged ones are not rewritten).
struct Publisher<'a> {
    node: &'a str,
    client: Option<&'a kube::Client>,
    report_file: Option<&'a Path>,
    last: BTreeMap<String, ProbeAttachmentStatus>,
}

impl Publisher<'_> {
    /// Writes each spec's attachment status where it goes if it changed.
    async fn publish(&mut self, pipeline: &Pipeline, health: &health::Health) {
        let snap = pipeline.engine.snapshot.borrow().clone();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let statuses = status::attachment_statuses(&snap, &pipeline.stats, now);
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
            let key = format!(
                "{}/{}",
                spec.metadata.namespace.as_deref().unwrap_or("default"),
                spec.display_name()
            );
            let mut cmp = st.clone();
            cmp.update_time = None;
            if self.last.get(&key) == Some(&cmp) {
                continue;
            }
            if let Some(c) = self.client {
                if let Err(e) = api::apply_attachment(c, spec, self.node, st).await {
                    tracing::warn!("updating the ProbeAttachment of {key}: {e}");
                    continue;
                }
            }
            self.last.insert(key, cmp);
        }
        self.last.retain(|k, _| {
            statuses.iter().any(|(s, _)| {
                *k == format!(
                    "{}/{}",
                    s.metadata.namespace.as_deref().unwrap_or("default"),
                    s.display_name()
                )
            })
        });
        if let Some(path) = self.report_file {
            let doc: BTreeMap<String, &ProbeAttachmentStatus> = statuses
                .iter()
                .map(|(s, st)| {
                    let ns = s.metadata.namespace.as_deref().unwrap_or("default");
                    (format!("{ns}/{}", s.display_name()), st)
                })
                .collect();
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
    opts: AgentOptions,
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
    let (pipeline, _) = Pipeline::start(&opts.pipeline, mode, Vec::new(), out)?;
    let health = health::Health::default();
    if let Some(addr) = opts.health_addr {
        tokio::spawn(health::serve(addr, health.clone()));
    }
    let mut publisher = Publisher {
        node: &opts.node_name,
        client: client.as_ref(),
        report_file: opts.report_file.as_deref(),
        last: BTreeMap::new(),
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
