//! A second reader of the calls delivered: the cluster agent's trace streams
//! (`kubectl gprobe trace`). The output thread hands every batch to the tap after writing
//! it; the tap must never wait (it copies what its readers want and drops what they cannot
//! take, counting it).

use crate::events::CallRecord;

/// Takes the calls delivered, batch by batch, on the output thread.
pub trait Tap: std::fmt::Debug + Send + Sync {
    /// Called with every batch delivered; must return at once.
    fn send(&self, batch: &[CallRecord]);
}
