//! From a ProbeSpec, its validation issues and its ProbeAttachments to the ProbeSpec's
//! status. Pure: no API calls, the time is given.

use gprobe_crds::{
    LinkState, ProbeAttachment, ProbeSpec, ProbeSpecStatus, SpecIssue, MAX_STATUS_ERRORS,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition type: the spec passed the operator's checks.
pub const VALID: &str = "Valid";
/// Condition type: the spec is valid, at least one probe is attached and none failed.
pub const READY: &str = "Ready";

/// Condition reasons.
pub mod reason {
    /// Valid=True.
    pub const VALIDATED: &str = "Validated";
    /// Valid=False, and Ready=False because of it.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Ready=True.
    pub const ATTACHED: &str = "Attached";
    /// Ready=False: at least one probe failed to attach.
    pub const ATTACH_ERRORS: &str = "AttachErrors";
    /// Ready=False: no agent reported a container matching the selector.
    pub const NO_MATCHING_CONTAINERS: &str = "NoMatchingContainers";
    /// Ready=False: containers matched, but no agent reported a probe attached yet.
    pub const PENDING: &str = "Pending";
}

/// Longest condition message the API accepts.
const MAX_CONDITION_MESSAGE: usize = 32 * 1024;

fn bounded(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max.saturating_sub(3);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The text of the Valid=False condition: every issue, `field: message`, joined by `; `.
pub fn issues_message(issues: &[SpecIssue]) -> String {
    let list: Vec<String> = issues.iter().map(ToString::to_string).collect();
    bounded(
        format!(
            "{} found: {}",
            plural(issues.len() as u32, "issue", "issues"),
            list.join("; ")
        ),
        MAX_CONDITION_MESSAGE,
    )
}

/// The status `spec` should have, given its validation `issues` and the `attachments` that
/// report on it. Conditions keep their `lastTransitionTime` from `spec.status` where their
/// status did not change, so that an unchanged world gives an identical status.
pub fn roll_up(
    spec: &ProbeSpec,
    issues: &[SpecIssue],
    attachments: &[ProbeAttachment],
    now: &Time,
) -> ProbeSpecStatus {
    let generation = spec.metadata.generation;
    let old = spec.status.as_ref();

    // Newest reports first, then by node name: a stable order, so that the same reports
    // always give the same `errors`.
    let mut atts: Vec<&ProbeAttachment> = attachments.iter().collect();
    atts.sort_by(|a, b| {
        let time = |x: &ProbeAttachment| x.status.as_ref().and_then(|s| s.update_time.clone());
        time(b)
            .cmp(&time(a))
            .then_with(|| a.spec.node_name.cmp(&b.spec.node_name))
    });

    let mut st = ProbeSpecStatus {
        observed_generation: generation,
        nodes: atts.len() as u32,
        ..ProbeSpecStatus::default()
    };
    let mut failing_nodes = 0u32;
    let mut stale_nodes = 0u32;
    for att in &atts {
        let Some(s) = &att.status else { continue };
        st.containers_matched += s.containers.len() as u32;
        st.processes_missed += s.processes_missed;
        if let (Some(g), Some(seen)) = (generation, s.observed_generation) {
            if seen < g {
                stale_nodes += 1;
            }
        }
        let mut node_failed = false;
        for link in &s.links {
            match link.state {
                LinkState::Attached => st.probes_attached += 1,
                LinkState::AttachError => {
                    st.probes_failed += 1;
                    node_failed = true;
                    if st.errors.len() < MAX_STATUS_ERRORS {
                        let at = if link.pod.is_empty() {
                            link.symbol.clone()
                        } else {
                            format!("{}/{}", link.pod, link.symbol)
                        };
                        st.errors.push(format!(
                            "{}: {at}: {}",
                            att.spec.node_name,
                            link.message.as_deref().unwrap_or("attach failed")
                        ));
                    }
                }
            }
        }
        failing_nodes += u32::from(node_failed);
    }

    let valid = issues.is_empty();
    let (v_status, v_reason, v_message) = if valid {
        (
            "True",
            reason::VALIDATED,
            "the spec passed every check".to_string(),
        )
    } else {
        ("False", reason::INVALID_SPEC, issues_message(issues))
    };

    let nodes = plural(st.nodes, "node", "nodes");
    let containers = plural(st.containers_matched, "container", "containers");
    let (r_status, r_reason, mut r_message) = if !valid {
        (
            "False",
            reason::INVALID_SPEC,
            "the spec is invalid: see the Valid condition".to_string(),
        )
    } else if st.probes_failed > 0 {
        (
            "False",
            reason::ATTACH_ERRORS,
            format!(
                "{} failed to attach on {}, {} attached; first: {}",
                plural(st.probes_failed, "probe", "probes"),
                plural(failing_nodes, "node", "nodes"),
                st.probes_attached,
                st.errors.first().map(String::as_str).unwrap_or("")
            ),
        )
    } else if st.probes_attached > 0 {
        (
            "True",
            reason::ATTACHED,
            format!(
                "{} attached in {containers} on {nodes}",
                plural(st.probes_attached, "probe", "probes")
            ),
        )
    } else if st.containers_matched > 0 {
        (
            "False",
            reason::PENDING,
            format!("{containers} matched on {nodes}; no probe attached yet"),
        )
    } else if st.nodes == 0 {
        (
            "False",
            reason::NO_MATCHING_CONTAINERS,
            "no agent has reported a matching container yet".to_string(),
        )
    } else {
        (
            "False",
            reason::NO_MATCHING_CONTAINERS,
            format!("no container matches the selector on the {nodes} that reported"),
        )
    };
    if valid && stale_nodes > 0 {
        r_message.push_str(&format!(
            " ({} not yet acted on generation {})",
            plural(stale_nodes, "node has", "nodes have"),
            generation.unwrap_or_default()
        ));
    }

    let cond = |type_: &str, status: &str, reason: &str, message: String| {
        let since = old
            .and_then(|o| o.condition(type_))
            .filter(|c| c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: bounded(message, MAX_CONDITION_MESSAGE),
            observed_generation: generation,
            last_transition_time: since,
        }
    };
    st.conditions = vec![
        cond(VALID, v_status, v_reason, v_message),
        cond(READY, r_status, r_reason, r_message),
    ];
    st
}

/// The conditions of `new` whose status or reason differ from those in `old` (all of them
/// when there is no old status): what deserves an Event.
pub fn transitions<'a>(
    old: Option<&ProbeSpecStatus>,
    new: &'a ProbeSpecStatus,
) -> Vec<&'a Condition> {
    new.conditions
        .iter()
        .filter(|c| {
            old.and_then(|o| o.condition(&c.type_))
                .is_none_or(|o| o.status != c.status || o.reason != c.reason)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gprobe_crds::{
        new_attachment, ContainerRef, Limits, LinkStatus, Probe, ProbeAttachmentStatus,
        ProbeSpecSpec, Selector,
    };
    use k8s_openapi::jiff::Timestamp;

    fn time(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    fn spec() -> ProbeSpec {
        let mut s = ProbeSpec::new(
            "urls",
            ProbeSpecSpec {
                selector: Selector {
                    executable: Some("/app/*".into()),
                    ..Selector::default()
                },
                probes: vec![Probe {
                    symbol: "main.f".into(),
                    ..Probe::default()
                }],
                limits: Limits::default(),
                ttl_seconds: None,
            },
        );
        s.metadata.namespace = Some("shop".into());
        s.metadata.generation = Some(2);
        s
    }

    fn link(pod: &str, state: LinkState, message: Option<&str>) -> LinkStatus {
        LinkStatus {
            container: format!("{pod}-c"),
            pod: pod.into(),
            symbol: "main.f".into(),
            state,
            message: message.map(Into::into),
            hits: 0,
            lost: 0,
            throttled: 0,
            site: None,
        }
    }

    fn att(node: &str, generation: i64, updated: &str, links: Vec<LinkStatus>) -> ProbeAttachment {
        let mut a = new_attachment(&spec(), node);
        a.status = Some(ProbeAttachmentStatus {
            observed_generation: Some(generation),
            update_time: Some(
                updated
                    .parse::<k8s_openapi::jiff::Timestamp>()
                    .map(Time)
                    .expect("RFC 3339 test time"),
            ),
            containers: links
                .iter()
                .map(|l| ContainerRef {
                    pod: l.pod.clone(),
                    container_id: l.container.clone(),
                    ..ContainerRef::default()
                })
                .collect(),
            links,
            links_omitted: 0,
            ..Default::default()
        });
        a
    }

    #[test]
    fn attached_everywhere_is_ready() {
        let atts = [
            att(
                "a",
                2,
                "2026-11-22T10:00:00Z",
                vec![link("p1", LinkState::Attached, None)],
            ),
            att(
                "b",
                2,
                "2026-11-22T10:00:01Z",
                vec![link("p2", LinkState::Attached, None)],
            ),
        ];
        let st = roll_up(&spec(), &[], &atts, &time(100));
        assert_eq!(
            (
                st.nodes,
                st.containers_matched,
                st.probes_attached,
                st.probes_failed
            ),
            (2, 2, 2, 0)
        );
        let ready = st.condition(READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Attached")
        );
        assert_eq!(
            ready.message,
            "2 probes attached in 2 containers on 2 nodes"
        );
        assert_eq!(ready.observed_generation, Some(2));
        assert_eq!(st.observed_generation, Some(2));
    }

    #[test]
    fn errors_are_newest_first_prefixed_and_bounded() {
        let many: Vec<_> = (0..12)
            .map(|i| {
                link(
                    &format!("p{i}"),
                    LinkState::AttachError,
                    Some("symbol not found"),
                )
            })
            .collect();
        let atts = [
            att("old-node", 2, "2026-11-22T09:00:00Z", many),
            att(
                "new-node",
                1,
                "2026-11-22T10:00:00Z",
                vec![link("q", LinkState::AttachError, None)],
            ),
        ];
        let st = roll_up(&spec(), &[], &atts, &time(100));
        assert_eq!(st.probes_failed, 13);
        assert_eq!(st.errors.len(), 10);
        assert_eq!(st.errors[0], "new-node: q/main.f: attach failed");
        assert_eq!(st.errors[1], "old-node: p0/main.f: symbol not found");
        let ready = st.condition(READY).unwrap();
        assert_eq!(ready.reason, "AttachErrors");
        assert!(
            ready
                .message
                .starts_with("13 probes failed to attach on 2 nodes, 0 attached; first: new-node"),
            "{}",
            ready.message
        );
        assert!(
            ready
                .message
                .ends_with("(1 node has not yet acted on generation 2)"),
            "{}",
            ready.message
        );
    }

    #[test]
    fn transition_times_survive_unchanged_statuses() {
        let mut s = spec();
        let first = roll_up(&s, &[], &[], &time(100));
        s.status = Some(first.clone());
        let again = roll_up(&s, &[], &[], &time(200));
        assert_eq!(again, first, "nothing changed: same status, same times");
        assert!(transitions(Some(&first), &again).is_empty());
        let atts = [att(
            "a",
            2,
            "2026-11-22T10:00:00Z",
            vec![link("p", LinkState::Attached, None)],
        )];
        let ready = roll_up(&s, &[], &atts, &time(300));
        assert_eq!(
            ready.condition(VALID).unwrap().last_transition_time,
            time(100)
        );
        assert_eq!(
            ready.condition(READY).unwrap().last_transition_time,
            time(300)
        );
        let moved: Vec<_> = transitions(Some(&first), &ready)
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(moved, ["Ready"]);
    }

    #[test]
    fn pending_when_containers_matched_but_nothing_attached() {
        let mut a = att("a", 2, "2026-11-22T10:00:00Z", vec![]);
        a.status
            .as_mut()
            .unwrap()
            .containers
            .push(ContainerRef::default());
        let st = roll_up(&spec(), &[], &[a], &time(1));
        assert_eq!(st.condition(READY).unwrap().reason, "Pending");
    }
}
