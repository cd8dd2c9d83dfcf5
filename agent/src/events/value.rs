//! A decoded value ([`Value`], [`ValueKind`]), the scalar readers every decoder shares
//! (words, integers, floats, text), and what decoding needs besides the bytes
//! ([`DecodeCtx`]). decode.rs dispatches on a capture's kind; composite.rs and errtext.rs
//! read the composite kinds with these.

use super::dyntypes::TypeLookup;
use super::redact;
use std::borrow::Cow;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub enum ValueKind {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Pointer(u64),
    /// A string or []byte (lossily UTF-8); `truncated` when longer than maxStringBytes.
    /// Also an error's message, and an interface's dynamic type name.
    Str {
        text: String,
        truncated: bool,
    },
    /// A string or []byte whose bytes are not valid UTF-8 (and that redaction left
    /// alone): JSONL and OTLP show it lossily (U+FFFD for each invalid sequence, as
    /// before), the table with `\xNN` for each byte that is not UTF-8.
    Bytes {
        bytes: Vec<u8>,
        truncated: bool,
    },
    /// An interface whose dynamic type has no known name (or, `nil`, a nil one where the
    /// capture could only tell nil from non-nil).
    Interface {
        nil: bool,
    },
    /// A nil pointer, interface or error, or a path through a nil pointer.
    Null,
    /// The first elements of a slice; `truncated` when it had more.
    Array {
        items: Vec<ValueKind>,
        truncated: bool,
    },
    /// The value's memory could not be read.
    Fault,
    /// A string or bytes whose length was negative (a signed C length, or a Go length in
    /// memory that is not what its type says): nothing was read. JSONL shows `""` and lists
    /// the value's key in `"invalid"`.
    Invalid,
}

impl ValueKind {
    /// The value, or an element of it, is [`ValueKind::Invalid`].
    pub fn has_invalid(&self) -> bool {
        match self {
            ValueKind::Invalid => true,
            ValueKind::Array { items, .. } => items.iter().any(ValueKind::has_invalid),
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub name: Arc<str>,
    pub kind: ValueKind,
}

pub(super) fn word(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}

/// An integer of `size` bytes at the low end of `w`, sign-extended when `signed`.
pub(super) fn int(w: u64, size: u8, signed: bool) -> ValueKind {
    let bits = (size as u32 * 8).clamp(8, 64);
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

pub(super) fn float(w: u64, size: u8) -> ValueKind {
    if size == 4 {
        ValueKind::Float(f32::from_bits(w as u32) as f64)
    } else {
        ValueKind::Float(f64::from_bits(w))
    }
}

/// Bytes as a string, redacted when `redact`.
pub(super) fn text(bytes: &[u8], truncated: bool, redact: bool) -> ValueKind {
    let lossy = String::from_utf8_lossy(bytes);
    let text = match redact.then(|| redact::redact(&lossy, truncated)) {
        Some(Cow::Owned(redacted)) => redacted,
        // Not UTF-8: the bytes are kept for the table.
        _ if matches!(lossy, Cow::Owned(_)) => {
            return ValueKind::Bytes {
                bytes: bytes.to_vec(),
                truncated,
            }
        }
        _ => lossy.into_owned(),
    };
    ValueKind::Str { text, truncated }
}

/// What a value needs besides its bytes: whether strings are redacted (the probe's
/// `redact`, true unless the spec says `redact: false`), and the process's type names.
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeCtx<'a> {
    pub redact: bool,
    pub types: Option<TypeLookup<'a>>,
}

impl DecodeCtx<'_> {
    pub fn type_name(&self, addr: u64) -> Option<&str> {
        self.types.as_ref()?.name(addr)
    }
}
