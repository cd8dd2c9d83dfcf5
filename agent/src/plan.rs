//! Turns one probe of a ProbeSpec and a resolved binary into what the kernel side needs
//! (uprobe offsets, BPF capture configurations) and what the decoder needs (names, types).

use crate::attach::abi::{self, GpCapture, GpLoc, GpProbeCfg, GP_DATA_LIMIT, GP_MAX_CAPTURES};
use crate::resolve::abi::{layout, signature_types, Loc, Placed};
use crate::resolve::gotype::GoType;
use crate::resolve::{Binary, ResolveError};
use gprobe_crds::signature::{parse_signature, ValueRef};
use gprobe_crds::Probe;
use std::path::PathBuf;
use thiserror::Error;

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
    /// `error` and other interfaces: nil or not, from the type word.
    Interface,
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
    pub signature_source: &'static str,
    /// What the user should know although the probe can attach.
    pub warnings: Vec<String>,
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
                flags: record_shape(caps),
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

/// The flags that let the BPF program write a configuration's records in place in the ring
/// buffer: captures all words (one record size), or a single string/bytes (a few sizes).
fn record_shape(caps: &[CapturePlan]) -> u8 {
    match caps {
        [c] if c.bpf.kind == abi::CAP_BYTES => abi::CFG_ONE_BYTES,
        _ if caps.iter().all(|c| c.bpf.kind == abi::CAP_WORD) => abi::CFG_WORDS,
        _ => 0,
    }
}

#[derive(Debug, Error)]
pub enum PlanError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("{symbol}: {reason}")]
    Signature { symbol: String, reason: String },
    #[error("{symbol}: {path} has no DWARF (stripped) and the probe has no signature: add `signature: \"func(...)\"` to the probe (copy it from the Go source or `go doc`), or probe an unstripped build")]
    NoSignature { symbol: String, path: PathBuf },
    #[error("{symbol}: cannot capture {name:?}: {reason}")]
    Capture {
        symbol: String,
        name: String,
        reason: String,
    },
    #[error("{symbol}: latency needs RET instructions but the function has none (it ends in a tail call or never returns); set latency: false")]
    NoReturn { symbol: String },
    #[error("{symbol}: the captures need up to {bytes} bytes per call; at most {limit} fit: capture fewer values or lower limits.maxStringBytes")]
    TooLarge {
        symbol: String,
        bytes: usize,
        limit: usize,
    },
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

    // Parameter and result names and types: the probe's signature, else DWARF.
    let (names_p, names_r, types_p, types_r, source) = match &probe.signature {
        Some(text) => {
            let sig = parse_signature(text).map_err(|e| PlanError::Signature {
                symbol: symbol.clone(),
                reason: e.to_string(),
            })?;
            let (tp, tr) = signature_types(&sig).map_err(|(name, e)| PlanError::Signature {
                symbol: symbol.clone(),
                reason: format!("parameter {name:?}: {e}"),
            })?;
            (
                sig.params
                    .iter()
                    .map(|p| p.name.clone())
                    .collect::<Vec<_>>(),
                sig.results
                    .iter()
                    .map(|p| p.name.clone())
                    .collect::<Vec<_>>(),
                tp,
                tr,
                "signature",
            )
        }
        None if probe.capture.is_empty() => (vec![], vec![], vec![], vec![], "none needed"),
        None => match bin.dwarf_signature(&func)? {
            Some(d) => (
                d.params.iter().map(|p| p.name.clone()).collect(),
                d.results.iter().map(|p| p.name.clone()).collect(),
                d.params.iter().map(|p| p.ty.clone()).collect(),
                d.results.iter().map(|p| p.ty.clone()).collect(),
                "DWARF",
            ),
            None => {
                return Err(PlanError::NoSignature {
                    symbol,
                    path: bin.path().to_path_buf(),
                })
            }
        },
    };
    let lay = layout(&types_p, &types_r);
    let lookup = |name: &str| -> Option<ValueRef> {
        if let Some(i) = names_p.iter().position(|n| n == name) {
            return Some(ValueRef::Param(i));
        }
        if let Some(i) = names_r.iter().position(|n| n == name) {
            return Some(ValueRef::Result(i));
        }
        let idx = |p: char| name.strip_prefix(p)?.parse::<usize>().ok();
        match (idx('r'), idx('p')) {
            (Some(i), _) if i < names_r.len() => Some(ValueRef::Result(i)),
            (_, Some(i)) if i < names_p.len() => Some(ValueRef::Param(i)),
            _ => None,
        }
    };

    let mut entry_captures = Vec::new();
    let mut return_captures = Vec::new();
    for name in &probe.capture {
        let cap_err = |reason: String| PlanError::Capture {
            symbol: symbol.clone(),
            name: name.clone(),
            reason,
        };
        let (placed, is_result) = match lookup(name) {
            Some(ValueRef::Param(i)) => (&lay.params[i], false),
            Some(ValueRef::Result(i)) => (&lay.results[i], true),
            None => {
                let known: Vec<_> = names_p.iter().chain(names_r.iter()).cloned().collect();
                return Err(cap_err(format!(
                    "no parameter or result has that name; known names: {}",
                    if known.is_empty() {
                        "(none)".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        };
        let plan = capture_plan(name, placed, max_string_bytes).map_err(cap_err)?;
        if is_result {
            return_captures.push(plan);
        } else {
            entry_captures.push(plan);
        }
    }
    for caps in [&entry_captures, &return_captures] {
        if caps.len() > GP_MAX_CAPTURES {
            return Err(PlanError::Capture {
                symbol,
                name: caps[GP_MAX_CAPTURES].name.clone(),
                reason: format!("at most {GP_MAX_CAPTURES} values per probe"),
            });
        }
        // Every capture must start inside the BPF cursor bound (see gprobe.h).
        let mut start = std::mem::size_of::<abi::GpEvent>();
        for c in caps.iter() {
            if start >= GP_DATA_LIMIT {
                return Err(PlanError::TooLarge {
                    symbol,
                    bytes: start,
                    limit: GP_DATA_LIMIT,
                });
            }
            start += 8 + (c.bpf.max_len as usize).max(8).div_ceil(8) * 8;
        }
    }
    let needs_return = probe.latency || !return_captures.is_empty();
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
        entry_captures,
        return_captures,
        signature_source: source,
        warnings: Vec::new(),
    })
}

/// Go's integer argument registers (ABIInternal order RAX RBX RCX RDI RSI R8 R9 R10 R11)
/// as x86 register numbers.
const GO_INT_REGS: [u8; 9] = {
    use abi::reg::*;
    [RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11]
};

fn loc(l: Loc, what: &str) -> Result<GpLoc, String> {
    match l {
        Loc::IntReg(r) => Ok(GpLoc {
            kind: abi::LOC_REG,
            reg: GO_INT_REGS[r as usize],
            ..Default::default()
        }),
        Loc::Stack(off) => Ok(GpLoc {
            kind: abi::LOC_MEM,
            reg: abi::reg::RSP,
            off,
            ..Default::default()
        }),
        Loc::FloatReg(x) => Err(format!(
            "the {what} is passed in register X{x}; uprobes see only the general-purpose registers (the kernel gives BPF no SSE state), so floats in registers cannot be read. Floats passed on the stack can"
        )),
    }
}

fn capture_plan(name: &str, placed: &Placed, max_string_bytes: u32) -> Result<CapturePlan, String> {
    let word = |decode: Decode, what: &str| -> Result<CapturePlan, String> {
        let p = placed.parts[0];
        Ok(CapturePlan {
            name: name.to_string(),
            decode,
            bpf: GpCapture {
                kind: abi::CAP_WORD,
                size: p.size.min(8) as u8,
                loc: [loc(p.loc, what)?, GpLoc::default()],
                ..Default::default()
            },
        })
    };
    let bytes = |decode: Decode| -> Result<CapturePlan, String> {
        let (ptr, len) = (placed.parts[0], placed.parts[1]);
        Ok(CapturePlan {
            name: name.to_string(),
            decode,
            bpf: GpCapture {
                kind: abi::CAP_BYTES,
                max_len: max_string_bytes.min(abi::GP_MAX_STR as u32) as u16,
                loc: [loc(ptr.loc, "pointer")?, loc(len.loc, "length")?],
                ..Default::default()
            },
        })
    };
    match &placed.ty {
        GoType::Bool => word(Decode::Bool, "bool"),
        GoType::Int { size, signed } => word(
            Decode::Int {
                size: *size,
                signed: *signed,
            },
            "integer",
        ),
        GoType::Uintptr => word(Decode::Int { size: 8, signed: false }, "uintptr"),
        GoType::Pointer => word(Decode::Pointer, "pointer"),
        GoType::Float { size } => word(Decode::Float { size: *size }, &format!("float{}", size * 8)),
        GoType::Interface => word(Decode::Interface, "interface"),
        GoType::String => bytes(Decode::Str),
        GoType::Slice { bytes: true } => bytes(Decode::Bytes),
        GoType::Slice { bytes: false } => Err("slices other than []byte cannot be captured; capture a []byte, string, or scalar parameter".into()),
        GoType::Complex { .. } => Err("complex numbers live in SSE registers, which uprobes cannot read".into()),
        GoType::Struct { .. } | GoType::Array { .. } => Err(format!(
            "{} values cannot be captured; capture a scalar, string, []byte, pointer or interface parameter",
            placed.ty
        )),
    }
}

/// Binary resolution as the engine asks for it: opens the file once per batch of probes.
#[derive(Debug, Default)]
pub struct BinaryResolver;

impl crate::engine::Resolver for BinaryResolver {
    fn plan(
        &mut self,
        path: &std::path::Path,
        probes: &[crate::engine::PlanRequest<'_>],
    ) -> Vec<Result<ProbePlan, std::sync::Arc<crate::engine::ProbeError>>> {
        use crate::engine::ProbeError;
        use std::sync::Arc;
        match Binary::open(path) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(name: &str, kind: u8) -> CapturePlan {
        CapturePlan {
            name: name.to_string(),
            decode: if kind == abi::CAP_WORD {
                Decode::Int {
                    size: 8,
                    signed: true,
                }
            } else {
                Decode::Str
            },
            bpf: GpCapture {
                kind,
                size: 8,
                max_len: if kind == abi::CAP_BYTES { 64 } else { 0 },
                ..Default::default()
            },
        }
    }

    fn plan(entry: Vec<CapturePlan>, ret: Vec<CapturePlan>, latency: bool) -> ProbePlan {
        ProbePlan {
            symbol: "main.f".into(),
            entry_offset: 0x1000,
            ret_offsets: if latency { vec![0x1010] } else { vec![] },
            entry_captures: entry,
            return_captures: ret,
            signature_source: "signature",
            warnings: vec![],
        }
    }

    #[test]
    fn configurations_are_flagged_by_the_shape_of_their_records() {
        // Words only (and no capture at all): one record size per configuration.
        let (e, r) = plan(vec![capture("n", abi::CAP_WORD)], vec![], true).configs(7, 100);
        let r = r.expect("a return configuration");
        assert_eq!((e.kind, e.func_id, e.n_captures), (abi::PROBE_ENTRY, 7, 1));
        assert_eq!(e.flags, abi::CFG_WORDS);
        assert_eq!(
            (r.kind, r.n_captures, r.rate_limit),
            (abi::PROBE_RETURN, 0, 0)
        );
        assert_eq!(r.flags, abi::CFG_WORDS);
        // One string alone.
        let (e, _) = plan(vec![capture("s", abi::CAP_BYTES)], vec![], false).configs(1, 0);
        assert_eq!((e.n_captures, e.flags), (1, abi::CFG_ONE_BYTES));
        // A string with other values: records are assembled by size.
        let (e, r) = plan(
            vec![capture("n", abi::CAP_WORD), capture("s", abi::CAP_BYTES)],
            vec![],
            false,
        )
        .configs(3, 0);
        assert!(r.is_none());
        assert_eq!((e.kind, e.n_captures, e.flags), (abi::PROBE_CALL, 2, 0));
        assert_eq!(e.caps[1].kind, abi::CAP_BYTES);
    }
}
