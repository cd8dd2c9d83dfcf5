//! Why DWARF could not be read: the errors of the DWARF readers of Go signatures and types
//! (`go/dwarf.rs`, `go/types/dwarf.rs`) and of C prototypes
//! (`c/dwarf.rs`), and [`UnreadableDwarf`], which names the file (and symbol) they were
//! reading. Nothing here depends on the readers: they and the errors that wrap these
//! (`resolve/error.rs`, `go/types/error.rs`) import this file, never the other way.

use std::path::PathBuf;

use gimli::DwTag;

/// What is wrong with the DWARF of a file, where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DwarfError {
    /// The file's sections could not be listed.
    #[error(transparent)]
    Object(#[from] object::Error),
    /// A DWARF section could not be read (or decompressed).
    #[error("section {section}: {source}")]
    Section {
        section: &'static str,
        #[source]
        source: object::Error,
    },
    /// gimli could not parse a unit, an entry or an attribute.
    #[error(transparent)]
    Gimli(#[from] gimli::Error),
    #[error("reference {offset:#x} is before the first unit")]
    BeforeFirstUnit { offset: usize },
    #[error("reference {offset:#x} is outside its unit")]
    OutsideUnit { offset: usize },
    /// A formal parameter without DW_AT_type.
    #[error("parameter {param} has no type")]
    ParamWithoutType { param: String },
    /// A Go function's DWARF lists fewer parameters than its `args` size in the pclntab
    /// takes (Go 1.19 and older leave unnamed and `_` ones out).
    #[error(
        "DWARF lists {listed} parameter(s) taking at most {max} bytes, but the function takes {args} \
         bytes of arguments: parameters are missing from DWARF (Go 1.19 and older leave \
         out unnamed and `_` parameters; functions written in assembly have none)"
    )]
    MissingParams { listed: usize, max: u64, args: u64 },
    #[error("typedefs at {offset:#x} nest too deeply (a cycle?)")]
    TypedefsTooDeep { offset: usize },
    /// A type laid out by value through more structs than gprobe follows.
    #[error("{type_name} nests more than {max} structs by value")]
    StructsTooDeep { type_name: String, max: usize },
    #[error("array type has no length")]
    ArrayWithoutLength,
    /// DW_AT_count or DW_AT_upper_bound (`what`: "count", "bound") is not a constant.
    #[error("array {what} is not a constant")]
    ArrayLengthNotConstant { what: &'static str },
    /// A typedef or array (`what`) whose DW_AT_type is missing.
    #[error("{what} {name:?} at {offset:#x} refers to no type")]
    RefersToNoType {
        what: &'static str,
        name: String,
        offset: usize,
    },
    /// A map or slice (`what`) without one of Go's attributes (`attr`).
    #[error("{what} without {attr}")]
    MissingGoAttribute {
        what: &'static str,
        attr: &'static str,
    },
    #[error("struct {name} has no size")]
    StructWithoutSize { name: String },
    #[error("base type {name} has an unknown encoding or size {size}")]
    UnknownBaseType { name: String, size: u64 },
    #[error("DIE {tag} {name:?} at {offset:#x} is not a Go type")]
    NotAGoType {
        tag: DwTag,
        name: String,
        offset: usize,
    },
    #[error("field {field} has no type")]
    FieldWithoutType { field: String },
    #[error("field {field} has no offset")]
    FieldWithoutOffset { field: String },
    /// The binary's DWARF could not be loaded when a type of it was asked for.
    #[error("the binary's DWARF cannot be loaded")]
    NotLoaded,
}

/// The DWARF of a file (for a symbol, where one was asked for) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the DWARF debug information of {}{}: {source}; give the probe an explicit \
    `signature:` in the ProbeSpec, or rebuild without \
        -ldflags=-w", path.display(), symbol.as_deref().map(|s| format!(" (for {s})")).unwrap_or_default())]
pub struct UnreadableDwarf {
    /// The file the DWARF is in: the binary, or its separate debug file.
    pub path: PathBuf,
    pub symbol: Option<String>,
    #[source]
    pub source: DwarfError,
}
