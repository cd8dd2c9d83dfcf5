//! The calls from gprobe's agents: one stream per node that runs a traced pod, from that
//! node's agent, through the API server's pod proxy with the user's own credentials
//! (`pods/proxy` on the agent pods), carrying the trace's token (gprobe_crds::trace).

use futures::{AsyncBufReadExt, StreamExt};
use gprobe_crds::trace::{stream_path, TOKEN_HEADER};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// What a node's stream task reports.
#[derive(Debug)]
pub enum Event {
    /// A line of the stream (a call or a notice).
    Line(String),
    /// The stream ended: `Ok` when the agent closed it, or why it failed.
    Closed {
        node: String,
        result: Result<(), String>,
    },
}

/// Where a trace's streams come from.
#[derive(Clone)]
pub struct Agents {
    pub client: Client,
    pub namespace: String,
    pub selector: String,
    pub port: u16,
}

impl Agents {
    /// The running agent pod of each node.
    pub async fn by_node(&self) -> Result<BTreeMap<String, String>, kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(&self.selector))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.metadata.deletion_timestamp.is_none()
            })
            .filter_map(|p| Some((p.spec?.node_name?, p.metadata.name?)))
            .collect())
    }

    /// The pod proxy path of trace `namespace/name` on agent pod `agent`.
    pub fn proxy_path(&self, agent: &str, namespace: &str, name: &str) -> String {
        format!(
            "/api/v1/namespaces/{}/pods/{agent}:{}/proxy{}",
            self.namespace,
            self.port,
            stream_path(namespace, name)
        )
    }

    /// Streams trace `namespace/name` from `agent` (on `node`) into `tx` until the agent
    /// ends it or the receiver is gone.
    pub async fn follow(
        self,
        node: String,
        agent: String,
        namespace: String,
        name: String,
        token: String,
        tx: mpsc::Sender<Event>,
    ) {
        let path = self.proxy_path(&agent, &namespace, &name);
        let result = self.read(&path, &token, &tx).await;
        let _ = tx.send(Event::Closed { node, result }).await;
    }

    /// After [`RECONNECT_DELAY`]: [`follow`](Self::follow) from the agent that runs on
    /// `node` now.
    pub async fn follow_again(
        self,
        node: String,
        namespace: String,
        name: String,
        token: String,
        tx: mpsc::Sender<Event>,
    ) {
        tokio::time::sleep(RECONNECT_DELAY).await;
        let agent = match self.by_node().await {
            Ok(mut agents) => agents.remove(&node),
            Err(e) => {
                let result = Err(format!("listing gprobe's agents: {e}"));
                let _ = tx.send(Event::Closed { node, result }).await;
                return;
            }
        };
        match agent {
            Some(agent) => self.follow(node, agent, namespace, name, token, tx).await,
            None => {
                let result = Err("no gprobe agent runs on the node now".to_string());
                let _ = tx.send(Event::Closed { node, result }).await;
            }
        }
    }

    async fn read(&self, path: &str, token: &str, tx: &mpsc::Sender<Event>) -> Result<(), String> {
        let request = http::Request::get(path)
            .header(TOKEN_HEADER, token)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let body = self
            .client
            .request_stream(request)
            .await
            .map_err(|e| describe(&e, &self.namespace))?;
        let mut lines = body.lines();
        while let Some(line) = lines.next().await {
            let line = line.map_err(|e| format!("reading the stream: {e}"))?;
            if line.is_empty() {
                continue;
            }
            if tx.send(Event::Line(line)).await.is_err() {
                break;
            }
        }
        Ok(())
    }
}

/// How often one node's stream is opened again after it broke, during one trace.
pub const MAX_RECONNECTS: u32 = 5;
/// The pause before opening it again (an agent pod being replaced needs a moment).
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// How long the streams of the nodes that ran traced pods get to end after the spec's
/// deletion: each agent sends its last calls and counts, then closes.
pub const END_WAIT: Duration = Duration::from_secs(5);

/// A stream's failure, in words: the API server's refusal (a missing `pods/proxy` right),
/// or the agent's (a wrong token).
fn describe(e: &kube::Error, system: &str) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 && s.message.contains("pods/proxy") => format!(
            "refused by the API server: you may not proxy to gprobe's agent pods in \
             namespace {system} (get pods/proxy): {}",
            s.message
        ),
        kube::Error::Api(s) => format!("HTTP {}: {}", s.code, s.message.trim()),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn streams_go_through_the_agents_pod_proxy() {
        // A client that is never used: only the path is built.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let agents = Agents {
            client: Client::try_from(config).unwrap(),
            namespace: "gprobe-system".into(),
            selector: "app=agent".into(),
            port: 9090,
        };
        assert_eq!(
            agents.proxy_path("gprobe-agent-x1", "shop", "get-1a2b"),
            "/api/v1/namespaces/gprobe-system/pods/gprobe-agent-x1:9090/proxy/traces/shop/get-1a2b"
        );
    }
}
