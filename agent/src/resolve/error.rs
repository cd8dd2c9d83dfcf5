//! Errors of the resolve stage: each carries the binary's path (and the symbol where one
//! is involved), and its message says what went wrong and what to do about it.

use std::fmt::Write as _;
use std::path::PathBuf;

use gprobe_crds::signature::SignatureError;

use super::go::abi::TypeError;
use super::go::types::PathError;

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("cannot read {}: {source}; check that the file exists and that this user may read it", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{} is not an ELF file ({reason}); gprobe reads Linux executables: point it at the program's binary, not at a script or a wrapper", path.display())]
    NotElf { path: PathBuf, reason: String },

    #[error("{} is a truncated or malformed ELF file: {reason}; check that the file was copied completely (compare its size and checksum with the original)", path.display())]
    Malformed { path: PathBuf, reason: String },

    #[error("{} is a {class} ELF file for machine {machine}; gprobe supports 64-bit little-endian x86-64 binaries only: trace an amd64 build of the program", path.display())]
    UnsupportedArch {
        path: PathBuf,
        class: &'static str,
        machine: u16,
    },

    #[error("{} was built with {} whose function table (pclntab magic {magic:#010x}) gprobe cannot read; rebuild the program with Go 1.18 or newer", path.display(), go_version.as_deref().unwrap_or("a Go release older than 1.18"))]
    UnsupportedGoVersion {
        path: PathBuf,
        go_version: Option<String>,
        magic: u32,
    },

    #[error("the Go function table (.gopclntab) of {} is corrupt: {reason}; the file may be damaged or not produced by the Go linker: rebuild it or check that it was not modified", path.display())]
    BadPclntab { path: PathBuf, reason: String },

    #[error("cannot tell where the Go code of {} starts: its module data (runtime.firstmoduledata) was not found or does not match the function table, the table's header has no text address (Go 1.27+ leaves it out), and the binary is not provably internally linked; gprobe refuses to guess function addresses: trace an unstripped build of the program", path.display())]
    NoTextStart { path: PathBuf },

    #[error("{symbol} is at {pclntab:#x} in the Go function table of {} but at {symtab:#x} in its ELF symbol table; refusing to probe an address the tables disagree on: the binary may have been rewritten after linking (rebuild it) or gprobe misreads it (report it)", path.display())]
    AddressMismatch {
        path: PathBuf,
        symbol: String,
        pclntab: u64,
        symtab: u64,
    },

    #[error("refusing to place a breakpoint at {symbol}+{offset:#x} (address {:#x}) in {}: not an instruction boundary of the function decoded from its first byte; the function table may be wrong (a breakpoint inside an instruction would corrupt the program)", addr + offset, path.display())]
    NotInstructionBoundary {
        path: PathBuf,
        symbol: String,
        addr: u64,
        offset: u64,
    },

    #[error("refusing to probe {symbol} at {addr:#x} in {}: decoded from its first byte, its instructions run past its end (+{size:#x}) to +{end:#x}; the function table may be wrong", path.display())]
    CodePastEnd {
        path: PathBuf,
        symbol: String,
        addr: u64,
        size: u64,
        end: u64,
    },

    #[error("{} has no function table: it is not a Go binary and has no .symtab or .dynsym symbols; trace an unstripped build of the program", path.display())]
    NoFunctions { path: PathBuf },

    #[error("{}", not_found_message(path, symbol, *inlined, similar))]
    NotFound {
        path: PathBuf,
        symbol: String,
        inlined: bool,
        similar: Vec<String>,
    },

    #[error("function {symbol} at {addr:#x} in {} lies outside every loadable segment of the file (or past its end); the binary's tables are inconsistent: check that the file is complete", path.display())]
    AddressNotMapped {
        path: PathBuf,
        symbol: String,
        addr: u64,
    },

    #[error("cannot read the DWARF debug information of {}{}: {reason}; give the probe an explicit `signature:` in the ProbeSpec, or rebuild without -ldflags=-w", path.display(), symbol.as_deref().map(|s| format!(" (for {s})")).unwrap_or_default())]
    Dwarf {
        path: PathBuf,
        symbol: Option<String>,
        reason: String,
    },
}

/// Why a probe could not be planned against a binary.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("{symbol}: {source}")]
    SignatureSyntax {
        symbol: String,
        #[source]
        source: SignatureError,
    },
    #[error("{symbol}: signature parameter {param:?}: {source}")]
    SignatureType {
        symbol: String,
        param: String,
        #[source]
        source: TypeError,
    },
    #[error("{symbol}: {} has no DWARF (stripped) and the probe has no signature: add `signature: \"func(...)\"` to the probe (copy it from the Go source or `go doc`), or probe an unstripped build", path.display())]
    NoSignature { symbol: String, path: PathBuf },
    #[error("{symbol}: cannot capture {name:?}: no parameter or result has that name; known names: {}", if known.is_empty() { "(none)".to_string() } else { known.join(", ") })]
    UnknownCapture {
        symbol: String,
        name: String,
        known: Vec<String>,
    },
    #[error("{symbol}: cannot capture {name:?}: the {what} is passed in register X{reg}; uprobes see only the general-purpose registers (the kernel gives BPF no SSE state), so floats in registers cannot be read. Floats passed on the stack can")]
    FloatInRegister {
        symbol: String,
        name: String,
        what: &'static str,
        reg: u8,
    },
    #[error("{symbol}: cannot capture {name:?}: {}", kind.explain(type_name))]
    Uncapturable {
        symbol: String,
        name: String,
        type_name: String,
        kind: Uncapturable,
    },
    #[error("{symbol}: cannot capture {name:?}: at most {max} values per probe")]
    TooManyCaptures {
        symbol: String,
        name: String,
        max: usize,
    },
    #[error("{symbol}: latency needs RET instructions but the function has none (it ends in a tail call or never returns); set latency: false")]
    NoReturn { symbol: String },
    #[error("{symbol}: the captures need up to {bytes} bytes per call; at most {limit} fit: capture fewer values or lower limits.maxStringBytes")]
    TooLarge {
        symbol: String,
        bytes: usize,
        limit: usize,
    },
    #[error("{symbol}: {} is not a Go binary; capturing arguments of other functions (C ABI) is not supported yet: remove `capture` (entry, return and latency still work)", path.display())]
    CapturesNeedGo { symbol: String, path: PathBuf },
    /// A field path or `len(...)` that the binary's types do not allow.
    #[error("{symbol}: cannot capture {capture:?}: {source}")]
    Path {
        symbol: String,
        capture: String,
        #[source]
        source: Box<PathError>,
    },
    #[error("{symbol}: invalid capture: {source}")]
    CaptureSyntax {
        symbol: String,
        #[source]
        source: gprobe_crds::gopath::GoCaptureError,
    },
}

/// Kinds of values that cannot be captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncapturable {
    /// Slices other than []byte.
    Slice,
    /// complex64 / complex128: SSE registers.
    Complex,
    /// Structs and arrays.
    Aggregate,
}

impl Uncapturable {
    fn explain(self, type_name: &str) -> String {
        match self {
            Uncapturable::Slice => format!("slices of integers, floats, bools, strings, pointers and interfaces can be captured, not {type_name}; capture len(...) of it"),
            Uncapturable::Complex => format!("complex numbers ({type_name}) live in SSE registers, which uprobes cannot read"),
            Uncapturable::Aggregate => format!("{type_name} values cannot be captured; capture a scalar, string, []byte, pointer or interface parameter"),
        }
    }
}

/// The package of a Go symbol: everything up to the first '.' after the last '/'.
pub(crate) fn go_package(symbol: &str) -> &str {
    let start = symbol.rfind('/').map_or(0, |i| i + 1);
    match symbol[start..].find('.') {
        Some(i) => &symbol[..start + i],
        None => symbol,
    }
}

/// The last component of a symbol: `Get` for `net/http.(*Client).Get`.
pub(crate) fn last_component(symbol: &str) -> &str {
    let start = symbol.rfind('/').map_or(0, |i| i + 1);
    match symbol[start..].rfind('.') {
        Some(i) => &symbol[start + i + 1..],
        None => &symbol[start..],
    }
}

fn not_found_message(
    path: &std::path::Path,
    symbol: &str,
    inlined: bool,
    similar: &[String],
) -> String {
    let mut s = String::new();
    if inlined {
        let _ = write!(
            s,
            "{symbol} is inlined into its callers in {} (the compiler copied its body, so there is no function to probe); ",
            path.display()
        );
        match similar.first() {
            Some(alt) => {
                let _ = write!(s, "probe {alt} instead, or ");
            }
            None => s.push_str("probe one of its callers instead, or "),
        }
        let _ = write!(s, "rebuild with -gcflags='{}=-l'", go_package(symbol));
    } else {
        let _ = write!(s, "symbol {symbol} not found in {}", path.display());
        if !similar.is_empty() {
            let _ = write!(s, "; similar: {}", similar.join(", "));
        }
        let _ = write!(
            s,
            "; list functions with: gprobe symbols {} --filter {}",
            path.display(),
            last_component(symbol)
        );
    }
    s
}
