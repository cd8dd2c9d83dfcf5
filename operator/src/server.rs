//! A minimal HTTP/1.1 server for `/metrics`, `/healthz` and `/readyz`: one GET per
//! connection, answered and closed. Enough for Prometheus and kubelet probes, with no web
//! framework.

use crate::metrics::Metrics;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::debug;

const MAX_HEAD: usize = 8 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the endpoints report.
#[derive(Debug, Default)]
pub struct Probes {
    pub metrics: Metrics,
    /// Set once the operator has reached the API server and found its CRDs.
    pub ready: AtomicBool,
}

/// Serves until `stop` turns true (or its sender is dropped).
pub async fn serve(listener: TcpListener, probes: Arc<Probes>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let probes = probes.clone();
                    tokio::spawn(async move {
                        if let Err(e) = handle(stream, &probes).await {
                            debug!(error = %e, "metrics connection");
                        }
                    });
                }
                Err(e) => {
                    debug!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

/// The request line's method and path (without the query), once the head is complete.
fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(head).ok()?;
    let line = text.lines().next()?;
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

/// Status line, content type and body for one request.
pub fn respond(method: &str, path: &str, probes: &Probes) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != "GET" {
        return ("405 Method Not Allowed", TEXT, "only GET\n".into());
    }
    match path {
        "/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            probes.metrics.render(),
        ),
        "/healthz" => ("200 OK", TEXT, "ok\n".into()),
        "/readyz" if probes.ready.load(Ordering::Relaxed) => ("200 OK", TEXT, "ok\n".into()),
        "/readyz" => (
            "503 Service Unavailable",
            TEXT,
            "not ready: the API server or the CRDs are not reachable yet\n".into(),
        ),
        _ => (
            "404 Not Found",
            TEXT,
            "try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

async fn handle(mut stream: TcpStream, probes: &Probes) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
                return Ok(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(false);
            }
        }
    })
    .await
    .unwrap_or(Ok(false))?;
    let (status, ctype, body) = match request_line(&head).filter(|_| complete) {
        Some((method, path)) => respond(method, path, probes),
        None => ("400 Bad Request", "text/plain", "bad request\n".into()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

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
