//! Capture planning for Go functions: parameter and result types from the probe's
//! signature or DWARF (DWARF wins where they disagree), their places under the register
//! ABI, and the BPF read of each captured value (`types/path.rs`: names, field paths and
//! lengths alike).

use gprobe_crds::gopath::parse_go_capture;
use gprobe_crds::signature::{parse_signature, Signature, TypeExpr, ValueRef};
use gprobe_crds::Probe;

use super::abi::{layout, Layout};
use super::gotype::GoType;
use super::types::{generic, path, TypeRef, TypeStore};
use crate::attach::abi;
use crate::resolve::error::{go_package, PlanError};
use crate::resolve::plan::{
    CapturePlan, Captures, Decode, PlanWarning, SignatureDifference, SignatureSource,
};
use crate::resolve::{Binary, DwarfSignature, FuncInfo};

/// Names and types of a function's parameters and results, and where they came from.
struct Typed {
    params: Vec<String>,
    results: Vec<String>,
    /// Where each parameter and result is (a generic instantiation's dictionary left out).
    layout: Layout,
    /// The type of each parameter and result, for field paths.
    param_types: Vec<TypeRef>,
    result_types: Vec<TypeRef>,
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
        None
    }

    /// Where `name` is a positional name (`p0`, `r1`) of a value that has a name of its
    /// own: that value's name. Unnamed values are named by position already.
    fn positional(&self, name: &str) -> Option<(ValueRef, &str)> {
        let r = gprobe_crds::signature::positional_index(name)?;
        let real = match r {
            ValueRef::Param(i) => self.params.get(i)?,
            ValueRef::Result(i) => self.results.get(i)?,
        };
        (real != name).then_some((r, real.as_str()))
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
    let mut store = TypeStore::new(bin, go_package(&func.name));
    if probe.capture.is_empty() {
        // Without captures the types are needed only to join the caller's trace: a
        // function whose types are unknown traces as before, without joining.
        let mut caps = Captures::default();
        if let Ok(typed) = types(bin, &mut store, func, probe, &mut Vec::new()) {
            caps.entry
                .extend(trace_context(bin, &mut store, symbol, &typed));
        }
        return Ok(caps);
    }
    let typed = types(bin, &mut store, func, probe, warnings)?;
    let mut caps = Captures {
        source: Some(typed.source),
        ..Default::default()
    };
    for entry in &probe.capture {
        let cap = parse_go_capture(entry).map_err(|source| PlanError::CaptureSyntax {
            symbol: symbol.clone(),
            source,
        })?;
        let (placed, ty, is_result) = match typed.lookup(&cap.root) {
            Some(ValueRef::Param(i)) => (&typed.layout.params[i], typed.param_types[i], false),
            Some(ValueRef::Result(i)) => (&typed.layout.results[i], typed.result_types[i], true),
            None => {
                return Err(match typed.positional(&cap.root) {
                    Some((position, real)) => {
                        PlanError::PositionalName(Box::new(crate::resolve::error::PositionalName {
                            symbol: symbol.clone(),
                            capture: entry.clone(),
                            name: cap.root.clone(),
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
                        symbol: symbol.clone(),
                        name: entry.clone(),
                        known: typed.known(),
                    },
                })
            }
        };
        let plan = path::plan_capture(
            &mut store,
            symbol,
            entry,
            &cap,
            placed,
            ty,
            max_string_bytes,
        )?;
        if is_result {
            caps.ret.push(plan);
        } else {
            caps.entry.push(plan);
        }
    }
    caps.entry
        .extend(trace_context(bin, &mut store, symbol, &typed));
    Ok(caps)
}

/// The name of the hidden capture that reads a handler's incoming `traceparent`: not a Go
/// expression, so no capture of the spec can have it.
pub const TRACEPARENT_CAPTURE: &str = "(traceparent)";

/// A net/http handler (a function with a `*net/http.Request` parameter) joins the trace of
/// a request that carries a W3C `traceparent`: a hidden capture reads that header from
/// `r.Header` at entry. None where the parameter, the field or the map layout of this Go
/// release is not known for sure: the span then starts its own trace.
fn trace_context(
    bin: &Binary,
    store: &mut TypeStore<'_>,
    symbol: &str,
    typed: &Typed,
) -> Option<CapturePlan> {
    // DWARF names the pointer type itself; a signature's `*http.Request` resolves its
    // element in the binary.
    let is_request = |store: &mut TypeStore<'_>, r: TypeRef| match store.get(r) {
        Ok(t) if t.name == "*net/http.Request" => true,
        Ok(t) => match t.kind {
            super::types::Kind::Pointer(e) => {
                store.get(e).is_ok_and(|e| e.name == "net/http.Request")
            }
            _ => false,
        },
        Err(_) => false,
    };
    let i = (0..typed.params.len()).find(|&i| is_request(store, typed.param_types[i]))?;
    let Some(layout) = bin.go_version().and_then(map_layout) else {
        tracing::debug!(
            "{symbol}: the map layout of {:?} is not known: incoming traceparent not read",
            bin.go_version()
        );
        return None;
    };
    let cap = gprobe_crds::gopath::GoCapture {
        root: typed.params[i].clone(),
        fields: vec!["Header".into()],
        len: false,
    };
    let placed = &typed.layout.params[i];
    match path::plan_capture(
        store,
        symbol,
        "r.Header",
        &cap,
        placed,
        typed.param_types[i],
        0,
    ) {
        Ok(mut plan) if plan.bpf.flags & abi::CAPF_PATH != 0 => {
            plan.name = TRACEPARENT_CAPTURE.into();
            plan.decode = Decode::Header;
            plan.bpf.kind = abi::CAP_HEADER;
            plan.bpf.size = layout;
            plan.bpf.max_len = TRACEPARENT_MAX;
            Some(plan)
        }
        Ok(_) => None,
        Err(e) => {
            tracing::debug!("{symbol}: r.Header not found: {e}");
            None
        }
    }
}

/// The name of the hidden capture of the span a propagating probe's entry opened in BPF.
pub const SPAN_CAPTURE: &str = "(span)";

/// The capture of the span a propagating probe's entry opens (`propagate: true`).
pub(crate) fn span_capture() -> CapturePlan {
    CapturePlan {
        name: SPAN_CAPTURE.into(),
        decode: Decode::Span,
        bpf: crate::attach::abi::GpCapture {
            kind: abi::CAP_SPAN,
            ..Default::default()
        },
    }
}

/// Bytes of a traceparent kept: version 00 is 55; later versions may append fields.
const TRACEPARENT_MAX: u16 = 64;

/// The map layout of the Go release `version` ("go1.24.3", "go1.25.0 X:noswissmap"), from
/// its minor version and experiments; None for a release gprobe does not know (after 1.27).
pub(crate) fn map_layout(version: &str) -> Option<u8> {
    let (release, experiments) = match version.split_once(" X:") {
        Some((r, x)) => (r, x),
        None => (version, ""),
    };
    let minor: u32 = release
        .strip_prefix("go1.")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let on = |name: &str| experiments.split(',').any(|e| e.trim() == name);
    match minor {
        0..=11 => None,
        12..=23 => Some(abi::MAP_HMAP),
        24..=25 if on("noswissmap") => Some(abi::MAP_HMAP),
        // Go 1.26 removed the old maps: the experiment means nothing gprobe knows.
        26..=27 if on("noswissmap") => None,
        24..=27 if on("mapsplitgroup") => Some(abi::MAP_SWISS_SPLIT),
        24..=27 => Some(abi::MAP_SWISS),
        _ => None,
    }
}

/// Lays out parameters and results; a generic instantiation takes its dictionary pointer
/// first (RAX), before the declared parameters, which the layout leaves out.
fn abi_layout(dictionary: bool, params: &[GoType], results: &[GoType]) -> Layout {
    if !dictionary {
        return layout(params, results);
    }
    let mut with_dict = vec![GoType::Pointer];
    with_dict.extend_from_slice(params);
    let mut lay = layout(&with_dict, results);
    lay.params.remove(0);
    lay
}

/// The parameter and result types: the probe's signature, else DWARF; where both exist
/// and lay out differently, DWARF (the compiler's own record) and a warning.
fn types(
    bin: &Binary,
    store: &mut TypeStore<'_>,
    func: &FuncInfo,
    probe: &Probe,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Typed, PlanError> {
    let symbol = &probe.symbol;
    let dict = generic::takes_dictionary(&func.name);
    let Some(text) = &probe.signature else {
        return match bin.dwarf_signature(func)? {
            Some(d) => Ok(from_dwarf(store, dict || d.dictionary, &d, Vec::new())),
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
    store.bind_type_params(&sig.type_params, &func.name);
    let refs = |store: &mut TypeStore<'_>, ps: &[gprobe_crds::signature::Param]| {
        ps.iter()
            .map(|p| store.expr_type(&p.ty))
            .collect::<Vec<_>>()
    };
    let (param_types, result_types) = (refs(store, &sig.params), refs(store, &sig.results));
    let mut shapes = |ps: &[gprobe_crds::signature::Param], refs: &[TypeRef]| {
        ps.iter()
            .zip(refs)
            .map(|(p, &r)| {
                store.shape(r).map_err(|e| PlanError::SignatureType {
                    symbol: symbol.clone(),
                    param: p.name.clone(),
                    source: e.into(),
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let (tp, tr) = (
        shapes(&sig.params, &param_types)?,
        shapes(&sig.results, &result_types)?,
    );
    // DWARF that cannot be used (absent, or incomplete as in Go 1.19's unnamed
    // parameters) leaves the signature as the only description.
    let dwarf = match bin.dwarf_signature(func) {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!("{symbol}: DWARF not compared with the signature: {e}");
            None
        }
    };
    // DWARF's `.dict` marks an instantiation too (whatever its name says).
    let dict = dict || dwarf.as_ref().is_some_and(|d| d.dictionary);
    let lay = abi_layout(dict, &tp, &tr);
    if let Some(d) = dwarf {
        let differences = compare(&sig, &lay, &d, dict);
        if !differences.is_empty() {
            warnings.push(PlanWarning::SignatureDisagreesWithDwarf {
                symbol: symbol.clone(),
                differences,
            });
            return Ok(from_dwarf(store, dict, &d, aliases(&sig, &d)));
        }
    }
    Ok(Typed {
        params: sig.params.iter().map(|p| p.name.clone()).collect(),
        results: sig.results.iter().map(|p| p.name.clone()).collect(),
        layout: lay,
        param_types,
        result_types,
        aliases: Vec::new(),
        source: SignatureSource::Signature,
    })
}

fn from_dwarf(
    store: &mut TypeStore<'_>,
    dict: bool,
    d: &DwarfSignature,
    aliases: Vec<(String, ValueRef)>,
) -> Typed {
    let tys = |ps: &[super::DwarfParam]| ps.iter().map(|p| p.ty.clone()).collect::<Vec<_>>();
    let mut refs = |ps: &[super::DwarfParam]| {
        ps.iter()
            .map(|p| dwarf_type(store, &p.type_name, &p.ty))
            .collect::<Vec<_>>()
    };
    Typed {
        params: d.params.iter().map(|p| p.name.clone()).collect(),
        results: d.results.iter().map(|p| p.name.clone()).collect(),
        layout: abi_layout(dict, &tys(&d.params), &tys(&d.results)),
        param_types: refs(&d.params),
        result_types: refs(&d.results),
        aliases,
        source: SignatureSource::Dwarf,
    }
}

/// The type DWARF names `name` (every Go type DIE has a name); where the name is not
/// found, the type as a signature would spell its shape, which plain captures need.
fn dwarf_type(store: &mut TypeStore<'_>, name: &str, shape: &GoType) -> TypeRef {
    if let Some(r) = store.dwarf_named(name) {
        return r;
    }
    let spelled = |n: &str| TypeExpr::Named {
        package: None,
        name: n.into(),
        args: Vec::new(),
    };
    let e = match shape {
        GoType::Slice { bytes: true } => TypeExpr::Slice(Box::new(spelled("byte"))),
        GoType::Interface => spelled("error"),
        GoType::Pointer => TypeExpr::Pointer(Box::new(spelled("byte"))),
        other => spelled(&other.to_string()),
    };
    store.expr_type(&e)
}

/// How the signature differs from DWARF in count or ABI shape (the registers, stack
/// slots and sizes of each value); types of the same shape (e.g. `*Client` and
/// `*net/http.Client`, or `int` and `int64`) agree.
fn compare(
    sig: &Signature,
    lay: &Layout,
    d: &DwarfSignature,
    dict: bool,
) -> Vec<SignatureDifference> {
    let tys = |ps: &[super::DwarfParam]| ps.iter().map(|p| p.ty.clone()).collect::<Vec<_>>();
    let dl = abi_layout(dict, &tys(&d.params), &tys(&d.results));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::DwarfParam;

    #[test]
    fn map_layouts_follow_the_release_and_its_experiments() {
        for (v, want) in [
            ("go1.19.8", Some(abi::MAP_HMAP)),
            ("go1.23.12", Some(abi::MAP_HMAP)),
            ("go1.24.11", Some(abi::MAP_SWISS)),
            ("go1.25.0 X:noswissmap", Some(abi::MAP_HMAP)),
            ("go1.27.3", Some(abi::MAP_SWISS)),
            ("go1.27.3 X:mapsplitgroup", Some(abi::MAP_SWISS_SPLIT)),
            ("go1.27.3 X:nomapsplitgroup", Some(abi::MAP_SWISS)),
            ("go1.26rc1", Some(abi::MAP_SWISS)),
            // Not known for sure: no traceparent is read.
            ("go1.28.0", None),
            ("go1.26.0 X:noswissmap", None),
            ("devel go1.27-abc", None),
        ] {
            assert_eq!(map_layout(v), want, "{v}");
        }
    }

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
            dictionary: false,
        }
    }

    fn compared(sig: &str, d: &DwarfSignature) -> Vec<SignatureDifference> {
        let sig = parse_signature(sig).unwrap();
        let (tp, tr) = crate::resolve::go::abi::signature_types(&sig).unwrap();
        compare(&sig, &layout(&tp, &tr), d, false)
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
        let bin = Binary::open(&std::env::current_exe().unwrap()).unwrap();
        let mut store = TypeStore::new(&bin, "main");
        let typed = from_dwarf(&mut store, false, &d, aliases(&sig, &d));
        // DWARF's own names win; `url` is DWARF's url, not the signature's position 0.
        assert_eq!(typed.lookup("url"), Some(ValueRef::Param(1)));
        assert_eq!(typed.lookup("c"), Some(ValueRef::Param(0)));
        // Names DWARF lacks bind by their position in the signature.
        assert_eq!(typed.lookup("target"), Some(ValueRef::Param(1)));
        assert_eq!(typed.lookup("n"), Some(ValueRef::Result(0)));
        // failure is result 1, which DWARF does not have.
        assert_eq!(typed.lookup("failure"), None);
        // Positional names of named values are refused, naming the value.
        assert_eq!(typed.lookup("r0"), None);
        assert_eq!(typed.lookup("p1"), None);
        assert_eq!(typed.positional("p1"), Some((ValueRef::Param(1), "url")));
        assert_eq!(typed.positional("r0"), Some((ValueRef::Result(0), "err")));
        assert_eq!(typed.positional("p2"), None);
    }

    #[test]
    fn positional_names_stand_for_unnamed_values_only() {
        let d = dwarf(
            &[("p0", INT), ("s", GoType::String)],
            &[("r0", GoType::Bool)],
        );
        let bin = Binary::open(&std::env::current_exe().unwrap()).unwrap();
        let mut store = TypeStore::new(&bin, "main");
        let typed = from_dwarf(&mut store, false, &d, Vec::new());
        assert_eq!(typed.lookup("p0"), Some(ValueRef::Param(0)));
        assert_eq!(typed.lookup("r0"), Some(ValueRef::Result(0)));
        assert_eq!(typed.lookup("p1"), None);
        assert_eq!(typed.positional("p1"), Some((ValueRef::Param(1), "s")));
        assert_eq!(typed.positional("p0"), None);
    }
}
