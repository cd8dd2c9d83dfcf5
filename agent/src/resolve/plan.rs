//! Turns one probe of a ProbeSpec and a resolved binary into what the kernel side needs
//! (uprobe offsets, BPF capture configurations) and what the decoder needs (names, types),
//! whatever the target kind: [`plan_probe`] dispatches to the USDT planner when the probe
//! names `usdt`, to Go when the binary is Go and the symbol is a Go function, else to C;
//! each target kind's module plans the captures (`go/plan.rs`, `c/plan.rs`,
//! `usdt/plan.rs`).
//!
//! # The plan, as the kernel side must carry it out
//!
//! | target | entry sites | return sites | semaphore | pairing |
//! |---|---|---|---|---|
//! | Go function | `entry_offset` (after the stack check) | uprobes on every RET (`ret_offsets`) | none | by goroutine (R14) |
//! | C function | `entry_offset` (first byte) | one uretprobe at the entry (`ret_offsets == [entry_offset]`, `uretprobe`) | none | by thread |
//! | USDT probe | `entry_offset` + `extra_entry_sites` | none (a point, not a call) | `ref_ctr_offset` | none needed |
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
//!   `GP_VAL_FAULT` when the pointer is NULL or unreadable. It decodes as a string
//!   (`Decode::Str`). Until the BPF program knows this kind it reads it as `CAP_BYTES`
//!   with no length location (`loc[1]` is `LOC_NONE`): a fault, never a wrong value.
//!
//! Locations (`GpLoc`): `LOC_REG` (x86 register number), `LOC_MEM` (register + `off`:
//! C stack arguments at RSP + 8, 16, ... at entry; USDT memory operands), `LOC_CONST`
//! (USDT `N@$imm`: the value is `off`). Configuration flags: `CFG_PAIR_BY_THREAD` in
//! `GpProbeCfg::flags` when `pair_by_thread`. A USDT probe's configurations are all
//! `PROBE_CALL`: one per group of [`ProbePlan::entry_groups`].

use std::fmt;

use crate::abi::{self, GpCapture, GpProbeCfg, GP_DATA_LIMIT, GP_MAX_CAPTURES, GP_MAX_VALUE};
pub use crate::resolve::error::{PlanError, Uncapturable};
use crate::resolve::{c, go, usdt, Binary, FuncInfo, ResolveError, TargetKind};
use gprobe_crds::Probe;

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
    pub costs: crate::resolve::sites::SiteCosts,
    /// The return sites; empty when no return probe is needed. Go: every RET instruction
    /// (uprobes). C: `[entry_offset]`, where a uretprobe goes (`uretprobe`).
    pub ret_offsets: Vec<u64>,
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
    /// The return sites are uretprobes (attached at `ret_offsets`, i.e. the entry), not
    /// uprobes: true for C functions; never for Go (uretprobes corrupt Go programs whose
    /// stacks move), where `ret_offsets` are RET instructions.
    pub uretprobe: bool,
    /// A USDT semaphore's file offset, to pass as the uprobe's reference counter offset
    /// (perf: the high bits of `config`; uprobe_multi: `ref_ctr_offsets`) on every entry
    /// site: the kernel then raises the 2-byte counter in each process the probe is
    /// attached to (pid-scoped: only the selected ones) and lowers it on detach, so that
    /// the program's `*_ENABLED()` check lets the probe fire. 0: no semaphore.
    pub ref_ctr_offset: u64,
    /// Entries and returns pair by thread (C, USDT), not by goroutine (Go): BPF keys its
    /// in-flight calls by the thread id (the low half of `bpf_get_current_pid_tgid`) in
    /// place of R14, and writes that id to `gp_event.goroutine`, so spans nest per thread.
    /// Carried to BPF as `CFG_PAIR_BY_THREAD` in the configuration's flags
    /// ([`ProbePlan::configs`]).
    pub pair_by_thread: bool,
    /// The names of the binary's Go types, for captures that show a dynamic type
    /// (interfaces, errors, `[]any`); `None` when no capture needs them.
    pub type_names: Option<go::types::TypeNames>,
    /// The probe propagates its spans (`propagate: true`, Go latency probes): its entry
    /// records carry the span BPF made (a `CAP_SPAN` capture, last), and both of its
    /// configurations have `CFG_PROPAGATE`.
    pub propagate: bool,
    /// gprobe's own runtime.newproc1 probe: both configurations have `CFG_NEWPROC`.
    pub newproc: bool,
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

pub use super::warnings::{PlanWarning, SignatureDifference};

impl ProbePlan {
    pub fn has_return(&self) -> bool {
        !self.ret_offsets.is_empty()
    }

    /// The configuration of one kind of uprobe with `caps`.
    fn config(&self, kind: u8, caps: &[CapturePlan], func_id: u32, rate_limit: u32) -> GpProbeCfg {
        let mut cfg = GpProbeCfg {
            func_id,
            kind,
            n_captures: caps.len() as u8,
            rate_limit: if kind == abi::PROBE_RETURN {
                0
            } else {
                rate_limit
            },
            flags: record_shape(caps)
                | if self.pair_by_thread {
                    abi::CFG_PAIR_BY_THREAD
                } else {
                    0
                }
                | if self.propagate {
                    abi::CFG_PROPAGATE
                } else {
                    0
                }
                | if self.newproc { abi::CFG_NEWPROC } else { 0 },
            // What a hit costs the process, for its overhead budget (0: not known).
            cost_ns: {
                let class = if kind == abi::PROBE_RETURN {
                    self.costs.ret
                } else {
                    Some(self.costs.entry)
                };
                match class.map_or(0, |c| c.cost_ns(super::sites::kernel())) {
                    0 => 0,
                    trap => trap + super::sites::PROGRAM_NS,
                }
            },
            // Only the entry site can be the stack check's jump.
            jcc: match (kind, self.entry_jcc) {
                (abi::PROBE_ENTRY | abi::PROBE_CALL, Some(cc)) => cc + 1,
                _ => 0,
            },
            // A propagating entry finds the caller's traceparent through its header capture.
            aux: caps
                .iter()
                .position(|c| self.propagate && c.bpf.kind == abi::CAP_HEADER)
                .map_or(0, |i| i as u64 + 1),
            ..Default::default()
        };
        for (slot, c) in cfg.caps.iter_mut().zip(caps) {
            *slot = c.bpf;
        }
        cfg
    }

    /// The kind of the entry configurations: ENTRY when returns are probed, else CALL.
    fn entry_kind(&self) -> u8 {
        if self.has_return() {
            abi::PROBE_ENTRY
        } else {
            abi::PROBE_CALL
        }
    }

    /// BPF configurations for the entry (at `entry_offset`) and (if any) the return uprobes.
    pub fn configs(&self, func_id: u32, rate_limit: u32) -> (GpProbeCfg, Option<GpProbeCfg>) {
        let entry = self.config(self.entry_kind(), &self.entry_captures, func_id, rate_limit);
        let ret = self
            .has_return()
            .then(|| self.config(abi::PROBE_RETURN, &self.return_captures, func_id, 0));
        (entry, ret)
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
    /// first group holds `entry_offset` (its configuration is `configs().0`).
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

    /// The BPF configuration of one entry group's captures (from [`ProbePlan::entry_groups`]).
    pub fn entry_config(&self, caps: &[CapturePlan], func_id: u32, rate_limit: u32) -> GpProbeCfg {
        self.config(self.entry_kind(), caps, func_id, rate_limit)
    }
}

/// The flags that let the BPF program write a configuration's records in place in the ring
/// buffer: captures all words (one record size), or a single string/bytes (a few sizes).
fn record_shape(caps: &[CapturePlan]) -> u8 {
    // The fast paths read flat locations only: a field path (CAPF_PATH) is walked by the
    // general writer (emit_any), like the kinds they do not know.
    let flat = |c: &CapturePlan, kind: u8| c.bpf.kind == kind && c.bpf.flags & abi::CAPF_PATH == 0;
    match caps {
        [c] if flat(c, abi::CAP_BYTES) => abi::CFG_ONE_BYTES,
        _ if caps.iter().all(|c| flat(c, abi::CAP_WORD)) => abi::CFG_WORDS,
        _ => 0,
    }
}

/// The captures of a probe, as a target kind plans them.
#[derive(Debug, Default)]
pub(crate) struct Captures {
    pub entry: Vec<CapturePlan>,
    pub ret: Vec<CapturePlan>,
    pub source: Option<SignatureSource>,
}

/// Checks that every capture list fits one BPF configuration and event.
fn check_sizes<'a>(
    symbol: &str,
    lists: impl IntoIterator<Item = &'a [CapturePlan]>,
) -> Result<(), PlanError> {
    for list in lists {
        if list.len() > GP_MAX_CAPTURES {
            return Err(PlanError::TooManyCaptures {
                symbol: symbol.to_string(),
                name: list[GP_MAX_CAPTURES].name.clone(),
                max: GP_MAX_CAPTURES,
            });
        }
        // Every capture must start inside the BPF cursor bound and end inside the
        // scratch buffer (see gprobe.h and GpCapture::max_record).
        let mut start = std::mem::size_of::<abi::GpEvent>();
        for c in list.iter() {
            let bytes = c.bpf.max_record();
            if start >= GP_DATA_LIMIT || bytes > GP_MAX_VALUE {
                return Err(PlanError::TooLarge {
                    symbol: symbol.to_string(),
                    bytes: start + bytes,
                    limit: GP_DATA_LIMIT,
                });
            }
            start += bytes;
        }
    }
    Ok(())
}

/// Plans `probe` against `bin`: a USDT probe when it names `usdt`; a Go function when the
/// binary is Go and the symbol is one of its Go functions; else a C function (of any
/// binary, cgo's C functions of a Go binary included).
pub fn plan_probe(
    bin: &Binary,
    probe: &Probe,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let is_usdt = probe.usdt.as_deref().is_some_and(|u| !u.trim().is_empty());
    let plan = if is_usdt && probe.symbol.trim().is_empty() {
        usdt::plan::plan(bin, probe, max_string_bytes)?
    } else if bin.kind() == TargetKind::Go {
        match bin.find_function(&probe.symbol) {
            Ok(func) => plan_go(bin, probe, func, max_string_bytes)?,
            // A C function that cgo linked in is in the ELF symbol tables only.
            Err(e @ ResolveError::NotFound { .. }) => match bin.find_c_function(&probe.symbol) {
                Ok(func) => plan_c(bin, probe, func, max_string_bytes)?,
                Err(_) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    } else {
        let func = bin.find_c_function(&probe.symbol)?;
        plan_c(bin, probe, func, max_string_bytes)?
    };
    if probe.propagate && !plan.propagate {
        return Err(PlanError::PropagateNotGo {
            symbol: plan.symbol,
        });
    }
    check_sizes(
        &plan.symbol,
        plan.entry_sites()
            .map(|(_, c)| c)
            .chain(std::iter::once(plan.return_captures.as_slice())),
    )?;
    Ok(plan)
}

use super::sites::{SiteClass, SiteCosts};

fn plan_go(
    bin: &Binary,
    probe: &Probe,
    func: FuncInfo,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let symbol = probe.symbol.clone();
    let sites = bin.probe_sites(&func)?;
    let mut warnings = Vec::new();
    let mut caps = go::plan::plan_captures(bin, &func, probe, max_string_bytes, &mut warnings)?;
    // The hidden captures come after the spec's and must fit with them: the incoming
    // traceparent is given up (said) where they leave no room; a propagating probe's span
    // must be recorded.
    if probe.propagate {
        caps.entry.push(go::plan::span_capture());
    }
    let fits = |entry: &[CapturePlan]| check_sizes(&probe.symbol, [entry]).is_ok();
    if !fits(&caps.entry) {
        if let Some(i) = caps.entry.iter().position(|c| c.decode == Decode::Header) {
            caps.entry.remove(i);
            warnings.push(PlanWarning::NoRoomForTraceparent {
                symbol: probe.symbol.clone(),
            });
        }
    }
    if probe.propagate && !fits(&caps.entry) {
        return Err(PlanError::TooManyCaptures {
            symbol: probe.symbol.clone(),
            name: "the span of propagate: true, recorded as a value".into(),
            max: GP_MAX_CAPTURES - 1,
        });
    }
    let needs_return = probe.latency || !caps.ret.is_empty();
    let type_names = caps
        .entry
        .iter()
        .chain(&caps.ret)
        .any(|c| c.decode.shows_type())
        .then(|| go::types::TypeNames::of(bin));
    if needs_return && sites.ret_offsets.is_empty() {
        return Err(PlanError::NoReturn { symbol });
    }
    Ok(ProbePlan {
        symbol,
        entry_offset: sites.entry.offset,
        entry_jcc: sites.entry.jcc,
        costs: SiteCosts {
            entry: sites.entry.class,
            ret: needs_return.then_some(sites.ret_class),
        },
        ret_offsets: if needs_return {
            sites.ret_offsets
        } else {
            Vec::new()
        },
        entry_captures: caps.entry,
        return_captures: caps.ret,
        signature_source: caps.source.unwrap_or(SignatureSource::None),
        warnings,
        extra_entry_sites: Vec::new(),
        uretprobe: false,
        ref_ctr_offset: 0,
        pair_by_thread: false,
        type_names,
        propagate: probe.propagate,
        newproc: false,
    })
}

/// A C function: entry at its first byte; its return, when needed, a uretprobe at the
/// same place (see `c/mod.rs`).
fn plan_c(
    bin: &Binary,
    probe: &Probe,
    func: FuncInfo,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let site = bin.c_entry_site(&func)?;
    let (entry, entry_class) = (site.probe, site.class);
    let mut warnings = Vec::new();
    let caps = c::plan::plan_captures(bin, &func, probe, max_string_bytes, &mut warnings)?;
    let needs_return = probe.latency || !caps.ret.is_empty();
    // Never a uretprobe in Go code, whatever the binary was taken for.
    if needs_return {
        bin.check_uretprobe(&func)?;
    }
    Ok(ProbePlan {
        symbol: probe.symbol.clone(),
        entry_offset: entry,
        entry_jcc: None,
        costs: SiteCosts {
            entry: entry_class,
            // A uretprobe's return: not measured.
            ret: needs_return.then_some(SiteClass::Unmeasured),
        },
        ret_offsets: if needs_return {
            vec![entry]
        } else {
            Vec::new()
        },
        entry_captures: caps.entry,
        return_captures: caps.ret,
        signature_source: caps.source.unwrap_or(SignatureSource::None),
        warnings,
        extra_entry_sites: Vec::new(),
        uretprobe: true,
        ref_ctr_offset: 0,
        pair_by_thread: true,
        propagate: false,
        newproc: false,
        type_names: None,
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
