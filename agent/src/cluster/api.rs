//! The one module of the agent that talks to the Kubernetes API server: it watches
//! ProbeSpecs and applies this node's ProbeAttachments.

use futures::StreamExt;
use gprobe_crds::{new_attachment, ProbeAttachment, ProbeAttachmentStatus, ProbeSpec};
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc;

pub use crate::engine::driver::SpecEvent;

pub const FIELD_MANAGER: &str = "gprobe-agent";

/// Forwards ProbeSpec changes of every namespace until the receiver is dropped. Watch
/// errors are logged and retried with the watcher's backoff.
pub async fn watch_specs(client: Client, tx: mpsc::Sender<SpecEvent>) {
    let api: Api<ProbeSpec> = Api::all(client);
    let stream = watcher(api, watcher::Config::default());
    futures::pin_mut!(stream);
    let mut initial: Vec<ProbeSpec> = Vec::new();
    while let Some(ev) = stream.next().await {
        let out = match ev {
            Ok(watcher::Event::Init) => {
                initial.clear();
                None
            }
            Ok(watcher::Event::InitApply(s)) => {
                initial.push(s);
                None
            }
            Ok(watcher::Event::InitDone) => Some(SpecEvent::Resync(std::mem::take(&mut initial))),
            Ok(watcher::Event::Apply(s)) => Some(SpecEvent::Upsert(Box::new(s))),
            Ok(watcher::Event::Delete(s)) => Some(SpecEvent::Delete {
                namespace: s.metadata.namespace.clone().unwrap_or_default(),
                name: s.metadata.name.clone().unwrap_or_default(),
            }),
            Err(e) => {
                tracing::warn!("watching ProbeSpecs: {e}; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                None
            }
        };
        if let Some(ev) = out {
            if tx.send(ev).await.is_err() {
                return;
            }
        }
    }
}

/// Writes the status of the ProbeAttachment of `spec` on `node` (server-side apply).
///
/// The object itself (owned by the ProbeSpec, so it goes when the spec goes) is applied
/// first unless `object_applied`: it depends only on the spec's name, uid and the node, so
/// once this agent has applied it for this spec, a status change is one request, not two
/// (1,000 nodes with 10 specs changing every 30 s are 333 writes a second, not 666). A
/// status subresource is never created by a write to it, so when the object has gone since
/// (deleted by hand), the 404 makes this apply it again and write the status once more.
pub async fn apply_attachment(
    client: &Client,
    spec: &ProbeSpec,
    node: &str,
    status: &ProbeAttachmentStatus,
    object_applied: bool,
) -> Result<(), kube::Error> {
    let ns = spec
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let api: Api<ProbeAttachment> = Api::namespaced(client.clone(), &ns);
    let obj = new_attachment(spec, node);
    let name = obj.metadata.name.clone().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let body = serde_json::json!({
        "apiVersion": gprobe_crds::API_VERSION,
        "kind": "ProbeAttachment",
        "status": status,
    });
    if object_applied {
        match api.patch_status(&name, &pp, &Patch::Apply(&body)).await {
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            r => return r.map(drop),
        }
    }
    api.patch(&name, &pp, &Patch::Apply(&obj)).await?;
    api.patch_status(&name, &pp, &Patch::Apply(&body)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    fn spec() -> ProbeSpec {
        let mut s = gprobe_crds::load_specs(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: urls, namespace: \
            shop, uid: 1111-2222}\nspec:\n  selector: {images: [\"*/http-client:*\"]}\n  probes: [{symbol: main.f}]\n",
            "t",
        )
        .unwrap()
        .remove(0);
        s.metadata.generation = Some(3);
        s
    }

    async fn body_json(req: Request<Body>) -> serde_json::Value {
        let bytes = req.into_body().collect_bytes().await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn attachment_is_applied_with_owner_then_status() {
        let (svc, mut handle): (_, Handle) = tower_test::mock::pair();
        let client = Client::new(svc, "default");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("object patch");
            assert_eq!(req.method(), http::Method::PATCH);
            let uri = req.uri().to_string();
            assert!(
                uri.starts_with(
                    "/apis/gprobe.dev/v1alpha1/namespaces/shop/probeattachments/urls-node-1?"
                ),
                "{uri}"
            );
            assert!(
                uri.contains("fieldManager=gprobe-agent") && uri.contains("force=true"),
                "{uri}"
            );
            let body = body_json(req).await;
            assert_eq!(body["spec"]["probeSpec"], "urls");
            assert_eq!(body["spec"]["nodeName"], "node-1");
            assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "1111-2222");
            assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "ProbeSpec");
            assert_eq!(body["metadata"]["labels"]["gprobe.dev/probespec"], "urls");
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );

            let (req, send) = handle.next_request().await.expect("status patch");
            assert!(
                req.uri()
                    .path()
                    .ends_with("/probeattachments/urls-node-1/status"),
                "{}",
                req.uri()
            );
            let body = body_json(req).await;
            assert_eq!(body["kind"], "ProbeAttachment");
            assert_eq!(body["status"]["observedGeneration"], 3);
            assert_eq!(body["status"]["links"][0]["state"], "Attached");
            assert_eq!(body["status"]["links"][0]["hits"], 5);
            let mut reply = body.clone();
            reply["metadata"] = serde_json::json!({"name": "urls-node-1", "namespace": "shop"});
            reply["spec"] = serde_json::json!({"probeSpec": "urls", "nodeName": "node-1"});
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            );
        });
        let status = ProbeAttachmentStatus {
            observed_generation: Some(3),
            links: vec![gprobe_crds::LinkStatus {
                container: "c".repeat(64),
                pod: "p".into(),
                symbol: "main.f".into(),
                state: gprobe_crds::LinkState::Attached,
                message: None,
                hits: 5,
                lost: 0,
                throttled: 0,
                site: None,
            }],
            ..Default::default()
        };
        apply_attachment(&client, &spec(), "node-1", &status, false)
            .await
            .unwrap();
        server.await.unwrap();
    }

    fn reply(status: u16, body: &serde_json::Value) -> Response<Body> {
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap()
    }

    fn not_found() -> serde_json::Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "probeattachments \"urls-node-1\" not found"})
    }

    /// The requests an agent makes for one write, as (method, path suffix), answering the
    /// first status write with `first_status` (the rest with 200).
    async fn requests_of_one_write(object_applied: bool, first_status: u16) -> Vec<String> {
        let (svc, mut handle): (_, Handle) = tower_test::mock::pair();
        let client = Client::new(svc, "default");
        let write = tokio::spawn(async move {
            apply_attachment(
                &client,
                &spec(),
                "node-1",
                &ProbeAttachmentStatus::default(),
                object_applied,
            )
            .await
        });
        let mut seen = Vec::new();
        let mut status_code = first_status;
        while let Some((req, send)) = handle.next_request().await {
            let path = req.uri().path().to_string();
            let mut body = body_json(req).await;
            body["metadata"] = serde_json::json!({"name": "urls-node-1", "namespace": "shop"});
            body["spec"] = serde_json::json!({"probeSpec": "urls", "nodeName": "node-1"});
            if path.ends_with("/status") {
                let code = std::mem::replace(&mut status_code, 200);
                let answer = if code == 404 { not_found() } else { body };
                send.send_response(reply(code, &answer));
            } else {
                send.send_response(reply(200, &body));
            }
            seen.push(path.rsplit('/').next().unwrap().to_string());
        }
        write.await.unwrap().unwrap();
        seen
    }

    #[tokio::test]
    async fn an_applied_attachment_gets_its_status_alone() {
        assert_eq!(
            requests_of_one_write(true, 200).await,
            ["status"],
            "one request per status change once the object is applied"
        );
        assert_eq!(
            requests_of_one_write(false, 200).await,
            ["urls-node-1", "status"]
        );
    }

    #[tokio::test]
    async fn an_attachment_deleted_since_is_applied_again() {
        assert_eq!(
            requests_of_one_write(true, 404).await,
            ["status", "urls-node-1", "status"]
        );
    }

    #[tokio::test]
    async fn specs_are_listed_then_watched() {
        let (svc, mut handle): (_, Handle) = tower_test::mock::pair();
        let client = Client::new(svc, "default");
        let (tx, mut rx) = mpsc::channel(8);
        let watch = tokio::spawn(watch_specs(client, tx));
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("list");
            assert_eq!(req.uri().path(), "/apis/gprobe.dev/v1alpha1/probespecs");
            assert!(
                !req.uri().to_string().contains("watch=true"),
                "{}",
                req.uri()
            );
            let mut item = serde_json::to_value(spec()).unwrap();
            item["metadata"]["resourceVersion"] = "10".into();
            let list = serde_json::json!({
                "apiVersion": "gprobe.dev/v1alpha1", "kind": "ProbeSpecList",
                "metadata": {"resourceVersion": "10"}, "items": [item.clone()]
            });
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&list).unwrap()))
                    .unwrap(),
            );

            let (req, send) = handle.next_request().await.expect("watch");
            let uri = req.uri().to_string();
            assert!(
                uri.contains("watch=true") && uri.contains("resourceVersion=10"),
                "{uri}"
            );
            item["metadata"]["resourceVersion"] = "11".into();
            let ev = serde_json::json!({"type": "DELETED", "object": item});
            let mut lines = serde_json::to_vec(&ev).unwrap();
            lines.push(b'\n');
            send.send_response(Response::builder().body(Body::from(lines)).unwrap());
        });
        match rx.recv().await.unwrap() {
            SpecEvent::Resync(v) => {
                assert_eq!(v.len(), 1);
                assert_eq!(v[0].metadata.name.as_deref(), Some("urls"));
            }
            other => panic!("expected the initial list, got {other:?}"),
        }
        match rx.recv().await.unwrap() {
            SpecEvent::Delete { namespace, name } => {
                assert_eq!((namespace.as_str(), name.as_str()), ("shop", "urls"))
            }
            other => panic!("expected a delete, got {other:?}"),
        }
        server.await.unwrap();
        watch.abort();
    }
}
