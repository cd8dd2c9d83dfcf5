//! Reconciliation against the mocked API server: which requests it makes, in which order,
//! and what the status patches and Events say.

use crate::controller::{error_policy, reconcile, Context, REQUEUE};
use crate::fixtures::{mock_client, status_error, verified, ApiServerVerifier, Seen, Step};
use crate::server::Probes;
use gprobe_crds::{
    load_specs, new_attachment, ContainerRef, LinkState, LinkStatus, ProbeAttachment,
    ProbeAttachmentStatus, ProbeSpec, ProbeSpecStatus,
};
use http::{Method, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::{reflector, watcher};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const LIST: &str = "/apis/gprobe.dev/v1alpha1/namespaces/shop/probeattachments";
const STATUS: &str = "/apis/gprobe.dev/v1alpha1/namespaces/shop/probespecs/urls/status";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

fn context() -> (Arc<Context>, ApiServerVerifier) {
    let (client, api) = mock_client();
    let ctx = Context::new(
        client,
        Arc::new(Probes::default()),
        Some("operator-0".into()),
    );
    (ctx, api)
}

fn spec_from(probes: &str) -> ProbeSpec {
    let text = format!(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: urls, namespace: \
        shop, uid: u-1, generation: 2}}\nspec:\n  selector: {{images: \
            ['registry.example/shop/*:v1.*']}}\n  probes:\n{probes}"
    );
    load_specs(&text, "test.yaml").unwrap().remove(0)
}

fn valid_spec() -> ProbeSpec {
    spec_from(
        "    - {symbol: 'net/http.(*Client).Get', signature: 'func(c *Client, url string) \
        (resp *Response, err error)', capture: [url, err]}\n",
    )
}

fn list_of(items: &[ProbeAttachment]) -> Value {
    json!({"apiVersion": "gprobe.dev/v1alpha1", "kind": "ProbeAttachmentList",
           "metadata": {"resourceVersion": "7"}, "items": items})
}

fn list_step(items: &[ProbeAttachment]) -> Step {
    Step::new(Method::GET, LIST)
        .query("labelSelector=gprobe.dev%2Fprobespec%3Durls")
        .ok(list_of(items))
}

/// The status patch: server-side apply by our field manager; answers with the spec carrying
/// the applied status, as the API server would.
fn patch_step(spec: &ProbeSpec) -> Step {
    let current = serde_json::to_value(spec).unwrap();
    Step::new(Method::PATCH, STATUS)
        .query("fieldManager=gprobe-operator")
        .query("force=true")
        .respond_with(move |body| {
            let mut obj = current.clone();
            obj["status"] = body["status"].clone();
            obj
        })
}

fn event_step() -> Step {
    Step::new(Method::POST, EVENTS).created()
}

fn applied_status(seen: &Seen) -> ProbeSpecStatus {
    assert_eq!(seen.body["apiVersion"], "gprobe.dev/v1alpha1");
    assert_eq!(seen.body["kind"], "ProbeSpec");
    assert!(
        seen.body.get("spec").is_none(),
        "a status apply carries no spec"
    );
    serde_json::from_value(seen.body["status"].clone()).expect("the patch holds a status")
}

fn cond<'a>(st: &'a ProbeSpecStatus, type_: &str) -> (&'a str, &'a str, &'a str) {
    let c = st
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn link(pod: &str, state: LinkState, message: Option<&str>) -> LinkStatus {
    LinkStatus {
        container: format!("{pod}-cid"),
        pod: pod.into(),
        symbol: "net/http.(*Client).Get".into(),
        state,
        message: message.map(Into::into),
        hits: 10,
        lost: 0,
        throttled: 0,
        site: None,
    }
}

fn attachment(
    spec: &ProbeSpec,
    node: &str,
    updated: &str,
    links: Vec<LinkStatus>,
) -> ProbeAttachment {
    let mut a = new_attachment(spec, node);
    a.status = Some(ProbeAttachmentStatus {
        observed_generation: Some(2),
        update_time: Some(
            updated
                .parse::<k8s_openapi::jiff::Timestamp>()
                .map(Time)
                .expect("RFC 3339 test time"),
        ),
        containers: links
            .iter()
            .map(|l| ContainerRef {
                namespace: "shop".into(),
                pod: l.pod.clone(),
                container_id: l.container.clone(),
                container: "app".into(),
                ..ContainerRef::default()
            })
            .collect(),
        links,
        links_omitted: 0,
        ..Default::default()
    });
    a
}

#[tokio::test]
async fn valid_spec_without_attachments_is_valid_not_ready_and_announced() {
    let (ctx, api) = context();
    let spec = valid_spec();
    let server = api.run(vec![
        list_step(&[]),
        patch_step(&spec),
        event_step(),
        event_step(),
    ]);
    let action = reconcile(Arc::new(spec), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(REQUEUE));
    assert_eq!(ctx.probes.metrics.reconciliations(), 1);
    drop(ctx);
    let seen = verified(server).await;

    assert_eq!(seen[1].method, Method::PATCH);
    assert!(
        seen[1].uri.contains("fieldManager=gprobe-operator"),
        "{}",
        seen[1].uri
    );
    let st = applied_status(&seen[1]);
    assert_eq!(cond(&st, "Valid").0, "True");
    assert_eq!(cond(&st, "Valid").1, "Validated");
    let (status, reason, message) = cond(&st, "Ready");
    assert_eq!((status, reason), ("False", "NoMatchingContainers"));
    assert_eq!(message, "no agent has reported a matching container yet");
    assert_eq!(st.observed_generation, Some(2));
    assert_eq!(st.condition("Ready").unwrap().observed_generation, Some(2));
    assert_eq!(
        (
            st.nodes,
            st.containers_matched,
            st.probes_attached,
            st.probes_failed
        ),
        (0, 0, 0, 0)
    );
    // Zero counts are written, not left out, so that the printer columns show 0.
    assert_eq!(seen[1].body["status"]["nodes"], 0);

    let events: Vec<(&str, &str)> = seen[2..]
        .iter()
        .map(|s| {
            assert_eq!(s.body["regarding"]["kind"], "ProbeSpec");
            assert_eq!(s.body["regarding"]["name"], "urls");
            assert_eq!(s.body["reportingController"], "gprobe-operator");
            assert_eq!(s.body["reportingInstance"], "operator-0");
            (
                s.body["type"].as_str().unwrap(),
                s.body["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [("Normal", "Validated"), ("Normal", "NoMatchingContainers")]
    );
}

#[tokio::test]
async fn invalid_spec_is_not_valid_and_never_ready() {
    let (ctx, api) = context();
    let spec = spec_from(
        "    - {symbol: main.computeE, signature: 'func(iterations int64) float64', capture: \
        [iters]}\n    - {symbol: main.g, signature: 'func(n int'}\n",
    );
    let server = api.run(vec![list_step(&[]), patch_step(&spec), event_step()]);
    reconcile(Arc::new(spec), ctx.clone()).await.unwrap();
    drop(ctx);
    let seen = verified(server).await;

    let st = applied_status(&seen[1]);
    let (status, reason, message) = cond(&st, "Valid");
    assert_eq!((status, reason), ("False", "InvalidSpec"));
    assert!(message.starts_with("2 issues found: "), "{message}");
    assert!(
        message.contains("spec.probes[0].capture[0]: \"iters\" is not a parameter or result"),
        "{message}"
    );
    assert!(message.contains("spec.probes[1].signature"), "{message}");
    let (status, reason, _) = cond(&st, "Ready");
    assert_eq!((status, reason), ("False", "InvalidSpec"));

    // One Event, for Valid=False; Ready=False because of it gets none of its own.
    let ev = &seen[2].body;
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["reason"], "InvalidSpec");
    assert!(ev["note"].as_str().unwrap().contains("\"iters\""), "{ev}");
}

#[tokio::test]
async fn a_when_that_does_not_parse_or_a_sample_out_of_range_is_an_invalid_spec() {
    let (ctx, api) = context();
    let spec = spec_from(
        "    - {symbol: main.handle, when: 'r.URL.Path = \"/healthz\"'}\n    - {symbol: main.slow, \
        when: 'duration > 100ms', sample: 1.5}\n",
    );
    let server = api.run(vec![list_step(&[]), patch_step(&spec), event_step()]);
    reconcile(Arc::new(spec), ctx.clone()).await.unwrap();
    drop(ctx);
    let seen = verified(server).await;

    let st = applied_status(&seen[1]);
    let (status, reason, message) = cond(&st, "Valid");
    assert_eq!((status, reason), ("False", "InvalidSpec"));
    assert!(message.starts_with("3 issues found: "), "{message}");
    for said in [
        "spec.probes[0].when: `=` is not a comparison: write `==` (at character 12 of \
         \"r.URL.Path = \\\"/healthz\\\"\")",
        "spec.probes[1].sample: sample is a share of the calls: more than 0, at most 1",
        "spec.probes[1].when: `duration > 100ms` needs `latency: true`",
    ] {
        assert!(message.contains(said), "{message}\nwant: {said}");
    }
    assert_eq!(cond(&st, "Ready").1, "InvalidSpec");
    let ev = &seen[2].body;
    assert_eq!(
        (ev["type"].as_str(), ev["reason"].as_str()),
        (Some("Warning"), Some("InvalidSpec"))
    );
    assert!(
        ev["note"].as_str().unwrap().contains("spec.probes[0].when"),
        "{ev}"
    );
}

#[tokio::test]
async fn two_nodes_roll_up_into_counts_and_errors() {
    let (ctx, api) = context();
    let mut spec = valid_spec();
    // It was valid and not ready before: only Ready moves.
    let before = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let mut old = crate::rollup::roll_up(&spec, &[], &[], &before);
    old.errors = vec![];
    spec.status = Some(old);

    let node_a = attachment(
        &spec,
        "node-a",
        "2026-11-22T10:00:00Z",
        vec![
            link("shop-1", LinkState::Attached, None),
            link("shop-2", LinkState::Attached, None),
        ],
    );
    let node_b = attachment(
        &spec,
        "node-b",
        "2026-11-22T10:00:05Z",
        vec![
            link("shop-3", LinkState::Attached, None),
            link(
                "shop-4",
                LinkState::AttachError,
                Some("no symbol net/http.(*Client).Get in /app/shop"),
            ),
        ],
    );
    // Same label value but another spec's report (only possible with hashed long names):
    // left out.
    let mut other = node_a.clone();
    other.spec.probe_spec = "other".into();
    other.metadata.name = Some("other-node-a".into());

    let server = api.run(vec![
        list_step(&[node_a, node_b, other]),
        patch_step(&spec),
        event_step(),
    ]);
    reconcile(Arc::new(spec), ctx.clone()).await.unwrap();
    drop(ctx);
    let seen = verified(server).await;

    let st = applied_status(&seen[1]);
    assert_eq!(st.nodes, 2);
    assert_eq!(st.containers_matched, 4);
    assert_eq!(st.probes_attached, 3);
    assert_eq!(st.probes_failed, 1);
    assert_eq!(
        st.errors,
        ["node-b: shop-4/net/http.(*Client).Get: no symbol net/http.(*Client).Get in /app/shop"]
    );
    let (status, reason, message) = cond(&st, "Ready");
    assert_eq!((status, reason), ("False", "AttachErrors"));
    assert!(
        message
            .starts_with("1 probe failed to attach on 1 node, 3 attached; first: node-b: shop-4/"),
        "{message}"
    );
    assert_eq!(
        st.condition("Valid").unwrap().last_transition_time,
        before,
        "Valid did not change: its transition time stays"
    );
    assert_eq!(
        st.condition("Ready").unwrap().last_transition_time,
        before,
        "Ready stayed False (only its reason moved): no status transition, same time"
    );

    assert_eq!(seen[2].body["type"], "Warning");
    assert_eq!(seen[2].body["reason"], "AttachErrors");
}

/// With the controller's store of ProbeAttachments (as `controller::run` sets it), the
/// reconciliation reads them from the store: no LIST reaches the API server, and another
/// namespace's or another spec's attachments are left out.
#[tokio::test]
async fn attachments_come_from_the_store_without_a_list() {
    let (ctx, api) = context();
    let spec = valid_spec();
    let node_a = attachment(
        &spec,
        "node-a",
        "2026-11-22T10:00:00Z",
        vec![link("shop-1", LinkState::Attached, None)],
    );
    let node_b = attachment(
        &spec,
        "node-b",
        "2026-11-22T10:00:05Z",
        vec![link("shop-2", LinkState::Attached, None)],
    );
    let mut elsewhere = node_a.clone();
    elsewhere.metadata.namespace = Some("billing".into());
    let mut other = node_b.clone();
    other.spec.probe_spec = "other".into();
    other.metadata.name = Some("other-node-b".into());

    let (store, mut writer) = reflector::store::<ProbeAttachment>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for a in [node_a, node_b, elsewhere, other] {
        writer.apply_watcher_event(&watcher::Event::InitApply(a));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    ctx.set_attachments(Some(store));

    // The patch and the two Events (Valid and Ready both new) only: the verifier fails on a
    // LIST.
    let server = api.run(vec![patch_step(&spec), event_step(), event_step()]);
    reconcile(Arc::new(spec), ctx.clone()).await.unwrap();
    drop(ctx);
    let seen = verified(server).await;
    assert_eq!(seen.len(), 3);
    let st = applied_status(&seen[0]);
    assert_eq!(st.nodes, 2);
    assert_eq!(st.probes_attached, 2);
    assert_eq!(cond(&st, "Ready").0, "True");
}

#[tokio::test]
async fn an_up_to_date_status_is_not_patched() {
    let (ctx, api) = context();
    let mut spec = valid_spec();
    let atts = [attachment(
        &spec,
        "node-a",
        "2026-11-22T10:00:00Z",
        vec![link("shop-1", LinkState::Attached, None)],
    )];
    let then = Time(Timestamp::from_second(1_800_000_000).unwrap());
    let current = crate::rollup::roll_up(&spec, &[], &atts, &then);
    assert_eq!(cond(&current, "Ready").0, "True");
    spec.status = Some(current);

    // Only the list: no patch, no Event (the verifier fails on any further request).
    let server = api.run(vec![list_step(&atts)]);
    let action = reconcile(Arc::new(spec), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(REQUEUE));
    drop(ctx);
    assert_eq!(verified(server).await.len(), 1);
}

#[tokio::test]
async fn a_spec_being_deleted_is_left_alone() {
    let (ctx, api) = context();
    let mut spec = valid_spec();
    spec.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(1_800_000_000).unwrap()));
    let server = api.run(vec![]);
    let action = reconcile(Arc::new(spec), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    drop(ctx);
    assert!(verified(server).await.is_empty(), "no request at all");
}

#[tokio::test]
async fn a_failed_patch_is_retried_with_growing_backoff_and_counted() {
    let (ctx, api) = context();
    let spec = Arc::new(valid_spec());
    let fail = || {
        Step::new(Method::PATCH, STATUS).reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            status_error(500, "InternalError"),
        )
    };
    let server = api.run(vec![list_step(&[]), fail(), list_step(&[]), fail()]);
    let mut delays = Vec::new();
    for _ in 0..2 {
        let err = reconcile(spec.clone(), ctx.clone()).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("patching the status of ProbeSpec shop/urls"),
            "{err}"
        );
        delays.push(error_policy(spec.clone(), &err, ctx.clone()));
    }
    assert_eq!(
        delays,
        [
            Action::requeue(Duration::from_secs(5)),
            Action::requeue(Duration::from_secs(10))
        ]
    );
    assert_eq!(ctx.probes.metrics.failures("patch_status"), 2);
    assert_eq!(ctx.probes.metrics.reconciliations(), 2);
    drop(ctx);
    verified(server).await;
}

#[tokio::test]
async fn an_expired_spec_is_deleted_by_its_uid_and_nothing_else_is_written() {
    let (ctx, api) = context();
    let mut spec = valid_spec();
    spec.spec.ttl_seconds = Some(30);
    spec.metadata.creation_timestamp = Some(Time(Timestamp::from_second(1_000).unwrap()));
    let server = api.run(vec![Step::new(
        Method::DELETE,
        "/apis/gprobe.dev/v1alpha1/namespaces/shop/probespecs/urls",
    )
    .ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}))]);
    let now = Time(Timestamp::from_second(1_031).unwrap());
    let action = crate::controller::reconcile_at(&spec, &ctx, &now)
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    drop(ctx);
    let seen = verified(server).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body["preconditions"]["uid"], "u-1");
}

#[tokio::test]
async fn a_spec_not_yet_expired_is_reconciled_again_just_after_its_expiry() {
    let (ctx, api) = context();
    let mut spec = valid_spec();
    spec.spec.ttl_seconds = Some(30);
    spec.metadata.creation_timestamp = Some(Time(Timestamp::from_second(1_000).unwrap()));
    let server = api.run(vec![
        list_step(&[]),
        patch_step(&spec),
        event_step(),
        event_step(),
    ]);
    let now = Time(Timestamp::from_second(1_010).unwrap());
    let action = crate::controller::reconcile_at(&spec, &ctx, &now)
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(21)));
    drop(ctx);
    verified(server).await;
}
