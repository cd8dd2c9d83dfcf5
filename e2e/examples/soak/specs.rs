//! The ProbeSpecs the soak keeps rewriting in the agent's spec folder, and the agent's
//! report of which version it applied.

use crate::{FUNCS, NS, SPEC};
use gprobe_e2e::spec::{to_yaml, ProbeBuilder, SpecBuilder};
use std::path::Path;

/// The main spec's version `generation`: all five functions, with or without latency and
/// results, the limit changed every time (each version is a real change).
pub fn main_spec(generation: i64) -> String {
    let latency = generation % 2 == 0;
    let mut b = SpecBuilder::new(SPEC)
        .namespace(NS)
        .images(["registry.test/soak/*"])
        .events_per_second(100_000 + generation as u32);
    for f in FUNCS {
        let p = ProbeBuilder::new(f).signature("func(i int64) int64");
        b = b.probe(if latency {
            p.capture(["i", "r0"]).latency()
        } else {
            p.capture(["i"])
        });
    }
    let mut spec = b.build();
    spec.metadata.generation = Some(generation);
    to_yaml(&spec)
}

/// A second spec on the steady pods, added and deleted as the main one changes.
pub fn extra_spec() -> String {
    SpecBuilder::new("soak-extra")
        .namespace(NS)
        .pod_labels([("app", "steady")])
        .probe(
            ProbeBuilder::new("main.add")
                .signature("func(i int64) int64")
                .capture(["i"]),
        )
        .yaml()
}

pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

pub fn observed_generation(report: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(report).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v[format!("{NS}/{SPEC}")]["observedGeneration"].as_i64()
}
