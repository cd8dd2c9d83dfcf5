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

/// Creates or updates the ProbeAttachment of `spec` on `node` (server-side apply; owned by
/// the ProbeSpec so it goes when the spec goes), then its status.
pub async fn apply_attachment(
    client: &Client,
    spec: &ProbeSpec,
    node: &str,
    status: &ProbeAttachmentStatus,
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
    api.patch(&name, &pp, &Patch::Apply(&obj)).await?;
    let body = serde_json::json!({
        "apiVersion": gprobe_crds::API_VERSION,
        "kind": "ProbeAttachment",
        "status": status,
    });
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
        apply_attachment(&client, &spec(), "node-1", &status)
            .await
            .unwrap();
        server.await.unwrap();
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
