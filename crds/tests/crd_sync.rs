//! The committed CRD YAML must be what `crdgen` prints, so that `kubectl apply -f crds/crds.yaml`
//! and the Helm chart install the schema the code expects.

use std::path::{Path, PathBuf};

const REGENERATE: &str = "run `cargo run -p gprobe-crds --bin crdgen > crds/crds.yaml`";

fn first_difference(a: &str, b: &str) -> String {
    for (i, (la, lb)) in a.lines().zip(b.lines()).enumerate() {
        if la != lb {
            return format!("line {}:\n  committed: {la}\n  generated: {lb}", i + 1);
        }
    }
    format!(
        "one is a prefix of the other ({} vs {} lines)",
        a.lines().count(),
        b.lines().count()
    )
}

fn check(path: &Path, generated: &str, fix: &str) {
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {fix}", path.display()));
    assert!(
        committed == generated,
        "{} is out of date with the Rust types; {fix}\nfirst difference at {}",
        path.display(),
        first_difference(&committed, generated)
    );
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crds/ has a parent")
        .to_path_buf()
}

#[test]
fn committed_crds_yaml_matches_the_types() {
    let generated = gprobe_crds::crds_yaml();
    check(&repo_root().join("crds/crds.yaml"), &generated, REGENERATE);
}

#[test]
fn chart_crds_yaml_matches_the_types() {
    let generated = gprobe_crds::crds_yaml();
    // The chart installs the CRDs from its own copy: a missing copy fails in check().
    let chart = repo_root().join("charts/gprobe/crds/crds.yaml");
    check(
        &chart,
        &generated,
        &format!("{REGENERATE} and copy it to charts/gprobe/crds/crds.yaml"),
    );
}
