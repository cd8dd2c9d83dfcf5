//! Interfaces, errors and slices: their records as `GpCapture` (abi/mod.rs) specifies
//! them, to values.

use super::value::{float, int, text, word, DecodeCtx, ValueKind};
use crate::abi::{VAL_FAULT, VAL_INVALID, VAL_TRUNCATED};
use crate::plan::Elem;
use crate::plan::ERROR_TYPES_WITH_MESSAGE;

/// The name of the dynamic type at `ty`, or an unnamed non-nil interface.
fn type_name(ty: u64, ctx: &DecodeCtx<'_>) -> ValueKind {
    match ctx.type_name(ty) {
        Some(n) => ValueKind::Str {
            text: n.to_string(),
            truncated: false,
        },
        None => ValueKind::Interface { nil: false },
    }
}

/// An interface or error: (type, data[, string length, bytes]). Null when nil; an error
/// whose dynamic type holds its message first shows the message; else the type's name.
pub(super) fn interface(error: bool, flags: u8, bytes: &[u8], ctx: &DecodeCtx<'_>) -> ValueKind {
    let ty = word(bytes);
    if ty == 0 {
        return ValueKind::Null;
    }
    if bytes.len() < 16 {
        // Only the first word was captured (a flat capture): its itab or type may still
        // be named.
        return type_name(ty, ctx);
    }
    match ctx.type_name(ty) {
        Some(n) if error && bytes.len() >= 24 && ERROR_TYPES_WITH_MESSAGE.contains(&n) => {
            if flags & VAL_INVALID != 0 {
                return ValueKind::Invalid;
            }
            text(&bytes[24..], flags & VAL_TRUNCATED != 0, ctx.redact)
        }
        _ => type_name(ty, ctx),
    }
}

fn elem_size(e: Elem) -> usize {
    match e {
        Elem::Bool => 1,
        Elem::Int { size, .. } | Elem::Float { size } => (size as usize).clamp(1, 8),
        Elem::Pointer => 8,
    }
}

/// A slice of scalars: its first elements, contiguous.
pub(super) fn slice(elem: Elem, flags: u8, bytes: &[u8]) -> ValueKind {
    let items = bytes
        .chunks_exact(elem_size(elem))
        .map(|b| {
            let w = word(b);
            match elem {
                Elem::Bool => ValueKind::Bool(w & 0xff != 0),
                Elem::Int { size, signed } => int(w, size, signed),
                Elem::Float { size } => float(w, size),
                Elem::Pointer if w == 0 => ValueKind::Null,
                Elem::Pointer => ValueKind::Pointer(w),
            }
        })
        .collect();
    ValueKind::Array {
        items,
        truncated: flags & VAL_TRUNCATED != 0,
    }
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// A `[]string`: element records of u32 full length, u16 bytes kept, u8 flags, u8 0 and
/// the bytes padded to 8.
pub(super) fn strings(flags: u8, bytes: &[u8], ctx: &DecodeCtx<'_>) -> ValueKind {
    let mut items = Vec::new();
    let mut off = 0;
    while let Some(h) = bytes.get(off..off + 8) {
        let k = u16::from_le_bytes([h[4], h[5]]) as usize;
        let ef = h[6];
        let Some(b) = bytes.get(off + 8..off + 8 + k) else {
            break;
        };
        items.push(if ef & VAL_FAULT != 0 {
            ValueKind::Fault
        } else if ef & VAL_INVALID != 0 {
            ValueKind::Invalid
        } else {
            text(b, ef & VAL_TRUNCATED != 0, ctx.redact)
        });
        off += 8 + pad8(k);
    }
    ValueKind::Array {
        items,
        truncated: flags & VAL_TRUNCATED != 0,
    }
}

/// A boxed value of the predeclared type `name` (its first word `w0`), or `None` for other
/// types.
fn boxed(name: &str, w0: u64) -> Option<ValueKind> {
    Some(match name {
        "bool" => ValueKind::Bool(w0 & 0xff != 0),
        "int" | "int64" => int(w0, 8, true),
        "int32" => int(w0, 4, true),
        "int16" => int(w0, 2, true),
        "int8" => int(w0, 1, true),
        "uint" | "uint64" | "uintptr" => int(w0, 8, false),
        "uint32" => int(w0, 4, false),
        "uint16" => int(w0, 2, false),
        "uint8" => int(w0, 1, false),
        "float64" => float(w0, 8),
        "float32" => float(w0, 4),
        _ => return None,
    })
}

/// A slice of interfaces: element records of u64 type, u64 data, u64 w0, u64 w1, u16 bytes
/// kept, u8 flags, 5 bytes 0, and the bytes at w0 padded to 8. Strings, integers, bools
/// and floats show as themselves, errors as [`interface`] does, anything else by its
/// type's name.
pub(super) fn interfaces(errors: bool, flags: u8, bytes: &[u8], ctx: &DecodeCtx<'_>) -> ValueKind {
    let mut items = Vec::new();
    let mut off = 0;
    while let Some(h) = bytes.get(off..off + 40) {
        let (ty, w0) = (word(&h[0..8]), word(&h[16..24]));
        let k = u16::from_le_bytes([h[32], h[33]]) as usize;
        let ef = h[34];
        let Some(b) = bytes.get(off + 40..off + 40 + k) else {
            break;
        };
        let truncated = ef & VAL_TRUNCATED != 0;
        let name = ctx.type_name(ty);
        items.push(match name {
            _ if ef & VAL_FAULT != 0 => ValueKind::Fault,
            _ if ty == 0 => ValueKind::Null,
            Some("string") if ef & VAL_INVALID != 0 => ValueKind::Invalid,
            Some("string") => text(b, truncated, ctx.redact),
            Some(n) if errors && ERROR_TYPES_WITH_MESSAGE.contains(&n) => {
                if ef & VAL_INVALID != 0 {
                    ValueKind::Invalid
                } else {
                    text(b, truncated, ctx.redact)
                }
            }
            Some(n) => boxed(n, w0).unwrap_or_else(|| type_name(ty, ctx)),
            None => ValueKind::Interface { nil: false },
        });
        off += 40 + pad8(k);
    }
    ValueKind::Array {
        items,
        truncated: flags & VAL_TRUNCATED != 0,
    }
}
