//! Why a probe is not attached somewhere: one typed error per cause, each naming the fix.

use super::tracer::TraceError;
use crate::plan::PlanError;
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
