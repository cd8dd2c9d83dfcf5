//! One trace, from the rights check to the summary: create the ProbeSpec, follow the nodes
//! of the traced pods (pods that start or move later included), print the calls, and on
//! Ctrl-C or `--for` delete the spec, take each node's last calls and counts, summarize.

use crate::access;
use crate::cli::TraceArgs;
use crate::error::Error;
use crate::output::{parse_line, Format, Line, Tally, TABLE_HEAD};
use crate::spec::{self, Request};
use crate::stream::{Agents, Event, END_WAIT, MAX_RECONNECTS};
use crate::target::{self, selector_query, Target};
use futures::StreamExt;
use gprobe_crds::oneliner::spec_yaml;
use gprobe_crds::ProbeSpec;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Runs `kubectl gprobe trace`.
pub async fn trace(args: TraceArgs) -> Result<(), Error> {
    let started = Instant::now();
    let (target, probe) = args.target_and_probe().map_err(Error::Usage)?;
    let target = match (target, &args.selector) {
        (Some(t), _) => Target::parse(t)?,
        (None, Some(s)) => Target::Selector(s.clone()),
        (None, None) => return Err(Error::Usage("give TARGET or -l SELECTOR".into())),
    };
    let request = |namespace, selection| Request {
        probe,
        namespace,
        selection,
        container: args.container.as_deref(),
        signature: args.signature.as_deref(),
        when: args.when.as_deref(),
        hist: args.hist,
        run_for: args.for_,
        margin: args.expiry_margin,
    };
    // The probe and its flags are checked first: a typo costs no request.
    let any_pods = target::Selection {
        labels: target::parse_selector("app=any")?,
        pod_name: None,
    };
    spec::build(&request("default", &any_pods), "check")?;
    let (client, default_ns) = connect(&args).await?;
    let namespace = args.namespace.clone().unwrap_or(default_ns);
    if !args.dry_run {
        let user = args.as_user.clone().unwrap_or_else(|| "you".into());
        access::check(
            &client,
            &access::needed(&namespace, &args.gprobe_namespace()),
            &user,
        )
        .await?;
    }
    let selection = target::resolve(&client, &namespace, &target).await?;
    let token = spec::new_token()?;
    let spec = spec::build(&request(&namespace, &selection), &token)?;
    if args.dry_run {
        print!("{}", spec_yaml(&spec));
        return Ok(());
    }
    let agents = Agents {
        client: client.clone(),
        namespace: args.gprobe_namespace(),
        selector: args.agent_selector.clone(),
        port: args.agent_port,
    };
    let known = agents.by_node().await.map_err(|source| Error::Api {
        what: format!("listing gprobe's agents in namespace {}", agents.namespace),
        source,
    })?;
    if known.is_empty() {
        return Err(Error::NoAgents {
            namespace: agents.namespace.clone(),
            selector: agents.selector.clone(),
        });
    }
    let specs: Api<ProbeSpec> = Api::namespaced(client.clone(), &namespace);
    let created = specs
        .create(&PostParams::default(), &spec)
        .await
        .map_err(|source| Error::Api {
            what: format!("creating ProbeSpec {namespace}/{}", spec.name_any()),
            source,
        })?;
    let name = created.name_any();
    eprintln!(
        "tracing {} in {} (ProbeSpec {namespace}/{name}, deleted at the end; by the operator \
         {} s after its creation otherwise)",
        created.spec.probes[0].symbol,
        target.shown(),
        created.spec.ttl_seconds.unwrap_or_default()
    );
    let format = match args.output.as_deref() {
        Some("json") => Format::Json,
        Some(_) => Format::Table,
        None if std::io::stdout().is_terminal() => Format::Table,
        None => Format::Json,
    };
    let run = Run {
        agents,
        known,
        namespace: namespace.clone(),
        name: name.clone(),
        token,
        pod_name: selection.pod_name.clone(),
        format,
        started,
    };
    let followed = run.follow(&client, &selection.labels, args.for_).await;
    // Whatever happened: the spec goes (only this very object: its uid).
    let deleted = specs
        .delete(
            &name,
            &DeleteParams {
                preconditions: Some(Preconditions {
                    uid: created.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            },
        )
        .await;
    let (mut tally, mut rx, open) = followed?;
    match deleted {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {
            eprintln!("the ProbeSpec was already gone (expired, or deleted by someone else)")
        }
        Err(source) => {
            return Err(Error::Api {
                what: format!(
                    "deleting ProbeSpec {namespace}/{name} (the operator deletes it when its \
                     ttlSeconds are up)"
                ),
                source,
            })
        }
    }
    run.drain(&mut tally, &mut rx, open).await;
    eprint!(
        "{}",
        tally.summary(args.hist, &created.spec.probes[0].symbol)
    );
    Ok(())
}

/// The kube client as the user's kubeconfig (or the pod's account) makes it, with
/// `--context` and impersonation; and the context's namespace.
async fn connect(args: &TraceArgs) -> Result<(Client, String), Error> {
    let mut config = match &args.context {
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Usage(format!("no kubeconfig and not in a pod: {e}")))?,
        Some(ctx) => kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions {
            context: Some(ctx.clone()),
            ..Default::default()
        })
        .await
        .map_err(Error::Config)?,
    };
    if let Some(user) = &args.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !args.as_groups.is_empty() {
        config.auth_info.impersonate_groups = Some(args.as_groups.clone());
    }
    let ns = config.default_namespace.clone();
    Ok((Client::try_from(config).map_err(Error::Client)?, ns))
}

/// A running trace.
struct Run {
    agents: Agents,
    /// Agent pod by node.
    known: BTreeMap<String, String>,
    namespace: String,
    name: String,
    token: String,
    /// `pod/NAME`: only its calls are shown.
    pod_name: Option<String>,
    format: Format,
    started: Instant,
}

/// What a finished follow hands on: the tally, the streams' channel, the nodes still open.
type Followed = (Tally, mpsc::Receiver<Event>, BTreeSet<String>);

impl Run {
    /// Follows the traced pods' nodes and prints calls until Ctrl-C, SIGTERM or `run_for`.
    async fn follow(
        &self,
        client: &Client,
        labels: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
        run_for: Option<Duration>,
    ) -> Result<Followed, Error> {
        let (tx, mut rx) = mpsc::channel::<Event>(1024);
        let mut tally = Tally {
            only_pod: self.pod_name.clone(),
            ..Tally::default()
        };
        let mut open: BTreeSet<String> = BTreeSet::new();
        let mut known = self.known.clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.namespace);
        let config = watcher::Config::default().labels(&selector_query(labels));
        let mut pod_events = watcher(pods, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        let stop_at = run_for.map(|d| tokio::time::Instant::now() + d);
        let deadline = async {
            match stop_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(deadline);
        // Registered once, before the loop: a signal between two turns is not missed.
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut failures: Vec<String> = Vec::new();
        let mut retries: BTreeMap<String, u32> = BTreeMap::new();
        let mut first_call: Option<Duration> = None;
        let mut out = std::io::stdout().lock();
        if self.format == Format::Table {
            let _ = writeln!(out, "{TABLE_HEAD}");
        }
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = int.recv() => break,
                _ = term.recv() => break,
                pod = pod_events.next() => match pod {
                    Some(Ok(pod)) => {
                        if self.pod_name.as_ref().is_some_and(|n| *n != pod.name_any()) {
                            continue;
                        }
                        let Some(node) = pod.spec.and_then(|s| s.node_name) else { continue };
                        if open.contains(&node) {
                            continue;
                        }
                        if !known.contains_key(&node) {
                            // An agent started since (a new node): look again.
                            if let Ok(now) = self.agents.by_node().await {
                                known = now;
                            }
                        }
                        let Some(agent) = known.get(&node).cloned() else {
                            eprintln!("pod {} runs on node {node}, which has no gprobe agent: \
                                       its calls are not traced", pod.metadata.name.unwrap_or_default());
                            continue;
                        };
                        open.insert(node.clone());
                        tokio::spawn(self.agents.clone().follow(
                            node,
                            agent,
                            self.namespace.clone(),
                            self.name.clone(),
                            self.token.clone(),
                            tx.clone(),
                        ));
                    }
                    // The watcher retries with backoff: said, not fatal.
                    Some(Err(e)) => eprintln!("watching the traced pods: {e} (retrying)"),
                    None => break,
                },
                ev = rx.recv() => match ev {
                    Some(ev) => {
                        if let Some((node, why)) = self.take(ev, &mut tally, &mut open, &mut out, &mut first_call) {
                            // An agent restarted (an upgrade), or the connection broke: its
                            // node is followed again, from the agent running there then.
                            let tries = retries.entry(node.clone()).or_insert(0u32);
                            if *tries < MAX_RECONNECTS {
                                *tries += 1;
                                eprintln!("node {node}: {why}; connecting again ({tries}/{MAX_RECONNECTS})");
                                open.insert(node.clone());
                                tokio::spawn(self.agents.clone().follow_again(
                                    node,
                                    self.namespace.clone(),
                                    self.name.clone(),
                                    self.token.clone(),
                                    tx.clone(),
                                ));
                                continue;
                            }
                            failures.push(format!("node {node}: {why}"));
                            if open.is_empty() && tally.nodes.is_empty() {
                                return Err(Error::NoStream(failures.join("; ")));
                            }
                        }
                        // Every node's stream ended by itself: the spec is gone (expired,
                        // or deleted by someone else).
                        if open.is_empty() && !tally.ended.is_empty() {
                            break;
                        }
                    }
                    None => break,
                },
            }
        }
        let _ = out.flush();
        if let Some(d) = first_call {
            eprintln!(
                "first call printed {:.2} s after the command started",
                d.as_secs_f64()
            );
        }
        drop(tx);
        Ok((tally, rx, open))
    }

    /// Takes one stream event: prints a call, says what a notice says. A stream that ended
    /// before its end line is returned: its node, and why.
    fn take(
        &self,
        ev: Event,
        tally: &mut Tally,
        open: &mut BTreeSet<String>,
        out: &mut impl Write,
        first_call: &mut Option<Duration>,
    ) -> Option<(String, String)> {
        match ev {
            Event::Line(line) => match parse_line(&line) {
                Some(Line::Call(call)) => {
                    let pod = call["resource"]["k8s.pod.name"].as_str().unwrap_or("");
                    if self.pod_name.as_deref().is_some_and(|n| n != pod) {
                        return None;
                    }
                    let text = tally.call(&call, &line, self.format);
                    first_call.get_or_insert_with(|| self.started.elapsed());
                    // A closed stdout (`| head`) is the reader's choice: go on counting.
                    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
                    None
                }
                Some(Line::Notice(n)) => {
                    for said in tally.notice(&n) {
                        eprintln!("{said}");
                    }
                    None
                }
                None => None,
            },
            Event::Closed { node, result } => {
                open.remove(&node);
                match result {
                    Ok(()) if tally.ended.contains(&node) => None,
                    Ok(()) => Some((node, "the agent closed the stream early".to_string())),
                    Err(e) => Some((node, e)),
                }
            }
        }
    }

    /// After the spec's deletion: each open stream's last calls and counts, for at most
    /// [`END_WAIT`].
    async fn drain(
        &self,
        tally: &mut Tally,
        rx: &mut mpsc::Receiver<Event>,
        mut open: BTreeSet<String>,
    ) {
        let mut out = std::io::stdout().lock();
        let mut first = None;
        let deadline = tokio::time::Instant::now() + END_WAIT;
        while !open.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(ev)) => {
                    self.take(ev, tally, &mut open, &mut out, &mut first);
                }
                Ok(None) => break,
                Err(_) => {
                    eprintln!(
                        "the streams of {} did not end within {END_WAIT:?} of the deletion",
                        open.iter().cloned().collect::<Vec<_>>().join(", ")
                    );
                    break;
                }
            }
        }
        let _ = out.flush();
    }
}
