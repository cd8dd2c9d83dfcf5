//! A spec's id, in a leaf of its own: the engine's state (`budget_state.rs`) keys on it
//! without importing the engine.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpecId(pub(super) u32);
