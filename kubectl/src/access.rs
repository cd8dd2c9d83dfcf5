//! The rights a trace needs, checked before anything is created (SelfSubjectAccessReview,
//! which the API server answers for the caller, impersonation included): a refusal names
//! the first missing right, instead of a 403 halfway through.

use crate::error::Error;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// One right: `verb` on `resource` (`group/resource/subresource` parts) in `namespace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: &'static str,
    pub namespace: String,
    /// What the trace does with it.
    pub why: &'static str,
}

impl Right {
    /// As kubectl names it: `probespecs.gprobe.dev`, `pods/proxy`.
    pub fn shown(&self) -> String {
        let mut s = self.resource.to_string();
        if !self.group.is_empty() {
            s = format!("{s}.{}", self.group);
        }
        if !self.subresource.is_empty() {
            s = format!("{s}/{}", self.subresource);
        }
        s
    }
}

/// Every right a trace of pods in `namespace` needs, with gprobe's agents in `system`.
pub fn needed(namespace: &str, system: &str) -> Vec<Right> {
    let r = |verb, group, resource, subresource, ns: &str, why| Right {
        verb,
        group,
        resource,
        subresource,
        namespace: ns.to_string(),
        why,
    };
    vec![
        r(
            "create",
            "gprobe.dev",
            "probespecs",
            "",
            namespace,
            "the trace is a ProbeSpec",
        ),
        r(
            "delete",
            "gprobe.dev",
            "probespecs",
            "",
            namespace,
            "it is deleted at the end",
        ),
        r(
            "list",
            "",
            "pods",
            "",
            namespace,
            "to follow the traced pods",
        ),
        r(
            "get",
            "",
            "pods",
            "proxy",
            system,
            "the calls come from gprobe's agents through the API server's pod proxy",
        ),
        r("list", "", "pods", "", system, "to find gprobe's agents"),
    ]
}

/// Asks the API server about each right; the first one refused is the error.
pub async fn check(client: &Client, rights: &[Right], user: &str) -> Result<(), Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let reviews = rights.iter().map(|right| {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(right.verb.into()),
                    group: Some(right.group.into()),
                    resource: Some(right.resource.into()),
                    subresource: (!right.subresource.is_empty()).then(|| right.subresource.into()),
                    namespace: Some(right.namespace.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let api = api.clone();
        async move { api.create(&PostParams::default(), &review).await }
    });
    let answers = futures::future::join_all(reviews).await;
    for (right, answer) in rights.iter().zip(answers) {
        let answer = answer.map_err(|source| Error::Api {
            what: "asking the API server what you may do (SelfSubjectAccessReview)".into(),
            source,
        })?;
        if !answer.status.is_some_and(|s| s.allowed) {
            return Err(Error::Forbidden {
                user: user.to_string(),
                verb: right.verb.to_string(),
                resource: right.shown(),
                namespace: right.namespace.clone(),
                why: right.why,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_needs_its_spec_its_pods_and_the_agents_proxy() {
        let shown: Vec<String> = needed("shop", "gprobe-system")
            .iter()
            .map(|r| format!("{} {} -n {}", r.verb, r.shown(), r.namespace))
            .collect();
        assert_eq!(
            shown,
            [
                "create probespecs.gprobe.dev -n shop",
                "delete probespecs.gprobe.dev -n shop",
                "list pods -n shop",
                "get pods/proxy -n gprobe-system",
                "list pods -n gprobe-system",
            ]
        );
    }
}
