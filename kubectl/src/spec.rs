//! The trace's ProbeSpec: the probe as `gprobe trace` builds it, selecting the target's
//! pods, expiring on its own (`ttlSeconds`), labelled as a trace and annotated with the
//! SHA-256 of a token that only this command knows (gprobe_crds::trace).

use crate::error::Error;
use crate::target::Selection;
use gprobe_crds::oneliner::{build_spec, TraceOptions};
use gprobe_crds::trace::{TOKEN_DIGEST_ANNOTATION, TRACE_LABEL};
use gprobe_crds::{ProbeSpec, Selector, MAX_TTL_SECONDS};
use ring::rand::SecureRandom;
use std::collections::BTreeMap;
use std::time::Duration;

/// The expiry of a trace without `--for`: it ends then, Ctrl-C or not.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// The value of [`TRACE_LABEL`] on the specs this command makes.
pub const MADE_BY: &str = "kubectl-gprobe";

/// What the ProbeSpec is made of.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub probe: &'a str,
    pub namespace: &'a str,
    pub selection: &'a Selection,
    pub container: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub when: Option<&'a str>,
    pub hist: bool,
    /// `--for`, and the margin the operator gives this command before deleting the spec.
    pub run_for: Option<Duration>,
    pub margin: Duration,
}

/// A new random token: 32 bytes, hex.
pub fn new_token() -> Result<String, Error> {
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Io(std::io::Error::other("no random bytes from the system")))?;
    Ok(hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lowercase hex SHA-256 of `token`: what the spec's annotation holds.
pub fn token_digest(token: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref())
}

/// The spec's `ttlSeconds`: `--for` plus the margin, or [`DEFAULT_TTL`].
pub fn ttl_seconds(run_for: Option<Duration>, margin: Duration) -> u32 {
    let ttl = run_for.map_or(DEFAULT_TTL, |d| d + margin);
    // Whole seconds, rounded up: the spec never expires before --for is over.
    let secs = ttl.as_millis().div_ceil(1000);
    u32::try_from(secs)
        .unwrap_or(u32::MAX)
        .clamp(1, MAX_TTL_SECONDS)
}

/// The ProbeSpec of a trace, named after the probe's symbol with a suffix from `token`
/// (each trace has its own spec), for the holder of `token`.
pub fn build(req: &Request<'_>, token: &str) -> Result<ProbeSpec, Error> {
    let selector = Selector {
        pod_selector: Some(req.selection.labels.clone()),
        container_names: req
            .container
            .map(|c| vec![c.to_string()])
            .unwrap_or_default(),
        ..Selector::default()
    };
    let opts = TraceOptions {
        signature: req.signature.map(str::to_string),
        when: req.when.map(str::to_string),
        hist: req.hist,
        ..TraceOptions::default()
    };
    let mut spec = build_spec(req.probe, &opts, selector, None)?;
    // A DNS label: at most 63 characters, the suffix included.
    let mut base = spec.metadata.name.take().unwrap_or_default();
    base.truncate(50);
    let base = base.trim_end_matches('-');
    let suffix = &token_digest(token)[..8];
    spec.metadata.name = Some(format!("{base}-{suffix}"));
    spec.metadata.namespace = Some(req.namespace.to_string());
    spec.metadata.labels = Some(BTreeMap::from([(TRACE_LABEL.into(), MADE_BY.into())]));
    spec.metadata.annotations = Some(BTreeMap::from([(
        TOKEN_DIGEST_ANNOTATION.into(),
        token_digest(token),
    )]));
    spec.spec.ttl_seconds = Some(ttl_seconds(req.run_for, req.margin));
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn selection() -> Selection {
        Selection {
            labels: LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                match_expressions: None,
            },
            pod_name: None,
        }
    }

    #[test]
    fn the_spec_selects_the_pods_expires_and_holds_only_the_tokens_digest() {
        let sel = selection();
        let req = Request {
            probe: "net/http.(*Client).Get(url) -> err",
            namespace: "shop",
            selection: &sel,
            container: Some("app"),
            signature: None,
            when: Some("err != nil"),
            hist: true,
            run_for: Some(Duration::from_secs(20)),
            margin: Duration::from_secs(30),
        };
        let token = "t0k3n";
        let spec = build(&req, token).unwrap();
        let name = spec.metadata.name.clone().unwrap();
        assert!(name.starts_with("net-http-client-get-"), "{name}");
        assert_eq!(spec.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(spec.spec.ttl_seconds, Some(50));
        assert_eq!(spec.spec.selector.pod_selector, Some(sel.labels.clone()));
        assert_eq!(spec.spec.selector.container_names, ["app"]);
        let p = &spec.spec.probes[0];
        assert_eq!(p.capture, ["url", "err"]);
        assert!(p.latency && p.hist);
        assert_eq!(p.when.as_deref(), Some("err != nil"));
        let text = serde_json::to_string(&spec).unwrap();
        assert!(
            !text.contains(token),
            "the token itself never leaves this command"
        );
        assert!(text.contains(&token_digest(token)));
        assert_ne!(build(&req, "other").unwrap().metadata.name, Some(name));
    }

    #[test]
    fn ttl_is_for_plus_margin_rounded_up_or_an_hour() {
        let m = Duration::from_secs(30);
        assert_eq!(ttl_seconds(Some(Duration::from_millis(1500)), m), 32);
        assert_eq!(ttl_seconds(None, m), 3600);
        assert_eq!(
            ttl_seconds(Some(Duration::from_secs(30 * 86400)), m),
            MAX_TTL_SECONDS
        );
    }

    #[test]
    fn tokens_are_random_and_digests_are_sha256() {
        assert_ne!(new_token().unwrap(), new_token().unwrap());
        assert_eq!(new_token().unwrap().len(), 64);
        assert_eq!(
            token_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
