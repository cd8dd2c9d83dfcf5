use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const API_GROUP: &str = "gprobe.dev";
pub const API_VERSION: &str = "gprobe.dev/v1alpha1";

/// What to trace: which processes (selector) and which functions in them (probes).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gprobe.dev",
    version = "v1alpha1",
    kind = "ProbeSpec",
    namespaced,
    shortname = "pspec",
    status = "ProbeSpecStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeSpecSpec {
    /// Which processes to trace. Every field given must match (AND); at least one is required.
    pub selector: Selector,
    /// The functions to trace in every selected process.
    pub probes: Vec<Probe>,
    /// Bounds on what each probe may capture and emit.
    #[serde(default)]
    pub limits: Limits,
}

/// Selects processes. Every field given must match (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    /// Globs on the container image reference (`registry/repo:tag`), or `sha256:...` digests.
    /// Cluster mode, and local mode where a container runtime is reachable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    /// A standard label selector on pod labels (cluster mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// Container names (globs) within the selected pods (cluster mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_names: Vec<String>,
    /// Glob on the executable path: inside the container in cluster mode, on the host in
    /// `gprobe run`. `*` does not cross `/`, `**` does; an exact path is a glob too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
}

/// One function to trace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Probe {
    /// The function's symbol as the Go toolchain names it, e.g. `main.computeE` or
    /// `net/http.(*Client).Get`.
    pub symbol: String,
    /// The Go signature, e.g. `func(c *Client, url string) (resp *Response, err error)`.
    /// Methods take their receiver as the first parameter. Optional where the binary has
    /// DWARF; required for stripped binaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Parameter or result names to record. Unnamed results are `r0`, `r1`, ...; unnamed
    /// parameters `p0`, `p1`, ... Results need `latency: true` or are read at return anyway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capture: Vec<String>,
    /// Measure each call from entry to return (uprobes on every RET, never uretprobes).
    #[serde(default)]
    pub latency: bool,
}

/// Bounds applied to every probe of the spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Bytes kept of each captured string or []byte (1..=4096); longer values are truncated
    /// and marked so.
    #[serde(default = "default_max_string_bytes")]
    pub max_string_bytes: u32,
    /// Calls recorded per second per probe, enforced in the kernel; calls over the limit are
    /// counted as throttled. 0 means unlimited.
    #[serde(default = "default_events_per_second")]
    pub events_per_second: u32,
}

pub const MAX_STRING_BYTES_CAP: u32 = 4096;

fn default_max_string_bytes() -> u32 {
    256
}
fn default_events_per_second() -> u32 {
    10_000
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_string_bytes: default_max_string_bytes(),
            events_per_second: default_events_per_second(),
        }
    }
}

/// What the operator reports about a ProbeSpec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeSpecStatus {
    /// Standard conditions: `Valid`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

impl ProbeSpec {
    /// The name used in output records: `metadata.name`.
    pub fn display_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }
}
