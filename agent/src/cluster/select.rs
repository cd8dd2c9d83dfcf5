//! Whether a ProbeSpec selects a container: namespace, image, pod labels, container name
//! and executable, all that are given (AND).

use crate::discover::cri::Container;
use gprobe_crds::glob::Glob;
use gprobe_crds::ProbeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// A standard Kubernetes label selector: matchLabels and matchExpressions (In, NotIn,
/// Exists, DoesNotExist), all ANDed. An empty selector matches everything.
pub fn labels_match(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &sel.match_labels {
        if ml.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let val = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or(&[]);
        let ok = match e.operator.as_str() {
            "In" => val.is_some_and(|v| values.contains(v)),
            "NotIn" => val.is_none_or(|v| !values.contains(v)),
            "Exists" => val.is_some(),
            "DoesNotExist" => val.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

fn any_glob(patterns: &[String], text: &str) -> bool {
    patterns
        .iter()
        .any(|p| Glob::new(p).is_ok_and(|g| g.matches(text)))
}

/// Image patterns match the reference; a `sha256:` pattern matches the image id/digest.
fn image_matches(patterns: &[String], c: &Container) -> bool {
    patterns.iter().any(|p| {
        if p.starts_with("sha256:") {
            c.image_id.ends_with(p.as_str()) || c.image == *p
        } else {
            Glob::new(p).is_ok_and(|g| g.matches(&c.image))
        }
    })
}

/// Whether `spec` selects the container (before looking at the executable).
pub fn selects_container(spec: &ProbeSpec, c: &Container) -> bool {
    // A ProbeSpec may only select pods of its own namespace: namespace RBAC decides who may
    // trace what.
    let ns = spec.metadata.namespace.as_deref().unwrap_or("default");
    if c.pod_namespace != ns {
        return false;
    }
    let sel = &spec.spec.selector;
    if !sel.images.is_empty() && !image_matches(&sel.images, c) {
        return false;
    }
    if let Some(ls) = &sel.pod_selector {
        if !labels_match(ls, &c.pod_labels) {
            return false;
        }
    }
    if !sel.container_names.is_empty() && !any_glob(&sel.container_names, &c.name) {
        return false;
    }
    true
}

/// Whether the executable (its path inside the container) passes `selector.executable`.
pub fn selects_executable(spec: &ProbeSpec, exe_in_container: &str) -> bool {
    match &spec.spec.selector.executable {
        Some(e) => Glob::new(e).is_ok_and(|g| g.matches(exe_in_container)),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gprobe_crds::load_specs;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn container(ns: &str, image: &str, labels: &[(&str, &str)], name: &str) -> Container {
        Container {
            id: "c".repeat(64),
            name: name.into(),
            image: image.into(),
            image_id: "sha256:abcdef".into(),
            pod_name: "p".into(),
            pod_namespace: ns.into(),
            pod_uid: "u".into(),
            pod_labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            pid: 1,
        }
    }

    fn spec(sel: &str) -> ProbeSpec {
        let text = format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: s, namespace: shop}}\nspec:\n  selector: {sel}\n  probes: [{{symbol: main.f}}]\n"
        );
        load_specs(&text, "t").unwrap().remove(0)
    }

    #[test]
    fn all_given_fields_must_match_and_only_in_the_specs_namespace() {
        let s = spec(
            r#"{images: ["registry.example/shop/*:v1.*"], podSelector: {matchLabels: {app: shop}}, containerNames: [app]}"#,
        );
        let good = container(
            "shop",
            "registry.example/shop/cart:v1.2",
            &[("app", "shop")],
            "app",
        );
        assert!(selects_container(&s, &good));
        assert!(!selects_container(
            &s,
            &container(
                "other",
                "registry.example/shop/cart:v1.2",
                &[("app", "shop")],
                "app"
            )
        ));
        assert!(!selects_container(
            &s,
            &container(
                "shop",
                "registry.example/shop/cart:v2.0",
                &[("app", "shop")],
                "app"
            )
        ));
        assert!(!selects_container(
            &s,
            &container(
                "shop",
                "registry.example/shop/cart:v1.2",
                &[("app", "web")],
                "app"
            )
        ));
        assert!(!selects_container(
            &s,
            &container(
                "shop",
                "registry.example/shop/cart:v1.2",
                &[("app", "shop")],
                "sidecar"
            )
        ));
        let by_digest = spec(r#"{images: ["sha256:abcdef"]}"#);
        assert!(selects_container(&by_digest, &good));
    }

    #[test]
    fn match_expressions() {
        let labels: BTreeMap<String, String> = [
            ("app".to_string(), "shop".to_string()),
            ("tier".to_string(), "web".to_string()),
        ]
        .into();
        let req = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let sel = |exprs| LabelSelector {
            match_expressions: Some(exprs),
            match_labels: None,
        };
        assert!(labels_match(
            &sel(vec![req("app", "In", &["shop", "cart"])]),
            &labels
        ));
        assert!(!labels_match(
            &sel(vec![req("app", "NotIn", &["shop"])]),
            &labels
        ));
        assert!(labels_match(
            &sel(vec![req("tier", "Exists", &[])]),
            &labels
        ));
        assert!(labels_match(
            &sel(vec![req("canary", "DoesNotExist", &[])]),
            &labels
        ));
        assert!(!labels_match(
            &sel(vec![req("tier", "Frobs", &[])]),
            &labels
        ));
        assert!(labels_match(&LabelSelector::default(), &labels));
    }

    #[test]
    fn executable_globs_apply_inside_the_container() {
        let s = spec(r#"{executable: "/app/*"}"#);
        assert!(selects_executable(&s, "/app/shop"));
        assert!(!selects_executable(&s, "/usr/bin/sh"));
    }
}
