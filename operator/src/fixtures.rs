//! A mocked API server for tests, after kube-rs controller-rs's `fixtures.rs`: a
//! `tower_test` mock service behind a real `kube::Client`, and a verifier that checks each
//! request the code under test makes (method, path, query) against a script, records its
//! JSON body, and answers as the script says. When the client is dropped, the verifier
//! checks that no request was left unanswered or unexpected.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::time::Duration;
use tower_test::mock::{self, Handle};

/// How long to wait for a request. Longer than any timer of the code under test, so that
/// tests with paused (auto-advancing) time see the code's timers fire first.
const PATIENCE: Duration = Duration::from_secs(60);

pub struct ApiServerVerifier(Handle<Request<Body>, Response<Body>>);

/// A client whose every request goes to the returned verifier.
pub fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServerVerifier(handle))
}

/// One expected request and the answer to it.
pub struct Step {
    pub method: Method,
    /// The request's path, without the query.
    pub path: String,
    /// `key=value` pairs the query must hold (values as they appear, percent-encoded).
    pub query: Vec<String>,
    pub status: StatusCode,
    /// The response body, made from the request body. The default echoes it back (what a
    /// create or replace answers).
    pub reply: Box<dyn Fn(&Value) -> Value + Send>,
}

impl Step {
    pub fn new(method: Method, path: &str) -> Self {
        Self {
            method,
            path: path.to_string(),
            query: Vec::new(),
            status: StatusCode::OK,
            reply: Box::new(Value::clone),
        }
    }
    pub fn query(mut self, kv: &str) -> Self {
        self.query.push(kv.to_string());
        self
    }
    pub fn reply(mut self, status: StatusCode, body: Value) -> Self {
        self.status = status;
        self.reply = Box::new(move |_| body.clone());
        self
    }
    /// Answers with `f(request body)`.
    pub fn respond_with(mut self, f: impl Fn(&Value) -> Value + Send + 'static) -> Self {
        self.reply = Box::new(f);
        self
    }
    /// Answers 201 Created with the request body.
    pub fn created(mut self) -> Self {
        self.status = StatusCode::CREATED;
        self
    }
    pub fn ok(self, body: Value) -> Self {
        self.reply(StatusCode::OK, body)
    }
}

/// The body of a Kubernetes `Status` error response.
pub fn status_error(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
           "code": code, "reason": reason, "message": format!("mock: {reason}")})
}

/// One request as the server saw it.
#[derive(Debug)]
pub struct Seen {
    pub method: Method,
    pub uri: String,
    pub body: Value,
}

impl ApiServerVerifier {
    /// Answers `script` in order, then expects the client to go away with no further
    /// request. Returns what it saw; panics (failing the test when joined) on any mismatch.
    pub fn run(self, script: Vec<Step>) -> tokio::task::JoinHandle<Vec<Seen>> {
        let mut handle = self.0;
        tokio::spawn(async move {
            let mut seen = Vec::new();
            for (i, step) in script.into_iter().enumerate() {
                let next = tokio::time::timeout(PATIENCE, handle.next_request())
                    .await
                    .unwrap_or_else(|_| {
                        panic!("request {i} ({} {}) never came", step.method, step.path)
                    });
                let (request, send) = next.unwrap_or_else(|| {
                    panic!(
                        "client went away before request {i} ({} {})",
                        step.method, step.path
                    )
                });
                let method = request.method().clone();
                let uri = request.uri().clone();
                assert_eq!(
                    (&method, uri.path()),
                    (&step.method, step.path.as_str()),
                    "request {i}: {method} {uri}"
                );
                let query = uri.query().unwrap_or("");
                for kv in &step.query {
                    assert!(
                        query.split('&').any(|q| q == kv),
                        "request {i}: query {query:?} lacks {kv:?}"
                    );
                }
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: Value = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).expect("request body is JSON")
                };
                let reply = (step.reply)(&body);
                send.send_response(
                    Response::builder()
                        .status(step.status)
                        .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                        .unwrap(),
                );
                seen.push(Seen {
                    method,
                    uri: uri.to_string(),
                    body,
                });
            }
            match tokio::time::timeout(PATIENCE, handle.next_request()).await {
                Ok(None) => {}
                Ok(Some((request, _))) => panic!(
                    "unexpected request after the script: {} {}",
                    request.method(),
                    request.uri()
                ),
                Err(_) => panic!("the client was not dropped after the script"),
            }
            seen
        })
    }
}

/// Waits for the verifier, re-raising its panic as this test's failure.
pub async fn verified(server: tokio::task::JoinHandle<Vec<Seen>>) -> Vec<Seen> {
    match server.await {
        Ok(seen) => seen,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("verifier: {e}"),
    }
}
