//! What can stop a trace, each with what it concerns and what to do.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Probe(#[from] gprobe_crds::oneliner::OneLinerError),
    #[error("reading the kubeconfig: {0}")]
    Config(#[source] kube::config::KubeconfigError),
    #[error("connecting to the API server: {0}")]
    Client(#[source] kube::Error),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The user lacks a right the trace needs (a SelfSubjectAccessReview said no).
    #[error(
        "refused: {user} may not {verb} {resource} in namespace {namespace}, which a trace \
         needs ({why}); ask for the chart's trace RBAC (README, \"kubectl gprobe\")"
    )]
    Forbidden {
        user: String,
        verb: String,
        resource: String,
        namespace: String,
        why: &'static str,
    },
    #[error("{0} not found")]
    NotFound(String),
    #[error("{kind}/{name} selects pods with matchExpressions or none at all: use -l SELECTOR")]
    NoSelector { kind: &'static str, name: String },
    #[error(
        "no gprobe agent in namespace {namespace} (pods labelled {selector}): is gprobe \
         installed there? (--gprobe-namespace, GPROBE_NAMESPACE)"
    )]
    NoAgents { namespace: String, selector: String },
    #[error("the trace could not start on any node: {0}")]
    NoStream(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}
