use super::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// A handler like the agent's: health, readiness and one metric.
#[derive(Debug, Default)]
struct Health {
    ready: AtomicBool,
    attached: AtomicUsize,
}

impl Health {
    fn set_ready(&self, v: bool) {
        self.ready.store(v, Ordering::Relaxed);
    }
    fn set_attached(&self, n: usize) {
        self.attached.store(n, Ordering::Relaxed);
    }
}

impl Handler for Health {
    fn name(&self) -> &'static str {
        "test server"
    }
    fn respond(&self, path: &str) -> Response {
        match path {
            "/healthz" => Response::text(200, "ok\n"),
            "/readyz" if self.ready.load(Ordering::Relaxed) => Response::text(200, "ok\n"),
            "/readyz" => Response::text(503, "not ready\n"),
            "/metrics" => Response {
                code: 200,
                content_type: METRICS,
                body: format!(
                    "# HELP gprobe_agent_links_attached Probe links attached on this \
                    node.\ngprobe_agent_links_attached {}\ngprobe_agent_ready {}\n",
                    self.attached.load(Ordering::Relaxed),
                    u8::from(self.ready.load(Ordering::Relaxed))
                ),
            },
            _ => Response::text(404, "not found\n"),
        }
    }
    fn stream(&self, request: &Request<'_>) -> Option<StreamStart> {
        if request.path != "/stream" {
            return None;
        }
        let allowed = request.header("x-token") == Some("yes");
        Some(Box::pin(async move {
            if !allowed {
                return Err(Response::text(403, "no\n"));
            }
            let (tx, chunks) = mpsc::channel(4);
            tokio::spawn(async move {
                for chunk in ["one\n", "two\n"] {
                    let _ = tx.send(chunk.as_bytes().to_vec()).await;
                }
            });
            Ok(Stream {
                content_type: TEXT,
                chunks,
            })
        }))
    }
}

/// Every test's wait for an event is bounded by this, so a broken server fails the test
/// instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(10);

struct Server {
    addr: SocketAddr,
    permits: Arc<Semaphore>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(limits: Limits, health: Arc<Health>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let task = tokio::spawn(accept_loop(listener, health, limits, permits.clone()));
    Server {
        addr,
        permits,
        task,
    }
}

/// Reads until the server closes the connection; a reset counts as closed.
async fn read_to_close(sock: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(PATIENCE, sock.read(&mut buf))
            .await
            .expect("the server neither answered nor closed the connection")
        {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn get(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    read_to_close(&mut s).await
}

#[tokio::test]
async fn answers_probes_and_metrics_over_http() {
    let h = Arc::new(Health::default());
    let server = start(Limits::default(), h.clone()).await;
    let addr = server.addr;
    let r = get(addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.ends_with("\r\n\r\nok\n"), "{r}");
    let r = get(addr, "GET /readyz HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
    h.set_ready(true);
    h.set_attached(7);
    let r = get(addr, "GET /readyz?verbose HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    // A head that arrives in pieces is read to its end.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
    s.write_all(b"Accept: text/plain\r\n\r\n").await.unwrap();
    let r = read_to_close(&mut s).await;
    assert!(
        r.contains("\r\n\r\n# HELP gprobe_agent_links_attached"),
        "{r}"
    );
    assert!(r.contains("\ngprobe_agent_links_attached 7\n"), "{r}");
    assert!(r.contains("\ngprobe_agent_ready 1\n"), "{r}");
    let r = get(addr, "HEAD /healthz HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.ends_with("\r\n\r\n"), "HEAD has no body: {r}");
    let r = get(addr, "GET /nope HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
    let r = get(addr, "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    server.task.abort();
}

#[tokio::test]
async fn a_client_that_sends_nothing_is_dropped_after_the_deadline() {
    let limits = Limits {
        read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = start(limits, Arc::new(Health::default())).await;
    let addr = server.addr;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let t0 = std::time::Instant::now();
    let r = read_to_close(&mut idle).await;
    assert!(r.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{r}");
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "closed after {:?}, before the deadline",
        t0.elapsed()
    );
    // A client that trickles a head never completes it: the deadline is for the whole
    // head, not for each read.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let (mut rd, mut wr) = slow.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if wr.write_all(b"X-A: b\r\n").await.is_err() {
                break;
            }
            tokio::select! {
                _ = rx.recv() => break,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    });
    let mut out = Vec::new();
    timeout(PATIENCE, rd.read_to_end(&mut out))
        .await
        .expect("the trickling client was not dropped")
        .ok();
    let _ = tx.send(()).await;
    trickle.await.unwrap();
    let r = String::from_utf8_lossy(&out);
    assert!(r.starts_with("HTTP/1.1 408 "), "{r}");
    server.task.abort();
}

#[tokio::test]
async fn a_head_over_the_limit_gets_431() {
    let server = start(Limits::default(), Arc::new(Health::default())).await;
    let addr = server.addr;
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(5000));
    let r = get(addr, &long).await;
    assert!(
        r.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{r}"
    );
    // Long headers count too, even when the request line is short.
    let long = format!(
        "GET /healthz HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "b".repeat(5000)
    );
    let r = get(addr, &long).await;
    assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
    // The server still answers afterwards.
    let r = get(addr, "GET /healthz HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    server.task.abort();
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once_and_probes_work_after_idle_ones_time_out() {
    let limits = Limits {
        read_timeout: Duration::from_secs(1),
        max_connections: 2,
        ..Limits::default()
    };
    let server = start(limits, Arc::new(Health::default())).await;
    let addr = server.addr;
    // Two idle connections take both slots (accepted in order, before the third).
    let mut idle: Vec<TcpStream> = Vec::new();
    for _ in 0..2 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // The third is refused at once: it is answered long before the idle ones time out.
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let r = read_to_close(&mut extra).await;
    assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
    let mut probe = [0u8; 1];
    for s in &idle {
        assert!(
            matches!(s.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock),
            "an idle connection was answered before its deadline"
        );
    }
    // So is a probe while the slots are taken.
    let r = get(addr, "GET /healthz HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
    // Once the idle ones are dropped, probes are served again.
    for s in &mut idle {
        let r = read_to_close(s).await;
        assert!(r.starts_with("HTTP/1.1 408 "), "{r}");
    }
    drop(idle);
    // Both slots come back (the handlers end after closing their connections).
    let freed = timeout(PATIENCE, server.permits.acquire_many(2))
        .await
        .expect("the timed-out connections kept their slots");
    drop(freed);
    let r = get(addr, "GET /healthz HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    server.task.abort();
}

/// An acceptor that fails with `errors` (one per call), records when it was called,
/// and then never accepts again.
struct Failing {
    errors: Vec<io::Error>,
    calls: mpsc::UnboundedSender<Instant>,
}

impl Acceptor for Failing {
    fn accept(&mut self) -> impl Future<Output = io::Result<TcpStream>> + Send {
        let _ = self.calls.send(Instant::now());
        let next = if self.errors.is_empty() {
            None
        } else {
            Some(self.errors.remove(0))
        };
        async move {
            match next {
                Some(e) => Err(e),
                None => std::future::pending().await,
            }
        }
    }
}

fn emfile() -> io::Error {
    io::Error::from_raw_os_error(libc::EMFILE)
}

#[tokio::test(start_paused = true)]
async fn accept_errors_back_off_instead_of_spinning() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let errors = vec![
        emfile(),
        io::Error::from_raw_os_error(libc::ENFILE),
        emfile(),
        emfile(),
        emfile(),
        emfile(),
        emfile(),
        emfile(),
        emfile(),
    ];
    let n = errors.len();
    let failing = Failing { errors, calls: tx };
    let permits = Arc::new(Semaphore::new(1));
    let server = tokio::spawn(accept_loop(
        failing,
        Arc::new(Health::default()),
        Limits::default(),
        permits,
    ));
    let mut at = Vec::new();
    for _ in 0..=n {
        at.push(rx.recv().await.expect("accept loop ended"));
    }
    let gaps: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    // 10 ms doubling per error, capped at 1 s (the clock is virtual: exact).
    assert_eq!(gaps, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    server.abort();
}

#[test]
fn backoff_resets_after_success_and_ignores_per_connection_errors() {
    let mut b = Backoff::default();
    assert_eq!(b.next_delay(&emfile()), Duration::from_millis(10));
    assert_eq!(b.next_delay(&emfile()), Duration::from_millis(20));
    let aborted = io::Error::from(io::ErrorKind::ConnectionAborted);
    assert_eq!(b.next_delay(&aborted), Duration::from_millis(10));
    assert_eq!(b.next_delay(&emfile()), Duration::from_millis(40));
    b.reset();
    assert_eq!(b.next_delay(&emfile()), Duration::from_millis(10));
}

#[test]
fn accept_errors_are_logged_at_most_once_per_interval_with_a_count() {
    let mut r = RateLimit::new(LOG_EVERY);
    let t0 = Instant::now();
    assert_eq!(r.allow(t0), Some(0));
    for i in 1..=5 {
        assert_eq!(r.allow(t0 + Duration::from_secs(i)), None);
    }
    assert_eq!(r.allow(t0 + LOG_EVERY), Some(5));
    assert_eq!(r.allow(t0 + LOG_EVERY + Duration::from_secs(1)), None);
    assert_eq!(r.allow(t0 + LOG_EVERY * 2), Some(1));
}

#[tokio::test]
async fn a_stream_is_written_chunk_by_chunk_and_ends_with_the_connection() {
    let server = start(Limits::default(), Arc::new(Health::default())).await;
    let ok = get(
        server.addr,
        "GET /stream?x=1 HTTP/1.1\r\nHost: a\r\nX-Token:  yes \r\n\r\n",
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    assert!(!ok.contains("Content-Length"), "{ok}");
    assert!(ok.ends_with("\r\n\r\none\ntwo\n"), "{ok}");
    let refused = get(server.addr, "GET /stream HTTP/1.1\r\nX-Token: no\r\n\r\n").await;
    assert!(
        refused.starts_with("HTTP/1.1 403 Forbidden\r\n"),
        "{refused}"
    );
    assert!(refused.ends_with("\r\n\r\nno\n"), "{refused}");
    let plain = get(server.addr, "GET /healthz HTTP/1.1\r\n\r\n").await;
    assert!(plain.ends_with("\r\n\r\nok\n"), "{plain}");
    server.task.abort();
}
