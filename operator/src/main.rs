//! `gprobe-operator`: wiring only (flags, logs, signals, API client, leader election,
//! metrics server, controller). The logic lives in the library.

use anyhow::{bail, Context as _};
use clap::Parser;
use gprobe_crds::{ProbeAttachment, ProbeSpec};
use gprobe_operator::controller::{self, Context};
use gprobe_operator::leader::{self, LeaseLock};
use gprobe_operator::server::{self, Probes};
use kube::api::{Api, ListParams};
use kube::Client;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;
use tracing::level_filters::LevelFilter;
use tracing::{info, warn};

/// Validates gprobe ProbeSpecs and rolls the agents' ProbeAttachments up into their status.
#[derive(Debug, Parser)]
#[command(name = "gprobe-operator", version)]
struct Args {
    /// Run the controller only while holding the Lease `gprobe-operator` (in $POD_NAMESPACE,
    /// else --namespace, else the client's default namespace), so that several replicas can run.
    #[arg(long)]
    leader_elect: bool,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Watch ProbeSpecs in this namespace only (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    log_level: LevelFilter,
}

const LEASE_NAME: &str = "gprobe-operator";

fn hostname() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Turns true on the first SIGTERM or SIGINT; a second one exits at once.
fn watch_signals() -> anyhow::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        info!("shutting down (signal again to exit at once)");
        tx.send_replace(true);
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        warn!("second signal: exiting now");
        std::process::exit(130);
    });
    Ok(rx)
}

async fn client() -> anyhow::Result<Client> {
    match Client::try_default().await {
        Ok(c) => Ok(c),
        Err(kube::Error::TlsRequired) => bail!(
            "the API server speaks HTTPS but this gprobe-operator was built without TLS; \
             rebuild with the default feature `rustls-tls`"
        ),
        Err(e) => {
            Err(e).context("connecting to the Kubernetes API (in-cluster config or kubeconfig)")
        }
    }
}

/// Fails with a hint when the CRDs are not installed or not readable with our RBAC.
async fn check_crds(client: &Client, namespace: Option<&str>) -> anyhow::Result<()> {
    let lp = ListParams::default().limit(1);
    let (specs, atts): (Api<ProbeSpec>, Api<ProbeAttachment>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let hint = "are the CRDs installed (kubectl apply -f crds/crds.yaml) and may this service account list them?";
    specs
        .list(&lp)
        .await
        .with_context(|| format!("listing ProbeSpecs: {hint}"))?;
    atts.list(&lp)
        .await
        .with_context(|| format!("listing ProbeAttachments: {hint}"))?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_max_level(args.log_level)
        .init();

    let shutdown = watch_signals()?;
    let probes = Arc::new(Probes::default());
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("binding --metrics-addr {}", args.metrics_addr))?;
    info!(addr = %args.metrics_addr, "serving /metrics, /healthz, /readyz");
    let server = tokio::spawn(server::serve(listener, probes.clone(), shutdown.clone()));

    let client = client().await?;
    check_crds(&client, args.namespace.as_deref()).await?;
    probes.ready.store(true, Ordering::Relaxed);

    let pod_name = std::env::var("POD_NAME").ok().filter(|s| !s.is_empty());
    let ctx = Context::new(client.clone(), probes.clone(), pod_name.clone());

    let (leading_tx, leading_rx) = watch::channel(!args.leader_elect);
    let (stop_campaign_tx, stop_campaign_rx) = watch::channel(false);
    // Without leader election, `leading` stays true: keep its sender alive until the end.
    let mut always_leading = None;
    let campaign = if args.leader_elect {
        let namespace = std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| args.namespace.clone())
            .unwrap_or_else(|| client.default_namespace().to_string());
        let identity = pod_name
            .or_else(hostname)
            .context("no holder identity for the lease: set POD_NAME")?;
        info!(lease = %format!("{namespace}/{LEASE_NAME}"), %identity, "leader election");
        let lock = LeaseLock::new(client.clone(), &namespace, LEASE_NAME, &identity);
        Some(tokio::spawn(leader::campaign(
            lock,
            leading_tx,
            stop_campaign_rx,
        )))
    } else {
        always_leading = Some(leading_tx);
        None
    };

    controller::supervise(ctx, args.namespace.clone(), leading_rx, shutdown.clone()).await;

    // The controller has stopped: only now give the lease away.
    stop_campaign_tx.send_replace(true);
    if let Some(c) = campaign {
        let _ = c.await;
    }
    drop(always_leading);
    let _ = server.await;
    info!("stopped");
    Ok(())
}
