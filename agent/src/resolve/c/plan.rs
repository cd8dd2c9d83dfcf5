//! Capture planning for C functions: parameter and result types from the probe's C
//! prototype or from C DWARF (DWARF wins where they disagree), their places under the
//! System V AMD64 ABI, and the BPF read of each captured value.

use gprobe_crds::csig::{is_go_signature, parse_c_signature, CSignature, CaptureExpr};
use gprobe_crds::ctype::{CClass, CType};
use gprobe_crds::signature::ValueRef;
use gprobe_crds::Probe;

use super::abi::{layout, Place};
use super::capture::{self, mem_loc, reg_loc, Width};
use crate::abi::{reg, GpLoc};
use crate::plan::{
    Captures, Pairing, PlanWarning, ProbePlan, Returns, Role, SignatureDifference, SignatureSource,
    SiteClass, SiteCosts,
};
use crate::resolve::error::{CProblem, PlanError};
use crate::resolve::{Binary, FuncInfo};

/// The prototype used, the names of the probe's signature that DWARF overrode (bound by
/// position), and where it came from.
struct Typed {
    sig: CSignature,
    aliases: Vec<(String, usize)>,
    source: SignatureSource,
}

impl Typed {
    fn lookup(&self, name: &str) -> Option<ValueRef> {
        self.sig.lookup(name).or_else(|| {
            self.aliases
                .iter()
                .find(|(n, _)| n == name)
                .map(|&(_, i)| ValueRef::Param(i))
        })
    }

    fn known(&self) -> Vec<String> {
        let mut v = self.sig.capture_names();
        v.extend(self.aliases.iter().map(|(n, _)| n.clone()));
        v
    }
}

/// A C function: entry at its first byte; its return, when needed, a uretprobe at the
/// same place (see `c/mod.rs`).
pub(crate) fn plan(
    bin: &Binary,
    probe: &Probe,
    func: FuncInfo,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let site = bin.c_entry_site(&func)?;
    let (entry, entry_class) = (site.probe, site.class);
    let mut warnings = Vec::new();
    let caps = plan_captures(bin, &func, probe, max_string_bytes, &mut warnings)?;
    let needs_return = probe.latency || !caps.ret.is_empty();
    // Never a uretprobe in Go code, whatever the binary was taken for.
    let returns = if needs_return {
        Returns::Uretprobe(bin.check_uretprobe(&func)?)
    } else {
        Returns::None
    };
    Ok(ProbePlan {
        symbol: probe.symbol.clone(),
        entry_offset: entry,
        entry_jcc: None,
        costs: SiteCosts {
            entry: entry_class,
            // A uretprobe's return: not measured.
            ret: needs_return.then_some(SiteClass::Unmeasured),
        },
        returns,
        entry_captures: caps.entry,
        return_captures: caps.ret,
        signature_source: caps.source.unwrap_or(SignatureSource::None),
        warnings,
        extra_entry_sites: Vec::new(),
        ref_ctr_offset: 0,
        pairing: Pairing::Thread,
        role: Role::Traced,
        type_names: None,
        filter: None,
        sample_bound: 0,
    })
}

/// Plans the captures of `probe` on the C function `func`.
pub(crate) fn plan_captures(
    bin: &Binary,
    func: &FuncInfo,
    probe: &Probe,
    max_string_bytes: u32,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Captures, PlanError> {
    if probe.capture.is_empty() {
        return Ok(Captures::default());
    }
    let symbol = probe.symbol.as_str();
    let typed = types(bin, func, probe, warnings)?;
    let tys: Vec<CType> = typed.sig.params.iter().map(|p| p.ty.clone()).collect();
    let lay = layout(&tys, typed.sig.ret.as_ref());
    let mut caps = Captures {
        source: Some(typed.source),
        ..Default::default()
    };
    let unknown = |name: &str| match typed.sig.positional(name) {
        Some((position, real)) => {
            PlanError::PositionalName(Box::new(crate::resolve::error::PositionalName {
                symbol: symbol.to_string(),
                capture: name.to_string(),
                name: name.to_string(),
                position,
                real: real.to_string(),
                described_by: match typed.source {
                    SignatureSource::Dwarf => "DWARF",
                    _ => "the signature",
                },
                known: typed.known(),
            }))
        }
        None => PlanError::UnknownCapture {
            symbol: symbol.to_string(),
            name: name.to_string(),
            known: typed.known(),
        },
    };
    for c in &probe.capture {
        match CaptureExpr::parse(c) {
            CaptureExpr::Name(n) => match typed.lookup(n) {
                Some(ValueRef::Param(i)) => {
                    let loc = place_loc(symbol, c, &tys[i], &lay.params[i])?;
                    let plan =
                        capture::value(symbol, c, Some(&tys[i]), loc, None, max_string_bytes)?;
                    caps.entry.push(plan);
                }
                Some(ValueRef::Result(_)) => {
                    let ret = typed.sig.ret.as_ref().ok_or_else(|| unknown(c))?;
                    let place = lay.result.as_ref().ok_or_else(|| unknown(c))?;
                    let loc = place_loc(symbol, c, ret, place)?;
                    let plan = capture::value(symbol, c, Some(ret), loc, None, max_string_bytes)?;
                    caps.ret.push(plan);
                }
                None => return Err(unknown(c)),
            },
            CaptureExpr::Slice { ptr, len } => {
                let param = |n: &str| match typed.lookup(n) {
                    Some(ValueRef::Param(i)) => Ok(i),
                    None if typed.sig.positional(n).is_some() => Err(unknown(n)),
                    _ => Err(PlanError::BadSlice {
                        symbol: symbol.to_string(),
                        capture: c.clone(),
                        why: format!(
                            "{n} is not a parameter; known: {}",
                            typed.sig.capture_names().join(", ")
                        ),
                    }),
                };
                let (p, l) = (param(ptr)?, param(len)?);
                let len = slice_types(symbol, c, &tys[p], &tys[l])?;
                let ploc = place_loc(symbol, c, &tys[p], &lay.params[p])?;
                let lloc = place_loc(symbol, c, &tys[l], &lay.params[l])?;
                caps.entry
                    .push(capture::bytes(c, ploc, lloc, len, max_string_bytes));
            }
        }
    }
    Ok(caps)
}

/// Checks `NAME[:LEN]`'s types: a pointer and an integer; returns the length's size and
/// sign (a negative signed length reads nothing).
pub(crate) fn slice_types(
    symbol: &str,
    capture: &str,
    ptr: &CType,
    len: &CType,
) -> Result<Width, PlanError> {
    let bad = |why: String| PlanError::BadSlice {
        symbol: symbol.to_string(),
        capture: capture.to_string(),
        why,
    };
    if !ptr.is_pointer() {
        return Err(bad(format!(
            "its pointer has type {ptr}: NAME[:LEN] reads LEN bytes at the pointer NAME"
        )));
    }
    match len.class() {
        CClass::Int { size, signed } if size <= 8 => Ok(Width { size, signed }),
        CClass::Bool => Ok(Width {
            size: 1,
            signed: false,
        }),
        _ => Err(bad(format!(
            "its length has type {len}: NAME[:LEN] takes its length from an integer"
        ))),
    }
}

/// The BPF location of a value placed at `place`.
fn place_loc(symbol: &str, name: &str, ty: &CType, place: &Place) -> Result<GpLoc, PlanError> {
    let problem = |problem| PlanError::CUncapturable {
        symbol: symbol.to_string(),
        name: name.to_string(),
        type_name: ty.to_string(),
        problem,
    };
    match place {
        Place::Reg(r) => Ok(reg_loc(*r)),
        Place::Stack(off) => Ok(mem_loc(reg::RSP, *off)),
        Place::Sse(x) => Err(PlanError::FloatInRegister {
            symbol: symbol.to_string(),
            name: name.to_string(),
            what: "floating-point value",
            reg: *x,
        }),
        Place::Aggregate => Err(problem(match ty.class() {
            CClass::Int { .. } | CClass::Float { .. } => CProblem::TooWide,
            _ => CProblem::Aggregate,
        })),
        Place::Unknown(why) => Err(problem(match ty.class() {
            CClass::Unknown { .. } => CProblem::UnknownType,
            _ => CProblem::UnknownPlace(why.clone()),
        })),
    }
}

/// The prototype: the probe's signature, else DWARF; where both exist and differ in the
/// number or the ABI shape of the values, DWARF (the compiler's own record) and a warning.
fn types(
    bin: &Binary,
    func: &FuncInfo,
    probe: &Probe,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Typed, PlanError> {
    let symbol = &probe.symbol;
    let dwarf = |bin: &Binary| bin.c_signature(func);
    let Some(text) = &probe.signature else {
        return match dwarf(bin)? {
            Some(sig) => Ok(Typed {
                sig,
                aliases: Vec::new(),
                source: SignatureSource::Dwarf,
            }),
            None => Err(PlanError::NoCSignature {
                symbol: symbol.clone(),
                path: bin.path().to_path_buf(),
                looked: (!bin.has_dwarf())
                    .then(|| bin.debug_file_candidates().pop())
                    .flatten(),
            }),
        };
    };
    if is_go_signature(text) {
        return Err(PlanError::GoSignatureForC {
            symbol: symbol.clone(),
            signature: text.clone(),
            path: bin.path().to_path_buf(),
        });
    }
    let sig = parse_c_signature(text).map_err(|source| PlanError::CSignatureSyntax {
        symbol: symbol.clone(),
        source,
    })?;
    if sig.is_arg_list() {
        return Err(PlanError::CSignatureForm {
            symbol: symbol.clone(),
            signature: text.clone(),
            problem: "an argument list without the result type and the function's name; write the \
                whole C prototype, e.g. \"int add(int a, int b)\"",
        });
    }
    // DWARF that cannot be read leaves the signature as the only description.
    let d = match dwarf(bin) {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!("{symbol}: DWARF not compared with the signature: {e}");
            None
        }
    };
    if let Some(d) = d {
        let differences = compare(&sig, &d);
        if !differences.is_empty() {
            warnings.push(PlanWarning::SignatureDisagreesWithDwarf {
                symbol: symbol.clone(),
                differences,
            });
            let aliases = aliases(&sig, &d);
            return Ok(Typed {
                sig: d,
                aliases,
                source: SignatureSource::Dwarf,
            });
        }
    }
    Ok(Typed {
        sig,
        aliases: Vec::new(),
        source: SignatureSource::Signature,
    })
}

/// What a value is to the ABI and to a probe: its class, with pointers and strings alike
/// (a `void *` that DWARF calls `char *` is read where the user asked) and integers by
/// size only (`int` and `unsigned` are the same register bits).
fn shape(t: &CType) -> CClass {
    match t.class() {
        CClass::CString => CClass::Pointer,
        CClass::Bool => CClass::Int {
            size: 1,
            signed: false,
        },
        CClass::Int { size, .. } => CClass::Int {
            size,
            signed: false,
        },
        c => c,
    }
}

/// How the signature differs from DWARF in count or shape.
fn compare(sig: &CSignature, d: &CSignature) -> Vec<SignatureDifference> {
    let mut out = Vec::new();
    if sig.params.len() != d.params.len() {
        out.push(SignatureDifference::ParamCount {
            signature: sig.params.len(),
            dwarf: d.params.len(),
        });
    }
    for (i, (s, dp)) in sig.params.iter().zip(&d.params).enumerate() {
        if shape(&s.ty) != shape(&dp.ty) {
            out.push(SignatureDifference::Param {
                index: i,
                signature: s.ty.to_string(),
                dwarf: dp.ty.to_string(),
            });
        }
    }
    let (sr, dr) = (sig.has_result(), d.has_result());
    if sr != dr {
        out.push(SignatureDifference::ResultCount {
            signature: sr as usize,
            dwarf: dr as usize,
        });
    } else if let (true, Some(s), Some(dt)) = (sr, &sig.ret, &d.ret) {
        if shape(s) != shape(dt) {
            out.push(SignatureDifference::Result {
                index: 0,
                signature: s.to_string(),
                dwarf: dt.to_string(),
            });
        }
    }
    out
}

/// Binds the signature's parameter names that DWARF does not use to DWARF's parameter at
/// the same position (as for Go: a signature with wrong types still lists the values in
/// order).
fn aliases(sig: &CSignature, d: &CSignature) -> Vec<(String, usize)> {
    sig.params
        .iter()
        .enumerate()
        .filter(|(i, p)| *i < d.params.len() && d.lookup(&p.name).is_none())
        .map(|(i, p)| (p.name.clone(), i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(s: &str) -> CSignature {
        parse_c_signature(s).unwrap()
    }

    #[test]
    fn compare_by_shape() {
        let d = sig("int add(int a, int b)");
        assert_eq!(compare(&sig("int add(unsigned x, int y)"), &d), vec![]);
        assert_eq!(
            compare(
                &sig("int add(void *x, char *y)"),
                &sig("int add(char *a, const void *b)")
            ),
            vec![]
        );
        assert_eq!(
            compare(&sig("long add(int a)"), &d),
            vec![
                SignatureDifference::ParamCount {
                    signature: 1,
                    dwarf: 2
                },
                SignatureDifference::Result {
                    index: 0,
                    signature: "long".into(),
                    dwarf: "int".into()
                }
            ]
        );
        assert_eq!(
            compare(&sig("void add(long a, int b)"), &d),
            vec![
                SignatureDifference::Param {
                    index: 0,
                    signature: "long".into(),
                    dwarf: "int".into()
                },
                SignatureDifference::ResultCount {
                    signature: 0,
                    dwarf: 1
                }
            ]
        );
        let s = sig("void add(long x, int b)");
        let t = Typed {
            aliases: aliases(&s, &d),
            sig: d,
            source: SignatureSource::Dwarf,
        };
        assert_eq!(t.lookup("x"), Some(ValueRef::Param(0)));
        assert_eq!(t.lookup("b"), Some(ValueRef::Param(1)));
        assert_eq!(t.lookup("r0"), Some(ValueRef::Result(0)));
    }
}
