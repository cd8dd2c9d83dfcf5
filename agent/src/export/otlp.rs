//! The one module that speaks OTLP: a span per call (grouped by the process it came from,
//! whose attributes become the span's resource) and metrics per probe and symbol.

use crate::events::{CallRecord, ProbeMeta, Resource, Value, ValueKind};
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, Key, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" | "http" => Ok(Protocol::HttpProtobuf),
            other => Err(format!(
                "unknown OTLP protocol {other:?}: use grpc or http/protobuf"
            )),
        }
    }
}

#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// Base endpoint, e.g. `http://collector:4317` (gRPC) or `http://collector:4318` (HTTP).
    pub endpoint: String,
    pub protocol: Protocol,
    pub metrics_interval: Duration,
    /// Resource attributes of the agent itself (metrics): service.name, host.name, ...
    pub agent_resource: Vec<(&'static str, String)>,
}

impl OtlpConfig {
    /// Reads `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_PROTOCOL` where the flags
    /// are not given; `None` when no endpoint is configured at all.
    pub fn from_flags_and_env(
        endpoint: Option<String>,
        protocol: Option<Protocol>,
        metrics_interval: Duration,
    ) -> Result<Option<Self>, String> {
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
            return Err(format!(
                "OTLP endpoint {endpoint:?} needs a scheme: write http://{endpoint} (or https://)"
            ));
        }
        Ok(Some(Self {
            endpoint,
            protocol,
            metrics_interval,
            agent_resource: vec![("service.name", "gprobe".into())],
        }))
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

/// BPF-side counters per (spec, symbol), cumulative, read by the metrics callback.
pub type LossCounters = Arc<Mutex<HashMap<(Arc<str>, Arc<str>), (u64, u64)>>>;

/// Entries of `OtlpExporter::probes` at which retired probes are first pruned.
const PRUNE_MIN: usize = 1024;

/// What every call of one probe configuration shares, built on its first call.
struct ProbeAttrs {
    /// Keeps the `ProbeMeta` allocation, whose address is the map key, from being reused
    /// by another probe while this entry exists; dead once the probe is retired and its
    /// records are gone.
    probe: Weak<ProbeMeta>,
    /// `gprobe.probe` and `code.function`, sharing the probe's `Arc<str>`s: the metrics'
    /// attributes and the first two of every span's.
    attrs: [KeyValue; 2],
    /// The span name: the symbol, interned.
    name: &'static str,
    /// `gprobe.args.NAME` / `gprobe.returns.NAME` by capture name, in capture order.
    args: Vec<(Arc<str>, Key)>,
    returns: Vec<(Arc<str>, Key)>,
    /// Calls in the current batch.
    calls: u64,
}

/// The attribute key of a captured value: usually at the value's own index (values come
/// in capture order), built once per probe and name.
fn value_key(keys: &mut Vec<(Arc<str>, Key)>, i: usize, prefix: &str, name: &Arc<str>) -> Key {
    if let Some((n, k)) = keys.get(i) {
        if Arc::ptr_eq(n, name) || **n == **name {
            return k.clone();
        }
    }
    if let Some((_, k)) = keys.iter().find(|(n, _)| **n == **name) {
        return k.clone();
    }
    let k = Key::from(Arc::<str>::from(format!("{prefix}.{name}")));
    keys.push((name.clone(), k.clone()));
    k
}

fn push_values(
    out: &mut Vec<KeyValue>,
    keys: &mut Vec<(Arc<str>, Key)>,
    prefix: &str,
    vals: &[Value],
) {
    for (i, v) in vals.iter().enumerate() {
        let key = value_key(keys, i, prefix, &v.name);
        out.push(match &v.kind {
            ValueKind::Bool(b) => KeyValue::new(key, *b),
            ValueKind::Int(i) => KeyValue::new(key, *i),
            ValueKind::Uint(u) if *u <= i64::MAX as u64 => KeyValue::new(key, *u as i64),
            ValueKind::Uint(u) => KeyValue::new(key, u.to_string()),
            ValueKind::Float(f) => KeyValue::new(key, *f),
            ValueKind::Pointer(p) => KeyValue::new(key, format!("{p:#x}")),
            ValueKind::Str { text, .. } => KeyValue::new(key, text.clone()),
            ValueKind::Interface { nil } => {
                KeyValue::new(key, if *nil { "nil" } else { "non-nil" })
            }
            ValueKind::Fault => KeyValue::new(key, "<unreadable>"),
        });
    }
}

pub struct OtlpExporter {
    spans: opentelemetry_otlp::SpanExporter,
    meters: SdkMeterProvider,
    calls: Counter<u64>,
    duration: Histogram<f64>,
    pending: Vec<(Arc<Resource>, SpanData)>,
    last_flush: Instant,
    rng: u64,
    scope: InstrumentationScope,
    /// Per probe configuration, keyed by the address of its `ProbeMeta` (a `usize`: a raw
    /// pointer would make the exporter `!Send`).
    probes: HashMap<usize, ProbeAttrs>,
    /// `probes` is pruned of retired probes when it reaches this size.
    prune_at: usize,
    /// Span names (symbols), interned: see `probe_attrs`.
    names: HashSet<&'static str>,
    /// Probes with calls in the current batch.
    touched: Vec<usize>,
    pub export_errors: u64,
    pub spans_exported: u64,
}

impl OtlpExporter {
    /// Builds the exporters; must run inside the tokio runtime (tonic channels live there).
    pub fn new(cfg: &OtlpConfig, losses: LossCounters) -> Result<Self, OtlpError> {
        let build_err = |signal, source| OtlpError::Build {
            signal,
            endpoint: cfg.endpoint.clone(),
            source,
        };
        let timeout = Duration::from_secs(10);
        // gRPC over TLS for https:// endpoints: the system's roots, plus the CA file of
        // OTEL_EXPORTER_OTLP_CERTIFICATE when set (the Helm chart mounts one there).
        let tls = if cfg.endpoint.starts_with("https://") {
            let mut t = opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new()
                .with_native_roots();
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
        let (spans, metrics) = match cfg.protocol {
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
                    tls.clone(),
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
        };
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_attributes(
                cfg.agent_resource
                    .iter()
                    .map(|(k, v)| KeyValue::new(*k, v.clone())),
            )
            .build();
        let meters = SdkMeterProvider::builder()
            .with_reader(
                PeriodicReader::builder(metrics)
                    .with_interval(cfg.metrics_interval)
                    .build(),
            )
            .with_resource(resource)
            .build();
        let meter = meters.meter("gprobe");
        let calls = meter
            .u64_counter("gprobe.calls")
            .with_description("Calls of traced functions delivered, per probe and symbol")
            .with_unit("{call}")
            .build();
        let duration = meter
            .f64_histogram("gprobe.call.duration")
            .with_description(
                "Duration of traced calls, entry to return (probes with latency: true)",
            )
            .with_unit("s")
            .build();
        let _lost = meter
            .u64_observable_counter("gprobe.events.lost")
            .with_description("Calls not delivered: ring buffer full (reason=ring_buffer_full) or over limits.eventsPerSecond (reason=rate_limited)")
            .with_unit("{call}")
            .with_callback(move |obs| {
                let l = losses.lock().unwrap_or_else(|e| e.into_inner());
                for ((spec, symbol), (lost, throttled)) in l.iter() {
                    let base = [
                        KeyValue::new("gprobe.probe", spec.to_string()),
                        KeyValue::new("code.function", symbol.to_string()),
                    ];
                    obs.observe(*lost, &[base[0].clone(), base[1].clone(), KeyValue::new("reason", "ring_buffer_full")]);
                    obs.observe(*throttled, &[base[0].clone(), base[1].clone(), KeyValue::new("reason", "rate_limited")]);
                }
            })
            .build();
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            ^ ((std::process::id() as u64) << 32);
        Ok(Self {
            spans,
            meters,
            calls,
            duration,
            pending: Vec::new(),
            last_flush: Instant::now(),
            rng: seed | 1,
            scope: InstrumentationScope::builder("gprobe")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            probes: HashMap::new(),
            prune_at: PRUNE_MIN,
            names: HashSet::new(),
            touched: Vec::new(),
            export_errors: 0,
            spans_exported: 0,
        })
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64*: ids need uniqueness, not cryptographic strength.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d).max(1)
    }

    /// The cached attributes, span name and counter of `rec`'s probe, built on its first
    /// call.
    fn probe_attrs<'a>(
        probes: &'a mut HashMap<usize, ProbeAttrs>,
        names: &mut HashSet<&'static str>,
        touched: &mut Vec<usize>,
        rec: &CallRecord,
    ) -> &'a mut ProbeAttrs {
        let id = Arc::as_ptr(&rec.probe) as usize;
        let pa = probes.entry(id).or_insert_with(|| {
            let symbol = &rec.probe.symbol;
            // SpanData wants a `'static` name: one leaked copy per distinct symbol, never
            // freed but bounded by the functions ever traced, instead of a String per span.
            let name = match names.get(&**symbol) {
                Some(n) => *n,
                None => {
                    let n: &'static str = Box::leak(symbol.to_string().into_boxed_str());
                    names.insert(n);
                    n
                }
            };
            ProbeAttrs {
                probe: Arc::downgrade(&rec.probe),
                attrs: [
                    KeyValue::new("gprobe.probe", rec.probe.spec.clone()),
                    KeyValue::new("code.function", symbol.clone()),
                ],
                name,
                args: Vec::new(),
                returns: Vec::new(),
                calls: 0,
            }
        });
        if pa.calls == 0 {
            touched.push(id);
        }
        pa
    }

    pub fn record(&mut self, batch: &[CallRecord]) {
        // Counts were all added at the end of the last batch: a safe point to drop the
        // entries of retired probes. Pruning only when the map has doubled since keeps it
        // linear in the probes alive, amortized.
        if self.probes.len() >= self.prune_at {
            self.probes.retain(|_, p| p.probe.strong_count() > 0);
            self.prune_at = (self.probes.len() * 2).max(PRUNE_MIN);
        }
        for rec in batch {
            let pa = Self::probe_attrs(&mut self.probes, &mut self.names, &mut self.touched, rec);
            pa.calls += 1;
            if let Some(d) = rec.duration_ns {
                self.duration.record(d as f64 / 1e9, &pa.attrs);
            }
            let n_values = rec.args.len() + rec.returns.as_ref().map_or(0, Vec::len);
            let mut attributes = Vec::with_capacity(4 + n_values);
            attributes.extend_from_slice(&pa.attrs);
            attributes.push(KeyValue::new("thread.id", rec.tid as i64));
            push_values(&mut attributes, &mut pa.args, "gprobe.args", &rec.args);
            if let Some(r) = &rec.returns {
                push_values(&mut attributes, &mut pa.returns, "gprobe.returns", r);
            }
            if rec.unfinished {
                attributes.push(KeyValue::new("gprobe.unfinished", true));
            }
            let name = pa.name;
            let trace_id =
                TraceId::from(((self.next_u64() as u128) << 64) | self.next_u64() as u128);
            let span_id = SpanId::from(self.next_u64());
            let start = UNIX_EPOCH + Duration::from_nanos(rec.start_time_unix_nano);
            let end = start + Duration::from_nanos(rec.duration_ns.unwrap_or(0));
            let span = SpanData {
                span_context: SpanContext::new(
                    trace_id,
                    span_id,
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                ),
                parent_span_id: SpanId::INVALID,
                parent_span_is_remote: false,
                span_kind: SpanKind::Internal,
                name: Cow::Borrowed(name),
                start_time: start,
                end_time: end,
                attributes,
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status: Status::Unset,
                instrumentation_scope: self.scope.clone(),
            };
            self.pending.push((rec.resource.clone(), span));
        }
        // One add per probe and batch: the SDK hashes the attribute set on every add.
        for id in self.touched.drain(..) {
            if let Some(pa) = self.probes.get_mut(&id) {
                self.calls.add(pa.calls, &pa.attrs);
                pa.calls = 0;
            }
        }
    }

    pub async fn maybe_flush(&mut self) {
        if self.pending.len() >= 2048 || self.last_flush.elapsed() >= Duration::from_secs(1) {
            self.flush().await;
        }
    }

    /// Exports pending spans, one request per process resource.
    pub async fn flush(&mut self) {
        self.last_flush = Instant::now();
        if self.pending.is_empty() {
            return;
        }
        let mut groups: Vec<(Arc<Resource>, Vec<SpanData>)> = Vec::new();
        for (res, span) in self.pending.drain(..) {
            match groups
                .iter_mut()
                .find(|(r, _)| Arc::ptr_eq(r, &res) || **r == *res)
            {
                Some((_, v)) => v.push(span),
                None => groups.push((res, vec![span])),
            }
        }
        for (res, spans) in groups {
            let resource = opentelemetry_sdk::Resource::builder_empty()
                .with_attributes(
                    res.attributes
                        .iter()
                        .map(|(k, v)| KeyValue::new(*k, v.clone())),
                )
                .build();
            self.spans.set_resource(&resource);
            let n = spans.len() as u64;
            match self.spans.export(spans).await {
                Ok(()) => self.spans_exported += n,
                Err(e) => {
                    self.export_errors += 1;
                    tracing::warn!("OTLP span export of {n} spans failed: {e}");
                }
            }
        }
    }

    pub async fn shutdown(&mut self) {
        self.flush().await;
        let _ = self.spans.shutdown();
        // Blocks while it pushes the final metrics: keep it off the async workers.
        let meters = self.meters.clone();
        let res = tokio::task::spawn_blocking(move || meters.shutdown()).await;
        if let Ok(Err(e)) = res {
            tracing::warn!("OTLP metrics shutdown: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(endpoint: &str, protocol: Protocol) -> OtlpConfig {
        OtlpConfig {
            endpoint: endpoint.into(),
            protocol,
            metrics_interval: Duration::from_secs(60),
            agent_resource: vec![],
        }
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
        .contains("needs a scheme"));
    }

    fn call(probe: &Arc<ProbeMeta>, args: Vec<Value>, returns: Option<Vec<Value>>) -> CallRecord {
        CallRecord {
            probe: probe.clone(),
            pid: 4242,
            tid: 4250,
            start_time_unix_nano: 1_763_770_000_000_000_000,
            duration_ns: returns.as_ref().map(|_| 183_000),
            args,
            returns,
            resource: Arc::new(Resource::default()),
            unfinished: false,
        }
    }

    fn val(name: &str, kind: ValueKind) -> Value {
        Value {
            name: name.into(),
            kind,
        }
    }

    fn meta(spec: &str, symbol: &str) -> Arc<ProbeMeta> {
        Arc::new(ProbeMeta::simple(spec, symbol, true))
    }

    // Multi-threaded: dropping the exporter sends the final metrics, whose gRPC call needs
    // a runtime thread that the drop is not blocking.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn spans_carry_the_probe_and_values_and_retired_probes_are_pruned() {
        let mut ex = OtlpExporter::new(
            &cfg("http://127.0.0.1:1", Protocol::Grpc),
            LossCounters::default(),
        )
        .unwrap();
        let get = meta("http-client-urls", "net/http.(*Client).Get");
        let batch = vec![
            call(
                &get,
                vec![
                    val(
                        "url",
                        ValueKind::Str {
                            text: "http://a/".into(),
                            truncated: false,
                        },
                    ),
                    val("n", ValueKind::Uint(u64::MAX)),
                ],
                Some(vec![val("err", ValueKind::Interface { nil: true })]),
            ),
            // Values out of capture order still get their own keys.
            call(
                &get,
                vec![
                    val("n", ValueKind::Uint(7)),
                    val("url", ValueKind::Pointer(0xc000)),
                ],
                Some(vec![val("err", ValueKind::Fault)]),
            ),
        ];
        ex.record(&batch);
        ex.record(&batch[..1]);
        let attrs = |i: usize| -> Vec<(String, String)> {
            ex.pending[i]
                .1
                .attributes
                .iter()
                .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                .collect()
        };
        let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let first = owned(&[
            ("gprobe.probe", "http-client-urls"),
            ("code.function", "net/http.(*Client).Get"),
            ("thread.id", "4250"),
            ("gprobe.args.url", "http://a/"),
            ("gprobe.args.n", "18446744073709551615"),
            ("gprobe.returns.err", "nil"),
        ]);
        assert_eq!(attrs(0), first);
        assert_eq!(
            attrs(1),
            owned(&[
                ("gprobe.probe", "http-client-urls"),
                ("code.function", "net/http.(*Client).Get"),
                ("thread.id", "4250"),
                ("gprobe.args.n", "7"),
                ("gprobe.args.url", "0xc000"),
                ("gprobe.returns.err", "<unreadable>"),
            ])
        );
        assert_eq!(attrs(2), first);
        assert!(ex
            .pending
            .iter()
            .all(|(_, s)| s.name == "net/http.(*Client).Get"));
        assert_eq!(
            ex.pending[0].1.end_time,
            ex.pending[0].1.start_time + Duration::from_nanos(183_000)
        );
        assert_eq!(ex.probes.len(), 1);
        assert!(ex.touched.is_empty());
        assert!(ex.probes.values().all(|p| p.calls == 0));

        // A retired probe's entry goes at the next prune; a live one stays.
        let other = meta("other", "main.other");
        ex.record(&[call(&other, vec![], None)]);
        assert_eq!(ex.probes.len(), 2);
        drop(batch);
        drop(get);
        ex.prune_at = 2;
        ex.record(&[call(&other, vec![], None)]);
        assert_eq!(ex.probes.len(), 1);
        assert_eq!(ex.prune_at, PRUNE_MIN);
        assert_eq!(ex.pending.last().unwrap().1.name, "main.other");
    }

    #[tokio::test]
    async fn https_endpoints_use_tls_and_a_missing_ca_file_is_a_clear_error() {
        let losses = LossCounters::default();
        // This is the only test that touches this variable.
        std::env::set_var("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem");
        let err = OtlpExporter::new(
            &cfg("https://collector:4317", Protocol::Grpc),
            losses.clone(),
        )
        .err()
        .expect("missing CA file");
        std::env::remove_var("OTEL_EXPORTER_OTLP_CERTIFICATE");
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
        assert!(OtlpExporter::new(&cfg("https://collector:4317", Protocol::Grpc), losses).is_ok());
    }
}
