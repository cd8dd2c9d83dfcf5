//! C types as a C prototype writes them or C DWARF describes them, and what a uprobe can
//! read of each: the class a value belongs to under the System V AMD64 ABI.

use std::fmt;

/// The tag of a `struct`, `union` or `enum` type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagKind {
    Struct,
    Union,
    Enum,
}

impl TagKind {
    pub fn keyword(self) -> &'static str {
        match self {
            TagKind::Struct => "struct",
            TagKind::Union => "union",
            TagKind::Enum => "enum",
        }
    }
}

/// A C type. Typedef and tag names are kept for display; what they stand for is known for
/// the standard integer typedefs (`size_t`, `int64_t`, ...) and for whatever DWARF
/// describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CType {
    Void,
    /// `_Bool` / `bool`.
    Bool,
    /// Plain `char` (signed on x86-64): a pointer to it is a NUL-terminated string.
    Char,
    /// An integer type, `signed char` and `unsigned char` included: its spelling, size and sign.
    Int {
        name: String,
        size: u8,
        signed: bool,
    },
    /// `float` (4), `double` (8), `long double` (16).
    Float {
        name: String,
        size: u8,
    },
    Pointer(Box<CType>),
    /// `const` and/or `volatile` (as written, e.g. "const"); they change nothing a probe reads.
    Qualified {
        quals: String,
        ty: Box<CType>,
    },
    /// A typedef name and, where known, the type it stands for.
    Typedef {
        name: String,
        ty: Option<Box<CType>>,
    },
    /// `struct X`, `union X`, `enum X`; the size where known (DWARF).
    Tagged {
        kind: TagKind,
        name: String,
        size: Option<u64>,
    },
    /// An array; as a parameter it is a pointer to its first element.
    Array {
        ty: Box<CType>,
        len: Option<u64>,
    },
    /// A function type: what a function pointer points to.
    Function,
}

/// What a value of a C type is to a probe: how it is passed and how it reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CClass {
    Void,
    Bool,
    Int {
        size: u8,
        signed: bool,
    },
    /// A pointer to `char`: read as a NUL-terminated string.
    CString,
    /// Any other pointer (and arrays, which decay to pointers): read as an address.
    Pointer,
    /// Passed in SSE registers (or on the stack when they run out).
    Float {
        size: u8,
    },
    /// A struct or union by value; `size` where known.
    Aggregate {
        size: Option<u64>,
    },
    /// A typedef or tag whose definition is unknown: its size cannot be told.
    Unknown {
        name: String,
    },
}

impl CType {
    pub fn int(name: &str, size: u8, signed: bool) -> CType {
        CType::Int {
            name: name.to_string(),
            size,
            signed,
        }
    }

    pub fn pointer_to(ty: CType) -> CType {
        CType::Pointer(Box::new(ty))
    }

    /// The type without qualifiers and known typedefs.
    pub fn resolved(&self) -> &CType {
        match self {
            CType::Qualified { ty, .. } => ty.resolved(),
            CType::Typedef { ty: Some(ty), .. } => ty.resolved(),
            t => t,
        }
    }

    /// The class of a value of this type passed as an argument or returned.
    pub fn class(&self) -> CClass {
        match self.resolved() {
            CType::Void => CClass::Void,
            CType::Bool => CClass::Bool,
            CType::Char => CClass::Int {
                size: 1,
                signed: true,
            },
            CType::Int { size, signed, .. } => CClass::Int {
                size: *size,
                signed: *signed,
            },
            CType::Float { size, .. } => CClass::Float { size: *size },
            CType::Pointer(to) | CType::Array { ty: to, .. } => match to.resolved() {
                CType::Char => CClass::CString,
                _ => CClass::Pointer,
            },
            CType::Function => CClass::Pointer,
            CType::Tagged {
                kind: TagKind::Enum,
                size,
                ..
            } => CClass::Int {
                size: size.map_or(4, |s| s.clamp(1, 8) as u8),
                signed: true,
            },
            CType::Tagged { size, .. } => CClass::Aggregate { size: *size },
            CType::Typedef { name, ty: None } => CClass::Unknown { name: name.clone() },
            CType::Qualified { .. } | CType::Typedef { .. } => unreachable!("resolved"),
        }
    }

    /// True for types whose values are pointers (arrays decay to them as parameters).
    pub fn is_pointer(&self) -> bool {
        matches!(self.class(), CClass::Pointer | CClass::CString)
    }

    /// True for integer types (and bool, char, enums).
    pub fn is_integer(&self) -> bool {
        matches!(self.class(), CClass::Int { .. } | CClass::Bool)
    }

    /// The C declaration of `name` with this type: `const char *ptr`, `int (*cb)(...)`.
    pub fn declare(&self, name: &str) -> String {
        let s = self.decl(name);
        s.trim().to_string()
    }

    fn decl(&self, inner: &str) -> String {
        let join = |base: &str| {
            if inner.is_empty() {
                base.to_string()
            } else {
                format!("{base} {inner}")
            }
        };
        match self {
            CType::Void => join("void"),
            CType::Bool => join("_Bool"),
            CType::Char => join("char"),
            CType::Int { name, .. } | CType::Float { name, .. } => join(name),
            CType::Typedef { name, .. } => join(name),
            CType::Tagged { kind, name, .. } => join(&format!("{} {name}", kind.keyword())),
            CType::Function => format!("void {inner}()"),
            CType::Pointer(to) => {
                let star = format!("*{inner}");
                match to.as_ref() {
                    CType::Array { .. } | CType::Function => to.decl(&format!("({star})")),
                    _ => to.decl(&star),
                }
            }
            CType::Array { ty, len } => {
                let n = len.map(|n| n.to_string()).unwrap_or_default();
                ty.decl(&format!("{inner}[{n}]"))
            }
            CType::Qualified { quals, ty } => match ty.as_ref() {
                // A qualified pointer: the qualifier follows the star (`char *const p`).
                CType::Pointer(to) => {
                    let rest = if inner.is_empty() {
                        format!("*{quals}")
                    } else {
                        format!("*{quals} {inner}")
                    };
                    to.decl(&rest)
                }
                _ => format!("{quals} {}", ty.decl(inner)),
            },
        }
    }
}

impl fmt::Display for CType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.declare(""))
    }
}

impl fmt::Display for CClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CClass::Void => f.write_str("void"),
            CClass::Bool => f.write_str("bool"),
            CClass::Int { size, signed } => {
                write!(
                    f,
                    "{}{}-byte integer",
                    if *signed { "" } else { "unsigned " },
                    size
                )
            }
            CClass::CString => f.write_str("string (char *)"),
            CClass::Pointer => f.write_str("pointer"),
            CClass::Float { size } => write!(f, "{size}-byte float"),
            CClass::Aggregate { size: Some(s) } => write!(f, "{s}-byte struct"),
            CClass::Aggregate { size: None } => f.write_str("struct"),
            CClass::Unknown { name } => write!(f, "unknown type {name}"),
        }
    }
}

/// The standard typedefs (stdint.h, stddef.h, sys/types.h on x86-64 Linux) a prototype may
/// use without DWARF: name, size, signed.
const KNOWN_TYPEDEFS: &[(&str, u8, bool)] = &[
    ("int8_t", 1, true),
    ("int16_t", 2, true),
    ("int32_t", 4, true),
    ("int64_t", 8, true),
    ("uint8_t", 1, false),
    ("uint16_t", 2, false),
    ("uint32_t", 4, false),
    ("uint64_t", 8, false),
    ("intptr_t", 8, true),
    ("uintptr_t", 8, false),
    ("intmax_t", 8, true),
    ("uintmax_t", 8, false),
    ("ptrdiff_t", 8, true),
    ("size_t", 8, false),
    ("ssize_t", 8, true),
    ("off_t", 8, true),
    ("off64_t", 8, true),
    ("loff_t", 8, true),
    ("time_t", 8, true),
    ("clock_t", 8, true),
    ("suseconds_t", 8, true),
    ("useconds_t", 4, false),
    ("pid_t", 4, true),
    ("uid_t", 4, false),
    ("gid_t", 4, false),
    ("mode_t", 4, false),
    ("socklen_t", 4, false),
    ("ino_t", 8, false),
    ("dev_t", 8, false),
    ("nfds_t", 8, false),
    ("wchar_t", 4, true),
    ("char16_t", 2, false),
    ("char32_t", 4, false),
    ("sig_atomic_t", 4, true),
    ("u_int8_t", 1, false),
    ("u_int16_t", 2, false),
    ("u_int32_t", 4, false),
    ("u_int64_t", 8, false),
];

/// A typedef name as a type: resolved for the standard ones, unknown otherwise.
pub fn typedef(name: &str) -> CType {
    let ty = KNOWN_TYPEDEFS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(n, size, signed)| Box::new(CType::int(n, size, signed)));
    CType::Typedef {
        name: name.to_string(),
        ty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_declarations() {
        let cchar = CType::Qualified {
            quals: "const".into(),
            ty: Box::new(CType::Char),
        };
        let s = CType::pointer_to(cchar.clone());
        assert_eq!(s.class(), CClass::CString);
        assert_eq!(s.declare("ptr"), "const char *ptr");
        assert_eq!(s.to_string(), "const char *");
        let size_t = typedef("size_t");
        assert_eq!(
            size_t.class(),
            CClass::Int {
                size: 8,
                signed: false
            }
        );
        assert_eq!(size_t.declare("len"), "size_t len");
        let robj = typedef("robj");
        assert_eq!(
            robj.class(),
            CClass::Unknown {
                name: "robj".into()
            }
        );
        assert_eq!(CType::pointer_to(robj).class(), CClass::Pointer);
        let pp = CType::pointer_to(CType::pointer_to(CType::Char));
        assert_eq!(pp.class(), CClass::Pointer);
        assert_eq!(pp.declare("argv"), "char **argv");
        let cp = CType::Qualified {
            quals: "const".into(),
            ty: Box::new(CType::pointer_to(CType::Char)),
        };
        assert_eq!(cp.declare("p"), "char *const p");
        let fp = CType::pointer_to(CType::Function);
        assert_eq!(fp.declare("cb"), "void (*cb)()");
        let arr = CType::Array {
            ty: Box::new(CType::Char),
            len: Some(16),
        };
        assert_eq!(arr.declare("name"), "char name[16]");
        assert_eq!(arr.class(), CClass::CString);
        let st = CType::Tagged {
            kind: TagKind::Struct,
            name: "timeval".into(),
            size: Some(16),
        };
        assert_eq!(st.class(), CClass::Aggregate { size: Some(16) });
        assert_eq!(CType::pointer_to(st).declare("tv"), "struct timeval *tv");
    }
}
