//! Why a Go type could not be found or read. Only error types are imported here
//! (`dwarf_error.rs`): the modules that read types, and the errors that wrap these
//! (`go/error.rs`, `resolve/error.rs`), import this file, never the other way.

use std::path::PathBuf;

use crate::resolve::dwarf_error::{DwarfError, UnreadableDwarf};

/// Where the binary's type information comes from, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeSource {
    /// DWARF debug information (an unstripped build).
    Dwarf,
    /// Go's runtime type descriptors only (a build stripped with `-ldflags=-w` or `-s -w`).
    Descriptors,
    /// Neither could be read.
    None,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TypeError {
    #[error("{}", not_found(name, path, *described_by, similar))]
    NotFound {
        name: String,
        path: PathBuf,
        /// What the binary describes its types with.
        described_by: TypeSource,
        /// Type names of the binary that look alike (same name in other packages).
        similar: Vec<String>,
    },

    #[error(
        "type name {name:?} is ambiguous in {}: it could be {}; write the import path (e.g. {})",
        path.display(),
        candidates.join(", "),
        candidates.first().map(String::as_str).unwrap_or("net/http.Request")
    )]
    Ambiguous {
        name: String,
        path: PathBuf,
        candidates: Vec<String>,
    },

    #[error("the runtime type descriptor at {addr:#x} in {} cannot be read: {reason}; the binary \
        may be damaged, or built by a Go release whose descriptor layout gprobe does not know \
            (give the layout through DWARF: a build without -ldflags=-w)", path.display())]
    BadDescriptor {
        path: PathBuf,
        addr: u64,
        #[source]
        reason: DescriptorError,
    },

    #[error("the DWARF type at {offset:#x} in {} cannot be read: {reason}", path.display())]
    BadDwarf {
        path: PathBuf,
        offset: usize,
        #[source]
        reason: DwarfError,
    },

    /// The binary's DWARF could not be loaded to index its types.
    #[error("the DWARF type at 0x0 in {path} cannot be read: {0}", path = .0.path.display())]
    DwarfUnloadable(#[source] Box<UnreadableDwarf>),

    #[error(
        "the type parameter {name} cannot be bound: the probed function {symbol} is not an \
        instantiation with that many shapes ({shapes}); probe an instantiation such as \
            main.Sum[go.shape.int64] (see gprobe symbols)"
    )]
    UnboundTypeParam {
        name: String,
        symbol: String,
        shapes: String,
    },

    #[error(
        "the type parameter {name} is bound to the shape {shape} of {symbol}, which gprobe \
        cannot lay out; write the concrete type in the signature instead"
    )]
    UnknownShape {
        name: String,
        shape: String,
        symbol: String,
    },
}

fn not_found(name: &str, path: &std::path::Path, source: TypeSource, similar: &[String]) -> String {
    let mut s = format!("type {name} is not described by {}", path.display());
    match source {
        TypeSource::Dwarf => s.push_str(
            " (its DWARF has no type of that name: check the package and the spelling; \
             gprobe types lists what the binary describes)",
        ),
        TypeSource::Descriptors => s.push_str(
            ": the binary has no DWARF (built with -ldflags=-w or -s -w), and Go writes a \
             runtime type descriptor only for types the program uses through an interface or \
             reflection (a value passed to fmt.Println, stored in an `any`, returned as an \
             error...), which this one never is. Give gprobe the layout through DWARF: probe a \
             build without -w (-ldflags=-s alone keeps DWARF); gprobe types lists what this \
             binary describes",
        ),
        TypeSource::None => s.push_str(
            ": it has neither DWARF nor readable runtime type descriptors; probe a build \
             without -ldflags=-w",
        ),
    }
    if !similar.is_empty() {
        s.push_str("; similar: ");
        s.push_str(&similar.join(", "));
    }
    if source != TypeSource::None {
        // Aliases of the standard library are followed; others cannot be: no binary
        // records an alias, only the type it names.
        s.push_str("; if it is a type alias (type A = B) of your program, write the type it names");
    }
    s
}

/// What is wrong with a runtime type descriptor (go/types/rtype.rs), or the module's
/// descriptors as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error("not inside the module's type descriptors [{start:#x}, {end:#x})")]
    OutsideTypes { start: u64, end: u64 },
    #[error("past the end of the file")]
    PastEnd,
    #[error("kind {kind} is not a Go kind")]
    NotAKind { kind: u8 },
    /// A kind the descriptor reader has no model for.
    #[error("kind {kind}")]
    UnknownKind { kind: u8 },
    #[error("alignment {align} is not a power of two up to 64")]
    BadAlignment { align: u8 },
    #[error("name outside the file")]
    NameOutside,
    #[error("name length is not a short varint")]
    NameLength,
    #[error("name runs past the end of the file")]
    NamePastEnd,
    #[error("name is not UTF-8")]
    NameNotUtf8,
    #[error("no type pointer at {addr:#x}")]
    NoTypePointer { addr: u64 },
    #[error("struct fields outside the file")]
    FieldsOutside,
    #[error("{count} struct fields")]
    TooManyFields { count: u64 },
    #[error("struct field outside the file")]
    FieldOutside,
    #[error("array length outside the file")]
    ArrayLengthOutside,
    #[error("the module's type section was not found")]
    NoTypeSection,
}

/// Why a capture path cannot be planned.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    #[error(transparent)]
    Type(#[from] TypeError),

    #[error(
        "{type_name} has no field {field}{}",
        if fields.is_empty() {
            String::new()
        } else {
            format!("; its fields: {}", fields.join(", "))
        }
    )]
    NoField {
        type_name: String,
        field: String,
        /// The fields (and promoted fields) the type has.
        fields: Vec<String>,
    },

    #[error("{field} is ambiguous in {type_name}: several embedded structs at the same depth \
        promote it ({}); name the embedded field, e.g. \
            {}", via.join(", "), via.first().map(|v| format!("{v}.{field}")).unwrap_or_default())]
    AmbiguousField {
        type_name: String,
        field: String,
        via: Vec<String>,
    },

    #[error("{type_name} is not a struct (nor a pointer to one): it has no field {field}")]
    NotAStruct { type_name: String, field: String },

    #[error("the path follows {hops} pointers; the kernel side follows at most {max}")]
    TooManyHops { hops: usize, max: usize },

    #[error("len() takes a string, slice, map, channel or array; {type_name} is none")]
    NoLength { type_name: String },

    #[error(
        "the value is in register X{reg} (a float or a struct of floats passed in registers); \
        uprobes see only the general-purpose registers, so it cannot be read"
    )]
    FloatRegister { reg: u8 },

    #[error("{type_name} values cannot be captured ({why}); {hint}")]
    Uncapturable {
        type_name: String,
        why: &'static str,
        hint: String,
    },
}
