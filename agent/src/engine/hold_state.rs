//! What the engine keeps for holds (`holds.rs` uses it): a leaf apart from the
//! `impl Engine` there, so that the engine's state does not import the file that imports
//! the engine.

use super::tracer::Held;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

/// How long the lease of holds lasts: renewed every tick (1 s), so an agent that stops
/// ticking holds nothing new after this.
pub(super) const LEASE: Duration = Duration::from_secs(3);

#[derive(Debug, Default)]
pub(super) struct HoldState {
    /// Processes resumed at the hold deadline before their probes were attached, with how
    /// long they had been held (ms): counted missed when they are handled.
    pub(super) overdue: HashMap<u32, u64>,
    /// Processes held by agents that died, until the first scan handles them.
    pub(super) adopted: HashMap<u32, Held>,
    /// Holds (pid, id) handled from the map: their events, coming later, are old news.
    pub(super) handled: HashSet<(u32, u64)>,
    pub(super) handled_order: VecDeque<(u32, u64)>,
    /// Process events lost (ring buffer full), as last read.
    pub(super) events_lost: u64,
    /// Events were lost since the last rescan: processes may have started unseen.
    pub(super) rescan: bool,
}
