//! Planning a USDT probe: every site of provider:name, the semaphore, and the captures of
//! each site (the same argument may be in different registers at different sites), typed
//! by the probe's `signature: "(type name, ...)"` or, without one, integers of the
//! note's sizes named arg0, arg1, ...

use gprobe_crds::csig::{is_go_signature, parse_c_signature, CSignature, CaptureExpr};
use gprobe_crds::ctype::CClass;
use gprobe_crds::Probe;

use super::args::{parse_args, ArgLoc, UsdtArg};
use super::{UsdtProbe, UsdtSite};
use crate::abi::GpLoc;
use crate::plan::{
    CapturePlan, EntrySite, Pairing, PlanWarning, ProbePlan, Returns, Role, SignatureSource,
};
use crate::resolve::c::capture::{self, const_loc, mem_loc, reg_loc, Width};
use crate::resolve::c::edit_distance;
use crate::resolve::c::plan::slice_types;
use crate::resolve::error::{PlanError, UnsupportedArg};
use crate::resolve::sites::{self, SiteClass, SiteCosts};
use crate::resolve::Binary;

/// Plans `probe` (whose `usdt` is provider:name) against `bin`.
pub(crate) fn plan(
    bin: &Binary,
    probe: &Probe,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let point = probe.point();
    let wanted = probe.usdt.as_deref().unwrap_or_default().trim();
    let path = bin.path().to_path_buf();
    let probes = bin.usdt_probes()?;
    let Some(found) = probes.iter().find(|p| p.point() == wanted) else {
        return Err(PlanError::UsdtNotFound {
            point,
            path,
            probes: probes.len(),
            similar: similar(probes, wanted),
        });
    };
    if probe.latency {
        return Err(PlanError::UsdtNoReturn { point });
    }
    let sig = match &probe.signature {
        None => None,
        Some(text) => Some(signature(&point, text)?),
    };
    // Sites at the same pc (a note repeated) are one uprobe.
    let mut sites: Vec<&UsdtSite> = Vec::new();
    for s in &found.sites {
        if let Some(p) = &s.problem {
            return Err(PlanError::UsdtBadNote {
                point,
                path,
                site: s.pc,
                problem: Box::new(p.clone()),
            });
        }
        if !sites.iter().any(|t| t.offset == s.offset) {
            sites.push(s);
        }
    }
    let mut semaphores: Vec<u64> = sites.iter().map(|s| s.semaphore_offset).collect();
    semaphores.sort_unstable();
    semaphores.dedup();
    if semaphores.len() > 1 {
        return Err(PlanError::UsdtSemaphores {
            point,
            path,
            offsets: semaphores,
        });
    }
    let mut warnings = Vec::new();
    let mut planned = Vec::with_capacity(sites.len());
    for s in &sites {
        let caps = site_captures(bin, probe, sig.as_ref(), s, max_string_bytes, &mut warnings)?;
        planned.push(EntrySite {
            offset: s.offset,
            captures: caps,
        });
    }
    let first = planned.remove(0);
    warnings.dedup();
    Ok(ProbePlan {
        symbol: point,
        entry_offset: first.offset,
        entry_jcc: None,
        // The site is sys/sdt.h's one-byte `nop` (usdt/check.rs).
        costs: SiteCosts {
            entry: match sites::kernel() {
                None => SiteClass::Unmeasured,
                Some(k) if k.nop => SiteClass::Emulated,
                Some(_) => SiteClass::SingleStepped,
            },
            ret: None,
        },
        returns: Returns::None,
        entry_captures: first.captures,
        return_captures: Vec::new(),
        signature_source: if probe.capture.is_empty() {
            SignatureSource::None
        } else if sig.is_some() {
            SignatureSource::Signature
        } else {
            SignatureSource::UsdtNote
        },
        warnings,
        extra_entry_sites: planned,
        ref_ctr_offset: semaphores.first().copied().unwrap_or(0),
        pairing: Pairing::Thread,
        role: Role::Traced,
        type_names: None,
        filter: None,
        sample_bound: 0,
    })
}

/// The probe's signature, which must be an argument list `(type name, ...)`.
fn signature(point: &str, text: &str) -> Result<CSignature, PlanError> {
    let form = |problem| PlanError::CSignatureForm {
        symbol: point.to_string(),
        signature: text.to_string(),
        problem,
    };
    if is_go_signature(text) {
        return Err(form(
            "Go syntax; a USDT probe's signature is its C argument list, e.g. \"(const char *query)\"",
        ));
    }
    let sig = parse_c_signature(text).map_err(|source| PlanError::CSignatureSyntax {
        symbol: point.to_string(),
        source,
    })?;
    if !sig.is_arg_list() {
        return Err(form(
            "a function prototype; a USDT probe's signature lists its arguments only, e.g. \"(const char *query)\"",
        ));
    }
    Ok(sig)
}

/// The names of a site's arguments: the signature's, else arg0, arg1, ... A positional
/// name (`arg1`, `p1`) stands only for an argument the signature does not name.
fn arg_index(sig: Option<&CSignature>, count: usize, name: &str) -> Option<usize> {
    if let Some(i) = sig.and_then(|s| s.params.iter().position(|p| p.name == name)) {
        return Some(i);
    }
    let i = positional_arg(sig, name)?;
    let named = sig
        .and_then(|s| s.params.get(i))
        .is_some_and(|p| p.name != format!("p{i}"));
    (i < count && !named).then_some(i)
}

/// The argument a positional name (`arg<i>`, or with a signature `p<i>`) stands for.
fn positional_arg(sig: Option<&CSignature>, name: &str) -> Option<usize> {
    name.strip_prefix("arg")
        .or_else(|| sig.and(name.strip_prefix('p')))?
        .parse()
        .ok()
}

fn known(sig: Option<&CSignature>, count: usize) -> Vec<String> {
    match sig {
        Some(s) => s.params.iter().map(|p| p.name.clone()).collect(),
        None => (0..count).map(|i| format!("arg{i}")).collect(),
    }
}

fn site_captures(
    bin: &Binary,
    probe: &Probe,
    sig: Option<&CSignature>,
    site: &UsdtSite,
    max_string_bytes: u32,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Vec<CapturePlan>, PlanError> {
    let point = probe.point();
    let specs: Vec<&str> = super::args::split_args(&site.args);
    let parsed = parse_args(&site.args);
    if let Some(s) = sig {
        if s.params.len() != parsed.len() || s.variadic {
            return Err(PlanError::UsdtArgCount {
                point,
                path: bin.path().to_path_buf(),
                signature: probe.signature.clone().unwrap_or_default(),
                given: s.params.len(),
                note: parsed.len(),
                args: site.args.clone(),
            });
        }
    }
    // The location of argument `i`, refused with the reason when its spec is unsupported.
    let arg = |name: &str, i: usize| -> Result<(UsdtArg, GpLoc), PlanError> {
        match &parsed[i] {
            Ok(a) => Ok((*a, loc(a))),
            Err(e) => Err(PlanError::UsdtUnsupportedArg(Box::new(UnsupportedArg {
                point: point.clone(),
                path: bin.path().to_path_buf(),
                name: name.to_string(),
                index: i,
                site: site.pc,
                spec: specs[i].to_string(),
                reason: e.reason.clone(),
            }))),
        }
    };
    let index = |name: &str| {
        arg_index(sig, parsed.len(), name).ok_or_else(|| {
            // A positional name of an argument the signature names: say which.
            let named = sig.and_then(|s| {
                let i = positional_arg(Some(s), name)?;
                Some((i, s.params.get(i)?.name.clone()))
            });
            match named {
                Some((i, real)) => {
                    PlanError::PositionalName(Box::new(crate::resolve::error::PositionalName {
                        symbol: point.clone(),
                        capture: name.to_string(),
                        name: name.to_string(),
                        position: gprobe_crds::signature::ValueRef::Param(i),
                        real,
                        described_by: "the signature",
                        known: known(sig, parsed.len()),
                    }))
                }
                None => PlanError::UnknownCapture {
                    symbol: point.clone(),
                    name: name.to_string(),
                    known: known(sig, parsed.len()),
                },
            }
        })
    };
    let const_pointer = |name: &str, i: usize, a: &UsdtArg| {
        // A constant address is the link-time one: wrong in a relocated (PIE) file.
        matches!(a.loc, ArgLoc::Const(_)).then(|| {
            PlanError::UsdtUnsupportedArg(Box::new(UnsupportedArg {
                point: point.clone(),
                path: bin.path().to_path_buf(),
                name: name.to_string(),
                index: i,
                site: site.pc,
                spec: specs[i].to_string(),
                reason: "a constant address cannot be read through (it is not relocated)".into(),
            }))
        })
    };
    let mut caps = Vec::new();
    for c in &probe.capture {
        match CaptureExpr::parse(c) {
            CaptureExpr::Name(n) => {
                let i = index(n)?;
                let (a, l) = arg(c, i)?;
                let ty = sig.map(|s| &s.params[i].ty);
                let class = ty.map(|t| t.class());
                if let (Some(t), Some(cl)) = (ty, &class) {
                    size_warning(&point, n, t.to_string(), cl, &a, warnings);
                }
                if class == Some(CClass::CString) {
                    if let Some(e) = const_pointer(c, i, &a) {
                        return Err(e);
                    }
                }
                let width = Some(Width {
                    size: a.size,
                    signed: a.signed,
                });
                caps.push(capture::value(&point, c, ty, l, width, max_string_bytes)?);
            }
            CaptureExpr::Slice { ptr, len } => {
                let (pi, li) = (index(ptr)?, index(len)?);
                let ((pa, pl), (la, ll)) = (arg(c, pi)?, arg(c, li)?);
                // The note's `-N@` says the value is signed, whatever the prototype says:
                // a length either calls signed is refused when negative.
                let len = match sig {
                    Some(s) => {
                        let t = slice_types(&point, c, &s.params[pi].ty, &s.params[li].ty)?;
                        Width {
                            size: t.size.min(la.size),
                            signed: t.signed || la.signed,
                        }
                    }
                    None => Width {
                        size: la.size,
                        signed: la.signed,
                    },
                };
                if let Some(e) = const_pointer(c, pi, &pa) {
                    return Err(e);
                }
                caps.push(capture::bytes(c, pl, ll, len, max_string_bytes));
            }
        }
    }
    Ok(caps)
}

fn loc(a: &UsdtArg) -> GpLoc {
    match a.loc {
        ArgLoc::Reg(r) => reg_loc(r),
        ArgLoc::Mem { reg, off } => mem_loc(reg, off),
        ArgLoc::Const(v) => const_loc(v),
    }
}

/// Warns where the signature's type and the note disagree on the size of an argument
/// (the note's size is what is read, up to the type's).
fn size_warning(
    point: &str,
    name: &str,
    type_name: String,
    class: &CClass,
    a: &UsdtArg,
    warnings: &mut Vec<PlanWarning>,
) {
    let type_size = match class {
        CClass::Int { size, .. } => *size,
        CClass::Bool => 1,
        CClass::Pointer | CClass::CString => 8,
        CClass::Float { size } => *size,
        _ => return,
    };
    if type_size != a.size {
        warnings.push(PlanWarning::UsdtArgSize {
            point: point.to_string(),
            name: name.to_string(),
            type_name,
            type_size,
            note_size: a.size,
        });
    }
}

/// Up to 5 probes like `wanted`: the same name under another provider, a name containing
/// it (or contained in it), a name a few edits away, then others of the same provider.
fn similar(probes: &[UsdtProbe], wanted: &str) -> Vec<String> {
    let (prov, name) = wanted.split_once(':').unwrap_or(("", wanted));
    // `function_entry` for `function__entry`: sdt.h turns `__` into `-` in its names.
    let norm = |s: &str| s.replace("__", "-").replace('_', "-").to_ascii_lowercase();
    let (nname, nprov) = (norm(name), norm(prov));
    let mut scored: Vec<(usize, String)> = probes
        .iter()
        .filter_map(|p| {
            let pn = norm(&p.name);
            let score = if pn == nname {
                0
            } else if !nname.is_empty() && (pn.contains(&nname) || nname.contains(&pn)) {
                1
            } else {
                let d = edit_distance(&pn, &nname);
                if d <= (nname.len() / 4).max(2) {
                    1 + d
                } else if norm(&p.provider) == nprov {
                    100
                } else {
                    return None;
                }
            };
            Some((score, p.point()))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}
