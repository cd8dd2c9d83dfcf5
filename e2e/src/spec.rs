//! ProbeSpecs for the tests, built from the typed contract (`gprobe_crds`) and serialized to
//! the YAML that `gprobe run` and `gprobe agent --spec-dir` read:
//!
//! ```no_run
//! use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
//! # let bin = std::path::Path::new("/tmp/http-client");
//! let yaml = SpecBuilder::new("urls")
//!     .executable(bin)
//!     .probe(
//!         ProbeBuilder::new("net/http.(*Client).Get")
//!             .signature("func(c *Client, url string) (resp *Response, err error)")
//!             .capture(["url", "err"])
//!             .latency(),
//!     )
//!     .events_per_second(50)
//!     .yaml();
//! ```
//!
//! Text that must not be a valid ProbeSpec (a YAML syntax error, say) is written as is
//! with [`raw`].

use gprobe_crds::{Limits, Probe, ProbeSpec, ProbeSpecSpec, Selector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;
use std::path::Path;

/// A ProbeSpec under construction: a name, a selector, probes and limits.
#[derive(Debug, Clone)]
pub struct SpecBuilder {
    name: String,
    namespace: Option<String>,
    selector: Selector,
    probes: Vec<Probe>,
    limits: Limits,
}

impl SpecBuilder {
    /// A spec named `name` that selects nothing and has no probes yet.
    pub fn new(name: &str) -> Self {
        SpecBuilder {
            name: name.to_string(),
            namespace: None,
            selector: Selector::default(),
            probes: Vec::new(),
            limits: Limits::default(),
        }
    }

    /// `metadata.namespace` (cluster mode).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// `selector.executable`: an exact path or a glob.
    pub fn executable(mut self, path_or_glob: impl AsRef<Path>) -> Self {
        self.selector.executable = Some(path_or_glob.as_ref().to_string_lossy().into_owned());
        self
    }

    /// `selector.images`: globs on image references, or digests.
    pub fn images<S: Into<String>>(mut self, images: impl IntoIterator<Item = S>) -> Self {
        self.selector.images = images.into_iter().map(Into::into).collect();
        self
    }

    /// `selector.podSelector.matchLabels`.
    pub fn pod_labels<K: Into<String>, V: Into<String>>(
        mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let labels: BTreeMap<String, String> = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self.selector.pod_selector = Some(LabelSelector {
            match_labels: Some(labels),
            ..Default::default()
        });
        self
    }

    /// `selector.containerNames`.
    pub fn container_names<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.selector.container_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces the whole selector.
    pub fn selector(mut self, selector: Selector) -> Self {
        self.selector = selector;
        self
    }

    /// Appends a probe (a [`ProbeBuilder`] or a [`Probe`]).
    pub fn probe(mut self, probe: impl Into<Probe>) -> Self {
        self.probes.push(probe.into());
        self
    }

    /// Replaces the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// `limits.eventsPerSecond` (0: unlimited).
    pub fn events_per_second(mut self, n: u32) -> Self {
        self.limits.events_per_second = n;
        self
    }

    /// `limits.maxOverheadPercent`.
    pub fn max_overhead_percent(mut self, p: f64) -> Self {
        self.limits.max_overhead_percent = p;
        self
    }

    /// `limits.maxStringBytes`.
    pub fn max_string_bytes(mut self, n: u32) -> Self {
        self.limits.max_string_bytes = n;
        self
    }

    /// The typed ProbeSpec.
    pub fn build(self) -> ProbeSpec {
        let mut spec = ProbeSpec::new(
            &self.name,
            ProbeSpecSpec {
                selector: self.selector,
                probes: self.probes,
                limits: self.limits,
                ttl_seconds: None,
            },
        );
        spec.metadata.namespace = self.namespace;
        spec
    }

    /// The ProbeSpec as one YAML document.
    pub fn yaml(self) -> String {
        to_yaml(&self.build())
    }
}

/// One probe under construction; becomes a [`Probe`] (fields not set keep their defaults).
#[derive(Debug, Clone)]
pub struct ProbeBuilder(Probe);

impl ProbeBuilder {
    /// A probe on `symbol` (e.g. `main.computeE`, `net/http.(*Client).Get`).
    pub fn new(symbol: &str) -> Self {
        ProbeBuilder(Probe {
            symbol: symbol.to_string(),
            ..Default::default()
        })
    }

    /// A probe on the USDT probe `provider:name` (no symbol).
    pub fn usdt(point: &str) -> Self {
        ProbeBuilder(Probe {
            usdt: Some(point.to_string()),
            ..Default::default()
        })
    }

    /// `library: GLOB`: the symbol or USDT probe is in a shared object of the process
    /// (a path glob, or a file-name glob such as `libssl.so*`).
    pub fn library(mut self, glob: &str) -> Self {
        self.0.library = Some(glob.to_string());
        self
    }

    /// The function's signature (needed where the binary has no DWARF).
    pub fn signature(mut self, signature: &str) -> Self {
        self.0.signature = Some(signature.to_string());
        self
    }

    /// Names (or paths) of the values to capture, in order.
    pub fn capture<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.0.capture = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `redact` (on by default): `false` keeps credentials in captured URLs.
    pub fn redact(mut self, on: bool) -> Self {
        self.0.redact = on;
        self
    }

    /// `propagate: true`: outgoing requests made in the probe's spans carry them.
    pub fn propagate(mut self) -> Self {
        self.0.propagate = true;
        self
    }

    /// `latency: true`: measure each call from entry to return.
    pub fn latency(mut self) -> Self {
        self.0.latency = true;
        self
    }

    /// `hist: true`: a histogram of the call durations on stderr (needs `latency`).
    pub fn hist(mut self) -> Self {
        self.0.hist = true;
        self
    }

    /// `when: PREDICATE`: keep only the calls for which it holds (the others are counted
    /// as `filtered`).
    pub fn when(mut self, predicate: &str) -> Self {
        self.0.when = Some(predicate.to_string());
        self
    }

    /// `sample: RATIO`: keep this share of the calls that pass `when` (the others are
    /// counted as `sampled_out`).
    pub fn sample(mut self, ratio: f64) -> Self {
        self.0.sample = Some(ratio);
        self
    }

    /// The typed probe.
    pub fn build(self) -> Probe {
        self.0
    }
}

impl From<ProbeBuilder> for Probe {
    fn from(b: ProbeBuilder) -> Probe {
        b.0
    }
}

/// `spec` as one YAML document.
pub fn to_yaml(spec: &ProbeSpec) -> String {
    serde_yaml::to_string(spec).expect("a ProbeSpec serializes to YAML")
}

/// Several ProbeSpecs as one multi-document YAML text.
pub fn multi_yaml<'a>(specs: impl IntoIterator<Item = &'a ProbeSpec>) -> String {
    specs
        .into_iter()
        .map(|s| format!("---\n{}", to_yaml(s)))
        .collect()
}

/// YAML text used as is: for specs that the typed builders cannot (and must not) express,
/// such as a syntax error or a field gprobe does not know.
pub fn raw(yaml: &str) -> String {
    yaml.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_spec_is_what_gprobe_loads() {
        let yaml = SpecBuilder::new("urls")
            .executable("/app/shop")
            .probe(
                ProbeBuilder::new("net/http.(*Client).Get")
                    .signature("func(c *Client, url string) (resp *Response, err error)")
                    .capture(["url", "err"])
                    .latency(),
            )
            .probe(
                ProbeBuilder::new("main.nope")
                    .when(r#"hasPrefix(p, "/api/") && n > 5"#)
                    .sample(0.25),
            )
            .events_per_second(50)
            .yaml();
        let specs = gprobe_crds::load_specs(&yaml, "spec.yaml").unwrap();
        assert_eq!(specs.len(), 1);
        let s = &specs[0];
        assert_eq!(s.display_name(), "urls");
        assert_eq!(s.spec.selector.executable.as_deref(), Some("/app/shop"));
        assert_eq!(s.spec.probes.len(), 2);
        assert_eq!(s.spec.probes[0].capture, ["url", "err"]);
        assert!(s.spec.probes[0].latency);
        assert!(!s.spec.probes[1].latency && s.spec.probes[1].signature.is_none());
        assert_eq!(s.spec.probes[0].when, None);
        assert_eq!(
            s.spec.probes[1].when.as_deref(),
            Some(r#"hasPrefix(p, "/api/") && n > 5"#)
        );
        assert_eq!(s.spec.probes[1].sample, Some(0.25));
        assert_eq!(s.spec.limits.events_per_second, 50);
        assert_eq!(s.spec.limits.max_string_bytes, 256);
        assert!(!yaml.contains("status"), "{yaml}");
    }

    #[test]
    fn cluster_selectors_and_several_documents() {
        let a = SpecBuilder::new("shop-urls")
            .namespace("shop")
            .images(["registry.test/shop/*:v1.*"])
            .pod_labels([("app", "shop")])
            .container_names(["app"])
            .probe(ProbeBuilder::new("main.f"))
            .build();
        let b = SpecBuilder::new("other")
            .executable("/bin/*")
            .probe(ProbeBuilder::new("main.g"))
            .build();
        let specs = gprobe_crds::load_specs(&multi_yaml([&a, &b]), "specs.yaml").unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].spec, a.spec);
        assert_eq!(specs[1].spec, b.spec);
        assert_eq!(specs[1].display_name(), "other");
        let sel = &specs[0].spec.selector;
        assert_eq!(specs[0].metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            sel.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app"],
            "shop"
        );
    }
}
