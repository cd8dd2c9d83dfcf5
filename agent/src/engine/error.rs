//! Why a probe is not attached somewhere: one typed error per cause, each naming the fix.

use crate::resolve::PlanError;
use crate::resolve::ResolveError;
use gprobe_crds::SpecIssue;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The spec itself says something impossible for this probe.
    #[error("{0}")]
    Invalid(SpecIssue),
    /// The binary could not be read.
    #[error(transparent)]
    Binary(ResolveError),
    /// The probe could not be planned in this binary (symbol, signature, captures).
    #[error(transparent)]
    Plan(PlanError),
    /// The kernel refused a configuration or a uprobe.
    #[error(transparent)]
    Trace(TraceError),
}

impl ProbeError {
    /// True when the cause is the process having exited (not the probe's fault).
    pub fn is_process_gone(&self) -> bool {
        matches!(self, ProbeError::Trace(TraceError::ProcessGone))
    }
}

/// Why the kernel side refused.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the process is gone")]
    ProcessGone,
    #[error(
        "too many probe configurations: at most {max} entry and return probes can be active \
        at once; remove some ProbeSpecs"
    )]
    Full { max: usize },
    #[error("attaching a uprobe to {path} at file offset {offset:#x} failed: {source}")]
    Attach {
        path: String,
        offset: u64,
        #[source]
        source: crate::attach::error::PerfError,
    },
    #[error("updating BPF map {map} failed: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: crate::attach::error::MapError,
    },
}
