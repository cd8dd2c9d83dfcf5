//! Captured bytes to typed values. The records of each capture kind are specified at
//! `GpCapture` (abi/mod.rs); the values and the scalar readers are in `value.rs`, composite ones
//! (interfaces, slices) are in `composite.rs`.

use super::composite;
use super::value::{float, int, text, word, DecodeCtx, Value, ValueKind};
use crate::abi::decode::values;
use crate::abi::{VAL_FAULT, VAL_INVALID, VAL_NIL, VAL_TRUNCATED};
use crate::plan::Decode;
use std::sync::Arc;

/// One captured value: its record's flags, `full_len` and bytes.
pub fn decode_one(
    decode: Decode,
    flags: u8,
    full_len: u32,
    bytes: &[u8],
    ctx: &DecodeCtx<'_>,
) -> ValueKind {
    if flags & VAL_FAULT != 0 {
        // A nil map or channel at the end of the path of `len(...)` (no hop left) has
        // length 0; a nil pointer before it makes the value null, as any nil on a path.
        return match decode {
            Decode::Len { nil_is_zero: true } if flags & VAL_NIL != 0 && full_len == 0 => {
                ValueKind::Int(0)
            }
            _ if flags & VAL_NIL != 0 => ValueKind::Null,
            _ => ValueKind::Fault,
        };
    }
    // A negative length or element count: nothing was read (interfaces decide for
    // themselves: their string is read only in case the dynamic type holds one).
    if flags & VAL_INVALID != 0
        && matches!(
            decode,
            Decode::Str
                | Decode::Bytes
                | Decode::Slice { .. }
                | Decode::Strings
                | Decode::Interfaces { .. }
        )
    {
        return ValueKind::Invalid;
    }
    let w = word(bytes);
    match decode {
        Decode::Bool => ValueKind::Bool(w & 0xff != 0),
        Decode::Int { size, signed } => int(w, size, signed),
        Decode::Float { size } => float(w, size),
        // A nil pointer (map, channel, func) is null, as a nil interface or error is.
        Decode::Pointer if w == 0 => ValueKind::Null,
        Decode::Pointer => ValueKind::Pointer(w),
        Decode::Len { .. } => ValueKind::Int(w as i64),
        Decode::ErrorText { max_len } => super::errtext::error_text(bytes, max_len, ctx),
        Decode::Interface | Decode::Error => {
            composite::interface(decode == Decode::Error, flags, bytes, ctx)
        }
        Decode::Slice { elem } => composite::slice(elem, flags, bytes),
        Decode::Strings => composite::strings(flags, bytes, ctx),
        Decode::Interfaces { errors } => composite::interfaces(errors, flags, bytes, ctx),
        Decode::Str | Decode::Bytes => text(bytes, flags & VAL_TRUNCATED != 0, ctx.redact),
        // Trace id, span id, parent span id, as hex: the reader parses them back.
        Decode::Span if bytes.len() >= 32 => ValueKind::Str {
            text: format!(
                "{:016x}{:016x}-{:016x}-{:016x}",
                word(&bytes[0..8]),
                word(&bytes[8..16]),
                word(&bytes[16..24]),
                word(&bytes[24..32])
            ),
            truncated: false,
        },
        Decode::Span => ValueKind::Fault,
        Decode::Header if bytes.is_empty() => ValueKind::Null,
        Decode::Header => text(bytes, flags & VAL_TRUNCATED != 0, false),
    }
}

/// Decodes a record's values with the configuration's decoders.
pub fn decode_values(
    data: &[u8],
    captures: &[(Arc<str>, Decode)],
    ctx: &DecodeCtx<'_>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(captures.len());
    for raw in values(data) {
        if let Some((name, decode)) = captures.get(raw.cap as usize) {
            out.push(Value {
                name: name.clone(),
                kind: decode_one(*decode, raw.flags, raw.full_len, raw.bytes, ctx),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(redact: bool) -> DecodeCtx<'static> {
        DecodeCtx {
            redact,
            types: None,
        }
    }

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
                0,
                &b,
                &ctx(false)
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
                0,
                &b,
                &ctx(false)
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
                0,
                &b,
                &ctx(false)
            ),
            ValueKind::Uint(0xdeff)
        );
        assert_eq!(
            decode_one(Decode::Bool, 0, 0, &b, &ctx(false)),
            ValueKind::Bool(true)
        );
        assert_eq!(
            decode_one(Decode::Bool, 0, 0, &0x100u64.to_le_bytes(), &ctx(false)),
            ValueKind::Bool(false)
        );
    }

    #[test]
    fn floats_strings_interfaces_and_faults() {
        assert_eq!(
            decode_one(
                Decode::Float { size: 8 },
                0,
                0,
                &2.5f64.to_bits().to_le_bytes(),
                &ctx(false)
            ),
            ValueKind::Float(2.5)
        );
        assert_eq!(
            decode_one(
                Decode::Float { size: 4 },
                0,
                0,
                &(1.5f32.to_bits() as u64).to_le_bytes(),
                &ctx(false)
            ),
            ValueKind::Float(1.5)
        );
        assert_eq!(
            decode_one(Decode::Str, VAL_TRUNCATED, 0, b"http://x", &ctx(false)),
            ValueKind::Str {
                text: "http://x".into(),
                truncated: true
            }
        );
        assert_eq!(
            decode_one(Decode::Interface, 0, 0, &0u64.to_le_bytes(), &ctx(false)),
            ValueKind::Null
        );
        assert_eq!(
            decode_one(Decode::Interface, 0, 0, &8u64.to_le_bytes(), &ctx(false)),
            ValueKind::Interface { nil: false }
        );
        assert_eq!(
            decode_one(Decode::Pointer, VAL_FAULT, 0, &[], &ctx(false)),
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
        let v = decode_values(&data, &caps, &ctx(true));
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

    #[test]
    fn strings_are_redacted_unless_the_probe_says_not_to() {
        let url = b"https://shop:hunter2@api.example/pay?card=1&token=abc";
        let red = "https://REDACTED@api.example/pay?card=1&token=REDACTED";
        for decode in [Decode::Str, Decode::Bytes] {
            assert_eq!(
                decode_one(decode, 0, 0, url, &ctx(true)),
                ValueKind::Str {
                    text: red.into(),
                    truncated: false
                }
            );
            assert_eq!(
                decode_one(decode, 0, 0, url, &ctx(false)),
                ValueKind::Str {
                    text: String::from_utf8_lossy(url).into_owned(),
                    truncated: false
                }
            );
        }
        // A value cut inside the password is redacted too.
        assert_eq!(
            decode_one(
                Decode::Str,
                VAL_TRUNCATED,
                0,
                b"https://shop:hunt",
                &ctx(true)
            ),
            ValueKind::Str {
                text: "https://REDACTED".into(),
                truncated: true
            }
        );
        // Through decode_values: the probe's flag reaches every string.
        let mut data = vec![0u8, 0, 14, 0, 0, 0, 0, 0];
        data.extend_from_slice(b"a=1&password=x\0\0");
        let caps: Vec<(Arc<str>, Decode)> = vec![("q".into(), Decode::Str)];
        assert_eq!(
            decode_values(&data, &caps, &ctx(true))[0].kind,
            ValueKind::Str {
                text: "a=1&password=REDACTED".into(),
                truncated: false
            }
        );
        assert_eq!(
            decode_values(&data, &caps, &ctx(false))[0].kind,
            ValueKind::Str {
                text: "a=1&password=x".into(),
                truncated: false
            }
        );
    }

    #[test]
    fn nil_pointers_are_null_and_negative_lengths_invalid() {
        assert_eq!(
            decode_one(Decode::Pointer, 0, 0, &0u64.to_le_bytes(), &ctx(false)),
            ValueKind::Null
        );
        assert_eq!(
            decode_one(
                Decode::Pointer,
                0,
                0,
                &0xc0001u64.to_le_bytes(),
                &ctx(false)
            ),
            ValueKind::Pointer(0xc0001)
        );
        let ptrs = Decode::Slice {
            elem: crate::plan::Elem::Pointer,
        };
        let mut b = 0u64.to_le_bytes().to_vec();
        b.extend_from_slice(&8u64.to_le_bytes());
        assert_eq!(
            decode_one(ptrs, 0, 2, &b, &ctx(false)),
            ValueKind::Array {
                items: vec![ValueKind::Null, ValueKind::Pointer(8)],
                truncated: false
            }
        );
        for d in [Decode::Bytes, Decode::Str, Decode::Strings] {
            assert_eq!(
                decode_one(d, VAL_INVALID, 0, &[], &ctx(false)),
                ValueKind::Invalid,
                "{d:?}"
            );
        }
        // An interface's string is read in case its type holds one: INVALID means
        // something only for those.
        assert_eq!(
            decode_one(
                Decode::Interface,
                VAL_INVALID,
                0,
                &8u64.to_le_bytes(),
                &ctx(false)
            ),
            ValueKind::Interface { nil: false }
        );
        // A []string element of a negative length.
        let b = [0, 0, 0, 0, 0, 0, VAL_INVALID, 0];
        assert_eq!(
            decode_one(Decode::Strings, 0, 1, &b, &ctx(false)),
            ValueKind::Array {
                items: vec![ValueKind::Invalid],
                truncated: false
            }
        );
    }

    #[test]
    fn nil_on_a_path_is_null_and_a_nil_map_has_length_zero() {
        let nil = VAL_FAULT | VAL_NIL;
        let len = |nil_is_zero| Decode::Len { nil_is_zero };
        assert_eq!(
            decode_one(len(true), nil, 0, &[], &ctx(false)),
            ValueKind::Int(0)
        );
        // A nil pointer before the map (a hop not taken): no length at all.
        assert_eq!(
            decode_one(len(true), nil, 1, &[], &ctx(false)),
            ValueKind::Null
        );
        assert_eq!(
            decode_one(len(false), nil, 0, &[], &ctx(false)),
            ValueKind::Null
        );
        assert_eq!(
            decode_one(Decode::Str, nil, 2, &[], &ctx(false)),
            ValueKind::Null
        );
        assert_eq!(
            decode_one(Decode::Str, VAL_FAULT, 0, &[], &ctx(false)),
            ValueKind::Fault
        );
    }

    #[test]
    fn slices_and_string_slices_are_arrays_of_their_first_elements() {
        let mut b = Vec::new();
        for x in [1i32, -2, 3] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        let elem = crate::plan::Elem::Int {
            size: 4,
            signed: true,
        };
        assert_eq!(
            decode_one(Decode::Slice { elem }, VAL_TRUNCATED, 20, &b, &ctx(false)),
            ValueKind::Array {
                items: vec![ValueKind::Int(1), ValueKind::Int(-2), ValueKind::Int(3)],
                truncated: true
            }
        );
        // []string: "ab", then an unreadable element, then "" (element records).
        let mut b = vec![2, 0, 0, 0, 2, 0, 0, 0];
        b.extend_from_slice(b"ab\0\0\0\0\0\0");
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, VAL_FAULT, 0]);
        b.extend_from_slice(&[0; 8]);
        let s = |t: &str| ValueKind::Str {
            text: t.into(),
            truncated: false,
        };
        assert_eq!(
            decode_one(Decode::Strings, 0, 3, &b, &ctx(false)),
            ValueKind::Array {
                items: vec![s("ab"), ValueKind::Fault, s("")],
                truncated: false
            }
        );
    }
}
