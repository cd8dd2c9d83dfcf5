//! Errors of the resolve stage: each carries the binary's path (and the symbol where one
//! is involved), and its message says what went wrong and what to do about it.
//!
//! These wrap the errors of the stage's readers, which sit below them in their own files
//! (`dwarf_error.rs`, `go/error.rs`, `go/types/error.rs`, `usdt/error.rs`): this file
//! imports error types only (and the symbol-name helpers of the leaf `gosym.rs`), so that
//! no module it depends on depends on it (scripts/import_cycles.py checks it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gprobe_crds::csig::CSignatureError;
use gprobe_crds::signature::SignatureError;

use super::dwarf_error::UnreadableDwarf;
use super::go::error::PclntabError;
use super::go::types::error::PathError;
use super::go::types::error::TypeError;
use super::usdt::error::{SiteProblem, StapsdtError};
use crate::gosym::{go_package, last_component};

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("cannot read {}: {source}; check that the file exists and that this user may read it", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{} is not an ELF file ({reason}); gprobe reads Linux executables: point it at the \
        program's binary, not at a script or a wrapper", path.display())]
    NotElf { path: PathBuf, reason: String },

    #[error("{}", malformed(path, reason))]
    Malformed { path: PathBuf, reason: String },

    /// A `.note.stapsdt` section that is not what sys/sdt.h writes.
    #[error("{}", malformed(path, format_args!("its .note.stapsdt section is malformed: {source}")))]
    MalformedStapsdt { path: PathBuf, source: StapsdtError },

    #[error("{} is a {class} ELF file for machine {machine}; gprobe supports 64-bit little-endian \
        x86-64 binaries only: trace an amd64 build of the program", path.display())]
    UnsupportedArch {
        path: PathBuf,
        class: &'static str,
        machine: u16,
    },

    #[error("{} was built with {} whose function table (pclntab magic {magic:#010x}) gprobe \
        cannot read; rebuild the program with Go 1.18 or \
            newer", path.display(), go_version.as_deref().unwrap_or("a Go release older than 1.18"))]
    UnsupportedGoVersion {
        path: PathBuf,
        go_version: Option<String>,
        magic: u32,
    },

    #[error("the Go function table (.gopclntab) of {} is corrupt: {reason}; the file may be \
        damaged or not produced by the Go linker: rebuild it or check that it was not modified", path.display())]
    BadPclntab {
        path: PathBuf,
        #[source]
        reason: PclntabError,
    },

    #[error("cannot tell where the Go code of {} starts: its module data \
        (runtime.firstmoduledata) was not found or does not match the function table, the table's \
            header has no text address (Go 1.27+ leaves it out), and the binary is not provably \
                internally linked; gprobe refuses to guess function addresses: trace an \
                    unstripped build of the program", path.display())]
    NoTextStart { path: PathBuf },

    #[error("{symbol} is at {pclntab:#x} in the Go function table of {} but at {symtab:#x} in its \
        ELF symbol table; refusing to probe an address the tables disagree on: the binary may \
            have been rewritten after linking (rebuild it) or gprobe misreads it (report it)", path.display())]
    AddressMismatch {
        path: PathBuf,
        symbol: String,
        pclntab: u64,
        symtab: u64,
    },

    #[error("refusing to place a breakpoint at {symbol}+{offset:#x} (address {:#x}) in {}: not an \
        instruction boundary of the function decoded from its first byte; the function table may \
            be wrong (a breakpoint inside an instruction would corrupt the program)", addr + offset, path.display())]
    NotInstructionBoundary {
        path: PathBuf,
        symbol: String,
        addr: u64,
        offset: u64,
    },

    #[error("refusing to place a breakpoint at {symbol}+{offset:#x} (address {:#x}) in {}: no \
        valid x86-64 instruction starts there (decoded from the function's first byte); the \
            symbol tables may point at data", addr + offset, path.display())]
    InvalidInstruction {
        path: PathBuf,
        symbol: String,
        addr: u64,
        offset: u64,
    },

    #[error("refusing to probe {symbol} at {addr:#x} in {}: decoded from its first byte, its \
        instructions run past its end (+{size:#x}) to +{end:#x}; the function table may be wrong", path.display())]
    CodePastEnd {
        path: PathBuf,
        symbol: String,
        addr: u64,
        size: u64,
        end: u64,
    },

    #[error("refusing to probe {symbol} at {addr:#x} in {}: the address is not in an executable \
        section of the file, so it is not code; the symbol tables may be wrong (check the binary)", path.display())]
    NotCode {
        path: PathBuf,
        symbol: String,
        addr: u64,
    },

    #[error("{} has no function table: it is not a Go binary and has no .symtab or .dynsym \
        symbols; trace an unstripped build of the program", path.display())]
    NoFunctions { path: PathBuf },

    #[error("{}", not_found_message(path, symbol, *inlined, similar))]
    NotFound {
        path: PathBuf,
        symbol: String,
        inlined: bool,
        similar: Vec<String>,
    },

    #[error("function {symbol} at {addr:#x} in {} lies outside every loadable segment of the file \
        (or past its end); the binary's tables are inconsistent: check that the file is complete", path.display())]
    AddressNotMapped {
        path: PathBuf,
        symbol: String,
        addr: u64,
    },

    #[error(transparent)]
    Dwarf(#[from] UnreadableDwarf),
}

/// The message of an ELF file whose structure is broken.
fn malformed(path: &Path, reason: impl std::fmt::Display) -> String {
    format!(
        "{} is a truncated or malformed ELF file: {reason}; check that the file was copied \
        completely (compare its size and checksum with the original)",
        path.display()
    )
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
        source: Box<TypeError>,
    },
    #[error("{symbol}: {} has no DWARF (stripped) and the probe has no signature: add `signature: \
        \"func(...)\"` to the probe (copy it from the Go source or `go doc`), or probe an \
            unstripped build", path.display())]
    NoSignature { symbol: String, path: PathBuf },
    #[error("{symbol}: cannot capture {name:?}: no parameter or result has that name; known \
        names: {}", if known.is_empty() { "(none)".to_string() } else { known.join(", ") })]
    UnknownCapture {
        symbol: String,
        name: String,
        known: Vec<String>,
    },
    /// `p0` (or `r1`, `arg2`) for a value the signature or DWARF names: refused, so that a
    /// capture never reads a value other than the one its author had in mind.
    #[error("{0}")]
    PositionalName(Box<PositionalName>),
    #[error(
        "{symbol}: cannot capture {name:?}: the {what} is passed in register X{reg}; uprobes \
        see only the general-purpose registers (the kernel gives BPF no SSE state), so floats in \
            registers cannot be read. Floats passed on the stack can"
    )]
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
    #[error(
        "{symbol}: cannot read {name:?}: a probe reads at most {max} values at a call's entry \
        (and {max} at its return), and the values `when:` compares count too, captured or not: \
        capture fewer values or compare fewer in `when:`"
    )]
    TooManyCaptures {
        symbol: String,
        name: String,
        max: usize,
    },
    #[error(
        "{symbol}: propagate: true applies to Go functions (whose goroutines carry the \
        spans); this is a C function: remove propagate"
    )]
    PropagateNotGo { symbol: String },
    #[error("{symbol}: refusing a return probe (uretprobe) in {}: {reason}; a uretprobe in Go \
        code kills the program when its goroutine's stack moves (\"unexpected return pc\"): probe \
            the function as a Go function (by its Go name), or set latency: false and capture no \
                results", path.display())]
    UretprobeInGo {
        symbol: String,
        path: PathBuf,
        reason: String,
    },
    #[error("{symbol}: {source}")]
    WhenSyntax {
        symbol: String,
        source: gprobe_crds::when::WhenError,
    },
    #[error("{symbol}: when: `{term}`: {reason}")]
    WhenTerm {
        symbol: String,
        term: String,
        reason: String,
    },
    #[error("{symbol}: {source}")]
    When {
        symbol: String,
        source: crate::filter::FilterError,
    },
    #[error(
        "{symbol}: latency needs RET instructions but the function has none (it ends in a \
        tail call or never returns); set latency: false"
    )]
    NoReturn { symbol: String },
    #[error(
        "{symbol}: the captures need up to {bytes} bytes per call; at most {limit} fit: \
        capture fewer values or lower limits.maxStringBytes"
    )]
    TooLarge {
        symbol: String,
        bytes: usize,
        limit: usize,
    },
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
    #[error("{symbol}: {source}")]
    CSignatureSyntax {
        symbol: String,
        #[source]
        source: CSignatureError,
    },
    #[error("{symbol}: the signature {signature:?} is Go syntax, but {symbol} is a C function of \
        {} (the System V C ABI, not Go's): write its C prototype, e.g. \"int add(int a, int b)\"", path.display())]
    GoSignatureForC {
        symbol: String,
        signature: String,
        path: PathBuf,
    },
    #[error("{symbol}: the signature {signature:?} is {problem}")]
    CSignatureForm {
        symbol: String,
        signature: String,
        problem: &'static str,
    },
    #[error("{symbol}: {} has no DWARF for this C function{} and the probe has no signature: add \
        `signature:` with its C prototype (copy it from the header, e.g. \"int add(int a, int \
            b)\"), or install the binary's debug \
                symbols", path.display(), looked.as_ref().map(|p| format!(" (nor a debug file at \
                    {})", p.display())).unwrap_or_default())]
    NoCSignature {
        symbol: String,
        path: PathBuf,
        /// The separate debug file looked for (by build ID), if the binary has one.
        looked: Option<PathBuf>,
    },
    #[error("{symbol}: cannot capture {name:?} ({type_name}): {}", problem.explain())]
    CUncapturable {
        symbol: String,
        name: String,
        type_name: String,
        problem: CProblem,
    },
    #[error("{symbol}: cannot capture {capture:?}: {why}")]
    BadSlice {
        symbol: String,
        capture: String,
        why: String,
    },
    #[error("{}", c_not_found_message(symbol, path, *stripped, similar))]
    CFunctionNotFound {
        symbol: String,
        path: PathBuf,
        /// The binary has no .symtab: only exported (.dynsym) functions are visible.
        stripped: bool,
        similar: Vec<String>,
    },
    #[error(
        "{symbol} in {} is an indirect function (IFUNC): its symbol is the resolver that picks \
         an implementation once, when the library is loaded; probe the implementation instead{}",
        path.display(),
        if similar.is_empty() {
            String::new()
        } else {
            format!(" (similar: {})", similar.join(", "))
        }
    )]
    IndirectFunction {
        symbol: String,
        path: PathBuf,
        similar: Vec<String>,
    },
    #[error("{}", usdt_not_found_message(point, path, *probes, similar))]
    UsdtNotFound {
        point: String,
        path: PathBuf,
        /// USDT probes the file has (0: no .note.stapsdt).
        probes: usize,
        similar: Vec<String>,
    },
    #[error("{point}: the signature {signature:?} names {given} argument(s) but the probe's note \
        in {} has {note} ({args:?}): list exactly one `type name` per argument, in order", path.display())]
    UsdtArgCount {
        point: String,
        path: PathBuf,
        signature: String,
        given: usize,
        note: usize,
        args: String,
    },
    #[error(transparent)]
    UsdtUnsupportedArg(Box<UnsupportedArg>),
    #[error(
        "{point}: a USDT probe marks a point in the code, not a call: it has no return for \
        latency or results; set latency: false and capture its arguments only"
    )]
    UsdtNoReturn { point: String },
    #[error(
        "{point}: its {} sites in {} use different semaphores ({}); a probe can raise one: \
         report this binary",
        offsets.len(),
        path.display(),
        offsets.iter().map(|o| format!("{o:#x}")).collect::<Vec<_>>().join(", ")
    )]
    UsdtSemaphores {
        point: String,
        path: PathBuf,
        offsets: Vec<u64>,
    },
    /// A site of the probe that cannot be probed (`site`: its pc).
    #[error("{point}: the USDT note of {} is unusable: site {site:#x}: {problem}", path.display())]
    UsdtBadNote {
        point: String,
        path: PathBuf,
        site: u64,
        problem: Box<SiteProblem>,
    },
}

/// Why [`super::Binary::check_fast_decoder`] failed: the functions could not be read, or
/// the fast RET scan and a full decode disagree on one.
#[derive(Debug, thiserror::Error)]
pub enum DecoderCheckError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("{symbol} at {addr:#x}: fast scan RETs {fast:x?}, iced RETs {iced:x?}")]
    Differs {
        symbol: String,
        addr: u64,
        fast: Vec<u64>,
        iced: Vec<u64>,
    },
}

/// A captured USDT argument whose spec gprobe cannot read (boxed: the largest error).
#[derive(Debug, thiserror::Error)]
#[error("{point}: cannot capture {name:?}: its argument spec {spec:?} (argument {index} at site \
    {site:#x} of {}) is not supported: {reason}; gprobe reads N@%reg, N@off(%reg), N@(%reg) and \
        N@$imm", path.display())]
pub struct UnsupportedArg {
    pub point: String,
    pub path: PathBuf,
    /// The capture that needs it.
    pub name: String,
    pub index: usize,
    /// The site's pc (a probe may have several sites with different specs).
    pub site: u64,
    pub spec: String,
    pub reason: String,
}

/// Why a C value cannot be captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CProblem {
    /// A struct or union by value.
    Aggregate,
    /// Wider than a register (`__int128`, `long double`).
    TooWide,
    /// A typedef or tag whose definition is unknown (no DWARF).
    UnknownType,
    /// Its place cannot be told (what comes before it).
    UnknownPlace(String),
    /// `void`: there is no value.
    Void,
}

impl CProblem {
    fn explain(&self) -> String {
        match self {
            CProblem::Aggregate => "structs and unions passed by value cannot be captured; \
                capture a pointer to it, or a scalar parameter".into(),
            CProblem::TooWide => "values wider than 8 bytes (__int128, long double) cannot be captured".into(),
            CProblem::UnknownType => "its size is unknown: write its underlying type (e.g. int, \
                or a pointer) in the signature, or probe a binary with DWARF (or its debug symbols installed)".into(),
            CProblem::UnknownPlace(why) => why.clone(),
            CProblem::Void => "void has no value".into(),
        }
    }
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
            Uncapturable::Slice => format!(
                "slices of integers, floats, bools, strings, pointers \
                and interfaces can be captured, not {type_name}; capture len(...) of it"
            ),
            Uncapturable::Complex => format!(
                "complex numbers ({type_name}) live in SSE \
                registers, which uprobes cannot read"
            ),
            Uncapturable::Aggregate => format!(
                "{type_name} values cannot be captured; capture a \
                scalar, string, []byte, pointer or interface parameter"
            ),
        }
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
            "{symbol} is inlined into its callers in {} (the compiler copied its body, so there \
            is no function to probe); ",
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

fn c_not_found_message(
    symbol: &str,
    path: &std::path::Path,
    stripped: bool,
    similar: &[String],
) -> String {
    let mut s = format!("function {symbol} not found in {}", path.display());
    if stripped {
        s.push_str(
            " (the binary is stripped: only its exported functions, in .dynsym, are \
            visible; static functions need an unstripped build)",
        );
    }
    if !similar.is_empty() {
        let _ = write!(s, "; similar: {}", similar.join(", "));
    }
    let _ = write!(
        s,
        "; list functions with: gprobe symbols {} --filter {symbol}",
        path.display()
    );
    s
}

fn usdt_not_found_message(
    point: &str,
    path: &std::path::Path,
    probes: usize,
    similar: &[String],
) -> String {
    let mut s = format!("{point}: no such USDT probe in {}", path.display());
    if probes == 0 {
        s.push_str(" (it has no .note.stapsdt section: no USDT probes at all; is it the right binary or library?)");
    } else {
        let _ = write!(s, " ({probes} probes)");
    }
    if !similar.is_empty() {
        let _ = write!(s, "; similar: {}", similar.join(", "));
    }
    let _ = write!(s, "; list them with: gprobe symbols {}", path.display());
    s
}

/// A positional name (`p0`) of a value that has a name of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionalName {
    pub symbol: String,
    /// The capture entry (`p1.URL.Path`), and the name in it (`p1`).
    pub capture: String,
    pub name: String,
    pub position: gprobe_crds::signature::ValueRef,
    /// The value's own name.
    pub real: String,
    /// What named it: "the signature", "DWARF".
    pub described_by: &'static str,
    pub known: Vec<String>,
}

impl std::fmt::Display for PositionalName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: cannot capture {:?}: {:?} names {} by its position, but {} names it {:?}: write \
            {} (positional names stand only for unnamed values); known names: {}",
            self.symbol,
            self.capture,
            self.name,
            position_text(self.position),
            self.described_by,
            self.real,
            self.real,
            self.known.join(", ")
        )
    }
}

fn position_text(r: gprobe_crds::signature::ValueRef) -> String {
    match r {
        gprobe_crds::signature::ValueRef::Param(i) => format!("parameter {i}"),
        gprobe_crds::signature::ValueRef::Result(i) => format!("result {i}"),
    }
}

#[cfg(test)]
mod tests;
