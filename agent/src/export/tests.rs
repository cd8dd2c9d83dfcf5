//! The export stage against real endpoints: a collector that accepts connections and never
//! answers, a refused port, and a real OTLP gRPC receiver (tonic, opentelemetry-proto).

use super::*;
use crate::events::{ProbeMeta, Resource, Value, ValueKind};
use crate::export::otlp::{OtlpConfig, Protocol};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// An output that counts the lines written to it.
#[derive(Clone)]
pub(super) struct Lines {
    buf: Arc<Mutex<Vec<u8>>>,
    count: Arc<watch::Sender<usize>>,
}

impl Lines {
    pub(super) fn new() -> (Self, watch::Receiver<usize>) {
        let (tx, rx) = watch::channel(0);
        (
            Self {
                buf: Arc::default(),
                count: Arc::new(tx),
            },
            rx,
        )
    }

    fn text(&self) -> String {
        String::from_utf8(self.buf.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.lock().unwrap().extend_from_slice(b);
        let n = b.iter().filter(|&&c| c == b'\n').count();
        self.count.send_modify(|c| *c += n);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub(super) fn calls(probe: &Arc<ProbeMeta>, pid: u32, n: usize) -> Vec<CallRecord> {
    let resource = Arc::new(Resource {
        attributes: vec![("process.pid", pid.to_string())],
    });
    (0..n)
        .map(|i| CallRecord {
            probe: probe.clone(),
            pid,
            tid: i as u32,
            start_time_unix_nano: 1_763_770_000_000_000_000 + i as u64,
            duration_ns: Some(1000 + i as u64),
            args: vec![Value {
                name: "url".into(),
                kind: ValueKind::Str {
                    text: format!("http://10.0.0.7:8080/cart/{i}"),
                    truncated: false,
                },
            }],
            returns: Some(vec![Value {
                name: "err".into(),
                kind: ValueKind::Interface { nil: true },
            }]),
            resource: resource.clone(),
            unfinished: false,
            span: Default::default(),
        })
        .collect()
}

pub(super) fn probe() -> Arc<ProbeMeta> {
    Arc::new(ProbeMeta::simple(
        "http-client-urls",
        "net/http.(*Client).Get",
        true,
    ))
}

/// Starts the export stage with JSONL into a [`Lines`] (its count returned) and OTLP to
/// `endpoint`, counting into `stats`.
pub(super) fn start_otlp(
    endpoint: String,
    stats: &Stats,
) -> (
    mpsc::Sender<Vec<CallRecord>>,
    ExportHandle,
    watch::Receiver<usize>,
) {
    let (out, lines) = Lines::new();
    let (tx, handle) = start(
        ExportOptions::new(Format::Jsonl, Some(otlp_cfg(endpoint))),
        Box::new(out),
        stats.clone(),
    )
    .unwrap();
    (tx, handle, lines)
}

pub(super) fn otlp_cfg(endpoint: String) -> OtlpConfig {
    OtlpConfig::new(endpoint, Protocol::Grpc, Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_written_and_counted_per_probe_and_pid() {
    let stats = Stats::new();
    let (out, _) = Lines::new();
    let (tx, handle) = start(
        ExportOptions::new(Format::Jsonl, None),
        Box::new(out.clone()),
        stats.clone(),
    )
    .unwrap();
    let (p, q) = (
        probe(),
        Arc::new(ProbeMeta::simple("other", "main.f", false)),
    );
    let mut batch = calls(&p, 7, 3);
    batch.extend(calls(&q, 7, 1));
    batch.extend(calls(&p, 8, 2));
    tx.send(batch).await.unwrap();
    tx.send(calls(&p, 7, 1)).await.unwrap();
    drop(tx);
    let f = handle.finish(Instant::now() + Duration::from_secs(5)).await;
    assert!(matches!(f.output, OutputEnd::Complete), "{f:?}");
    assert!(f.otlp.is_none());
    let text = out.text();
    assert_eq!(text.lines().count(), 7);
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["args"]["url"], "http://10.0.0.7:8080/cart/0");
    assert_eq!(stats.probe(&p.key).delivered, 6);
    assert_eq!(stats.delivered_by(&p.key, 7), 4);
    assert_eq!(stats.delivered_by(&p.key, 8), 2);
    assert_eq!(stats.delivered_by(&q.key, 7), 1);

    // A table: one header for the run.
    let (out, _) = Lines::new();
    let (tx, handle) = start(
        ExportOptions::new(Format::Table, None),
        Box::new(out.clone()),
        Stats::new(),
    )
    .unwrap();
    tx.send(calls(&p, 7, 2)).await.unwrap();
    tx.send(calls(&p, 7, 1)).await.unwrap();
    drop(tx);
    handle.finish(Instant::now() + Duration::from_secs(5)).await;
    let text = out.text();
    assert_eq!(text.matches("\nTIME ").count(), 1, "{text}");
    assert_eq!(text.matches("net/http.(*Client).Get").count(), 3, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_output_stops_writing_but_calls_are_still_counted() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let stats = Stats::new();
    let (tx, handle) = start(
        ExportOptions::new(Format::Jsonl, None),
        Box::new(Closed),
        stats.clone(),
    )
    .unwrap();
    let p = probe();
    let closed = handle.output_closed();
    assert!(!*closed.borrow());
    for _ in 0..3 {
        tx.send(calls(&p, 1, 10)).await.unwrap();
    }
    drop(tx);
    let f = handle.finish(Instant::now() + Duration::from_secs(5)).await;
    assert!(matches!(f.output, OutputEnd::Complete), "{f:?}");
    assert_eq!(stats.probe(&p.key).delivered, 30);
    // The run is told, so that it can stop when nothing else takes the calls.
    assert!(*closed.borrow());
}

/// Sends `n` calls in batches of 1000 and waits until the output has every line.
async fn send_and_wait_for_output(
    tx: &mpsc::Sender<Vec<CallRecord>>,
    lines: &mut watch::Receiver<usize>,
    n: usize,
) -> Duration {
    let p = probe();
    let batches: Vec<_> = (0..n / 1000)
        .map(|i| calls(&p, 100 + i as u32 % 4, 1000))
        .collect();
    let t0 = Instant::now();
    for b in batches {
        tx.send(b).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), lines.wait_for(|c| *c >= n))
        .await
        .expect("the output never had every call")
        .unwrap();
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_holds_back_neither_output_nor_exit() {
    // Accepts connections (the kernel's backlog does) and never reads or answers.
    let stuck = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", stuck.local_addr().unwrap());
    let stats = Stats::new();
    // An export timeout longer than any machine takes to write the output: an export that
    // ended before it could only have been one the output waited for.
    let mut cfg = otlp_cfg(endpoint);
    cfg.timeout = Duration::from_secs(600);
    let (out, mut lines) = Lines::new();
    let (tx, handle) = start(
        ExportOptions::new(Format::Jsonl, Some(cfg)),
        Box::new(out),
        stats.clone(),
    )
    .unwrap();
    let output_took = send_and_wait_for_output(&tx, &mut lines, 100_000).await;
    // Every call reached the output while no export had ended (the collector's first
    // answer would come never come, and the export timeout is 600 s): the output waited for none.
    let (exported, _, errors) = stats.otlp_counts();
    assert_eq!(
        (exported, errors),
        (0, 0),
        "an export ended before the output had every call ({output_took:?})"
    );
    let level = handle.otlp_queue().unwrap();
    assert!(level.peak <= level.capacity, "{level:?}");
    drop(tx);

    // What the pipeline gives it: gprobe exits within 5 s whatever the collector does.
    let t0 = Instant::now();
    let f = handle.finish(t0 + FINISH_WITHIN).await;
    let took = t0.elapsed();
    // The finish keeps its own deadline, not the export's 60 s timeout (the slack is for a
    // loaded machine).
    assert!(
        took < FINISH_WITHIN + Duration::from_secs(5),
        "finish took {took:?}"
    );
    assert!(matches!(f.output, OutputEnd::Complete), "{f:?}");
    let (exported, dropped, errors) = stats.otlp_counts();
    assert_eq!(exported, 0);
    assert_eq!(dropped, 100_000, "every span is accounted for as dropped");
    assert!(errors >= 1, "the export cut at the deadline is an error");
    assert_eq!(stats.probe(&probe().key).delivered, 100_000);
    eprintln!(
        "stuck collector: output of 100k calls in {output_took:?}, finish in {took:?}, {f:?}"
    );
    drop(stuck);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_endpoint_keeps_the_queue_bounded_and_counts_errors_as_they_happen() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = otlp_cfg(format!("http://127.0.0.1:{port}"));
    cfg.queue_spans = 4096;
    cfg.batch_spans = 1024;
    let stats = Stats::new();
    let (out, _) = Lines::new();
    let (tx, handle) = start(
        ExportOptions::new(Format::Jsonl, Some(cfg)),
        Box::new(out),
        stats.clone(),
    )
    .unwrap();
    let p = probe();
    let mut sent = 0u64;
    let mut pace = tokio::time::interval(Duration::from_millis(5));
    let t0 = Instant::now();
    // Calls keep coming; failures are counted while they do, not only at exit.
    while stats.otlp_counts().2 < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no export failure counted"
        );
        pace.tick().await;
        tx.send(calls(&p, 1, 500)).await.unwrap();
        sent += 500;
        let level = handle.otlp_queue().unwrap();
        assert!(level.held <= level.capacity, "{level:?}");
    }
    let failures_after = t0.elapsed();
    drop(tx);
    let f = handle.otlp_queue().unwrap();
    assert!(f.peak <= 4096, "{f:?}");
    let t1 = Instant::now();
    let fin = handle.finish(t1 + FINISH_WITHIN).await;
    assert!(
        t1.elapsed() < FINISH_WITHIN + Duration::from_secs(5),
        "finish took {:?}",
        t1.elapsed()
    );
    let (exported, dropped, errors) = stats.otlp_counts();
    assert_eq!(exported, 0);
    assert_eq!(dropped, sent, "every span is accounted for");
    assert!(errors >= 2);
    assert_eq!(stats.probe(&p.key).delivered, sent);
    eprintln!(
        "refused endpoint: 2 failures counted after {failures_after:?}, {sent} calls, \
         queue peak {}/4096, {fin:?}",
        f.peak
    );
}

/// A real OTLP gRPC receiver that hands each request to the test as it arrives.
#[derive(Clone)]
struct Receiver {
    traces: mpsc::UnboundedSender<ExportTraceServiceRequest>,
    metrics: mpsc::UnboundedSender<ExportMetricsServiceRequest>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let _ = self.traces.send(req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let _ = self.metrics.send(req.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

pub(super) type Received = (
    mpsc::UnboundedReceiver<ExportTraceServiceRequest>,
    mpsc::UnboundedReceiver<ExportMetricsServiceRequest>,
);

pub(super) async fn receiver() -> (String, Received) {
    let (ttx, trx) = mpsc::unbounded_channel();
    let (mtx, mrx) = mpsc::unbounded_channel();
    let svc = Receiver {
        traces: ttx,
        metrics: mtx,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(svc.clone()))
            .add_service(MetricsServiceServer::new(svc))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (format!("http://{addr}"), (trx, mrx))
}

/// Every metric the receiver got so far, in the order it got them.
pub(super) fn received_metrics(
    rx: &mut mpsc::UnboundedReceiver<ExportMetricsServiceRequest>,
) -> Vec<Metric> {
    let mut out = Vec::new();
    while let Ok(req) = rx.try_recv() {
        out.extend(
            req.resource_metrics
                .into_iter()
                .flat_map(|r| r.scope_metrics)
                .flat_map(|s| s.metrics),
        );
    }
    out
}

/// The value of attribute `key`: a string as it is, a bool as `true` or `false`, another
/// value in its debug form; empty when absent.
pub(super) fn attr(attrs: &[KeyValue], key: &str) -> String {
    attrs
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref())
        .and_then(|v| v.value.as_ref())
        .map(|v| match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::BoolValue(b) => b.to_string(),
            other => format!("{other:?}"),
        })
        .unwrap_or_default()
}

fn span_count(req: &ExportTraceServiceRequest) -> usize {
    req.resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_flushed_by_the_timer_without_new_calls_and_metrics_come_from_stats() {
    let (endpoint, (mut traces, mut metrics)) = receiver().await;
    let stats = Stats::new();
    stats.process_matched(&[]);
    stats.process_traced(&[]);
    let (tx, handle, _) = start_otlp(endpoint, &stats);
    let p = probe();
    // Two small batches, far from a full one: only the timer sends them.
    for round in 0..2 {
        let t0 = Instant::now();
        tx.send(calls(&p, 4242, 3)).await.unwrap();
        let req = tokio::time::timeout(Duration::from_secs(20), traces.recv())
            .await
            .expect("no spans within 20 s (flush interval 1 s)")
            .unwrap();
        let took = t0.elapsed();
        // Nothing but the timer sends a batch this small while the run goes on: that it
        // arrived at all shows the timer (how soon is a loaded machine's business).
        assert_eq!(span_count(&req), 3);
        eprintln!("round {round}: spans received {took:?} after their calls");
    }
    drop(tx);
    let t0 = Instant::now();
    let f = handle.finish(Instant::now() + Duration::from_secs(5)).await;
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Counted once the receiver has answered (the task has ended: nothing is in flight).
    assert_eq!(stats.otlp_counts(), (6, 0, 0));
    assert_eq!(
        f.otlp,
        Some(otlp::OtlpFinished {
            spans_abandoned: 0,
            metrics_late: false
        })
    );

    // The final metrics: counts from Stats, durations from the output thread.
    let mut seen = BTreeMap::new();
    for m in received_metrics(&mut metrics) {
        let v = match &m.data {
            Some(Data::Sum(s)) => s
                .data_points
                .iter()
                .map(|p| match p.value {
                    Some(Number::AsInt(v)) => v as u64,
                    _ => 0,
                })
                .sum(),
            Some(Data::ExponentialHistogram(h)) => h.data_points.iter().map(|p| p.count).sum(),
            _ => 0,
        };
        seen.insert(m.name.clone(), v);
    }
    assert_eq!(seen.get("gprobe.calls"), Some(&6), "{seen:?}");
    assert_eq!(seen.get("gprobe.call.duration"), Some(&6), "{seen:?}");
    assert_eq!(seen.get("gprobe.events.lost"), Some(&0), "{seen:?}");
    assert_eq!(seen.get("gprobe.spans.dropped"), Some(&0), "{seen:?}");
    assert_eq!(seen.get("gprobe.processes.matched"), Some(&1), "{seen:?}");
    assert_eq!(seen.get("gprobe.processes.traced"), Some(&1), "{seen:?}");
    assert_eq!(seen.get("gprobe.processes.missed"), Some(&0), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_cut_by_captured_values_up_to_the_series_cap_then_other() {
    let (endpoint, (_traces, mut metrics)) = receiver().await;
    let stats = Stats::new();
    let (tx, handle, _) = start_otlp(endpoint, &stats);
    let mut meta = ProbeMeta::simple("shop", "main.handle", true);
    meta.metrics = Some(crate::events::MetricLabels {
        labels: vec!["method".into(), "err".into()],
        max_series: 2,
    });
    let p = Arc::new(meta);
    let mut batch = Vec::new();
    for (i, method) in ["GET", "POST", "GET", "PUT", "DELETE", "GET"]
        .iter()
        .enumerate()
    {
        let mut c = calls(&p, 7, 1).remove(0);
        c.duration_ns = Some(1000 * (i as u64 + 1));
        c.args = vec![Value {
            name: "method".into(),
            kind: ValueKind::Str {
                text: method.to_string(),
                truncated: false,
            },
        }];
        batch.push(c);
    }
    tx.send(batch).await.unwrap();
    drop(tx);
    handle.finish(Instant::now() + Duration::from_secs(5)).await;

    // (method, err) -> (calls, durations) as the receiver got them.
    let mut calls_by: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut durations_by: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut overflow = 0;
    for m in received_metrics(&mut metrics) {
        let key = |attrs: &[_]| {
            (
                attr(attrs, "gprobe.args.method"),
                attr(attrs, "gprobe.returns.err"),
            )
        };
        match (m.name.as_str(), &m.data) {
            ("gprobe.calls", Some(Data::Sum(s))) => {
                for p in &s.data_points {
                    if let Some(Number::AsInt(v)) = p.value {
                        calls_by.insert(key(&p.attributes), v as u64);
                    }
                }
            }
            ("gprobe.call.duration", Some(Data::ExponentialHistogram(h))) => {
                for p in &h.data_points {
                    durations_by.insert(key(&p.attributes), p.count);
                }
            }
            ("gprobe.metrics.overflow", Some(Data::Sum(s))) => {
                for p in &s.data_points {
                    if let Some(Number::AsInt(v)) = p.value {
                        overflow = v;
                    }
                }
            }
            _ => {}
        }
    }
    let k = |m: &str, e: &str| (m.to_string(), e.to_string());
    let want = BTreeMap::from([
        (k("GET", "nil"), 3),
        (k("POST", "nil"), 1),
        (k("other", "other"), 2),
    ]);
    assert_eq!(
        calls_by, want,
        "two series kept, PUT and DELETE under other"
    );
    assert_eq!(durations_by, want);
    assert_eq!(overflow, 2);
}
