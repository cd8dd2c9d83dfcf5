//! ProbeAttachment: what the agent on one node attached for one ProbeSpec.

use crate::ProbeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{CustomResource, KubeSchema, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The label every ProbeAttachment carries; its value is [`probespec_label_value`] of the
/// owning ProbeSpec's name. List a spec's attachments with
/// `gprobe.dev/probespec=<probespec_label_value(name)>`.
pub const PROBESPEC_LABEL: &str = "gprobe.dev/probespec";
/// At most this many entries in `ProbeAttachmentStatus.links`.
pub const MAX_LINKS: usize = 200;
/// Longest object name Kubernetes accepts (a DNS subdomain).
pub const MAX_NAME_LEN: usize = 253;
/// Longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE_LEN: usize = 63;
const HASH_LEN: usize = 10;

/// Which ProbeSpec and node a ProbeAttachment reports on. Both fields are immutable.
// Several printer columns share a `type_`: not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "gprobe.dev",
    version = "v1alpha1",
    kind = "ProbeAttachment",
    namespaced,
    shortname = "patt",
    category = "gprobe",
    status = "ProbeAttachmentStatus",
    doc = "A ProbeAttachment reports what the gprobe agent on one node attached for one \
        ProbeSpec: the matched containers and one link per probe and container. Written by the \
            agent, named <probespec>-<node>, owned by the ProbeSpec (garbage-collected with it) \
                and rolled up into the ProbeSpec's status by the operator.",
    printcolumn(
        name = "ProbeSpec",
        type_ = "string",
        json_path = ".spec.probeSpec",
        description = "The ProbeSpec reported on"
    ),
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = ".spec.nodeName",
        description = "The node whose agent wrote this report"
    ),
    printcolumn(
        name = "Updated",
        type_ = "string",
        json_path = ".status.updateTime",
        description = "When the agent last wrote the status (RFC 3339)"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ProbeAttachmentSpec {
    /// The name of the ProbeSpec (same namespace) this attachment reports on.
    #[x_kube(validation = Rule::new("self == oldSelf").message("is immutable"))]
    pub probe_spec: String,
    /// The node whose agent wrote this attachment.
    #[x_kube(validation = Rule::new("self == oldSelf").message("is immutable"))]
    pub node_name: String,
}

/// What the agent attached on its node, as of `updateTime`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeAttachmentStatus {
    /// The `metadata.generation` of the ProbeSpec the agent acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the agent wrote this status, RFC 3339 (`2026-11-22T10:00:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_time: Option<Time>,
    /// The containers on this node that the ProbeSpec's selector matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerRef>,
    /// One entry per probe and matched container: attached or why not (at most 200; see
    /// `linksOmitted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 200))]
    pub links: Vec<LinkStatus>,
    /// Links left out of `links` to keep within its bound of 200.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub links_omitted: u32,
    /// Processes the selector matched on this node since the agent started.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub processes_matched: u64,
    /// Of those, traced from their first call (or from the agent's start).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub processes_traced: u64,
    /// Of those, not traced from their first call (see `missed`).
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub processes_missed: u64,
    /// The latest processes not traced from their first call, with the reason (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub missed: Vec<MissedProcess>,
    /// The node's kernel: its release, and the features gprobe uses that it lacks, each
    /// with what gprobe does instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<NodeKernel>,
}

/// The node's kernel as the agent found it at start.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeKernel {
    /// `uname -r`.
    pub release: String,
    /// The features this kernel lacks (at most 16).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub missing: Vec<MissingFeature>,
}

/// A kernel feature gprobe uses that the node's kernel lacks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct MissingFeature {
    /// e.g. `task_kfuncs`.
    pub name: String,
    /// What gprobe does without it.
    pub instead: String,
}

/// At most this many entries in `ProbeAttachmentStatus.missed`.
pub const MAX_MISSED: usize = 10;

/// A matched process that was not traced from its first call.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct MissedProcess {
    /// Its pid in the node's pid namespace.
    pub pid: u32,
    /// Its executable's path.
    pub executable: String,
    /// Why: e.g. "exited before gprobe could attach".
    pub reason: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero64(n: &u64) -> bool {
    *n == 0
}

/// A container that the selector matched.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The pod's UID.
    pub pod_uid: String,
    /// The container's name within the pod.
    pub container: String,
    /// The container runtime's id of the container (64 hex characters for containerd).
    pub container_id: String,
    /// The image reference the container runs.
    pub image: String,
    /// The container's main process id, in the node's pid namespace.
    pub pid: u32,
}

/// Whether a probe is attached in a container.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum LinkState {
    /// The uprobes are attached and firing calls are recorded.
    Attached,
    /// The probe could not be attached; `message` says why.
    AttachError,
}

/// One probe in one container.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkStatus {
    /// The container runtime's id of the container.
    #[serde(default)]
    pub container: String,
    /// The pod's name.
    #[serde(default)]
    pub pod: String,
    /// The probe's symbol.
    #[serde(default)]
    pub symbol: String,
    /// `Attached` or `AttachError`.
    pub state: LinkState,
    /// Why the probe is not attached, or a note about how it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Calls recorded since the probe was attached.
    #[serde(default)]
    pub hits: u64,
    /// Calls the agent could not deliver (ring buffer full, export failures).
    #[serde(default)]
    pub lost: u64,
    /// Calls not recorded because of `limits.eventsPerSecond`.
    #[serde(default)]
    pub throttled: u64,
    /// What a call costs the program where the probe sits: how the kernel runs its entry
    /// (and return) site, `emulated` or `single-stepped`, and the cost measured on the node
    /// (e.g. "entry emulated ~880 ns a call").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
}

impl ProbeAttachmentStatus {
    /// Keeps at most [`MAX_LINKS`] links, errors first (they are what a reader needs), and
    /// counts the rest in `links_omitted`. The order within errors and within attached links
    /// is kept.
    pub fn bound_links(&mut self) {
        if self.links.len() <= MAX_LINKS {
            return;
        }
        let (mut kept, attached): (Vec<_>, Vec<_>) = std::mem::take(&mut self.links)
            .into_iter()
            .partition(|l| l.state == LinkState::AttachError);
        kept.extend(attached);
        let dropped = kept.len() - MAX_LINKS;
        kept.truncate(MAX_LINKS);
        self.links = kept;
        self.links_omitted = self
            .links_omitted
            .saturating_add(u32::try_from(dropped).unwrap_or(u32::MAX));
    }
}

/// FNV-1a, 64 bits: stable across Rust versions and platforms, unlike `DefaultHasher`.
fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `text` if it is at most `max` bytes; otherwise a prefix of it, without trailing `-`, `.`
/// or `_`, then `-` and a hash of the whole of `text`, `max` bytes in all.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let hash = format!("{:016x}", fnv1a(text));
    let mut cut = max - 1 - HASH_LEN;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let prefix = text[..cut].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{prefix}-{}", &hash[..HASH_LEN])
}

/// The name of the ProbeAttachment for ProbeSpec `spec` on node `node`: `<spec>-<node>`,
/// or, when that is longer than 253 characters, its first characters and a hash of it.
/// Both inputs are Kubernetes names (DNS subdomains), so the result is one too.
pub fn attachment_name(spec: &str, node: &str) -> String {
    bounded(&format!("{spec}-{node}"), MAX_NAME_LEN)
}

/// The value of the [`PROBESPEC_LABEL`] label for a ProbeSpec named `spec`: the name itself,
/// or, when longer than the 63 characters a label value may have, its first characters and
/// a hash of it.
pub fn probespec_label_value(spec: &str) -> String {
    bounded(spec, MAX_LABEL_VALUE_LEN)
}

/// A new ProbeAttachment for `spec` on `node`: same namespace, named by
/// [`attachment_name`], labelled [`PROBESPEC_LABEL`], and owned by the ProbeSpec (an owner
/// reference with `controller: true`) so that deleting the ProbeSpec deletes it.
///
/// The owner reference needs the ProbeSpec's `metadata.uid`, which only objects read from
/// the API server have; without one the attachment gets no owner reference.
pub fn new_attachment(spec: &ProbeSpec, node: &str) -> ProbeAttachment {
    let name = spec.display_name();
    ProbeAttachment {
        metadata: ObjectMeta {
            name: Some(attachment_name(name, node)),
            namespace: spec.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                PROBESPEC_LABEL.to_string(),
                probespec_label_value(name),
            )])),
            owner_references: spec.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: ProbeAttachmentSpec {
            probe_spec: name.to_string(),
            node_name: node.to_string(),
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, ProbeSpecSpec, Selector};

    fn is_dns_subdomain(s: &str) -> bool {
        s.len() <= MAX_NAME_LEN
            && s.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    }

    #[test]
    fn short_names_are_spec_dash_node() {
        assert_eq!(
            attachment_name("http-client-urls", "node-a.example"),
            "http-client-urls-node-a.example"
        );
        assert_eq!(
            probespec_label_value("http-client-urls"),
            "http-client-urls"
        );
    }

    #[test]
    fn long_names_are_truncated_hashed_and_stay_valid() {
        let spec = "s".repeat(200);
        let node_a = format!("{}.a", "n".repeat(100));
        let node_b = format!("{}.b", "n".repeat(100));
        let a = attachment_name(&spec, &node_a);
        let b = attachment_name(&spec, &node_b);
        assert_eq!(a.len(), MAX_NAME_LEN);
        assert!(is_dns_subdomain(&a), "{a}");
        assert_ne!(a, b, "different nodes must give different names");
        assert_eq!(a, attachment_name(&spec, &node_a), "stable");
        // A cut that lands right after a '.' must not leave ".-" behind.
        let dotted = format!("{}.{}", "x".repeat(240), "y".repeat(30));
        let n = attachment_name(&dotted, "node");
        assert!(is_dns_subdomain(&n), "{n}");
        let label = probespec_label_value(&spec);
        assert_eq!(label.len(), MAX_LABEL_VALUE_LEN);
        assert!(label.starts_with("sss") && label.as_bytes()[52] == b'-');
    }

    #[test]
    fn new_attachment_is_owned_and_labelled() {
        let mut spec = ProbeSpec::new(
            "urls",
            ProbeSpecSpec {
                selector: Selector {
                    executable: Some("/app/*".into()),
                    ..Selector::default()
                },
                probes: vec![],
                limits: Limits::default(),
                ttl_seconds: None,
            },
        );
        spec.metadata.namespace = Some("shop".into());
        spec.metadata.uid = Some("1234-5678".into());
        let att = new_attachment(&spec, "node-a");
        assert_eq!(att.metadata.name.as_deref(), Some("urls-node-a"));
        assert_eq!(att.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            att.metadata.labels.as_ref().unwrap()[PROBESPEC_LABEL],
            "urls"
        );
        let owner = &att.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "ProbeSpec");
        assert_eq!(owner.api_version, "gprobe.dev/v1alpha1");
        assert_eq!(owner.name, "urls");
        assert_eq!(owner.uid, "1234-5678");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(att.spec.probe_spec, "urls");
        assert_eq!(att.spec.node_name, "node-a");
    }

    #[test]
    fn links_are_bounded_errors_first() {
        let link = |i: usize, state| LinkStatus {
            container: format!("c{i}"),
            pod: "p".into(),
            symbol: "main.f".into(),
            state,
            message: None,
            hits: 0,
            lost: 0,
            throttled: 0,
            site: None,
        };
        let mut st = ProbeAttachmentStatus::default();
        for i in 0..250 {
            st.links.push(link(i, LinkState::Attached));
        }
        st.links.push(link(250, LinkState::AttachError));
        st.bound_links();
        assert_eq!(st.links.len(), MAX_LINKS);
        assert_eq!(st.links_omitted, 51);
        assert_eq!(st.links[0].container, "c250");
        assert_eq!(st.links[1].container, "c0");
    }

    #[test]
    fn status_json_uses_the_documented_field_names() {
        let st: ProbeAttachmentStatus = serde_json::from_value(serde_json::json!({
            "observedGeneration": 3,
            "updateTime": "2026-11-22T10:00:00Z",
            "containers": [{"namespace": "shop", "pod": "shop-1", "podUid": "u", "container": "app",
                            "containerId": "abc", "image": "registry.example/shop:v1", "pid": 42}],
            "links": [{"container": "abc", "pod": "shop-1", "symbol": "main.f", "state": "AttachError",
                       "message": "symbol not found", "hits": 0, "lost": 0, "throttled": 0}]
        }))
        .unwrap();
        assert_eq!(st.containers[0].pid, 42);
        assert_eq!(st.containers[0].container_id, "abc");
        assert_eq!(st.links[0].state, LinkState::AttachError);
        assert_eq!(st.links[0].message.as_deref(), Some("symbol not found"));
    }
}
