//! Load on the operator and the API server as a large cluster's agents make it: `--nodes`
//! simulated agents, each writing one ProbeAttachment per ProbeSpec (`--specs` of them) the
//! way `gprobe agent` does (server-side apply of the object, then of its status), and then
//! changing every status once per `--period`, spread evenly over the period (the status
//! alone, one request: the agent applies the object once per spec).
//!
//! What it measures is the operator's roll-up latency: each status change adds 1 to the
//! attachment's `processesMissed`, which the operator sums into `ProbeSpec.status`. When a
//! change's write returns, the tool knows how many changes of that ProbeSpec have been
//! written (T); the change is rolled up when a watched ProbeSpec status first shows a sum of
//! at least T. It prints p50/p90/p99/max of that delay over the changes of the steady phase,
//! the writes per second achieved, and the changes never rolled up before the end, then
//! deletes its namespace (unless --keep).
//!
//!   attachment-load --nodes 1000 --specs 10 --period 30s --duration 120s
//!
//! It talks to the cluster of $KUBECONFIG. The operator must be running.

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use futures::{stream, StreamExt, TryStreamExt};
use gprobe_crds::{
    new_attachment, ContainerRef, LinkState, LinkStatus, ProbeAttachment, ProbeAttachmentStatus,
    ProbeSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    about = "Writes ProbeAttachments as N agents would and measures the operator's roll-up latency"
)]
struct Args {
    /// Simulated nodes (one agent each).
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// ProbeSpecs; every node writes one ProbeAttachment per ProbeSpec.
    #[arg(long, default_value_t = 10)]
    specs: usize,
    /// How often each agent changes each of its attachments' status.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    period: Duration,
    /// How long the steady phase (status changes) lasts.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    duration: Duration,
    /// Requests in flight at most (all agents together).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Namespace of the ProbeSpecs and ProbeAttachments (created, deleted at the end).
    #[arg(long, default_value = "gprobe-load")]
    namespace: String,
    /// Leave the namespace and its objects in place.
    #[arg(long)]
    keep: bool,
}

/// A `--period`/`--duration` value that is not a number with a unit (s, m, ms).
#[derive(Debug, thiserror::Error)]
#[error("{0}: expected e.g. 30s, 2m")]
struct BadDuration(String);

fn parse_duration(s: &str) -> Result<Duration, BadDuration> {
    let bad = || BadDuration(s.to_string());
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().map_err(|_| bad())?;
    match unit {
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "ms" => Ok(Duration::from_millis(n)),
        _ => Err(bad()),
    }
}

/// One change written: which spec, when its write returned, and how many changes of that
/// spec had been written then.
struct Written {
    spec: usize,
    at: Instant,
    total: u64,
}

/// The status an agent of `node` reports for a spec: one container and one attached link
/// (about the size of a real one), and `missed` as its processesMissed count.
fn status(node: usize, missed: u64) -> ProbeAttachmentStatus {
    let id = format!("{node:064x}");
    ProbeAttachmentStatus {
        update_time: Some(Time(Timestamp::now())),
        containers: vec![ContainerRef {
            namespace: "shop".into(),
            pod: format!("shop-{node}"),
            pod_uid: format!("00000000-0000-0000-0000-{node:012}"),
            container: "app".into(),
            container_id: id.clone(),
            image: "registry.example/shop/app:v1".into(),
            pid: 4242,
        }],
        links: vec![LinkStatus {
            container: id,
            pod: format!("shop-{node}"),
            symbol: "main.handleOrder".into(),
            state: LinkState::Attached,
            message: None,
            hits: missed * 100,
            lost: 0,
            throttled: 0,
            site: None,
        }],
        processes_matched: 1 + missed,
        processes_traced: 1,
        processes_missed: missed,
        ..Default::default()
    }
}

/// Writes the attachment of `spec` on `node` as the agent does: the object (only the first
/// time, as the agent applies it once per spec), then its status.
async fn write(
    api: &Api<ProbeAttachment>,
    spec: &ProbeSpec,
    node: usize,
    missed: u64,
    object_applied: bool,
) -> Result<()> {
    let node_name = format!("load-node-{node:04}");
    let obj = new_attachment(spec, &node_name);
    let name = obj.metadata.name.clone().unwrap_or_default();
    let pp = PatchParams::apply("gprobe-agent").force();
    if !object_applied {
        api.patch(&name, &pp, &Patch::Apply(&obj)).await?;
    }
    let body = serde_json::json!({
        "apiVersion": gprobe_crds::API_VERSION,
        "kind": "ProbeAttachment",
        "status": status(node, missed),
    });
    api.patch_status(&name, &pp, &Patch::Apply(&body)).await?;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.nodes == 0 || args.specs == 0 {
        bail!("--nodes and --specs must be at least 1");
    }
    let client = Client::try_default()
        .await
        .context("connecting to the cluster of $KUBECONFIG")?;
    let ns = args.namespace.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?;
    match namespaces.create(&PostParams::default(), &ns_obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("creating the namespace"),
    }
    let specs_api: Api<ProbeSpec> = Api::namespaced(client.clone(), &ns);
    let atts: Api<ProbeAttachment> = Api::namespaced(client.clone(), &ns);
    let mut specs = Vec::new();
    for s in 0..args.specs {
        let name = format!("load-{s}");
        let body = serde_json::json!({
            "apiVersion": gprobe_crds::API_VERSION, "kind": "ProbeSpec",
            "metadata": {"name": name},
            "spec": {"selector": {"executable": "/load/none"}, "probes": [{"symbol": "main.handleOrder"}]},
        });
        let spec = specs_api
            .patch(
                &name,
                &PatchParams::apply("attachment-load").force(),
                &Patch::Apply(&body),
            )
            .await
            .with_context(|| format!("creating ProbeSpec {name}"))?;
        specs.push(spec);
    }
    let specs = Arc::new(specs);

    // Every ProbeSpec status the operator writes, as the watch delivers it: (spec, when, sum).
    let seen: Arc<Mutex<Vec<(usize, Instant, u64)>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let stream = watcher(specs_api.clone(), watcher::Config::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(ev)) = stream.try_next().await {
                let objs: Vec<ProbeSpec> = match ev {
                    watcher::Event::Apply(s) | watcher::Event::InitApply(s) => vec![s],
                    _ => continue,
                };
                let now = Instant::now();
                for s in objs {
                    let (Some(name), Some(st)) = (s.metadata.name.as_deref(), s.status.as_ref())
                    else {
                        continue;
                    };
                    if let Some(i) = name
                        .strip_prefix("load-")
                        .and_then(|i| i.parse::<usize>().ok())
                    {
                        seen.lock().unwrap_or_else(|e| e.into_inner()).push((
                            i,
                            now,
                            st.processes_missed,
                        ));
                    }
                }
            }
        })
    };

    // Phase 1: every agent writes its attachments (processesMissed 0).
    let t0 = Instant::now();
    let pairs: Vec<(usize, usize)> = (0..args.nodes)
        .flat_map(|n| (0..args.specs).map(move |s| (n, s)))
        .collect();
    stream::iter(pairs)
        .map(|(n, s)| {
            let (atts, specs) = (atts.clone(), specs.clone());
            async move { write(&atts, &specs[s], n, 0, false).await }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await
        .context("creating the ProbeAttachments")?;
    let created = t0.elapsed();
    println!(
        "created {} ProbeAttachments ({} nodes x {} specs) in {:.1} s: {:.0} attachments/s (2 requests each)",
        args.nodes * args.specs,
        args.nodes,
        args.specs,
        created.as_secs_f64(),
        (args.nodes * args.specs) as f64 / created.as_secs_f64()
    );

    // Phase 2: each (node, spec) changes once per period, at its node's offset in the period.
    let written: Arc<Mutex<Vec<Written>>> = Arc::default();
    let totals: Arc<Vec<Mutex<u64>>> = Arc::new((0..args.specs).map(|_| Mutex::new(0)).collect());
    let missed: Arc<Vec<Mutex<u64>>> = Arc::new(
        (0..args.nodes * args.specs)
            .map(|_| Mutex::new(0))
            .collect(),
    );
    let start = Instant::now();
    let per_round = args.nodes * args.specs;
    let rounds = (args.duration.as_secs_f64() / args.period.as_secs_f64())
        .ceil()
        .max(1.0) as usize;
    let errors = Arc::new(Mutex::new(0u64));
    let late = Arc::new(Mutex::new(Duration::ZERO));
    stream::iter(0..rounds * per_round)
        .map(|k| {
            let (atts, specs, written, totals, missed, errors, late) = (
                atts.clone(),
                specs.clone(),
                written.clone(),
                totals.clone(),
                missed.clone(),
                errors.clone(),
                late.clone(),
            );
            let (round, i) = (k / per_round, k % per_round);
            let (n, s) = (i / args.specs, i % args.specs);
            let due = args
                .period
                .mul_f64(round as f64 + n as f64 / args.nodes as f64);
            async move {
                let now = start.elapsed();
                if due > now {
                    tokio::time::sleep(due - now).await;
                } else {
                    let mut l = late.lock().unwrap_or_else(|e| e.into_inner());
                    *l = (*l).max(now - due);
                }
                let value = {
                    let mut m = missed[i].lock().unwrap_or_else(|e| e.into_inner());
                    *m += 1;
                    *m
                };
                match write(&atts, &specs[s], n, value, true).await {
                    Ok(()) => {
                        let at = Instant::now();
                        let total = {
                            let mut t = totals[s].lock().unwrap_or_else(|e| e.into_inner());
                            *t += 1;
                            *t
                        };
                        written
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Written { spec: s, at, total });
                    }
                    Err(e) => {
                        *errors.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                        eprintln!("write {n}/{s}: {e:#}");
                    }
                }
            }
        })
        .buffer_unordered(args.concurrency)
        .collect::<Vec<()>>()
        .await;
    let steady = start.elapsed();
    // Give the operator time to roll up the last changes.
    tokio::time::sleep(Duration::from_secs(15)).await;
    watch.abort();

    let written = std::mem::take(&mut *written.lock().unwrap_or_else(|e| e.into_inner()));
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    let mut by_spec: HashMap<usize, Vec<(Instant, u64)>> = HashMap::new();
    for (s, at, v) in seen {
        by_spec.entry(s).or_default().push((at, v));
    }
    let mut delays = Vec::new();
    let mut unresolved = 0u64;
    for w in &written {
        let first = by_spec.get(&w.spec).and_then(|obs| {
            obs.iter()
                .filter(|(_, v)| *v >= w.total)
                .map(|(at, _)| *at)
                .min()
        });
        match first {
            Some(at) => delays.push(at.saturating_duration_since(w.at)),
            None => unresolved += 1,
        }
    }
    delays.sort();
    let n = written.len();
    println!(
        "steady phase: {} status changes in {:.1} s ({:.1} changes/s, one request each; planned \
        {:.1}/s), {} failed writes, writes behind schedule by at most {:.1} s",
        n,
        steady.as_secs_f64(),
        n as f64 / steady.as_secs_f64(),
        per_round as f64 / args.period.as_secs_f64(),
        *errors.lock().unwrap_or_else(|e| e.into_inner()),
        late.lock().unwrap_or_else(|e| e.into_inner()).as_secs_f64()
    );
    println!(
        "roll-up latency (change written -> ProbeSpec status shows it): p50 {:.3} s, p90 {:.3} s, \
        p99 {:.3} s, max {:.3} s over {} changes; {} not rolled up within 15 s of the end",
        percentile(&delays, 0.5).as_secs_f64(),
        percentile(&delays, 0.9).as_secs_f64(),
        percentile(&delays, 0.99).as_secs_f64(),
        delays.last().copied().unwrap_or_default().as_secs_f64(),
        delays.len(),
        unresolved
    );
    if !args.keep {
        namespaces
            .delete(&ns, &DeleteParams::default())
            .await
            .context("deleting the namespace")?;
        println!("deleting namespace {ns} (its objects go with it)");
    }
    Ok(())
}
