//! Decoding the records BPF writes to the events ring buffer: the fixed header
//! ([`GpEvent`]), a record of any mirrored type read unaligned, and the captured values
//! that follow a header. Kept apart from the struct mirrors and their layout checks in
//! mod.rs: this reads bytes, that describes them.

use super::{GpEvent, Record};

/// Reads the fixed header of an event record. `None` when the record is too short.
pub fn read_event(buf: &[u8]) -> Option<GpEvent> {
    read_record(buf)
}

/// The record of type `T` at the start of `buf`, which may be longer (a record of which `T`
/// is the first part) and need not be aligned. `None` when it is shorter than `T`.
pub fn read_record<T: Record>(buf: &[u8]) -> Option<T> {
    if buf.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: `buf` holds size_of::<T>() bytes, and any bytes are a valid `T` (Record:
    // repr(C) structs of integers and byte arrays); read_unaligned needs no alignment.
    Some(unsafe { std::ptr::read_unaligned(buf.as_ptr().cast::<T>()) })
}

/// The bytes of `v`, as a BPF program writes it: records for tests of the decoders.
#[cfg(test)]
pub fn bytes_of<T: Record>(v: &T) -> Vec<u8> {
    // SAFETY: `v` is size_of::<T>() readable bytes, every one initialized for the records
    // this is used on (GpProcEvent, GpProcExec: every byte is a field, pads named).
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

/// One captured value of a record: (capture index, flags, full length, bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawValue<'a> {
    pub cap: u8,
    pub flags: u8,
    pub full_len: u32,
    pub bytes: &'a [u8],
}

/// Iterates over the values after the header; stops at the first malformed one.
pub fn values(data: &[u8]) -> impl Iterator<Item = RawValue<'_>> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let hdr = data.get(off..off + 8)?;
        let len = u16::from_ne_bytes([hdr[2], hdr[3]]) as usize;
        let full_len = u32::from_ne_bytes(hdr[4..8].try_into().unwrap());
        let bytes = data.get(off + 8..off + 8 + len)?;
        let v = RawValue {
            cap: hdr[0],
            flags: hdr[1],
            full_len,
            bytes,
        };
        off += 8 + len.div_ceil(8) * 8;
        Some(v)
    })
}
