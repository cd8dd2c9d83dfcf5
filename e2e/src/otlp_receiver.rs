//! A real OTLP receiver for the end-to-end tests: gRPC (tonic) and HTTP/protobuf, built on
//! opentelemetry-proto, on loopback; it keeps every export request it gets.

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
use prost::Message;
use std::sync::{Arc, Mutex};

#[derive(Default, Clone)]
pub struct Received {
    pub traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    pub metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.traces.lock().unwrap().push(req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Received {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.metrics.lock().unwrap().push(req.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

/// The runtime the receivers of a test run on (one worker thread: they only collect).
pub fn receiver_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// A gRPC OTLP receiver on loopback; stops when the runtime is dropped.
pub fn grpc_receiver(rt: &tokio::runtime::Runtime) -> (Received, String) {
    let rec = Received::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = rec.clone();
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(svc.clone()))
            .add_service(MetricsServiceServer::new(svc))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (rec, format!("http://{addr}"))
}

/// An HTTP/protobuf OTLP receiver: POST /v1/traces and /v1/metrics, HTTP/1.1 keep-alive.
pub fn http_receiver(rt: &tokio::runtime::Runtime) -> (Received, String) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let rec = Received::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = rec.clone();
    rt.spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let rec = shared.clone();
            tokio::spawn(async move {
                let mut r = BufReader::new(sock);
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut len = 0usize;
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).await.unwrap();
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                len = v.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0u8; len];
                    r.read_exact(&mut body).await.unwrap();
                    match path.as_str() {
                        "/v1/traces" => {
                            let req = ExportTraceServiceRequest::decode(&body[..]).unwrap();
                            rec.traces.lock().unwrap().push(req)
                        }
                        "/v1/metrics" => {
                            let req = ExportMetricsServiceRequest::decode(&body[..]).unwrap();
                            rec.metrics.lock().unwrap().push(req)
                        }
                        other => panic!("unexpected OTLP path {other}"),
                    }
                    r.get_mut()
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Type: \
                            application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
                        )
                        .await
                        .unwrap();
                }
            });
        }
    });
    (rec, format!("http://{addr}"))
}

pub fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

pub fn attr_str(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        AnyValue::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

/// Every span received, with its resource attributes.
pub fn spans(rec: &Received) -> Vec<(Vec<KeyValue>, opentelemetry_proto::tonic::trace::v1::Span)> {
    let mut out = Vec::new();
    for req in rec.traces.lock().unwrap().iter() {
        for rs in &req.resource_spans {
            let res = rs
                .resource
                .as_ref()
                .map(|r| r.attributes.clone())
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    out.push((res.clone(), s.clone()));
                }
            }
        }
    }
    out
}
