//! The operator's errors, each with the object it concerns.

use thiserror::Error;

/// Why one reconciliation failed. The controller retries it with backoff.
#[derive(Debug, Error)]
pub enum Error {
    #[error("ProbeSpec {name:?} has no namespace (ProbeSpec is a namespaced kind)")]
    NoNamespace { name: String },
    #[error("listing the ProbeAttachments of ProbeSpec {namespace}/{name}: {source}")]
    ListAttachments {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "the ProbeAttachments of ProbeSpec {namespace}/{name} are not known yet: the \
        operator's watch of them has not listed them within {waited:?} (can its ServiceAccount \
            list and watch probeattachments?)"
    )]
    AttachmentsNotSynced {
        namespace: String,
        name: String,
        waited: std::time::Duration,
    },
    #[error("patching the status of ProbeSpec {namespace}/{name}: {source}")]
    PatchStatus {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("deleting ProbeSpec {namespace}/{name}, whose ttlSeconds are up: {source}")]
    DeleteExpired {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// A short, fixed name for the `error` label of the failures metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace { .. } => "no_namespace",
            Error::ListAttachments { .. } => "list_attachments",
            Error::AttachmentsNotSynced { .. } => "attachments_not_synced",
            Error::PatchStatus { .. } => "patch_status",
            Error::DeleteExpired { .. } => "delete_expired",
        }
    }
}

/// Why a Lease operation failed.
#[derive(Debug, Error)]
pub enum LeaseError {
    #[error("{action} Lease {namespace}/{name}: {source}")]
    Api {
        action: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}
