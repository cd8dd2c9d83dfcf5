//! What the generated CRDs promise: descriptions on every field, the CEL rules, printer
//! columns and short names.

use gprobe_crds::{ProbeAttachment, ProbeSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

fn schema(crd: &CustomResourceDefinition) -> Value {
    let v = &crd.spec.versions[0];
    serde_json::to_value(
        v.schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// Paths of object properties that have no description (items of plain arrays need none).
fn undocumented(path: &str, node: &Value, out: &mut Vec<String>) {
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let p = format!("{path}.{name}");
            if prop.get("description").is_none() {
                out.push(p.clone());
            }
            undocumented(&p, prop, out);
        }
    }
    if let Some(items) = node.get("items") {
        undocumented(&format!("{path}[]"), items, out);
    }
}

fn rules(node: &Value) -> Vec<String> {
    node.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|r| r["rule"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_field_has_a_description() {
    for crd in [ProbeSpec::crd(), ProbeAttachment::crd()] {
        let mut missing = Vec::new();
        undocumented("", &schema(&crd), &mut missing);
        assert!(
            missing.is_empty(),
            "{}: fields without a description (add a doc comment): {missing:?}",
            crd.spec.names.kind
        );
    }
}

#[test]
fn probespec_schema_carries_the_static_checks_as_cel_rules() {
    let s = schema(&ProbeSpec::crd());
    let spec = &s["properties"]["spec"]["properties"];
    assert!(rules(&spec["selector"])[0].contains("has(self.executable)"));
    assert_eq!(rules(&spec["probes"]), ["size(self) >= 1"]);
    assert_eq!(spec["probes"]["maxItems"], 128);
    // A probe is on exactly one function or USDT probe, neither blank.
    assert_eq!(
        rules(&spec["probes"]["items"]),
        ["(has(self.symbol) && self.symbol.trim() != '') != (has(self.usdt) && self.usdt.trim() != '')"]
    );
    let probe = &spec["probes"]["items"]["properties"];
    assert_eq!(rules(&probe["capture"]), ["size(self) <= 8"]);
    assert_eq!(
        rules(&spec["limits"]["properties"]["maxStringBytes"]),
        ["self >= 1 && self <= 4096"]
    );
}

#[test]
fn printer_columns_and_names() {
    let crd = ProbeSpec::crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["pspec".to_string()][..])
    );
    let cols: Vec<_> = crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        cols,
        [
            ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
            ("Nodes", ".status.nodes"),
            ("Attached", ".status.probesAttached"),
            ("Errors", ".status.probesFailed"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
    assert!(crd.spec.versions[0]
        .subresources
        .as_ref()
        .unwrap()
        .status
        .is_some());

    let crd = ProbeAttachment::crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["patt".to_string()][..])
    );
    assert_eq!(crd.spec.group, "gprobe.dev");
    assert_eq!(crd.spec.versions[0].name, "v1alpha1");
    let s = schema(&crd);
    assert_eq!(
        s["properties"]["status"]["properties"]["links"]["maxItems"],
        200
    );
}

#[test]
fn old_yaml_without_the_new_status_fields_still_loads() {
    let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  \
        selector: {executable: /bin/x}\n  probes: [{symbol: main.f}]\nstatus:\n  conditions: []\n";
    let s = &gprobe_crds::load_specs(text, "a.yaml").unwrap()[0];
    let st = s.status.as_ref().unwrap();
    assert_eq!(st.nodes, 0);
    assert_eq!(st.observed_generation, None);
    assert!(st.errors.is_empty());
}
