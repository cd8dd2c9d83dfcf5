//! Trace streams: the calls of one ProbeSpec, served as JSON lines on the health port to
//! `kubectl gprobe trace` through the API server's pod proxy (gprobe_crds::trace).
//!
//! Who may read: the API server has already checked that the caller may proxy to this pod;
//! the agent then serves a spec's calls only to a request carrying the token whose SHA-256
//! the spec's annotation holds, which only the plugin that created the spec knows. A spec
//! without the annotation (one applied with kubectl, say) is never served.
//!
//! Nothing here waits on the output thread's behalf: a reader that falls behind loses calls
//! (counted, and said in its next status), never slows the others or the node.

use crate::engine::driver::SpecEvent;
use crate::events::CallRecord;
use crate::export::jsonl::write_record;
use crate::export::tap::Tap;
use crate::stats::Stats;
use gprobe_crds::trace::{Notice, TOKEN_DIGEST_ANNOTATION, TOKEN_HEADER};
use gprobe_crds::{ProbeAttachmentStatus, ProbeSpec};
use gprobe_httpd::{Response, Stream};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Readers at once on one node: each holds a connection of the health server (64).
pub const MAX_READERS: usize = 16;
/// Chunks (a batch's calls of one spec, or a notice) queued for one reader.
const QUEUE_CHUNKS: usize = 1024;
/// How long a request waits for its spec to reach this agent: the plugin connects right
/// after creating it, and the agent's watch may not have seen it yet.
pub const SPEC_WAIT: Duration = Duration::from_secs(10);
/// How long a deleted spec's readers are still served: the calls made just before the
/// deletion are still on their way through the ring buffer and the output thread.
const END_GRACE: Duration = Duration::from_millis(500);

/// One reader of one spec's calls.
struct Reader {
    tx: mpsc::Sender<Vec<u8>>,
    /// Calls dropped for this reader (its queue was full).
    dropped: Arc<AtomicU64>,
}

#[derive(Default)]
struct Inner {
    node: String,
    /// Readers by spec key (`namespace/name`).
    readers: Mutex<HashMap<String, Vec<Reader>>>,
    /// How many readers: the output thread's tap returns at once when 0.
    count: AtomicUsize,
    /// The specs this agent has, by key: the token digest each was annotated with.
    specs: Mutex<HashMap<String, Option<String>>>,
    /// Bumped on every change of `specs`, for requests waiting for theirs.
    specs_changed: watch::Sender<u64>,
    /// The latest attachment status of each spec (cluster::Publisher).
    statuses: Mutex<BTreeMap<String, ProbeAttachmentStatus>>,
    stats: OnceLock<Stats>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces")
            .field("readers", &self.count.load(Ordering::Relaxed))
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The trace streams of one agent. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct Traces(Arc<Inner>);

/// Lowercase hex SHA-256 of `token`.
pub fn token_digest(token: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn key_of(spec: &ProbeSpec) -> String {
    let ns = spec.metadata.namespace.as_deref().unwrap_or("default");
    format!("{ns}/{}", spec.display_name())
}

fn digest_of(spec: &ProbeSpec) -> Option<String> {
    spec.metadata
        .annotations
        .as_ref()?
        .get(TOKEN_DIGEST_ANNOTATION)
        .map(|d| d.trim().to_ascii_lowercase())
}

impl Traces {
    pub fn new(node: &str) -> Self {
        Self(Arc::new(Inner {
            node: node.to_string(),
            ..Inner::default()
        }))
    }

    /// The counts the statuses carry come from here (set once the pipeline runs).
    pub fn set_stats(&self, stats: Stats) {
        let _ = self.0.stats.set(stats);
    }

    /// Follows the specs this agent is given: a spec gone ends its streams.
    pub fn spec_event(&self, ev: &SpecEvent) {
        let gone: Vec<String> = {
            let mut specs = lock(&self.0.specs);
            match ev {
                SpecEvent::Upsert(s) => {
                    specs.insert(key_of(s), digest_of(s));
                    Vec::new()
                }
                SpecEvent::Delete { namespace, name } => {
                    let key = format!("{namespace}/{name}");
                    specs.remove(&key).map(|_| key).into_iter().collect()
                }
                SpecEvent::Resync(all) => {
                    let now: HashMap<String, Option<String>> =
                        all.iter().map(|s| (key_of(s), digest_of(s))).collect();
                    let gone = specs
                        .keys()
                        .filter(|k| !now.contains_key(*k))
                        .cloned()
                        .collect();
                    *specs = now;
                    gone
                }
            }
        };
        self.0.specs_changed.send_modify(|n| *n += 1);
        for key in gone {
            // Its last status stays for the readers' last line (`end` forgets it).
            let traces = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(END_GRACE).await;
                traces.end(&key);
            });
        }
    }

    /// Sends the last status and [`Notice::End`] to `key`'s readers, then closes their
    /// streams, unless the spec came back meanwhile.
    fn end(&self, key: &str) {
        if lock(&self.0.specs).contains_key(key) {
            return;
        }
        let readers = lock(&self.0.readers).remove(key);
        let last = lock(&self.0.statuses).remove(key).unwrap_or_default();
        let Some(readers) = readers else {
            return;
        };
        self.0.count.fetch_sub(readers.len(), Ordering::Relaxed);
        let end = notice_line(&Notice::End {
            node: self.0.node.clone(),
        });
        for r in readers {
            let _ =
                r.tx.try_send(self.status_line_of(key, last.clone(), &r.dropped));
            let _ = r.tx.try_send(end.clone());
        }
    }

    /// Records each spec's latest attachment status and sends it to the spec's readers.
    pub fn set_statuses(&self, statuses: &[(Arc<ProbeSpec>, ProbeAttachmentStatus)]) {
        {
            let mut st = lock(&self.0.statuses);
            for (spec, status) in statuses {
                let mut s = status.clone();
                // Compared below without it: the time alone is no change.
                s.update_time = None;
                st.insert(key_of(spec), s);
            }
        }
        if self.0.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut readers = lock(&self.0.readers);
        for (key, list) in readers.iter_mut() {
            for r in list.iter() {
                let _ = r.tx.try_send(self.status_line(key, &r.dropped));
            }
            self.prune(list);
        }
        readers.retain(|_, l| !l.is_empty());
    }

    /// Forgets readers that went away.
    fn prune(&self, list: &mut Vec<Reader>) {
        let before = list.len();
        list.retain(|r| !r.tx.is_closed());
        self.0
            .count
            .fetch_sub(before - list.len(), Ordering::Relaxed);
    }

    /// The [`Notice::Status`] line of `key` for a reader that lost `dropped` calls.
    fn status_line(&self, key: &str, dropped: &AtomicU64) -> Vec<u8> {
        let status = lock(&self.0.statuses).get(key).cloned().unwrap_or_default();
        self.status_line_of(key, status, dropped)
    }

    /// The [`Notice::Status`] line of `key` with `status`.
    fn status_line_of(
        &self,
        key: &str,
        status: ProbeAttachmentStatus,
        dropped: &AtomicU64,
    ) -> Vec<u8> {
        let (mut filtered, mut lost, mut throttled, mut delivered) = (0, 0, 0, 0);
        if let Some(stats) = self.0.stats.get() {
            for (k, s) in stats.probes() {
                if &*k.spec == key {
                    filtered += s.filtered;
                    lost += s.lost;
                    throttled += s.throttled;
                    delivered += s.delivered;
                }
            }
        }
        notice_line(&Notice::Status {
            node: self.0.node.clone(),
            status: Box::new(status),
            filtered,
            lost,
            throttled,
            delivered,
            dropped: dropped.load(Ordering::Relaxed),
        })
    }

    /// Opens a stream of spec `namespace/name`'s calls for the holder of `token`, once
    /// the spec is known here (waiting up to [`SPEC_WAIT`]); or the refusal.
    pub async fn open(
        &self,
        namespace: &str,
        name: &str,
        token: Option<&str>,
    ) -> Result<Stream, Response> {
        let key = format!("{namespace}/{name}");
        let mut changed = self.0.specs_changed.subscribe();
        let wait = async {
            loop {
                if let Some(d) = lock(&self.0.specs).get(&key) {
                    return d.clone();
                }
                if changed.changed().await.is_err() {
                    return None;
                }
            }
        };
        let digest = match tokio::time::timeout(SPEC_WAIT, wait).await {
            Ok(d) => d,
            Err(_) => {
                return Err(Response::text(
                    404,
                    format!(
                        "no ProbeSpec {key} on node {} (not seen within {SPEC_WAIT:?})\n",
                        self.0.node
                    ),
                ))
            }
        };
        let Some(digest) = digest else {
            return Err(Response::text(
                403,
                format!(
                    "ProbeSpec {key} was not made by kubectl gprobe trace (no \
                     {TOKEN_DIGEST_ANNOTATION} annotation): its calls are not served\n"
                ),
            ));
        };
        if token.map(token_digest).as_deref() != Some(digest.as_str()) {
            return Err(Response::text(
                403,
                format!("the {TOKEN_HEADER} header does not hold the token of trace {key}\n"),
            ));
        }
        let (tx, chunks) = mpsc::channel(QUEUE_CHUNKS);
        let reader = Reader {
            tx,
            dropped: Arc::default(),
        };
        let mut readers = lock(&self.0.readers);
        let open: usize = readers
            .values_mut()
            .map(|l| {
                self.prune(l);
                l.len()
            })
            .sum();
        if open >= MAX_READERS {
            return Err(Response::text(
                429,
                format!("{MAX_READERS} traces are streaming from this node already\n"),
            ));
        }
        // What is attached so far, first: the reader need not wait for the next change.
        let _ = reader.tx.try_send(self.status_line(&key, &reader.dropped));
        readers.entry(key).or_default().push(reader);
        self.0.count.fetch_add(1, Ordering::Relaxed);
        Ok(Stream {
            content_type: "application/x-ndjson",
            chunks,
        })
    }
}

fn notice_line(n: &Notice) -> Vec<u8> {
    let mut line = serde_json::to_vec(n).unwrap_or_default();
    line.push(b'\n');
    line
}

impl Tap for Traces {
    fn send(&self, batch: &[CallRecord]) {
        if self.0.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut readers = lock(&self.0.readers);
        // The batch's calls of each spec that has readers, as JSON lines.
        let mut lines: HashMap<&str, (Vec<u8>, u64)> = HashMap::new();
        for rec in batch {
            let key = &*rec.probe.key.spec;
            if !readers.contains_key(key) {
                continue;
            }
            let (buf, n) = lines.entry(key).or_default();
            write_record(rec, buf);
            *n += 1;
        }
        for (key, (buf, n)) in lines {
            let Some(list) = readers.get_mut(key) else {
                continue;
            };
            for r in list.iter() {
                if r.tx.try_send(buf.clone()).is_err() {
                    r.dropped.fetch_add(n, Ordering::Relaxed);
                }
            }
            self.prune(list);
        }
        readers.retain(|_, l| !l.is_empty());
    }
}

#[cfg(test)]
mod tests;
