//! The one module that speaks OTLP: a span per call (grouped by the process it came from,
//! whose attributes become the span's resource) and metrics read from [`Stats`].
//!
//! [`start`] splits the work in two: an [`OtlpSink`] for the output thread, which records
//! call durations and hands calls to a bounded queue without ever waiting, and an
//! [`OtlpHandle`] for the task that batches and exports spans (see `task.rs`) and for the
//! metrics provider. A slow or dead collector costs at most the queue's bound in memory and
//! `finish`'s deadline in time.

mod metrics;
mod queue;
mod spans;
mod task;

pub use metrics::CallRecorder;
pub use queue::{QueueLevel, SpanQueue};
pub use spans::SpanBuilder;

use crate::events::CallRecord;
use crate::stats::Stats;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// An OTLP protocol name other than `grpc` and `http/protobuf`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown OTLP protocol {0:?}: use grpc or http/protobuf")]
pub struct UnknownProtocol(pub String);

impl std::str::FromStr for Protocol {
    type Err = UnknownProtocol;
    fn from_str(s: &str) -> Result<Self, UnknownProtocol> {
        match s {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" | "http" => Ok(Protocol::HttpProtobuf),
            other => Err(UnknownProtocol(other.to_string())),
        }
    }
}

/// An OTLP setting (flag or `OTEL_EXPORTER_OTLP_*` variable) that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OtlpConfigError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names no protocol.
    #[error(transparent)]
    Protocol(#[from] UnknownProtocol),
    #[error("OTLP endpoint {endpoint:?} needs a scheme: write http://{endpoint} (or https://)")]
    NoScheme { endpoint: String },
    #[error("OTEL_EXPORTER_OTLP_TIMEOUT={value:?}: expected milliseconds, e.g. 10000")]
    Timeout { value: String },
}

#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// Base endpoint, e.g. `http://collector:4317` (gRPC) or `http://collector:4318` (HTTP).
    pub endpoint: String,
    pub protocol: Protocol,
    pub metrics_interval: Duration,
    /// Resource attributes of the agent itself (metrics): service.name, host.name, ...
    pub agent_resource: Vec<(&'static str, String)>,
    /// Each export request (spans or metrics) is abandoned after this long.
    pub timeout: Duration,
    /// Spans the OTLP stage holds at most (queued, waiting for a batch, being exported);
    /// calls beyond it are dropped from OTLP (not from the output) and counted.
    pub queue_spans: usize,
    /// Spans per export; a full batch is exported at once.
    pub batch_spans: usize,
    /// Spans wait at most this long for their batch to fill.
    pub flush_interval: Duration,
}

/// Defaults of [`OtlpConfig`]'s tuning fields.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_QUEUE_SPANS: usize = 16_384;
pub const DEFAULT_BATCH_SPANS: usize = 2048;
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

impl OtlpConfig {
    /// A configuration with the default tuning and `service.name=gprobe`.
    pub fn new(
        endpoint: impl Into<String>,
        protocol: Protocol,
        metrics_interval: Duration,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol,
            metrics_interval,
            agent_resource: vec![("service.name", "gprobe".into())],
            timeout: DEFAULT_TIMEOUT,
            queue_spans: DEFAULT_QUEUE_SPANS,
            batch_spans: DEFAULT_BATCH_SPANS,
            flush_interval: DEFAULT_FLUSH_INTERVAL,
        }
    }

    /// Reads `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_PROTOCOL` where the flags
    /// are not given, and `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds); `None` when no
    /// endpoint is configured at all.
    pub fn from_flags_and_env(
        endpoint: Option<String>,
        protocol: Option<Protocol>,
        metrics_interval: Duration,
    ) -> Result<Option<Self>, OtlpConfigError> {
        let endpoint = endpoint
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok())
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
            .filter(|e| !e.is_empty());
        let Some(endpoint) = endpoint else {
            return Ok(None);
        };
        let protocol = match protocol {
            Some(p) => p,
            None => match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL") {
                Ok(p) if !p.is_empty() => p.parse()?,
                _ => Protocol::Grpc,
            },
        };
        if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
            return Err(OtlpConfigError::NoScheme { endpoint });
        }
        let mut cfg = Self::new(endpoint, protocol, metrics_interval);
        if let Ok(ms) = std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT") {
            match ms.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => cfg.timeout = Duration::from_millis(ms),
                _ => return Err(OtlpConfigError::Timeout { value: ms }),
            }
        }
        Ok(Some(cfg))
    }

    fn http_url(&self, signal: &str) -> String {
        // A bare base URL gets the standard per-signal path, as the OTLP spec says for
        // OTEL_EXPORTER_OTLP_ENDPOINT.
        let base = self.endpoint.trim_end_matches('/');
        let has_path = base.splitn(4, '/').nth(3).is_some_and(|p| !p.is_empty());
        if has_path {
            base.to_string()
        } else {
            format!("{base}/v1/{signal}")
        }
    }
}

/// Runs the HTTP client's requests on the agent's tokio runtime: the SDK's metrics reader
/// exports from its own thread, where a hyper client finds no reactor.
#[derive(Debug)]
struct OnRuntime {
    inner: Arc<opentelemetry_http::hyper::HyperClient>,
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let inner = self.inner.clone();
        self.handle
            .spawn(async move { inner.send_bytes(request).await })
            .await
            .map_err(|e| Box::new(e) as opentelemetry_http::HttpError)?
    }
}

fn with_tls<B: opentelemetry_otlp::WithTonicConfig>(
    b: B,
    tls: Option<opentelemetry_otlp::tonic_types::transport::ClientTlsConfig>,
) -> B {
    match tls {
        Some(t) => b.with_tls_config(t),
        None => b,
    }
}

#[derive(Debug, Error)]
pub enum OtlpError {
    #[error("reading the OTLP CA certificate {path} (OTEL_EXPORTER_OTLP_CERTIFICATE): {source}")]
    Certificate {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("setting up the OTLP {signal} exporter for {endpoint} failed: {source}")]
    Build {
        signal: &'static str,
        endpoint: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The span and metric exporters of `cfg`; must run inside the tokio runtime (tonic
/// channels live there).
fn exporters(
    cfg: &OtlpConfig,
) -> Result<
    (
        opentelemetry_otlp::SpanExporter,
        opentelemetry_otlp::MetricExporter,
    ),
    OtlpError,
> {
    let build_err = |signal, source| OtlpError::Build {
        signal,
        endpoint: cfg.endpoint.clone(),
        source,
    };
    let timeout = cfg.timeout;
    // gRPC over TLS for https:// endpoints: the system's roots, plus the CA file of
    // OTEL_EXPORTER_OTLP_CERTIFICATE when set (the Helm chart mounts one there).
    let tls = if cfg.endpoint.starts_with("https://") {
        let mut t =
            opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new().with_native_roots();
        if let Ok(path) = std::env::var("OTEL_EXPORTER_OTLP_CERTIFICATE") {
            let pem = std::fs::read(&path).map_err(|e| OtlpError::Certificate {
                path: path.clone(),
                source: e,
            })?;
            t = t.ca_certificate(
                opentelemetry_otlp::tonic_types::transport::Certificate::from_pem(pem),
            );
        }
        Some(t)
    } else {
        None
    };
    let http_client = || OnRuntime {
        inner: Arc::new(
            opentelemetry_http::hyper::HyperClient::with_default_connector(timeout, None),
        ),
        handle: tokio::runtime::Handle::current(),
    };
    Ok(match cfg.protocol {
        Protocol::Grpc => (
            with_tls(
                opentelemetry_otlp::SpanExporter::builder().with_tonic(),
                tls.clone(),
            )
            .with_endpoint(&cfg.endpoint)
            .with_timeout(timeout)
            .build()
            .map_err(|e| build_err("trace", e))?,
            with_tls(
                opentelemetry_otlp::MetricExporter::builder().with_tonic(),
                tls,
            )
            .with_endpoint(&cfg.endpoint)
            .with_timeout(timeout)
            .build()
            .map_err(|e| build_err("metrics", e))?,
        ),
        Protocol::HttpProtobuf => (
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(http_client())
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(cfg.http_url("traces"))
                .with_timeout(timeout)
                .build()
                .map_err(|e| build_err("trace", e))?,
            opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_http_client(http_client())
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(cfg.http_url("metrics"))
                .with_timeout(timeout)
                .build()
                .map_err(|e| build_err("metrics", e))?,
        ),
    })
}

/// The output thread's side of OTLP: records durations, queues calls for spans.
pub struct OtlpSink {
    queue: SpanQueue,
    durations: CallRecorder,
}

impl OtlpSink {
    /// Records the batch's durations and queues its calls for spans without waiting;
    /// returns how many spans were dropped because the queue was full.
    pub fn send(&mut self, batch: Vec<CallRecord>) -> u64 {
        self.durations.record(&batch);
        self.queue.push(batch)
    }

    /// Counts the calls left out by `when:` and `sample:` since the last batch (call it
    /// when no batch came for a while, and at the end).
    pub fn tick(&mut self) {
        self.durations.count_left_out();
    }
}

/// The OTLP task and metrics provider, until [`OtlpHandle::finish`].
pub struct OtlpHandle {
    task: JoinHandle<usize>,
    deadline: watch::Sender<Option<Instant>>,
    metrics: metrics::Metrics,
    held: Arc<queue::Held>,
    stats: Stats,
}

/// What OTLP could not do by `finish`'s deadline.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OtlpFinished {
    /// Spans not exported by the deadline (counted in `Stats` as dropped).
    pub spans_abandoned: u64,
    /// The final metrics export had not completed by the deadline.
    pub metrics_late: bool,
}

/// The OTLP task stops this long before `finish`'s deadline, so that `finish` returns by it.
const TASK_MARGIN: Duration = Duration::from_millis(50);

/// Starts OTLP export: the span task on the current tokio runtime, the metrics provider
/// with its periodic reader (reading `stats`).
pub fn start(cfg: &OtlpConfig, stats: Stats) -> Result<(OtlpSink, OtlpHandle), OtlpError> {
    let (spans, metric_exporter) = exporters(cfg)?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_attributes(
            cfg.agent_resource
                .iter()
                .map(|(k, v)| KeyValue::new(*k, v.clone())),
        )
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(
            PeriodicReader::builder(metric_exporter)
                .with_interval(cfg.metrics_interval)
                .build(),
        )
        .with_resource(resource)
        .with_view(metrics::exponential_durations)
        .build();
    let metrics = metrics::Metrics::new(provider);
    let meter = metrics.meter().expect("provider just built");
    metrics::observe(&meter, &stats);
    let durations = CallRecorder::new(&meter, stats.clone());
    let queue_spans = cfg.queue_spans.max(1);
    let held = queue::Held::new(queue_spans);
    let (queue, rx) = SpanQueue::new(held.clone(), stats.clone());
    let (deadline_tx, deadline) = watch::channel(None);
    let task = task::SpanTask {
        exporter: spans,
        endpoint: cfg.endpoint.clone(),
        rx,
        held: held.clone(),
        stats: stats.clone(),
        batch: cfg.batch_spans.clamp(1, queue_spans),
        interval: cfg.flush_interval.max(Duration::from_millis(1)),
        timeout: cfg.timeout,
        deadline,
    };
    let task = tokio::spawn(task.run());
    Ok((
        OtlpSink { queue, durations },
        OtlpHandle {
            task,
            deadline: deadline_tx,
            metrics,
            held,
            stats,
        },
    ))
}

impl OtlpHandle {
    /// How full the span queue is, and was at most.
    pub fn level(&self) -> QueueLevel {
        self.held.level()
    }

    /// Tells the span task to be done by `deadline`: exports in flight are cut there.
    pub(crate) fn set_deadline(&self, deadline: Instant) {
        let task_deadline = deadline
            .checked_sub(TASK_MARGIN)
            .unwrap_or(deadline)
            .max(Instant::now());
        self.deadline.send_replace(Some(task_deadline));
    }

    /// Waits for the span task to export what it holds (it ends once the [`OtlpSink`] is
    /// dropped, or at the deadline) while the final metrics are sent; returns by
    /// `deadline` whatever the collector does.
    pub async fn finish(self, deadline: Instant) -> OtlpFinished {
        self.set_deadline(deadline);
        let OtlpHandle {
            mut task,
            deadline: _keep_open,
            metrics,
            held,
            stats,
        } = self;
        let spans = async {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(Ok(left)) => left as u64,
                Ok(Err(e)) => {
                    tracing::error!("OTLP span task failed: {e}");
                    take_held(&held, &stats)
                }
                Err(_) => {
                    task.abort();
                    take_held(&held, &stats)
                }
            }
        };
        let (spans_abandoned, metrics_done) = tokio::join!(spans, metrics.shutdown(deadline));
        OtlpFinished {
            spans_abandoned,
            metrics_late: !metrics_done,
        }
    }
}

/// Counts what an ended task still held as dropped.
fn take_held(held: &queue::Held, stats: &Stats) -> u64 {
    let n = held.level().held;
    held.release(n);
    stats
        .otlp()
        .spans_dropped
        .fetch_add(n as u64, Ordering::Relaxed);
    n as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(endpoint: &str, protocol: Protocol) -> OtlpConfig {
        OtlpConfig::new(endpoint, protocol, Duration::from_secs(60))
    }

    #[test]
    fn http_urls_get_the_signal_path_unless_they_have_one() {
        let c = cfg("http://collector:4318", Protocol::HttpProtobuf);
        assert_eq!(c.http_url("traces"), "http://collector:4318/v1/traces");
        let c = cfg(
            "http://collector:4318/custom/traces",
            Protocol::HttpProtobuf,
        );
        assert_eq!(c.http_url("traces"), "http://collector:4318/custom/traces");
        assert!("grpcx".parse::<Protocol>().is_err());
        assert!(OtlpConfig::from_flags_and_env(
            Some("collector:4317".into()),
            None,
            Duration::from_secs(1)
        )
        .unwrap_err()
        .to_string()
        .contains("needs a scheme"));
    }

    #[tokio::test]
    async fn https_endpoints_use_tls_and_a_missing_ca_file_is_a_clear_error() {
        // This is the only test that touches this variable.
        std::env::set_var("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem");
        let err = start(&cfg("https://collector:4317", Protocol::Grpc), Stats::new())
            .err()
            .expect("missing CA file");
        std::env::remove_var("OTEL_EXPORTER_OTLP_CERTIFICATE");
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
        assert!(start(&cfg("https://collector:4317", Protocol::Grpc), Stats::new()).is_ok());
    }
}
