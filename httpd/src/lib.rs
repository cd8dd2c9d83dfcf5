//! A deliberately small HTTP/1.1 server for `/metrics`, `/healthz` and `/readyz` (one GET
//! or HEAD per connection, answered and closed), shared by gprobe's agent and operator. It
//! stays usable when clients misbehave:
//! - each connection has [`Limits::read_timeout`] to send its request head (a client that
//!   connects and sends nothing, or trickles bytes, gets `408` and is closed);
//! - a head longer than [`Limits::max_head_bytes`] gets `431` and is closed;
//! - at most [`Limits::max_connections`] connections are served at once; a connection
//!   beyond that is answered `503` without reading and closed at once, so idle clients
//!   can delay the probes by at most the read timeout, never hold the server;
//! - accept errors (out of file descriptors: EMFILE, ENFILE; out of memory) back off
//!   from 10 ms to 1 s instead of retrying in a tight loop, and are logged at most once
//!   per [`LOG_EVERY`] with the count of those not logged.
//!
//! A handler may also answer some requests with a stream ([`Handler::stream`]): a body that
//! goes on, written chunk by chunk as it comes, ended by closing the connection. Each
//! chunk has [`STREAM_WRITE_TIMEOUT`] to be written; a stream holds its connection's slot.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{timeout, Instant};

/// Plain text, for probes and errors.
pub const TEXT: &str = "text/plain; charset=utf-8";
/// The Prometheus text exposition format.
pub const METRICS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub code: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn text(code: u16, body: impl Into<String>) -> Self {
        Self {
            code,
            content_type: TEXT,
            body: body.into(),
        }
    }
}

/// What the server answers: by path (the query is cut off; GET and HEAD only).
pub trait Handler: Send + Sync + 'static {
    /// Names the server in logs.
    fn name(&self) -> &'static str;
    fn respond(&self, path: &str) -> Response;
    /// A GET that this handler answers with a stream, or `None` to answer it with
    /// [`respond`](Handler::respond). The future decides: the stream, or a whole answer
    /// (a refusal).
    fn stream(&self, _request: &Request<'_>) -> Option<StreamStart> {
        None
    }
}

/// A GET request, as [`Handler::stream`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The path, without the query.
    pub path: &'a str,
    /// The header lines after the request line.
    headers: &'a str,
}

impl<'a> Request<'a> {
    /// Parses a request head's text after its request line (`headers`).
    pub fn new(path: &'a str, headers: &'a str) -> Self {
        Self { path, headers }
    }

    /// The value of header `name` (case-insensitive), trimmed; the first if repeated.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// A body that goes on: its chunks as they come; the stream ends when the sender is
/// dropped.
#[derive(Debug)]
pub struct Stream {
    pub content_type: &'static str,
    pub chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
}

/// What [`Handler::stream`] returns: decides, then streams or refuses.
pub type StreamStart =
    std::pin::Pin<Box<dyn Future<Output = Result<Stream, Response>> + Send + 'static>>;

/// Time to write one chunk of a stream: a reader that takes none for this long is gone.
pub const STREAM_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Serves connections of `listener` with `limits`, answering with `handler`, until the
/// task is dropped.
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    accept_loop(listener, handler, limits, permits).await
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
async fn accept_loop<H: Handler>(
    mut acceptor: impl Acceptor,
    handler: Arc<H>,
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
                        "{}: accept failed: {e}; retrying in {delay:?}{}",
                        handler.name(),
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
        let h = handler.clone();
        tokio::spawn(async move {
            handle(sock, &*h, &limits).await;
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

async fn handle<H: Handler>(mut sock: TcpStream, handler: &H, limits: &Limits) {
    // Whether the client may still be sending when the response is written.
    let mut unread = false;
    let (code, ctype, body, head_only) = match read_head(&mut sock, limits).await {
        Ok(head) => {
            let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or("");
            let target = parts.next().unwrap_or("/");
            let path = target.split(['?', '#']).next().unwrap_or(target);
            let headers = String::from_utf8_lossy(&head);
            let headers = headers.split_once('\n').map_or("", |(_, rest)| rest);
            let started = match method {
                "GET" => handler.stream(&Request::new(path, headers)),
                _ => None,
            };
            match started {
                Some(start) => match start.await {
                    Ok(stream) => return write_stream(sock, stream).await,
                    Err(r) => (r.code, r.content_type, r.body, false),
                },
                None => match method {
                    "GET" | "HEAD" => {
                        let r = handler.respond(path);
                        (r.code, r.content_type, r.body, method == "HEAD")
                    }
                    _ => (405, TEXT, "only GET and HEAD\n".to_string(), false),
                },
            }
        }
        Err(HeadError::Closed) => return,
        Err(HeadError::Timeout { partial }) => {
            unread = partial;
            (
                408,
                TEXT,
                "request head not received in time\n".into(),
                false,
            )
        }
        Err(HeadError::TooLarge) => {
            unread = true;
            (
                431,
                TEXT,
                format!("request head over {} bytes\n", limits.max_head_bytes),
                false,
            )
        }
    };
    let reason = match code {
        200 => "OK",
        401 => "Unauthorized",
        403 => "Forbidden",
        429 => "Too Many Requests",
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
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
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

/// Writes `stream`'s head, then its chunks as they come, until its sender is dropped or
/// the reader is gone (a write fails or takes over [`STREAM_WRITE_TIMEOUT`]). The body ends
/// with the connection: no length is known beforehand.
async fn write_stream(mut sock: TcpStream, mut stream: Stream) {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nCache-Control: no-store\r\nConnection: \
         close\r\n\r\n",
        stream.content_type
    );
    if !matches!(
        timeout(STREAM_WRITE_TIMEOUT, sock.write_all(head.as_bytes())).await,
        Ok(Ok(()))
    ) {
        return;
    }
    while let Some(chunk) = stream.chunks.recv().await {
        if !matches!(
            timeout(STREAM_WRITE_TIMEOUT, sock.write_all(&chunk)).await,
            Ok(Ok(()))
        ) {
            return;
        }
    }
    let _ = timeout(STREAM_WRITE_TIMEOUT, sock.shutdown()).await;
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
mod tests;
