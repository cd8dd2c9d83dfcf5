//! What the terminal shows: each call (a table row, or its JSON line as the agent sent it),
//! what the agents say about the pods (attached, or why not), and the summary at the end:
//! calls delivered per pod, filtered, lost, and the histogram with `--hist`.

use gprobe_crds::hist::Log2Hist;
use gprobe_crds::trace::Notice;
use gprobe_crds::LinkState;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// How calls are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    /// JSON lines, the records of `gprobe run --output json`.
    Json,
}

/// The table's heading.
pub const TABLE_HEAD: &str =
    "TIME (UTC)    POD                                 PID  DURATION  CALL";

/// What the agents said about one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodState {
    /// Calls of it printed.
    pub calls: u64,
    pub node: String,
    /// `None` while attached (or not reported yet); why not otherwise.
    pub problem: Option<String>,
    pub attached: bool,
    /// Its node's agent no longer reports it (the pod was deleted, or moved).
    pub gone: bool,
}

/// Everything seen so far, for the summary.
#[derive(Debug, Default)]
pub struct Tally {
    pub pods: BTreeMap<String, PodState>,
    /// The latest status of each node: (filtered, lost, throttled, dropped, delivered).
    pub nodes: BTreeMap<String, NodeCounts>,
    pub hist: Log2Hist,
    /// Calls printed.
    pub calls: u64,
    /// Nodes whose stream ended normally (the spec gone there).
    pub ended: BTreeSet<String>,
    /// `pod/NAME`: other pods the spec selects too (same labels) are left out.
    pub only_pod: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounts {
    pub filtered: u64,
    pub lost: u64,
    pub throttled: u64,
    pub dropped: u64,
    pub delivered: u64,
}

/// One line of a stream, read.
#[derive(Debug)]
pub enum Line {
    Call(Value),
    Notice(Notice),
}

/// Reads a stream line: a call or a notice (notices have a `"gprobe"` key).
pub fn parse_line(line: &str) -> Option<Line> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v.get("gprobe").is_some() {
        serde_json::from_value(v).ok().map(Line::Notice)
    } else {
        Some(Line::Call(v))
    }
}

fn pod_of(call: &Value) -> &str {
    call["resource"]["k8s.pod.name"].as_str().unwrap_or("?")
}

impl Tally {
    /// Counts `call`; returns what to print: a table row, or the JSON line as it came.
    pub fn call(&mut self, call: &Value, raw: &str, format: Format) -> String {
        self.calls += 1;
        self.pods.entry(pod_of(call).to_string()).or_default().calls += 1;
        if let Some(ns) = call["duration_ns"].as_u64() {
            self.hist.record(ns);
        }
        match format {
            Format::Json => format!("{raw}\n"),
            Format::Table => row(call),
        }
    }

    /// Takes in a notice; returns what to say about it on stderr (a pod attached, or why
    /// not), once per change.
    pub fn notice(&mut self, notice: &Notice) -> Vec<String> {
        let mut said = Vec::new();
        match notice {
            Notice::Status {
                node,
                status,
                filtered,
                lost,
                throttled,
                delivered,
                dropped,
            } => {
                self.nodes.insert(
                    node.clone(),
                    NodeCounts {
                        filtered: *filtered,
                        lost: *lost,
                        throttled: *throttled,
                        dropped: *dropped,
                        delivered: *delivered,
                    },
                );
                // Pods of this node that its agent no longer reports are gone.
                let now: BTreeSet<&str> = status.links.iter().map(|l| l.pod.as_str()).collect();
                for (name, pod) in self.pods.iter_mut() {
                    if pod.node == *node && !now.contains(name.as_str()) {
                        pod.gone = true;
                    }
                }
                for link in &status.links {
                    if self.only_pod.as_ref().is_some_and(|p| *p != link.pod) {
                        continue;
                    }
                    let pod = self.pods.entry(link.pod.clone()).or_default();
                    pod.node.clone_from(node);
                    pod.gone = false;
                    let attached = link.state == LinkState::Attached;
                    let problem = (!attached).then(|| {
                        link.message
                            .clone()
                            .unwrap_or_else(|| "not attached".to_string())
                    });
                    if attached && !pod.attached {
                        said.push(format!(
                            "attached: pod {} ({}, node {node})",
                            link.pod, link.symbol
                        ));
                    }
                    if problem != pod.problem && problem.as_deref() != Some("not attached yet") {
                        if let Some(p) = &problem {
                            said.push(format!(
                                "not attached: pod {} (node {node}): {}: {p}",
                                link.pod, link.symbol
                            ));
                        }
                    }
                    pod.attached |= attached;
                    pod.problem = problem;
                }
            }
            Notice::End { node } => {
                self.ended.insert(node.clone());
            }
        }
        said
    }

    /// The summary printed at the end.
    pub fn summary(&self, hist: bool, name: &str) -> String {
        let mut out = String::new();
        let total = self
            .nodes
            .values()
            .fold(NodeCounts::default(), |a, n| NodeCounts {
                filtered: a.filtered + n.filtered,
                lost: a.lost + n.lost,
                throttled: a.throttled + n.throttled,
                dropped: a.dropped + n.dropped,
                delivered: a.delivered + n.delivered,
            });
        let _ = writeln!(
            out,
            "\n{} calls delivered, {} filtered (when:), {} lost (ring buffer full), {} \
             throttled, {} dropped (this terminal fell behind)",
            self.calls, total.filtered, total.lost, total.throttled, total.dropped
        );
        let _ = writeln!(out, "{:<40} {:<20} {:>8}  STATE", "POD", "NODE", "CALLS");
        for (pod, st) in &self.pods {
            let mut state = match (&st.problem, st.attached) {
                (Some(p), _) => format!("not attached: {p}"),
                (None, true) => "attached".to_string(),
                (None, false) => "not reported".to_string(),
            };
            if st.gone {
                state.push_str(", then gone");
            }
            let _ = writeln!(out, "{pod:<40} {:<20} {:>8}  {state}", st.node, st.calls);
        }
        if self.pods.is_empty() {
            out.push_str("(no pod of the target was reported by an agent)\n");
        }
        if hist {
            out.push('\n');
            out.push_str(&self.hist.block(name, 0, total.lost + total.throttled));
        }
        out
    }
}

/// A call as a table row.
fn row(call: &Value) -> String {
    let ns = call["start_time_unix_nano"].as_u64().unwrap_or(0);
    let secs = ns / 1_000_000_000;
    let time = format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60,
        ns / 1_000_000 % 1000
    );
    let duration = call["duration_ns"]
        .as_u64()
        .map_or_else(|| "-".to_string(), duration);
    let mut text = values(&call["args"]);
    if let Some(r) = call.get("returns") {
        let _ = write!(text, " -> {}", values(r));
    }
    format!(
        "{time:<13} {:<32} {:>7}  {duration:>8}  {}({text})\n",
        pod_of(call),
        call["pid"].as_u64().unwrap_or(0),
        call["symbol"].as_str().unwrap_or("?")
    )
}

/// `name=value, ...` of a record's args or returns; null is Go's nil.
fn values(v: &Value) -> String {
    let Some(map) = v.as_object() else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::Null => format!("{k}=nil"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A duration as a person reads it: `183µs`, `1.25ms`, `2.0s`.
fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{}µs", ns / 1_000),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.1}s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gprobe_crds::{LinkStatus, ProbeAttachmentStatus};

    const CALL: &str = concat!(
        r#"{"probe":"get-1","symbol":"net/http.(*Client).Get","pid":42,"tid":42,"#,
        r#""start_time_unix_nano":3723004000000,"duration_ns":183000,"#,
        r#""args":{"url":"http://x/item/1"},"returns":{"err":null},"#,
        r#""resource":{"k8s.pod.name":"web-1"}}"#
    );

    fn status(node: &str, pod: &str, state: LinkState, message: Option<&str>) -> Notice {
        Notice::Status {
            node: node.into(),
            status: Box::new(ProbeAttachmentStatus {
                links: vec![LinkStatus {
                    container: "c1".into(),
                    pod: pod.into(),
                    symbol: "main.f".into(),
                    state,
                    message: message.map(Into::into),
                    hits: 0,
                    lost: 0,
                    throttled: 0,
                    site: None,
                }],
                ..Default::default()
            }),
            filtered: 3,
            lost: 1,
            throttled: 0,
            delivered: 1,
            dropped: 0,
        }
    }

    #[test]
    fn calls_print_as_rows_or_as_they_came_and_count_per_pod() {
        let mut t = Tally::default();
        let Some(Line::Call(v)) = parse_line(CALL) else {
            panic!("a call")
        };
        let row = t.call(&v, CALL, Format::Table);
        assert_eq!(
            row,
            "01:02:03.004  web-1                                 42     183µs  \
             net/http.(*Client).Get(url=\"http://x/item/1\" -> err=nil)\n"
        );
        assert_eq!(t.call(&v, CALL, Format::Json), format!("{CALL}\n"));
        assert_eq!(t.pods["web-1"].calls, 2);
        assert_eq!(t.hist.total(), 2);
    }

    #[test]
    fn pods_attached_or_not_are_said_once_and_summed_up() {
        let mut t = Tally::default();
        let n = status("node-a", "web-1", LinkState::Attached, None);
        assert_eq!(t.notice(&n), ["attached: pod web-1 (main.f, node node-a)"]);
        assert!(t.notice(&n).is_empty(), "said once");
        let bad = status(
            "node-a",
            "old-1",
            LinkState::AttachError,
            Some("symbol main.f not found"),
        );
        assert_eq!(
            t.notice(&bad),
            ["not attached: pod old-1 (node node-a): main.f: symbol main.f not found"]
        );
        let Some(Line::Notice(end)) = parse_line(r#"{"gprobe":"end","node":"node-a"}"#) else {
            panic!("a notice")
        };
        t.notice(&end);
        assert!(t.ended.contains("node-a"));
        let s = t.summary(true, "main.f");
        assert!(
            s.contains("0 calls delivered, 3 filtered (when:), 1 lost"),
            "{s}"
        );
        assert!(s.contains("not attached: symbol main.f not found"), "{s}");
        assert!(s.contains("@ns[main.f]: no call has returned yet"), "{s}");

        let only_web = status("node-a", "web-1", LinkState::Attached, None);
        t.notice(&only_web);
        assert!(t.pods["old-1"].gone && !t.pods["web-1"].gone);
        assert!(t
            .summary(false, "main.f")
            .contains("not attached: symbol main.f not found, then gone"));

        let mut one = Tally {
            only_pod: Some("web-1".into()),
            ..Tally::default()
        };
        assert!(
            one.notice(&bad).is_empty(),
            "another pod of the same labels"
        );
        assert!(!one.pods.contains_key("old-1"));
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(999), "999ns");
        assert_eq!(duration(183_000), "183µs");
        assert_eq!(duration(1_250_000), "1.25ms");
        assert_eq!(duration(2_000_000_000), "2.0s");
    }
}
