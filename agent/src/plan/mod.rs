//! The probe plan: what one probe of a ProbeSpec becomes against one binary, whatever the
//! target kind: the uprobe sites, the BPF reads of each capture and how its bytes decode.
//! The planners make it (`resolve/planner.rs` dispatches to `resolve/go/plan.rs`,
//! `resolve/c/plan.rs` and `resolve/usdt/plan.rs`), attach/ carries it out (its BPF
//! configurations: `attach/encode.rs`), events/ decodes by it. This module is a leaf: it
//! holds the model and its pure methods, and imports neither the planners nor attach/.
//!
//! # The plan, as the kernel side must carry it out
//!
//! - Go function: entry at `entry_offset` (after the stack check); returns by uprobes on
//!   every RET (`Returns::RetSites`); no semaphore; paired by goroutine (R14).
//! - C function: entry at `entry_offset` (first byte); one uretprobe at `entry_offset`
//!   (`Returns::Uretprobe`); no semaphore; paired by thread.
//! - USDT probe: `entry_offset` + `extra_entry_sites`; no returns (a point, not a call:
//!   `Returns::None`); the semaphore at `ref_ctr_offset`; no pairing needed.
//!
//! A function probed without latency or results has no return sites either
//! (`Returns::None`). A `Returns::Uretprobe` holds the proof that its function lies outside
//! Go code ([`OutsideGoCode`], which only `Binary::check_uretprobe` gives), so that no plan
//! puts a uretprobe into Go code.
//!
//! Capture kinds (`GpCapture.kind`) the BPF program must read:
//! - `CAP_WORD`: `size` bytes (1..8) of the value at `loc[0]`: a register's low bytes, the
//!   memory at register + `off` (read exactly `size` bytes: a USDT memory operand of 1
//!   byte may end a page), or the constant `off`. The decoder masks and sign-extends.
//! - `CAP_BYTES`: `max_len` bytes at most from the pointer at `loc[0]`, the length at
//!   `loc[1]`. `size` is the length's size in bytes (1..8; 0 means 8, Go's `int`): a C
//!   `int num` leaves the register's upper half undefined, so the length is masked to
//!   `size` bytes first.
//! - `CAP_CSTR` (new): the NUL-terminated string at the pointer at `loc[0]` (the pointer
//!   read as a `CAP_WORD` of 8 bytes), at most `max_len` bytes of it: read with
//!   `bpf_probe_read_user_str` into `max_len + 2` bytes, so that a string of more than
//!   `max_len` bytes (return value `max_len + 2`) is told from one of exactly `max_len`
//!   (`max_len + 1`). The value's bytes exclude the NUL; `full_len` = `len`;
//!   `GP_VAL_TRUNCATED` when longer than `max_len` (its first `max_len` bytes are kept);
//!   `GP_VAL_FAULT` when unreadable (with `GP_VAL_NIL`: the pointer is NULL). It decodes as a string
//!   (`Decode::Str`). Until the BPF program knows this kind it reads it as `CAP_BYTES`
//!   with no length location (`loc[1]` is `LOC_NONE`): a fault, never a wrong value.
//!
//! Locations (`GpLoc`): `LOC_REG` (x86 register number), `LOC_MEM` (register + `off`:
//! C stack arguments at RSP + 8, 16, ... at entry; USDT memory operands), `LOC_CONST`
//! (USDT `N@$imm`: the value is `off`). Configuration flags: `CFG_PAIR_BY_THREAD` in
//! `GpProbeCfg::flags` for `Pairing::Thread`. A USDT probe's configurations are all
//! `PROBE_CALL`: one per group of [`ProbePlan::entry_groups`] (`attach/encode.rs`).

pub mod costs;
pub(crate) mod errtable;
pub(crate) mod typenames;
mod warnings;

use std::fmt;

use crate::abi::GpCapture;
pub use crate::resolve::c::OutsideGoCode;

pub use costs::{KernelSites, SiteClass, SiteCosts};
pub use errtable::{ErrFormat, ErrTable, ErrType};
pub use typenames::{TypeNames, ERROR_TYPES_WITH_MESSAGE};
pub use warnings::{PlanWarning, SignatureDifference};

/// How a captured value's bytes read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    Bool,
    Int {
        size: u8,
        signed: bool,
    },
    Float {
        size: u8,
    },
    /// Pointers, maps, chans, funcs: the address; null when nil.
    Pointer,
    Str,
    Bytes,
    /// An interface other than `error` (`GP_CAP_IFACE`, or a `GP_CAP_WORD` of its first
    /// word): null when nil, else the dynamic type's name (`TypeNames`).
    Interface,
    /// An `error` (`GP_CAP_IFACE` with `CAPF_DATA_STR`): null when nil; the message for
    /// the dynamic types of `ERROR_TYPES_WITH_MESSAGE`; else the dynamic type's name.
    Error,
    /// An `error` (`GP_CAP_ERROR`): null when nil; the text its `Error()` returns where the
    /// error and everything it holds are of the standard library's types of the binary's
    /// error table (`resolve/go/types/errtable.rs`), cut at `max_len` bytes; else the
    /// dynamic type's name.
    ErrorText {
        max_len: u16,
    },
    /// `len(x)` (`GP_CAP_WORD`): an int; a nil map or channel on the way (`VAL_NIL`) has
    /// length 0, a nil pointer before it makes the value null.
    Len {
        /// True when NIL means a nil map or channel (the last hop is the map pointer).
        nil_is_zero: bool,
    },
    /// A slice of scalars (`GP_CAP_SLICE`): an array of its first elements.
    Slice {
        elem: Elem,
    },
    /// A `[]string` (`GP_CAP_STRS`): an array of its first strings.
    Strings,
    /// A slice of interfaces (`GP_CAP_IFACES`): an array of its first elements, each a
    /// string, integer or bool where the dynamic type is one, else its name (or, for
    /// `errors`, as [`Decode::Error`]).
    Interfaces {
        errors: bool,
    },
    /// A request header (`GP_CAP_HEADER`): the string, or null when absent. Never output:
    /// the reader takes it (a handler's incoming `traceparent`).
    Header,
    /// The span BPF opened (`GP_CAP_SPAN`): never output, the reader takes it.
    Span,
}

impl Decode {
    /// Whether a value shows a dynamic type's name (and so needs the binary's type names).
    pub fn shows_type(&self) -> bool {
        matches!(
            self,
            Decode::Interface
                | Decode::Error
                | Decode::ErrorText { .. }
                | Decode::Interfaces { .. }
        )
    }
}

/// How the elements of a captured slice of scalars read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    Bool,
    Int { size: u8, signed: bool },
    Float { size: u8 },
    Pointer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturePlan {
    pub name: String,
    pub decode: Decode,
    pub bpf: GpCapture,
}

/// One more entry site of a probe, with the captures of that site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySite {
    /// File offset of the uprobe.
    pub offset: u64,
    /// The probe's captures as read at this site: the same names and decoders as
    /// `ProbePlan::entry_captures` (in the same order), but the locations may differ.
    pub captures: Vec<CapturePlan>,
}

/// Everything needed to attach one probe to one binary. All offsets are file offsets of
/// the binary the plan was made for (what uprobes and the reference counter take).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbePlan {
    /// The symbol, or `usdt:provider:name` for a USDT probe (as `Probe::point()`).
    pub symbol: String,
    /// File offset of the (first) entry uprobe: for Go, after the stack-growth check, so
    /// that a call whose stack grows (and restarts the function) is seen once; for C, the
    /// function's first byte; for USDT, the first site's probe instruction.
    pub entry_offset: u64,
    /// The entry site is Go's stack-check jump, of this condition (0-15): BPF skips a hit
    /// where it is taken (`GpProbeCfg::jcc`). Go functions only (no extra entry sites).
    pub entry_jcc: Option<u8>,
    /// How the kernel runs the entry and return sites (what a call costs the program).
    pub costs: SiteCosts,
    /// Where the calls' returns are seen, if anywhere.
    pub returns: Returns,
    /// The captures at `entry_offset`.
    pub entry_captures: Vec<CapturePlan>,
    pub return_captures: Vec<CapturePlan>,
    /// Where the signature came from, for the attach report.
    pub signature_source: SignatureSource,
    /// What the probe will not see or where gprobe overrode the spec; the caller logs them.
    pub warnings: Vec<PlanWarning>,
    /// The other entry sites of the probe: a USDT probe the compiler copied to several
    /// places has one site per copy, each with the same `CALL` behaviour and captures of
    /// the same names, read where that copy keeps them. Empty for functions. Attach each
    /// like `entry_offset` (the sites with equal captures can share one configuration:
    /// [`ProbePlan::entry_groups`]).
    pub extra_entry_sites: Vec<EntrySite>,
    /// A USDT semaphore's file offset, to pass as the uprobe's reference counter offset
    /// (perf: the high bits of `config`; uprobe_multi: `ref_ctr_offsets`) on every entry
    /// site: the kernel then raises the 2-byte counter in each process the probe is
    /// attached to (pid-scoped: only the selected ones) and lowers it on detach, so that
    /// the program's `*_ENABLED()` check lets the probe fire. 0: no semaphore.
    pub ref_ctr_offset: u64,
    /// What pairs a call's entry with its return, and nests spans.
    pub pairing: Pairing,
    /// The names of the binary's Go types, for captures that show a dynamic type
    /// (interfaces, errors, `[]any`); `None` when no capture needs them.
    pub type_names: Option<TypeNames>,
    /// A user's probe, one that propagates its spans, or gprobe's own runtime.newproc1.
    pub role: Role,
    /// The probe's `when:`, compiled for each of its sites (`resolve/when.rs`).
    pub filter: Option<PlanFilter>,
    /// The probe's `sample:` as [`sample_bound`] gives it (0: every call): a propagating
    /// probe decides in BPF whether a trace it starts is sampled, for its outgoing
    /// requests' `traceparent`, as the reader decides for its calls.
    pub sample_bound: u64,
}

/// OpenTelemetry's TraceIdRatioBased bound for `ratio`: a trace is sampled when the low 64
/// bits of its id, shifted right once, are below it. 0 (every trace) for a ratio of 1 or
/// more.
pub fn sample_bound(ratio: f64) -> u64 {
    if ratio >= 1.0 || ratio.is_nan() {
        return 0;
    }
    (ratio.max(0.0) * (1u64 << 63) as f64) as u64
}

/// A probe's `when:` as BPF evaluates it at each kind of site: the same terms, each read
/// where that site has its value (a capture's index, the duration, or decided at the
/// entry). The values read for the terms only are the last captures of the site's list
/// (`GpFilter::n_out` keeps the others in the record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanFilter {
    /// At the entry sites: `None` when no term is known there (then every entry passes).
    pub entry: Option<crate::abi::GpFilter>,
    /// At the returns: `None` when every term is decided at the entry.
    pub ret: Option<crate::abi::GpFilter>,
}

/// Where a probe sees its calls return: one choice, made by the target kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Returns {
    /// No return probe: a USDT probe (a point, not a call), or a function whose probe needs
    /// neither latency nor results.
    #[default]
    None,
    /// Go functions: an uprobe on every RET instruction (file offsets; never empty: use
    /// [`Returns::ret_sites`]). Never a uretprobe: it rewrites the return address on the
    /// stack, which Go's stack growth and unwinder do not expect.
    RetSites(Vec<u64>),
    /// C functions: one uretprobe at `entry_offset` (the kernel swaps the return address
    /// when the call enters, so it sees every return, tail calls included). Only for code
    /// outside Go's: made from the proof that `Binary::check_uretprobe` gives.
    Uretprobe(OutsideGoCode),
}

impl Returns {
    /// Uprobes on the RET instructions at `offsets`; none when there are none.
    pub fn ret_sites(offsets: Vec<u64>) -> Returns {
        if offsets.is_empty() {
            Returns::None
        } else {
            Returns::RetSites(offsets)
        }
    }
}

/// What a probe is for, beyond recording its calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Role {
    /// A user's probe.
    #[default]
    Traced,
    /// A user's probe that propagates its spans (`propagate: true`, Go latency probes): its
    /// entry records carry the span BPF made (a `CAP_SPAN` capture, last), and both of its
    /// configurations have `CFG_PROPAGATE`.
    Propagating,
    /// gprobe's own runtime.newproc1 probe: both configurations have `CFG_NEWPROC`.
    Newproc,
}

/// What BPF keys a call's in-flight entry by, so that its return finds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pairing {
    /// Go: the goroutine (`runtime.g` in R14), so a goroutine that parks on one thread and
    /// returns on another is measured right.
    #[default]
    Goroutine,
    /// C functions and USDT probes, where R14 is any value: the thread id (the low half of
    /// `bpf_get_current_pid_tgid`), which BPF also writes to `gp_event.goroutine`, so spans
    /// nest per thread. Carried to BPF as `CFG_PAIR_BY_THREAD` (`attach/encode.rs`).
    Thread,
}

/// Where the parameter and result types of a plan came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SignatureSource {
    /// The probe captures nothing: no types needed.
    #[default]
    None,
    /// The probe's `signature:`.
    Signature,
    /// The binary's DWARF (or its separate debug file's).
    Dwarf,
    /// A USDT probe without a signature: integers of the sizes its note gives.
    UsdtNote,
}

impl fmt::Display for SignatureSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignatureSource::None => "none needed",
            SignatureSource::Signature => "signature",
            SignatureSource::Dwarf => "DWARF",
            SignatureSource::UsdtNote => "USDT note",
        })
    }
}

impl ProbePlan {
    pub fn has_return(&self) -> bool {
        self.returns != Returns::None
    }

    /// The file offsets of the return probes: the RET instructions (uprobes), or the entry
    /// (a uretprobe: [`ProbePlan::uretprobe`]); empty when the probe has no return.
    pub fn ret_offsets(&self) -> &[u64] {
        match &self.returns {
            Returns::None => &[],
            Returns::RetSites(offsets) => offsets,
            Returns::Uretprobe(_) => std::slice::from_ref(&self.entry_offset),
        }
    }

    /// Whether the return probe is a uretprobe (at the entry), not uprobes on RETs.
    pub fn uretprobe(&self) -> bool {
        matches!(self.returns, Returns::Uretprobe(_))
    }

    /// Every entry site with its captures: `entry_offset` first, then `extra_entry_sites`.
    pub fn entry_sites(&self) -> impl Iterator<Item = (u64, &[CapturePlan])> + '_ {
        std::iter::once((self.entry_offset, self.entry_captures.as_slice())).chain(
            self.extra_entry_sites
                .iter()
                .map(|s| (s.offset, s.captures.as_slice())),
        )
    }

    /// The entry sites grouped by equal captures: one BPF configuration per group. The
    /// first group holds `entry_offset` (its configuration is the entry one of
    /// `attach::encode::configs`).
    pub fn entry_groups(&self) -> Vec<(Vec<u64>, &[CapturePlan])> {
        let mut groups: Vec<(Vec<u64>, &[CapturePlan])> = Vec::new();
        for (off, caps) in self.entry_sites() {
            match groups.iter_mut().find(|(_, c)| *c == caps) {
                Some((offs, _)) => offs.push(off),
                None => groups.push((vec![off], caps)),
            }
        }
        groups
    }
}

/// The captures of a probe, as a target kind plans them.
#[derive(Debug, Default)]
pub(crate) struct Captures {
    pub entry: Vec<CapturePlan>,
    pub ret: Vec<CapturePlan>,
    pub source: Option<SignatureSource>,
}
