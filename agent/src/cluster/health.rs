//! /healthz, /readyz and /metrics for the agent's pod probes and Prometheus.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Clone, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
    attached: Arc<AtomicUsize>,
}

impl Health {
    /// Ready once the container runtime answers.
    pub fn set_ready(&self, v: bool) {
        self.ready.store(v, Ordering::Relaxed);
    }
    pub fn set_attached(&self, n: usize) {
        self.attached.store(n, Ordering::Relaxed);
    }

    fn respond(&self, path: &str) -> (u16, String) {
        match path {
            "/healthz" => (200, "ok\n".into()),
            "/readyz" if self.ready.load(Ordering::Relaxed) => (200, "ok\n".into()),
            "/readyz" => (503, "the container runtime has not answered yet\n".into()),
            "/metrics" => (
                200,
                format!(
                    "# HELP gprobe_agent_links_attached Probe links attached on this node.\n# TYPE gprobe_agent_links_attached gauge\ngprobe_agent_links_attached {}\n# HELP gprobe_agent_ready Whether the container runtime answers.\n# TYPE gprobe_agent_ready gauge\ngprobe_agent_ready {}\n",
                    self.attached.load(Ordering::Relaxed),
                    u8::from(self.ready.load(Ordering::Relaxed))
                ),
            ),
            _ => (404, "not found\n".into()),
        }
    }
}

pub async fn serve(addr: SocketAddr, health: Health) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("--health-addr {addr}: {e}");
            return;
        }
    };
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let h = health.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let n = sock.read(&mut buf).await.unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let path = req.split_whitespace().nth(1).unwrap_or("/");
            let (code, body) = h.respond(path);
            let reason = match code {
                200 => "OK",
                503 => "Service Unavailable",
                _ => "Not Found",
            };
            let _ = sock
                .write_all(
                    format!(
                        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_metrics() {
        let h = Health::default();
        assert_eq!(h.respond("/healthz").0, 200);
        assert_eq!(h.respond("/readyz").0, 503);
        h.set_ready(true);
        h.set_attached(3);
        assert_eq!(h.respond("/readyz").0, 200);
        assert!(h
            .respond("/metrics")
            .1
            .contains("gprobe_agent_links_attached 3"));
        assert_eq!(h.respond("/nope").0, 404);
    }
}
