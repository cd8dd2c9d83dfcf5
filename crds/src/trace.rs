//! Ad-hoc traces (`kubectl gprobe trace`): what the plugin and the agents agree on. The
//! plugin creates a ProbeSpec labelled [`TRACE_LABEL`] whose annotation
//! [`TOKEN_DIGEST_ANNOTATION`] holds the SHA-256 (hex) of a random token only the plugin
//! knows; each agent serves the spec's calls at [`stream_path`] on its health port, through
//! the API server's pod proxy, only to a request carrying that token in [`TOKEN_HEADER`].
//! The stream is JSON lines: each call as `gprobe run --output json` writes it, and
//! [`Notice`] lines (they have a `"gprobe"` key, calls never do).

use crate::ProbeAttachmentStatus;
use serde::{Deserialize, Serialize};

/// Marks a ProbeSpec made by `kubectl gprobe trace`; the value names who made it.
pub const TRACE_LABEL: &str = "gprobe.dev/trace";
/// The SHA-256 of the trace's token, lowercase hex.
pub const TOKEN_DIGEST_ANNOTATION: &str = "gprobe.dev/trace-token-sha256";
/// The request header that carries the token to the agent.
pub const TOKEN_HEADER: &str = "X-Gprobe-Trace-Token";

/// Where an agent serves the calls of ProbeSpec `namespace/name`.
pub fn stream_path(namespace: &str, name: &str) -> String {
    format!("/traces/{namespace}/{name}")
}

/// `(namespace, name)` of a [`stream_path`], if `path` is one.
pub fn parse_stream_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/traces/")?;
    let (ns, name) = rest.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (ok(ns) && ok(name)).then_some((ns, name))
}

/// A stream line that is not a call.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "gprobe", rename_all = "camelCase")]
pub enum Notice {
    /// What this node has attached for the trace and its counts so far: when a subscriber
    /// connects, when they change (at most every 2 s) and last before [`Notice::End`].
    #[serde(rename_all = "camelCase")]
    Status {
        node: String,
        /// Per container and probe: attached, or why not (a binary without the symbol),
        /// with its hits, lost and throttled calls.
        status: Box<ProbeAttachmentStatus>,
        /// Calls the probes' `when:` left out on this node.
        filtered: u64,
        /// Calls lost on this node: the ring buffer was full.
        lost: u64,
        /// Calls over the spec's `limits.eventsPerSecond` on this node, not recorded.
        throttled: u64,
        /// Calls recorded and delivered on this node (to every reader, this one included).
        delivered: u64,
        /// Calls this stream's reader did not take in time: dropped for it alone.
        dropped: u64,
    },
    /// The ProbeSpec is gone from this node: the stream's last line.
    #[serde(rename_all = "camelCase")]
    End { node: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_paths_round_trip_and_refuse_anything_else() {
        let p = stream_path("shop", "get-1a2b");
        assert_eq!(p, "/traces/shop/get-1a2b");
        assert_eq!(parse_stream_path(&p), Some(("shop", "get-1a2b")));
        for bad in [
            "/traces/shop",
            "/traces//x",
            "/traces/a/b/c",
            "/metrics",
            "/traces/A/b",
        ] {
            assert_eq!(parse_stream_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn notices_are_tagged_so_that_calls_and_notices_are_told_apart() {
        let end = serde_json::to_value(Notice::End { node: "n1".into() }).unwrap();
        assert_eq!(end, serde_json::json!({"gprobe": "end", "node": "n1"}));
        let back: Notice = serde_json::from_value(end).unwrap();
        assert_eq!(back, Notice::End { node: "n1".into() });
    }
}
