//! `/metrics`, `/healthz` and `/readyz` of the operator, served by the hardened server of
//! `gprobe-httpd` (read deadlines, a connection cap, accept back-off).

use crate::metrics::Metrics;
use gprobe_httpd::{Handler, Limits, Response, METRICS};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What the endpoints report.
#[derive(Debug, Default)]
pub struct Probes {
    pub metrics: Metrics,
    /// Set once the operator has reached the API server and found its CRDs.
    pub ready: AtomicBool,
}

/// Serves until `stop` turns true (or its sender is dropped).
pub async fn serve(listener: TcpListener, probes: Arc<Probes>, mut stop: watch::Receiver<bool>) {
    let server = gprobe_httpd::serve(listener, probes, Limits::default());
    tokio::pin!(server);
    loop {
        tokio::select! {
            _ = &mut server => return,
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

impl Handler for Probes {
    fn name(&self) -> &'static str {
        "metrics server"
    }

    fn respond(&self, path: &str) -> Response {
        match path {
            "/metrics" => Response {
                code: 200,
                content_type: METRICS,
                body: self.metrics.render(),
            },
            "/healthz" => Response::text(200, "ok\n"),
            "/readyz" if self.ready.load(Ordering::Relaxed) => Response::text(200, "ok\n"),
            "/readyz" => Response::text(
                503,
                "not ready: the API server or the CRDs are not reachable yet\n",
            ),
            _ => Response::text(404, "try /metrics, /healthz or /readyz\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let probes = Arc::new(Probes::default());
        probes.metrics.reconciled(Duration::from_millis(1));
        let (stop_tx, stop_rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, probes.clone(), stop_rx));

        let r = get(addr, "/metrics").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("\ngprobe_operator_reconciliations_total 1\n"),
            "{r}"
        );
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200 OK"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        probes.ready.store(true, Ordering::Relaxed);
        assert!(get(addr, "/readyz?verbose")
            .await
            .starts_with("HTTP/1.1 200 OK"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));

        stop_tx.send(true).unwrap();
        server.await.unwrap();
    }
}
