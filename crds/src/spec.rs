use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const API_GROUP: &str = "gprobe.dev";
pub const API_VERSION: &str = "gprobe.dev/v1alpha1";

/// At most this many probes in one ProbeSpec (keeps the CRD's CEL rules within their cost
/// budget; split larger sets into several ProbeSpecs).
pub const MAX_PROBES: usize = 128;
/// At most this many captured values per probe.
pub const MAX_CAPTURES: usize = 8;
/// At most this many bytes in a probe's symbol.
pub const MAX_SYMBOL_BYTES: usize = 1024;

/// What to trace: which processes (selector) and which functions in them (probes).
// Several printer columns share a `type_`: not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "gprobe.dev",
    version = "v1alpha1",
    kind = "ProbeSpec",
    namespaced,
    shortname = "pspec",
    category = "gprobe",
    status = "ProbeSpecStatus",
    doc = "A ProbeSpec names functions to trace with eBPF uprobes (probes) and the processes to \
        trace them in (selector). The gprobe agent on every node attaches them and reports in a \
            ProbeAttachment; the gprobe operator rolls those up into status.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status",
        description = "Whether at least one probe is attached and none failed"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        json_path = ".status.nodes",
        description = "Nodes whose agent reported on this ProbeSpec"
    ),
    printcolumn(
        name = "Attached",
        type_ = "integer",
        json_path = ".status.probesAttached",
        description = "Probes attached, summed over containers and nodes"
    ),
    printcolumn(
        name = "Errors",
        type_ = "integer",
        json_path = ".status.probesFailed",
        description = "Probes that failed to attach, summed over containers and nodes"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeSpecSpec {
    /// Which processes to trace. Every field given must match (AND); at least one is required.
    pub selector: Selector,
    /// The functions to trace in every selected process (1 to 128).
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("size(self) >= 1").message("lists no probe: add at least one symbol"))]
    pub probes: Vec<Probe>,
    /// Bounds on what each probe may capture and emit.
    #[serde(default)]
    pub limits: Limits,
    /// Seconds after its creation (`metadata.creationTimestamp`) at which the operator
    /// deletes this ProbeSpec (1 to 604800, a week). For ad-hoc traces (`kubectl gprobe
    /// trace`): the trace ends even when whoever started it is gone. Without it, the spec
    /// stays until deleted. Local mode ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub ttl_seconds: Option<u32>,
}

/// The longest `ttlSeconds`: a week.
pub const MAX_TTL_SECONDS: u32 = 604_800;

/// Selects processes. Every field given must match (AND); at least one field is required.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new(
    "(has(self.images) && size(self.images) > 0) || has(self.podSelector) || \
    (has(self.containerNames) && size(self.containerNames) > 0) || has(self.executable)"
).message("selects nothing: give at least one of images, podSelector, containerNames, executable"))]
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

/// One function (or USDT probe) to trace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(validation = Rule::new(
    "(has(self.symbol) && self.symbol.trim() != '') != (has(self.usdt) && self.usdt.trim() != '')"
).message("names no probe point, or two: give exactly one of symbol (a function) and usdt (provider:name)"))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Probe {
    /// The function's symbol: as the Go toolchain names it (`main.computeE`,
    /// `net/http.(*Client).Get`), or a C function (`createStringObject`, `SSL_write`).
    /// Exactly one of `symbol` and `usdt` is given.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub symbol: String,
    /// A USDT probe, `provider:name` (e.g. `postgresql:query__start`), from the
    /// `.note.stapsdt` section of the executable or of `library`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub usdt: Option<String>,
    /// A shared object of the selected processes that holds the symbol or USDT probe: a path
    /// glob (`/usr/lib/**/libssl.so.3`) or a file-name glob (`libssl.so*`). Libraries loaded
    /// after the process started (dlopen) are found when they are loaded. Without it, the
    /// executable itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub library: Option<String>,
    /// The Go signature, e.g. `func(c *Client, url string) (resp *Response, err error)`
    /// (methods take their receiver as the first parameter); for a C function its C
    /// prototype, e.g. `int SSL_write(void *ssl, const void *buf, int num)`; for a USDT
    /// probe its argument list, e.g. `(const char *query)`. Optional where the binary has
    /// DWARF; needed to capture values of stripped binaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Parameter or result names to record (at most 8). Unnamed results are `r0`, `r1`, ...;
    /// unnamed parameters `p0`, `p1`, ... Results are read at return. C functions and USDT
    /// probes also take `NAME[:LEN]`: LEN bytes at the pointer NAME, LEN another argument.
    /// A USDT probe without a signature has arguments `arg0`, `arg1`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("size(self) <= 8").message("lists too many values; at most 8 per probe"))]
    pub capture: Vec<String>,
    /// Measure each call from entry to return: Go functions with uprobes on every RET
    /// (never uretprobes), C functions with a uretprobe. Not for USDT probes (a point, not
    /// a call).
    #[serde(default)]
    pub latency: bool,
    /// Replace URL credentials (`user:pass@`) and the values of secret-looking query
    /// parameters (token, password, key, signature, ...) in captured strings by `REDACTED`.
    /// On by default; `false` keeps captured values verbatim.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub redact: bool,
    /// OTLP metrics cut by captured values: `gprobe.calls` and `gprobe.call.duration` get
    /// one series per distinct combination of these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<ProbeMetrics>,
    /// Outgoing net/http requests made while this probe's span is open, on the goroutine
    /// that opened it, carry its trace context (a W3C `traceparent` header, written into
    /// the request as it goes out) to the next service. Go latency probes only; HTTP/1
    /// requests that have no traceparent of their own. Off by default: it writes into the
    /// traced program's memory (the connection's send buffer), which some kernels forbid
    /// (lockdown) and which gprobe otherwise never does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub propagate: bool,
    /// Keep only the calls for which this condition holds, decided in the kernel: terms
    /// compare a value of the call (anything `capture` accepts: `r.URL.Path`,
    /// `len(o.Items)`, `err`, `r0`) or `duration` with a literal (integers and durations
    /// with `== != < <= > >=`; strings with `==`, `!=` and `hasPrefix(x, "...")`; `nil`;
    /// `true`/`false`), joined by `&&`, `||`, `!` and parentheses, at most 16 terms. E.g.
    /// `r.URL.Path != "/healthz"`, `err != nil`, `duration > 100ms` (needs `latency:
    /// true`). A term's value need not be captured. Calls left out are counted (`filtered`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub when: Option<String>,
    /// Keep this share of the calls that pass `when` (0 < sample <= 1), decided by trace
    /// id as OpenTelemetry's TraceIdRatioBased sampler does, so a request is kept or left
    /// out alike in every service; a request whose incoming `traceparent` is sampled is
    /// kept, one that is not is left out. Calls left out are counted (`sampled_out`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0 && self <= 1.0").message(
        "sample is a share of the calls: more than 0, at most 1 (0.01 keeps 1 in 100)"
    ))]
    pub sample: Option<f64>,
    /// A log2 histogram of this probe's call durations, in bpftrace's layout: local mode
    /// (`gprobe run`, `gprobe trace`) prints it on stderr at the end, every
    /// `--hist-interval` and on SIGUSR1. It counts every call that returned, the ones
    /// `when:` or `sample:` left out included. Needs `latency: true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hist: bool,
}

/// Captured values as attributes of a probe's metrics.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeMetrics {
    /// Names from `capture` (at most 4), e.g. `[method, path]`: each becomes the attribute
    /// `gprobe.args.NAME` (a parameter) or `gprobe.returns.NAME` (a result).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub labels: Vec<String>,
    /// Distinct label combinations kept per probe (default 100, at most 10000); the calls
    /// of further ones are counted under the value `other` for every label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_series: Option<u32>,
}

impl ProbeMetrics {
    pub const DEFAULT_MAX_SERIES: u32 = 100;

    /// `max_series` or its default.
    pub fn max_series(&self) -> u32 {
        self.max_series.unwrap_or(Self::DEFAULT_MAX_SERIES)
    }
}

fn default_true() -> bool {
    true
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

fn is_true(b: &bool) -> bool {
    *b
}

impl Probe {
    /// What the probe is on, for messages and records: the symbol, or `usdt:provider:name`.
    pub fn point(&self) -> String {
        match &self.usdt {
            Some(u) if self.symbol.is_empty() => format!("usdt:{u}"),
            _ => self.symbol.clone(),
        }
    }
}

impl Default for Probe {
    fn default() -> Self {
        Self {
            symbol: String::new(),
            usdt: None,
            library: None,
            signature: None,
            capture: Vec::new(),
            latency: false,
            redact: true,
            metrics: None,
            propagate: false,
            when: None,
            sample: None,
            hist: false,
        }
    }
}

/// Bounds applied to every probe of the spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Bytes kept of each captured string or []byte (1..=4096); longer values are truncated
    /// and marked so.
    #[serde(default = "default_max_string_bytes")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 4096").message("is out of range: use 1..=4096"))]
    pub max_string_bytes: u32,
    /// Calls recorded per second per probe, enforced in the kernel; calls over the limit are
    /// counted as throttled. 0 means unlimited.
    #[serde(default = "default_events_per_second")]
    pub events_per_second: u32,
    /// The share of one CPU (in percent, 0..=100) that the spec's probes may cost one
    /// process, estimated from each probe's hits and its site's measured cost. A process
    /// over it for 10 s in a row loses this spec's return probes first (its calls are still
    /// recorded, without a duration or results), and if still over for another 10 s, the
    /// rest (said, and counted in the summary's `budget`); they come back after a back-off
    /// that doubles from 60 s. Other processes keep theirs. 0 means no budget (benchmarks,
    /// short investigations).
    #[serde(default = "default_max_overhead_percent")]
    #[x_kube(validation = Rule::new("self >= 0.0 && self <= \
        100.0").message("is out of range: use a percentage from 0 (no budget) to 100"))]
    pub max_overhead_percent: f64,
}

pub const MAX_STRING_BYTES_CAP: u32 = 4096;

fn default_max_string_bytes() -> u32 {
    256
}
fn default_events_per_second() -> u32 {
    10_000
}
fn default_max_overhead_percent() -> f64 {
    2.0
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_string_bytes: default_max_string_bytes(),
            events_per_second: default_events_per_second(),
            max_overhead_percent: default_max_overhead_percent(),
        }
    }
}

/// At most this many entries in `ProbeSpecStatus.errors`.
pub const MAX_STATUS_ERRORS: usize = 10;

/// What the operator reports about a ProbeSpec, rolled up from the ProbeAttachments that
/// the agents write (one per node). Every field is optional: an empty status is valid.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeSpecStatus {
    /// Standard conditions. `Valid`: the spec passed the operator's checks (reason
    /// `InvalidSpec` lists the issues otherwise). `Ready`: the spec is valid, at least one
    /// probe is attached and none failed (reasons `Attached`, `NoMatchingContainers`,
    /// `AttachErrors`, `InvalidSpec`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    /// The `metadata.generation` of the ProbeSpec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Nodes whose agent reported on this ProbeSpec (ProbeAttachments found).
    #[serde(default)]
    pub nodes: u32,
    /// Containers matched by the selector, summed over nodes.
    #[serde(default)]
    pub containers_matched: u32,
    /// Probes attached (one per probe and container), summed over nodes.
    #[serde(default)]
    pub probes_attached: u32,
    /// Probes that failed to attach (one per probe and container), summed over nodes.
    #[serde(default)]
    pub probes_failed: u32,
    /// Selected processes not traced from their first call (they exited before the agent
    /// could attach, for example), summed over nodes; each node's ProbeAttachment lists the
    /// latest ones with the reason.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub processes_missed: u64,
    /// The latest attach errors, at most 10, each prefixed with its node: `node-a: ...`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub errors: Vec<String>,
}

impl ProbeSpecStatus {
    /// The condition of type `type_`, if present.
    pub fn condition(
        &self,
        type_: &str,
    ) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

impl ProbeSpec {
    /// The name used in output records: `metadata.name`.
    pub fn display_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }
}
