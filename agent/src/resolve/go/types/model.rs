//! The model of a Go type that the capture planner and the signature checker share: a
//! [`TypeInfo`] (name, size, [`Kind`]) whose element and field types are [`TypeRef`]s,
//! read one type at a time from DWARF or a runtime type descriptor, or made from a
//! probe's signature.

/// Where a type is described.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeRef {
    /// A DIE, by its .debug_info offset.
    Dwarf(usize),
    /// A runtime type descriptor, by its link-time address.
    Desc(u64),
    /// A type made from a probe's signature (`*T`, `[]int64`, predeclared types).
    Synth(u32),
}

/// A Go type: enough to lay out values and follow field paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    /// Go's name with import paths, as DWARF spells it: `main.order`, `*net/http.Request`,
    /// `[]string`, `error`.
    pub name: String,
    pub size: u64,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Bool,
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
    UnsafePointer,
    Pointer(TypeRef),
    Slice(TypeRef),
    Array {
        elem: TypeRef,
        len: u64,
    },
    Map {
        key: TypeRef,
        elem: TypeRef,
    },
    Chan,
    Func,
    /// `empty`: `any`/`interface{}`, whose first word is a type descriptor; otherwise an
    /// itab.
    Interface {
        empty: bool,
    },
    Struct(Vec<Field>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub ty: TypeRef,
    pub offset: u64,
    /// An embedded field (`Base` in `struct{ Base; ... }`): its fields are promoted.
    pub embedded: bool,
}

/// The package-name form of a type name: `http.Request` for `net/http.Request`, the name
/// itself when it has no import path. Brackets (type arguments) are left alone.
pub(crate) fn short_name(full: &str) -> &str {
    let head = &full[..full.find('[').unwrap_or(full.len())];
    match head.rfind('/') {
        Some(i) => &full[i + 1..],
        None => full,
    }
}
