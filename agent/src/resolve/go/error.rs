//! Errors of Go binaries' own tables: why the function table (pclntab) or the inline trees
//! cannot be read. Nothing is imported here, so that `resolve/error.rs` can wrap these
//! without importing the modules that produce them.

/// What is wrong with a Go function table (`.gopclntab`) or the inline trees it leads to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PclntabError {
    #[error("table at file offset {off:#x} with {len} bytes runs past the end of the file")]
    PastEnd { off: usize, len: usize },
    #[error("table of {len} bytes is too short for its header")]
    TooShort { len: usize },
    #[error("unknown magic {magic:#010x}")]
    UnknownMagic { magic: u32 },
    #[error("header truncated")]
    HeaderTruncated,
    #[error("unexpected header (pad {} {}, minLC {min_lc}, ptrSize {ptr_size}); only 64-bit \
        tables are supported", pad[0], pad[1])]
    UnexpectedHeader {
        pad: [u8; 2],
        min_lc: u8,
        ptr_size: u8,
    },
    #[error("implausible function count {nfunc}")]
    FunctionCount { nfunc: u64 },
    #[error("function name table [{start:#x}, {end:#x}) is outside the {len} bytes of the table")]
    NameTableOutside { start: u64, end: u64, len: usize },
    #[error(
        "function table at {at:#x} with {nfunc} entries is outside the {len} bytes of the table"
    )]
    FunctionTableOutside { at: u64, nfunc: u64, len: usize },
    #[error("pc-value tables at {pctab:#x} start after the function table at {functab:#x}")]
    PcTablesAfterFunctions { pctab: u64, functab: u64 },
    /// The binary bears marks of Go (`marks`, as messages say them) but has no table.
    #[error("the binary is Go ({}) but its function table was found nowhere (no .gopclntab \
        section, and no pclntab header in .data.rel.ro or any other non-executable segment)", marks.join(", "))]
    NotFound { marks: Vec<String> },
    #[error("function entries are not sorted at index {index} ({entry:#x} after {prev:#x}, next {next:#x})")]
    Unsorted {
        index: usize,
        entry: u32,
        prev: u32,
        next: u32,
    },
    #[error("function {index}'s record at offset {at:#x} is outside the {len} bytes of the table")]
    RecordOutside { index: usize, at: usize, len: usize },
    #[error(
        "function {index}'s record says entry {record:#x}, the function table says {table:#x}"
    )]
    EntryMismatch {
        index: usize,
        record: u32,
        table: u32,
    },
    #[error(
        "function {index}'s name offset {name_off} is outside the name table ({names_len} bytes)"
    )]
    NameOutside {
        index: usize,
        name_off: i32,
        names_len: usize,
    },
    #[error("the module data's gofunc (base of the inline trees) was not found")]
    NoGofunc,
    #[error("a _func record is cut off")]
    FuncRecordCut,
    #[error("an inline tree at {addr:#x} is outside the file's segments")]
    InlineTreeOutside { addr: u64 },
    #[error(
        "an inline tree at {addr:#x} names offset {name_off:#x}, outside the {names_len}-byte \
        name table (the module data's gofunc is wrong?)"
    )]
    InlineNameOutside {
        addr: u64,
        name_off: u32,
        names_len: u32,
    },
}
