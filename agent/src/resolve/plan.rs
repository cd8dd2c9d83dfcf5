//! Turns one probe of a ProbeSpec and a resolved binary into what the kernel side needs
//! (uprobe offsets, BPF capture configurations) and what the decoder needs (names, types),
//! whatever the target kind: [`plan_probe`] finds the function and its probe sites, and
//! the target kind's module plans the captures (`go/plan.rs`; C and USDT to come).

use std::fmt;

use crate::attach::abi::{
    self, GpCapture, GpProbeCfg, GP_DATA_LIMIT, GP_MAX_CAPTURES, GP_MAX_VALUE,
};
use crate::resolve::error::go_package;
pub use crate::resolve::error::{PlanError, Uncapturable};
use crate::resolve::{go, Binary, TargetKind};
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
    /// Pointers, maps, chans, funcs: the address.
    Pointer,
    Str,
    Bytes,
    /// An interface other than `error` (`GP_CAP_IFACE`, or a `GP_CAP_WORD` of its first
    /// word): null when nil, else the dynamic type's name (`TypeNames`).
    Interface,
    /// An `error` (`GP_CAP_IFACE` with `CAPF_DATA_STR`): null when nil; the message for
    /// the dynamic types of `ERROR_TYPES_WITH_MESSAGE`; else the dynamic type's name.
    Error,
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

/// Everything needed to attach one probe to one binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbePlan {
    pub symbol: String,
    /// File offset of the entry uprobe: after Go's stack-growth check, so that a call whose
    /// stack grows (and restarts the function) is seen once.
    pub entry_offset: u64,
    /// File offsets of every RET; empty when no return probe is needed.
    pub ret_offsets: Vec<u64>,
    pub entry_captures: Vec<CapturePlan>,
    pub return_captures: Vec<CapturePlan>,
    /// Where the signature came from, for the attach report.
    pub signature_source: SignatureSource,
    /// What the probe will not see or where gprobe overrode the spec; the caller logs them.
    pub warnings: Vec<PlanWarning>,
}

/// Where the parameter and result types of a plan came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureSource {
    /// The probe captures nothing: no types needed.
    None,
    /// The probe's `signature:`.
    Signature,
    /// The binary's DWARF.
    Dwarf,
}

impl fmt::Display for SignatureSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignatureSource::None => "none needed",
            SignatureSource::Signature => "signature",
            SignatureSource::Dwarf => "DWARF",
        })
    }
}

/// Something the user should know about a plan that still attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanWarning {
    /// The function exists, but the compiler also inlined it at `count` call sites: calls
    /// through those run a copy of its body and are not seen.
    InlinedCallSites { symbol: String, count: usize },
    /// The probe's signature and the binary's DWARF describe different parameters or
    /// results; DWARF was used.
    SignatureDisagreesWithDwarf {
        symbol: String,
        differences: Vec<SignatureDifference>,
    },
}

/// One way a probe's signature differs from DWARF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureDifference {
    ParamCount {
        signature: usize,
        dwarf: usize,
    },
    ResultCount {
        signature: usize,
        dwarf: usize,
    },
    /// Parameter `index` (0-based) is laid out differently (registers, stack slots or size).
    Param {
        index: usize,
        signature: String,
        dwarf: String,
    },
    Result {
        index: usize,
        signature: String,
        dwarf: String,
    },
}

impl fmt::Display for SignatureDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureDifference::ParamCount { signature, dwarf } => write!(
                f,
                "the signature has {signature} parameter(s), DWARF {dwarf}"
            ),
            SignatureDifference::ResultCount { signature, dwarf } => {
                write!(f, "the signature has {signature} result(s), DWARF {dwarf}")
            }
            SignatureDifference::Param {
                index,
                signature,
                dwarf,
            } => write!(
                f,
                "parameter {index} is {signature} in the signature but {dwarf} in DWARF"
            ),
            SignatureDifference::Result {
                index,
                signature,
                dwarf,
            } => write!(
                f,
                "result {index} is {signature} in the signature but {dwarf} in DWARF"
            ),
        }
    }
}

impl fmt::Display for PlanWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanWarning::InlinedCallSites { symbol, count } => write!(
                f,
                "{symbol}: the compiler also inlined it at {count} call site(s); calls through \
                 those run a copy of its body and are not seen (rebuild with \
                 -gcflags='{}=-l' to see them)",
                go_package(symbol)
            ),
            PlanWarning::SignatureDisagreesWithDwarf {
                symbol,
                differences,
            } => {
                write!(f, "{symbol}: the probe's signature disagrees with DWARF (")?;
                for (i, d) in differences.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str("); DWARF was used, capture names of the signature map to DWARF's parameters by position")
            }
        }
    }
}

impl ProbePlan {
    pub fn has_return(&self) -> bool {
        !self.ret_offsets.is_empty()
    }

    /// BPF configurations for the entry and (if any) the return uprobes.
    pub fn configs(&self, func_id: u32, rate_limit: u32) -> (GpProbeCfg, Option<GpProbeCfg>) {
        let make = |kind, caps: &[CapturePlan]| {
            let mut cfg = GpProbeCfg {
                func_id,
                kind,
                n_captures: caps.len() as u8,
                rate_limit: if kind == abi::PROBE_RETURN {
                    0
                } else {
                    rate_limit
                },
                ..Default::default()
            };
            for (slot, c) in cfg.caps.iter_mut().zip(caps) {
                *slot = c.bpf;
            }
            cfg
        };
        if self.has_return() {
            (
                make(abi::PROBE_ENTRY, &self.entry_captures),
                Some(make(abi::PROBE_RETURN, &self.return_captures)),
            )
        } else {
            (make(abi::PROBE_CALL, &self.entry_captures), None)
        }
    }
}

/// The captures of a probe, as a target kind plans them.
#[derive(Debug, Default)]
pub(crate) struct Captures {
    pub entry: Vec<CapturePlan>,
    pub ret: Vec<CapturePlan>,
    pub source: Option<SignatureSource>,
}

/// Plans `probe` against `bin`.
pub fn plan_probe(
    bin: &Binary,
    probe: &Probe,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let symbol = probe.symbol.clone();
    let func = bin.find_function(&symbol)?;
    let sites = bin.probe_sites(&func)?;
    let mut warnings = Vec::new();
    let caps = match bin.kind() {
        TargetKind::Go => {
            go::plan::plan_captures(bin, &func, probe, max_string_bytes, &mut warnings)?
        }
        TargetKind::Elf if probe.capture.is_empty() => Captures::default(),
        TargetKind::Elf => {
            return Err(PlanError::CapturesNeedGo {
                symbol,
                path: bin.path().to_path_buf(),
            })
        }
    };
    for list in [&caps.entry, &caps.ret] {
        if list.len() > GP_MAX_CAPTURES {
            return Err(PlanError::TooManyCaptures {
                symbol,
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
                    symbol,
                    bytes: start + bytes,
                    limit: GP_DATA_LIMIT,
                });
            }
            start += bytes;
        }
    }
    let needs_return = probe.latency || !caps.ret.is_empty();
    if needs_return && sites.ret_offsets.is_empty() {
        return Err(PlanError::NoReturn { symbol });
    }
    Ok(ProbePlan {
        symbol,
        entry_offset: sites.body_offset,
        ret_offsets: if needs_return {
            sites.ret_offsets
        } else {
            Vec::new()
        },
        entry_captures: caps.entry,
        return_captures: caps.ret,
        signature_source: caps.source.unwrap_or(SignatureSource::None),
        warnings,
    })
}

/// Binary resolution as the engine asks for it: opens the file once per batch of probes.
#[derive(Debug, Default)]
pub struct BinaryResolver;

impl crate::engine::Resolver for BinaryResolver {
    fn plan(
        &mut self,
        path: &std::path::Path,
        shown: &std::path::Path,
        probes: &[crate::engine::PlanRequest<'_>],
    ) -> Vec<Result<ProbePlan, std::sync::Arc<crate::engine::ProbeError>>> {
        use crate::engine::ProbeError;
        use std::sync::Arc;
        match Binary::open_as(path, shown) {
            Err(e) => {
                let e = Arc::new(ProbeError::Binary(e));
                probes.iter().map(|_| Err(e.clone())).collect()
            }
            Ok(bin) => probes
                .iter()
                .map(|r| {
                    plan_probe(&bin, r.probe, r.limits.max_string_bytes)
                        .map_err(|e| Arc::new(ProbeError::Plan(e)))
                })
                .collect(),
        }
    }
}
