//! /healthz, /readyz and /metrics for the agent's pod probes and Prometheus, and the trace
//! streams of `kubectl gprobe trace` (traces.rs), served by the hardened server of
//! `gprobe-httpd` (read deadlines, a connection cap, accept back-off).

use super::traces::Traces;
use gprobe_crds::trace::{parse_stream_path, TOKEN_HEADER};
use gprobe_httpd::{Handler, Limits, Request, Response, StreamStart, METRICS};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug, Default)]
struct State {
    ready: AtomicBool,
    attached: AtomicUsize,
    /// What the kernel lacks and what that costs, said after "ok" on /readyz.
    detail: Mutex<String>,
    /// Why gprobe cannot trace on this node at all (a kernel without what its programs
    /// need): /readyz says it, and never answers ready.
    unable: Mutex<Option<String>>,
    /// Served at `/traces/NAMESPACE/NAME` once set.
    traces: OnceLock<Traces>,
}

#[derive(Debug, Clone, Default)]
pub struct Health(Arc<State>);

impl Health {
    /// Ready once the container runtime answers.
    pub fn set_ready(&self, v: bool) {
        self.0.ready.store(v, Ordering::Relaxed);
    }

    /// Lines /readyz adds to its answer (the kernel's missing features).
    pub fn set_detail(&self, lines: &[String]) {
        let mut d = self.0.detail.lock().unwrap_or_else(|e| e.into_inner());
        *d = lines.iter().map(|l| format!("{l}\n")).collect();
    }

    /// gprobe cannot trace on this node: the agent stays up (no crash loop) and /readyz
    /// answers 503 with the reason.
    pub fn set_unable(&self, why: &str) {
        *self.0.unable.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
    }

    pub fn set_attached(&self, n: usize) {
        self.0.attached.store(n, Ordering::Relaxed);
    }

    /// Serves these trace streams (once; later calls are ignored).
    pub fn set_traces(&self, traces: Traces) {
        let _ = self.0.traces.set(traces);
    }
}

impl Handler for State {
    fn name(&self) -> &'static str {
        "health server"
    }

    fn respond(&self, path: &str) -> Response {
        let unable = self
            .unable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let ready = self.ready.load(Ordering::Relaxed) && unable.is_none();
        match path {
            "/healthz" => Response::text(200, "ok\n"),
            "/readyz" if unable.is_some() => Response::text(
                503,
                format!(
                    "gprobe cannot trace on this node: {}\n",
                    unable.unwrap_or_default()
                ),
            ),
            "/readyz" if ready => {
                let detail = self.detail.lock().unwrap_or_else(|e| e.into_inner());
                Response::text(200, format!("ok\n{detail}"))
            }
            "/readyz" => Response::text(503, "the container runtime has not answered yet\n"),
            "/metrics" => Response {
                code: 200,
                content_type: METRICS,
                body: format!(
                    "# HELP gprobe_agent_links_attached Probe links attached on this node.\n# \
                    TYPE gprobe_agent_links_attached gauge\ngprobe_agent_links_attached {}\n# \
                        HELP gprobe_agent_ready Whether the agent traces (the container \
                            runtime answers, the kernel has what gprobe needs).\n# TYPE \
                            gprobe_agent_ready gauge\ngprobe_agent_ready {}\n",
                    self.attached.load(Ordering::Relaxed),
                    u8::from(ready)
                ),
            },
            _ => Response::text(404, "not found\n"),
        }
    }

    fn stream(&self, request: &Request<'_>) -> Option<StreamStart> {
        let (namespace, name) = parse_stream_path(request.path)?;
        let (namespace, name) = (namespace.to_string(), name.to_string());
        let token = request.header(TOKEN_HEADER).map(str::to_string);
        let traces = self.traces.get().cloned();
        Some(Box::pin(async move {
            match traces {
                Some(t) => t.open(&namespace, &name, token.as_deref()).await,
                None => Err(Response::text(503, "this agent serves no traces yet\n")),
            }
        }))
    }
}

/// Serves until the task is dropped; a bind error is logged and ends it.
pub async fn serve(addr: SocketAddr, health: Health) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("--health-addr {addr}: {e}");
            return;
        }
    };
    gprobe_httpd::serve(listener, health.0, Limits::default()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_metrics() {
        let h = Health::default();
        assert_eq!(h.0.respond("/healthz").code, 200);
        assert_eq!(h.0.respond("/readyz").code, 503);
        h.set_ready(true);
        h.set_attached(3);
        assert_eq!(h.0.respond("/readyz").code, 200);
        assert_eq!(h.0.respond("/readyz").body, "ok\n");
        h.set_detail(&["kernel 6.1.0: task_kfuncs missing: x".into()]);
        assert_eq!(
            h.0.respond("/readyz").body,
            "ok\nkernel 6.1.0: task_kfuncs missing: x\n"
        );
        h.set_unable("this kernel (5.10.0-32-amd64) lacks what gprobe's uprobe programs need");
        let r = h.0.respond("/readyz");
        assert_eq!(r.code, 503, "never ready where gprobe cannot trace");
        assert_eq!(
            r.body,
            "gprobe cannot trace on this node: this kernel (5.10.0-32-amd64) lacks what \
             gprobe's uprobe programs need\n"
        );
        assert!(h
            .0
            .respond("/metrics")
            .body
            .contains("gprobe_agent_ready 0"));
        assert_eq!(h.0.respond("/healthz").code, 200, "alive: no restart helps");
        let m = h.0.respond("/metrics");
        assert!(
            m.body.contains("gprobe_agent_links_attached 3"),
            "{}",
            m.body
        );
        assert_eq!(m.content_type, METRICS);
        assert_eq!(h.0.respond("/nope").code, 404);
    }

    #[tokio::test]
    async fn trace_streams_are_served_at_their_path_with_the_token_header() {
        use crate::engine::driver::SpecEvent;
        use gprobe_crds::trace::TOKEN_DIGEST_ANNOTATION;
        let h = Health::default();
        let request = |headers| Request::new("/traces/shop/t1", headers);
        let without = h.0.stream(&request("")).expect("a trace path").await;
        assert_eq!(without.unwrap_err().code, 503, "no traces set yet");

        let traces = Traces::new("node-a");
        let text = format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: t1, namespace: \
             shop, annotations: {{{TOKEN_DIGEST_ANNOTATION}: '{}'}}}}\nspec:\n  selector: \
             {{images: [x]}}\n  probes: [{{symbol: main.f}}]\n",
            super::super::traces::token_digest("tok")
        );
        let spec = gprobe_crds::load_specs(&text, "t.yaml").unwrap().remove(0);
        traces.spec_event(&SpecEvent::Upsert(Box::new(spec)));
        h.set_traces(traces);
        let wrong =
            h.0.stream(&request("X-Gprobe-Trace-Token: nope\r\n"))
                .unwrap()
                .await;
        assert_eq!(wrong.unwrap_err().code, 403);
        let ok =
            h.0.stream(&request("x-gprobe-trace-token: tok\r\n"))
                .unwrap()
                .await;
        assert_eq!(ok.unwrap().content_type, "application/x-ndjson");
        assert!(
            h.0.stream(&Request::new("/metrics", "")).is_none(),
            "answered whole"
        );
    }
}
