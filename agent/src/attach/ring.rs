//! A ring buffer the BPF programs write records to, as the rest of the agent reads it: the
//! project's own type over aya's (only attach/ uses aya).

use aya::maps::{MapData, RingBuf};
use std::ops::Deref;
use std::os::fd::{AsRawFd, RawFd};

/// One BPF ring buffer, read record by record; its fd polls readable when records wait.
pub struct Ring(RingBuf<MapData>);

impl Ring {
    pub(super) fn new(ring: RingBuf<MapData>) -> Ring {
        Ring(ring)
    }

    /// The next record written, if any: its bytes, handed back to the kernel when the
    /// returned value is dropped.
    pub fn next_record(&mut self) -> Option<impl Deref<Target = [u8]> + '_> {
        self.0.next()
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
