//! Captured bytes to typed values.

use crate::attach::abi::{values, VAL_FAULT, VAL_TRUNCATED};
use crate::plan::Decode;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Pointer(u64),
    /// A string or []byte (lossily UTF-8); `truncated` when longer than maxStringBytes.
    Str {
        text: String,
        truncated: bool,
    },
    /// An interface: nil or not.
    Interface {
        nil: bool,
    },
    /// The value's memory could not be read.
    Fault,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub name: Arc<str>,
    pub kind: ValueKind,
}

fn word(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}

pub fn decode_one(decode: Decode, flags: u8, bytes: &[u8]) -> ValueKind {
    if flags & VAL_FAULT != 0 {
        return ValueKind::Fault;
    }
    let w = word(bytes);
    match decode {
        Decode::Bool => ValueKind::Bool(w & 0xff != 0),
        Decode::Int { size, signed } => {
            let bits = size as u32 * 8;
            let v = if bits >= 64 {
                w
            } else {
                w & ((1u64 << bits) - 1)
            };
            if signed {
                let shift = 64 - bits;
                ValueKind::Int(((v << shift) as i64) >> shift)
            } else {
                ValueKind::Uint(v)
            }
        }
        Decode::Float { size: 4 } => ValueKind::Float(f32::from_bits(w as u32) as f64),
        Decode::Float { .. } => ValueKind::Float(f64::from_bits(w)),
        Decode::Pointer => ValueKind::Pointer(w),
        Decode::Interface => ValueKind::Interface { nil: w == 0 },
        Decode::Str | Decode::Bytes => ValueKind::Str {
            text: String::from_utf8_lossy(bytes).into_owned(),
            truncated: flags & VAL_TRUNCATED != 0,
        },
    }
}

/// Decodes a record's values with the configuration's decoders.
pub fn decode_values(data: &[u8], captures: &[(Arc<str>, Decode)]) -> Vec<Value> {
    let mut out = Vec::with_capacity(captures.len());
    for raw in values(data) {
        if let Some((name, decode)) = captures.get(raw.cap as usize) {
            out.push(Value {
                name: name.clone(),
                kind: decode_one(*decode, raw.flags, raw.bytes),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_masked_and_sign_extended() {
        let b = (-5i64).to_le_bytes();
        assert_eq!(
            decode_one(
                Decode::Int {
                    size: 8,
                    signed: true
                },
                0,
                &b
            ),
            ValueKind::Int(-5)
        );
        // An int8 of -1 in a register whose upper bytes hold garbage.
        let b = 0x1234_5678_9abc_deffu64.to_le_bytes();
        assert_eq!(
            decode_one(
                Decode::Int {
                    size: 1,
                    signed: true
                },
                0,
                &b
            ),
            ValueKind::Int(-1)
        );
        assert_eq!(
            decode_one(
                Decode::Int {
                    size: 2,
                    signed: false
                },
                0,
                &b
            ),
            ValueKind::Uint(0xdeff)
        );
        assert_eq!(decode_one(Decode::Bool, 0, &b), ValueKind::Bool(true));
        assert_eq!(
            decode_one(Decode::Bool, 0, &0x100u64.to_le_bytes()),
            ValueKind::Bool(false)
        );
    }

    #[test]
    fn floats_strings_interfaces_and_faults() {
        assert_eq!(
            decode_one(
                Decode::Float { size: 8 },
                0,
                &2.5f64.to_bits().to_le_bytes()
            ),
            ValueKind::Float(2.5)
        );
        assert_eq!(
            decode_one(
                Decode::Float { size: 4 },
                0,
                &(1.5f32.to_bits() as u64).to_le_bytes()
            ),
            ValueKind::Float(1.5)
        );
        assert_eq!(
            decode_one(Decode::Str, VAL_TRUNCATED, b"http://x"),
            ValueKind::Str {
                text: "http://x".into(),
                truncated: true
            }
        );
        assert_eq!(
            decode_one(Decode::Interface, 0, &0u64.to_le_bytes()),
            ValueKind::Interface { nil: true }
        );
        assert_eq!(
            decode_one(Decode::Interface, 0, &8u64.to_le_bytes()),
            ValueKind::Interface { nil: false }
        );
        assert_eq!(
            decode_one(Decode::Pointer, VAL_FAULT, &[]),
            ValueKind::Fault
        );
    }

    #[test]
    fn values_are_walked_with_padding() {
        // Two values: a 3-byte string (padded to 8) and a word.
        let mut data = vec![0u8, 0, 3, 0, 3, 0, 0, 0];
        data.extend_from_slice(b"abc\0\0\0\0\0");
        data.extend_from_slice(&[1, 0, 8, 0, 0, 0, 0, 0]);
        data.extend_from_slice(&42u64.to_le_bytes());
        let caps: Vec<(Arc<str>, Decode)> = vec![
            ("s".into(), Decode::Str),
            (
                "n".into(),
                Decode::Int {
                    size: 8,
                    signed: true,
                },
            ),
        ];
        let v = decode_values(&data, &caps);
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0].kind,
            ValueKind::Str {
                text: "abc".into(),
                truncated: false
            }
        );
        assert_eq!(v[1].kind, ValueKind::Int(42));
    }
}
