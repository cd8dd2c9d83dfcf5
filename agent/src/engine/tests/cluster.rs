//! Cluster mode: a spec selects the containers of its namespace only.

use super::*;

fn container(id: &str, ns: &str, app: &str) -> Container {
    Container {
        id: id.repeat(64),
        name: "app".into(),
        image: "registry.example/shop/cart:v1".into(),
        image_id: "sha256:abc".into(),
        pod_name: format!("pod-{id}"),
        pod_namespace: ns.into(),
        pod_uid: "uid".into(),
        pod_labels: [("app".to_string(), app.to_string())].into(),
        pid: 0,
    }
}

#[test]
fn cluster_mode_selects_containers_of_the_specs_namespace_only() {
    let mut w = world(Mode::Cluster { node: "n1".into() });
    w.engine
        .add_spec(spec(
            "s",
            Some("shop"),
            "{podSelector: {matchLabels: {app: cart}}}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    let fresh = w.engine.set_containers(vec![
        container("a", "shop", "cart"),
        container("b", "other", "cart"),
    ]);
    assert_eq!(fresh.len(), 2);
    let in_container = |pid, c: &str| {
        let mut p = proc(pid, "/app/cart", 7);
        p.container_id = Some(c.repeat(64));
        p
    };
    w.engine
        .process_seen(in_container(10, "a"), Origin::Running);
    w.engine
        .process_seen(in_container(11, "b"), Origin::Running);
    w.engine
        .process_seen(proc(12, "/app/cart", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 1);
    assert_eq!(live_links(&w, 11), 0, "another namespace");
    assert_eq!(live_links(&w, 12), 0, "not in a container");
    let snap = w.engine.snapshot();
    assert_eq!(snap.specs[0].key.to_string(), "shop/s");
    assert_eq!(snap.specs[0].processes.len(), 1);
    // The container goes: its processes are forgotten.
    assert!(w
        .engine
        .set_containers(vec![container("b", "other", "cart")])
        .is_empty());
    assert_eq!(live_links(&w, 10), 0);
    assert!(!w.engine.is_tracked(10));
}
