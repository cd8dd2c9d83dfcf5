//! What the register ABI sees of a Go type ([`GoType`]: its shape, size and alignment) and
//! Go's kind numbers. The types themselves are modelled once, in `types/` ([`TypeInfo`],
//! from a signature, DWARF or a runtime type descriptor); `types/shape.rs` derives this
//! view from that model, for the signature checker and the capture planner alike.
//!
//! [`TypeInfo`]: super::types::TypeInfo

use std::fmt;

/// reflect.Kind values (internal/abi.Kind): a type descriptor's kind byte, and DWARF's
/// DW_AT_go_kind.
pub(crate) mod kind {
    pub const BOOL: u8 = 1;
    pub const INT: u8 = 2;
    pub const INT64: u8 = 6;
    pub const UINT: u8 = 7;
    pub const UINT8: u8 = 8;
    pub const UINT64: u8 = 11;
    pub const UINTPTR: u8 = 12;
    pub const FLOAT32: u8 = 13;
    pub const FLOAT64: u8 = 14;
    pub const COMPLEX64: u8 = 15;
    pub const COMPLEX128: u8 = 16;
    pub const ARRAY: u8 = 17;
    pub const CHAN: u8 = 18;
    pub const FUNC: u8 = 19;
    pub const INTERFACE: u8 = 20;
    pub const MAP: u8 = 21;
    pub const PTR: u8 = 22;
    pub const SLICE: u8 = 23;
    pub const STRING: u8 = 24;
    pub const STRUCT: u8 = 25;
    pub const UNSAFE_POINTER: u8 = 26;
}

/// A Go type reduced to what the register ABI needs: its shape, size and alignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoType {
    Bool,
    /// int8..int64, uint8..uint64, int, uint, uintptr. `size` in bytes.
    Int {
        size: u8,
        signed: bool,
    },
    Uintptr,
    Float {
        size: u8,
    },
    Complex {
        size: u8,
    },
    String,
    /// []T; `bytes` is true for []byte / []uint8, which can be captured as bytes.
    Slice {
        bytes: bool,
    },
    /// `error`, `any`, `interface{...}` and named interfaces: two words (type/itab, data).
    Interface,
    /// Any pointer-shaped value: *T, map, chan, func, unsafe.Pointer.
    Pointer,
    Struct {
        fields: Vec<(String, GoType)>,
        size: u64,
        align: u64,
    },
    Array {
        len: u64,
        elem: Box<GoType>,
        size: u64,
        align: u64,
    },
}

impl GoType {
    pub fn size(&self) -> u64 {
        match self {
            GoType::Bool => 1,
            GoType::Int { size, .. } | GoType::Float { size } => *size as u64,
            GoType::Complex { size } => *size as u64,
            GoType::Uintptr | GoType::Pointer => 8,
            GoType::String | GoType::Interface => 16,
            GoType::Slice { .. } => 24,
            GoType::Struct { size, .. } | GoType::Array { size, .. } => *size,
        }
    }

    pub fn align(&self) -> u64 {
        match self {
            GoType::Bool => 1,
            GoType::Int { size, .. } | GoType::Float { size } => *size as u64,
            GoType::Complex { size } => (*size as u64) / 2,
            GoType::Uintptr | GoType::Pointer | GoType::String | GoType::Interface => 8,
            GoType::Slice { .. } => 8,
            GoType::Struct { align, .. } | GoType::Array { align, .. } => (*align).max(1),
        }
    }
}

impl fmt::Display for GoType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GoType::Bool => write!(f, "bool"),
            GoType::Int { size, signed: true } => write!(f, "int{}", size * 8),
            GoType::Int {
                size,
                signed: false,
            } => write!(f, "uint{}", size * 8),
            GoType::Uintptr => write!(f, "uintptr"),
            GoType::Float { size } => write!(f, "float{}", size * 8),
            GoType::Complex { size } => write!(f, "complex{}", size * 8),
            GoType::String => write!(f, "string"),
            GoType::Slice { bytes: true } => write!(f, "[]byte"),
            GoType::Slice { bytes: false } => write!(f, "[]T"),
            GoType::Interface => write!(f, "interface"),
            GoType::Pointer => write!(f, "pointer"),
            GoType::Struct { size, .. } => write!(f, "struct({size} bytes)"),
            GoType::Array { len, elem, .. } => write!(f, "[{len}]{elem}"),
        }
    }
}
