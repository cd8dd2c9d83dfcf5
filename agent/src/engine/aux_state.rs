//! What the engine keeps per executable for gprobe's auxiliary probes, whose code is in
//! `crate::auxiliary` (see there): here, so that the engine's state names nothing in those
//! folders.

use super::tracer::{ProbeConfig, Site};

/// The newproc probe planned in one executable (`auxiliary/newproc/`).
pub(super) struct NewprocPlan {
    pub(super) cfg: ProbeConfig,
    pub(super) sites: Vec<Site>,
}

/// The propagation probes of one executable (`auxiliary/propagate/`): configured once,
/// placed per process.
pub(super) struct PropagateProbes {
    pub(super) cfg: ProbeConfig,
    pub(super) sites: Vec<Site>,
    /// Why there is no header writer, if so.
    pub(super) why: Option<String>,
}
