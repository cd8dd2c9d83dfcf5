//! /healthz, /readyz and /metrics for the agent's pod probes and Prometheus.
//!
//! A deliberately small HTTP/1.1 server that stays usable when clients misbehave:
//! - each connection has [`Limits::read_timeout`] to send its request head (a client that
//!   connects and sends nothing, or trickles bytes, gets `408` and is closed);
//! - a head longer than [`Limits::max_head_bytes`] gets `431` and is closed;
//! - at most [`Limits::max_connections`] connections are served at once; a connection
//!   beyond that is answered `503` without reading and closed at once, so idle clients
//!   can delay the probes by at most the read timeout, never hold the server;
//! - accept errors (out of file descriptors: EMFILE, ENFILE; out of memory) back off
//!   from 10 ms to 1 s instead of retrying in a tight loop, and are logged at most once
//!   per [`LOG_EVERY`] with the count of those not logged.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{timeout, Instant};

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

/// How much a client may cost the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time from accept to the end of the request head (the whole head, not each read).
    pub read_timeout: Duration,
    /// Largest request head (request line and headers) read; more gets 431.
    pub max_head_bytes: usize,
    /// Connections served at once; more are answered 503 and closed at once.
    pub max_connections: usize,
    /// Time to write a response (and to drain a refused request before closing).
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // The kubelet and Prometheus send their request at once; 3 s is generous and
            // below the chart's probe timeout (5 s).
            read_timeout: Duration::from_secs(3),
            // A kubelet probe's head is ~150 bytes, a Prometheus scrape's ~400.
            max_head_bytes: 4096,
            max_connections: 64,
            write_timeout: Duration::from_secs(3),
        }
    }
}

/// Accept errors are logged at most this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
const BACKOFF_FIRST: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long a refused request's remaining input is drained before the connection closes.
const LINGER: Duration = Duration::from_secs(1);

/// Serves until the task is dropped; a bind error is logged and ends it.
pub async fn serve(addr: SocketAddr, health: Health) {
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("--health-addr {addr}: {e}");
            return;
        }
    };
    serve_listener(listener, health, Limits::default()).await;
}

/// Serves connections of `listener` with `limits` until the task is dropped.
pub async fn serve_listener(listener: TcpListener, health: Health, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    accept_loop(listener, health, limits, permits).await
}

/// Where connections come from: a [`TcpListener`], or a fake in tests.
trait Acceptor {
    fn accept(&mut self) -> impl Future<Output = io::Result<TcpStream>> + Send;
}

impl Acceptor for TcpListener {
    async fn accept(&mut self) -> io::Result<TcpStream> {
        TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

/// `permits` holds one permit per connection being served (`limits.max_connections`).
async fn accept_loop(
    mut acceptor: impl Acceptor,
    health: Health,
    limits: Limits,
    permits: Arc<Semaphore>,
) {
    let mut backoff = Backoff::default();
    let mut log = RateLimit::new(LOG_EVERY);
    loop {
        let sock = match acceptor.accept().await {
            Ok(s) => s,
            Err(e) => {
                let delay = backoff.next_delay(&e);
                if let Some(skipped) = log.allow(Instant::now()) {
                    tracing::warn!(
                        "health server: accept failed: {e}; retrying in {delay:?}{}",
                        if skipped > 0 {
                            format!(" ({skipped} more accept errors since the last report)")
                        } else {
                            String::new()
                        }
                    );
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        backoff.reset();
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Over the cap: answer without reading and close. The response fits in the
            // socket's send buffer, so try_write does not wait.
            let _ = sock.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        };
        let h = health.clone();
        tokio::spawn(async move {
            handle(sock, &h, &limits).await;
            // The slot is free again once the handler has closed the connection.
            drop(permit);
        });
    }
}

/// Why a request head could not be read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// No complete head within the read timeout; `partial` when some bytes came.
    Timeout { partial: bool },
    /// The head is longer than the limit.
    TooLarge,
    /// The client closed the connection or the read failed: nothing to answer.
    Closed,
}

/// Reads up to the end of the request head (`\r\n\r\n`, or `\n\n` from lenient clients).
async fn read_head(sock: &mut TcpStream, limits: &Limits) -> Result<Vec<u8>, HeadError> {
    let mut buf = Vec::with_capacity(512);
    let read = async {
        let mut chunk = [0u8; 1024];
        loop {
            let n = sock.read(&mut chunk).await.map_err(|_| HeadError::Closed)?;
            if n == 0 {
                return Err(HeadError::Closed);
            }
            let searched_from = buf.len().saturating_sub(3);
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = head_end(&buf[searched_from..]) {
                buf.truncate(searched_from + end);
                return Ok(());
            }
            if buf.len() > limits.max_head_bytes {
                return Err(HeadError::TooLarge);
            }
        }
    };
    match timeout(limits.read_timeout, read).await {
        Ok(Ok(())) if buf.len() > limits.max_head_bytes => Err(HeadError::TooLarge),
        Ok(Ok(())) => Ok(buf),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(HeadError::Timeout {
            partial: !buf.is_empty(),
        }),
    }
}

/// The length of the head including its blank line, if `buf` holds all of it.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|p| p + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn handle(mut sock: TcpStream, health: &Health, limits: &Limits) {
    // Whether the client may still be sending when the response is written.
    let mut unread = false;
    let (code, body, head_only) = match read_head(&mut sock, limits).await {
        Ok(head) => {
            let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or("");
            let target = parts.next().unwrap_or("/");
            let path = target.split(['?', '#']).next().unwrap_or(target);
            match method {
                "GET" => {
                    let (c, b) = health.respond(path);
                    (c, b, false)
                }
                "HEAD" => {
                    let (c, b) = health.respond(path);
                    (c, b, true)
                }
                _ => (405, "only GET and HEAD\n".to_string(), false),
            }
        }
        Err(HeadError::Closed) => return,
        Err(HeadError::Timeout { partial }) => {
            unread = partial;
            (408, "request head not received in time\n".into(), false)
        }
        Err(HeadError::TooLarge) => {
            unread = true;
            (
                431,
                format!("request head over {} bytes\n", limits.max_head_bytes),
                false,
            )
        }
    };
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let allow = if code == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(&body);
    }
    let write = async {
        sock.write_all(out.as_bytes()).await?;
        sock.shutdown().await
    };
    if !matches!(timeout(limits.write_timeout, write).await, Ok(Ok(()))) {
        return;
    }
    if unread {
        // The client may still be sending. Closing with unread input makes the kernel send
        // a reset, which can destroy the response before the client reads it: read and
        // discard what comes (bounded in bytes and time) until the client closes.
        let drain = async {
            let mut sink = [0u8; 4096];
            let mut left = 64 * 1024usize;
            while left > 0 {
                match sock.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
        };
        let _ = timeout(LINGER, drain).await;
    }
}

/// The delay before the next accept after an error: doubles from 10 ms up to 1 s while
/// errors go on, back to the start after a success.
#[derive(Debug, Default)]
struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    fn next_delay(&mut self, err: &io::Error) -> Duration {
        // Errors about one connection (the client reset it before accept) say nothing about
        // the server: retry soon, without growing the delay.
        if matches!(
            err.kind(),
            io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
        ) {
            return BACKOFF_FIRST;
        }
        // Out of file descriptors (EMFILE, ENFILE), memory or buffers: the pending connection
        // stays queued, so an immediate retry fails the same way. Wait, longer each time.
        let d = self.next.unwrap_or(BACKOFF_FIRST);
        self.next = Some((d * 2).min(BACKOFF_MAX));
        d
    }

    fn reset(&mut self) {
        self.next = None;
    }
}

/// Lets one event through per `every`; counts the others.
#[derive(Debug)]
struct RateLimit {
    every: Duration,
    last: Option<Instant>,
    skipped: u64,
}

impl RateLimit {
    fn new(every: Duration) -> Self {
        RateLimit {
            every,
            last: None,
            skipped: 0,
        }
    }

    /// `Some(events skipped since the last one let through)` when this one may be logged.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.every => {
                self.skipped += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.skipped))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;

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

    /// Every test's wait for an event is bounded by this, so a broken server fails the test
    /// instead of hanging it.
    const PATIENCE: Duration = Duration::from_secs(10);

    struct Server {
        addr: SocketAddr,
        permits: Arc<Semaphore>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(limits: Limits, health: Health) -> Server {
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
        let h = Health::default();
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
        let server = start(limits, Health::default()).await;
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
        let server = start(Limits::default(), Health::default()).await;
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
    async fn connections_over_the_cap_are_closed_at_once_and_probes_work_after_idle_ones_time_out()
    {
        let limits = Limits {
            read_timeout: Duration::from_secs(1),
            max_connections: 2,
            ..Limits::default()
        };
        let server = start(limits, Health::default()).await;
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
            Health::default(),
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
}
