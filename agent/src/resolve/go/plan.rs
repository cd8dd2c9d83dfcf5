//! Capture planning for Go functions: parameter and result types from the probe's
//! signature or DWARF (DWARF wins where they disagree), their places under the register
//! ABI, and the BPF read of each captured value.

use gprobe_crds::signature::{parse_signature, Signature, ValueRef};
use gprobe_crds::Probe;

use super::abi::{layout, signature_types, Layout, Loc, Placed};
use super::gotype::GoType;
use crate::attach::abi::{self, GpCapture, GpLoc};
use crate::resolve::error::{PlanError, Uncapturable};
use crate::resolve::plan::{
    CapturePlan, Captures, Decode, PlanWarning, SignatureDifference, SignatureSource,
};
use crate::resolve::{Binary, DwarfSignature, FuncInfo};

/// Names and types of a function's parameters and results, and where they came from.
struct Typed {
    params: Vec<String>,
    results: Vec<String>,
    layout: Layout,
    /// Names of the probe's signature that DWARF does not use, each bound to the position
    /// it has in the signature (when DWARF overrode the signature).
    aliases: Vec<(String, ValueRef)>,
    source: SignatureSource,
}

impl Typed {
    fn lookup(&self, name: &str) -> Option<ValueRef> {
        if let Some(i) = self.params.iter().position(|n| n == name) {
            return Some(ValueRef::Param(i));
        }
        if let Some(i) = self.results.iter().position(|n| n == name) {
            return Some(ValueRef::Result(i));
        }
        if let Some((_, r)) = self.aliases.iter().find(|(n, _)| n == name) {
            return Some(*r);
        }
        let idx = |p: char| name.strip_prefix(p)?.parse::<usize>().ok();
        match (idx('r'), idx('p')) {
            (Some(i), _) if i < self.results.len() => Some(ValueRef::Result(i)),
            (_, Some(i)) if i < self.params.len() => Some(ValueRef::Param(i)),
            _ => None,
        }
    }

    fn known(&self) -> Vec<String> {
        let mut v: Vec<String> = self.params.iter().chain(&self.results).cloned().collect();
        v.extend(self.aliases.iter().map(|(n, _)| n.clone()));
        v
    }
}

/// Plans the captures of `probe` on the Go function `func`; adds what the user should know
/// to `warnings`.
pub(crate) fn plan_captures(
    bin: &Binary,
    func: &FuncInfo,
    probe: &Probe,
    max_string_bytes: u32,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Captures, PlanError> {
    let symbol = &probe.symbol;
    match bin.inlined_call_sites(&func.name) {
        Ok(0) => {}
        Ok(count) => warnings.push(PlanWarning::InlinedCallSites {
            symbol: symbol.clone(),
            count,
        }),
        // The warning is advice; a binary whose inline trees cannot be read still traces.
        Err(e) => tracing::debug!("{symbol}: inlined call sites not counted: {e}"),
    }
    if probe.capture.is_empty() {
        return Ok(Captures::default());
    }
    let typed = types(bin, func, probe, warnings)?;
    let mut caps = Captures {
        source: Some(typed.source),
        ..Default::default()
    };
    for name in &probe.capture {
        let (placed, is_result) = match typed.lookup(name) {
            Some(ValueRef::Param(i)) => (&typed.layout.params[i], false),
            Some(ValueRef::Result(i)) => (&typed.layout.results[i], true),
            None => {
                return Err(PlanError::UnknownCapture {
                    symbol: symbol.clone(),
                    name: name.clone(),
                    known: typed.known(),
                })
            }
        };
        let plan = capture_plan(symbol, name, placed, max_string_bytes)?;
        if is_result {
            caps.ret.push(plan);
        } else {
            caps.entry.push(plan);
        }
    }
    Ok(caps)
}

/// The parameter and result types: the probe's signature, else DWARF; where both exist
/// and lay out differently, DWARF (the compiler's own record) and a warning.
fn types(
    bin: &Binary,
    func: &FuncInfo,
    probe: &Probe,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Typed, PlanError> {
    let symbol = &probe.symbol;
    let Some(text) = &probe.signature else {
        return match bin.dwarf_signature(func)? {
            Some(d) => Ok(from_dwarf(&d, Vec::new())),
            None => Err(PlanError::NoSignature {
                symbol: symbol.clone(),
                path: bin.path().to_path_buf(),
            }),
        };
    };
    let sig = parse_signature(text).map_err(|source| PlanError::SignatureSyntax {
        symbol: symbol.clone(),
        source,
    })?;
    let (tp, tr) = signature_types(&sig).map_err(|(param, source)| PlanError::SignatureType {
        symbol: symbol.clone(),
        param,
        source,
    })?;
    let lay = layout(&tp, &tr);
    // DWARF that cannot be used (absent, or incomplete as in Go 1.19's unnamed
    // parameters) leaves the signature as the only description.
    let dwarf = match bin.dwarf_signature(func) {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!("{symbol}: DWARF not compared with the signature: {e}");
            None
        }
    };
    if let Some(d) = dwarf {
        let differences = compare(&sig, &lay, &d);
        if !differences.is_empty() {
            warnings.push(PlanWarning::SignatureDisagreesWithDwarf {
                symbol: symbol.clone(),
                differences,
            });
            return Ok(from_dwarf(&d, aliases(&sig, &d)));
        }
    }
    Ok(Typed {
        params: sig.params.iter().map(|p| p.name.clone()).collect(),
        results: sig.results.iter().map(|p| p.name.clone()).collect(),
        layout: lay,
        aliases: Vec::new(),
        source: SignatureSource::Signature,
    })
}

fn from_dwarf(d: &DwarfSignature, aliases: Vec<(String, ValueRef)>) -> Typed {
    let tys = |ps: &[super::DwarfParam]| ps.iter().map(|p| p.ty.clone()).collect::<Vec<_>>();
    Typed {
        params: d.params.iter().map(|p| p.name.clone()).collect(),
        results: d.results.iter().map(|p| p.name.clone()).collect(),
        layout: layout(&tys(&d.params), &tys(&d.results)),
        aliases,
        source: SignatureSource::Dwarf,
    }
}

/// How the signature differs from DWARF in count or ABI shape (the registers, stack
/// slots and sizes of each value); types of the same shape (e.g. `*Client` and
/// `*net/http.Client`, or `int` and `int64`) agree.
fn compare(sig: &Signature, lay: &Layout, d: &DwarfSignature) -> Vec<SignatureDifference> {
    let tys = |ps: &[super::DwarfParam]| ps.iter().map(|p| p.ty.clone()).collect::<Vec<_>>();
    let dl = layout(&tys(&d.params), &tys(&d.results));
    let mut out = Vec::new();
    if sig.params.len() != d.params.len() {
        out.push(SignatureDifference::ParamCount {
            signature: sig.params.len(),
            dwarf: d.params.len(),
        });
    }
    if sig.results.len() != d.results.len() {
        out.push(SignatureDifference::ResultCount {
            signature: sig.results.len(),
            dwarf: d.results.len(),
        });
    }
    let pairs = lay
        .params
        .iter()
        .zip(&dl.params)
        .zip(&sig.params)
        .zip(&d.params);
    for (i, (((s, dw), sp), dp)) in pairs.enumerate() {
        if s.parts != dw.parts {
            out.push(SignatureDifference::Param {
                index: i,
                signature: sp.ty.to_string(),
                dwarf: dp.type_name.clone(),
            });
        }
    }
    let pairs = lay
        .results
        .iter()
        .zip(&dl.results)
        .zip(&sig.results)
        .zip(&d.results);
    for (i, (((s, dw), sp), dp)) in pairs.enumerate() {
        if s.parts != dw.parts {
            out.push(SignatureDifference::Result {
                index: i,
                signature: sp.ty.to_string(),
                dwarf: dp.type_name.clone(),
            });
        }
    }
    out
}

/// Binds the signature's names to DWARF's values when DWARF overrides the signature. A
/// name DWARF also uses means DWARF's value of that name (DWARF's names come from the same
/// source code, so they are right where the two disagree). Any other name binds by
/// position: the user named the value at that place of the signature, and a signature
/// with wrong types usually still lists the values in order. A name whose position DWARF
/// does not have stays unbound and fails as an unknown capture.
fn aliases(sig: &Signature, d: &DwarfSignature) -> Vec<(String, ValueRef)> {
    let dwarf_names: Vec<&str> = d
        .params
        .iter()
        .chain(&d.results)
        .map(|p| p.name.as_str())
        .collect();
    let mut out = Vec::new();
    for (i, p) in sig.params.iter().enumerate() {
        if !dwarf_names.contains(&p.name.as_str()) && i < d.params.len() {
            out.push((p.name.clone(), ValueRef::Param(i)));
        }
    }
    for (i, p) in sig.results.iter().enumerate() {
        if !dwarf_names.contains(&p.name.as_str()) && i < d.results.len() {
            out.push((p.name.clone(), ValueRef::Result(i)));
        }
    }
    out
}

/// Go's integer argument registers (ABIInternal order RAX RBX RCX RDI RSI R8 R9 R10 R11)
/// as x86 register numbers.
const GO_INT_REGS: [u8; 9] = {
    use abi::reg::*;
    [RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11]
};

/// Where BPF reads one part; `Err(register)` for an SSE register.
fn loc(l: Loc) -> Result<GpLoc, u8> {
    match l {
        Loc::IntReg(r) => Ok(GpLoc {
            kind: abi::LOC_REG,
            reg: GO_INT_REGS[r as usize],
            ..Default::default()
        }),
        // Stack arguments: memory at the stack pointer the probe sees plus `off`.
        Loc::Stack(off) => Ok(GpLoc {
            kind: abi::LOC_MEM,
            reg: abi::reg::RSP,
            off,
            ..Default::default()
        }),
        Loc::FloatReg(x) => Err(x),
    }
}

fn capture_plan(
    symbol: &str,
    name: &str,
    placed: &Placed,
    max_string_bytes: u32,
) -> Result<CapturePlan, PlanError> {
    let float_err = |what: &'static str| {
        move |reg| PlanError::FloatInRegister {
            symbol: symbol.to_string(),
            name: name.to_string(),
            what,
            reg,
        }
    };
    let word = |decode: Decode, what: &'static str| -> Result<CapturePlan, PlanError> {
        let p = placed.parts[0];
        Ok(CapturePlan {
            name: name.to_string(),
            decode,
            bpf: GpCapture {
                kind: abi::CAP_WORD,
                size: p.size.min(8) as u8,
                loc: [loc(p.loc).map_err(float_err(what))?, GpLoc::default()],
                ..Default::default()
            },
        })
    };
    let bytes = |decode: Decode| -> Result<CapturePlan, PlanError> {
        let (ptr, len) = (placed.parts[0], placed.parts[1]);
        Ok(CapturePlan {
            name: name.to_string(),
            decode,
            bpf: GpCapture {
                kind: abi::CAP_BYTES,
                max_len: max_string_bytes.min(abi::GP_MAX_STR as u32) as u16,
                loc: [
                    loc(ptr.loc).map_err(float_err("pointer"))?,
                    loc(len.loc).map_err(float_err("length"))?,
                ],
                ..Default::default()
            },
        })
    };
    let uncapturable = |kind| PlanError::Uncapturable {
        symbol: symbol.to_string(),
        name: name.to_string(),
        type_name: placed.ty.to_string(),
        kind,
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
        GoType::Uintptr => word(
            Decode::Int {
                size: 8,
                signed: false,
            },
            "uintptr",
        ),
        GoType::Pointer => word(Decode::Pointer, "pointer"),
        GoType::Float { size } => word(
            Decode::Float { size: *size },
            if *size == 4 { "float32" } else { "float64" },
        ),
        GoType::Interface => word(Decode::Interface, "interface"),
        GoType::String => bytes(Decode::Str),
        GoType::Slice { bytes: true } => bytes(Decode::Bytes),
        GoType::Slice { bytes: false } => Err(uncapturable(Uncapturable::Slice)),
        GoType::Complex { .. } => Err(uncapturable(Uncapturable::Complex)),
        GoType::Struct { .. } | GoType::Array { .. } => Err(uncapturable(Uncapturable::Aggregate)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::DwarfParam;

    fn dwarf(params: &[(&str, GoType)], results: &[(&str, GoType)]) -> DwarfSignature {
        let list = |ps: &[(&str, GoType)]| {
            ps.iter()
                .map(|(n, t)| DwarfParam {
                    name: n.to_string(),
                    type_name: t.to_string(),
                    ty: t.clone(),
                })
                .collect()
        };
        DwarfSignature {
            params: list(params),
            results: list(results),
        }
    }

    fn compared(sig: &str, d: &DwarfSignature) -> Vec<SignatureDifference> {
        let sig = parse_signature(sig).unwrap();
        let (tp, tr) = signature_types(&sig).unwrap();
        compare(&sig, &layout(&tp, &tr), d)
    }

    const INT: GoType = GoType::Int {
        size: 8,
        signed: true,
    };

    #[test]
    fn same_shapes_agree() {
        let d = dwarf(
            &[("c", GoType::Pointer), ("url", GoType::String)],
            &[("resp", GoType::Pointer), ("err", GoType::Interface)],
        );
        // Other names, other pointer and interface types, same layout.
        let s = "func(client *Client, u string) (*Response, error)";
        assert_eq!(compared(s, &d), vec![]);
        // int and int64 are the same word; bool and uint8 the same byte.
        let d = dwarf(&[("n", INT), ("b", GoType::Bool)], &[]);
        assert_eq!(compared("func(n int64, b uint8)", &d), vec![]);
    }

    #[test]
    fn counts_and_shapes_differ() {
        let d = dwarf(&[("c", GoType::Pointer), ("url", GoType::String)], &[]);
        assert_eq!(
            compared("func(url string)", &d),
            vec![
                SignatureDifference::ParamCount {
                    signature: 1,
                    dwarf: 2
                },
                SignatureDifference::Param {
                    index: 0,
                    signature: "string".into(),
                    dwarf: "pointer".into()
                },
            ]
        );
        // A smaller integer in the same register is a different shape (its size).
        let d = dwarf(&[("n", INT)], &[("ok", GoType::Bool)]);
        assert_eq!(
            compared("func(n int32) (ok bool, err error)", &d),
            vec![
                SignatureDifference::ResultCount {
                    signature: 2,
                    dwarf: 1
                },
                SignatureDifference::Param {
                    index: 0,
                    signature: "int32".into(),
                    dwarf: "int64".into()
                },
            ]
        );
    }

    #[test]
    fn signature_names_bind_to_dwarf_by_name_then_position() {
        let d = dwarf(
            &[("c", GoType::Pointer), ("url", GoType::String)],
            &[("err", GoType::Interface)],
        );
        let sig = parse_signature("func(url int, target string) (n int, failure error)").unwrap();
        let typed = from_dwarf(&d, aliases(&sig, &d));
        // DWARF's own names win; `url` is DWARF's url, not the signature's position 0.
        assert_eq!(typed.lookup("url"), Some(ValueRef::Param(1)));
        assert_eq!(typed.lookup("c"), Some(ValueRef::Param(0)));
        // Names DWARF lacks bind by their position in the signature.
        assert_eq!(typed.lookup("target"), Some(ValueRef::Param(1)));
        assert_eq!(typed.lookup("n"), Some(ValueRef::Result(0)));
        // failure is result 1, which DWARF does not have.
        assert_eq!(typed.lookup("failure"), None);
        assert_eq!(typed.lookup("r0"), Some(ValueRef::Result(0)));
        assert_eq!(typed.lookup("p1"), Some(ValueRef::Param(1)));
    }
}
