//! The parameters and results of a Go function as a probe sees them: their names and types
//! from the probe's signature or DWARF (DWARF wins where the two lay out differently, with
//! a warning naming each difference), their places under the register ABI, and which
//! names of the signature stand for which of DWARF's values. Capture planning (plan.rs)
//! looks the captures' roots up here.

use gprobe_crds::signature::{parse_signature, Signature, TypeExpr, ValueRef};
use gprobe_crds::Probe;

use super::abi::{layout, Layout};
use super::gotype::GoType;
use super::types::{generic, TypeRef, TypeStore};
use crate::plan::{PlanWarning, SignatureDifference, SignatureSource};
use crate::resolve::error::PlanError;
use crate::resolve::{Binary, DwarfSignature, FuncInfo};

/// Names and types of a function's parameters and results, and where they came from.
pub(super) struct Typed {
    pub(super) params: Vec<String>,
    results: Vec<String>,
    /// Where each parameter and result is (a generic instantiation's dictionary left out).
    pub(super) layout: Layout,
    /// The type of each parameter and result, for field paths.
    pub(super) param_types: Vec<TypeRef>,
    pub(super) result_types: Vec<TypeRef>,
    /// Names of the probe's signature that DWARF does not use, each bound to the position
    /// it has in the signature (when DWARF overrode the signature).
    aliases: Vec<(String, ValueRef)>,
    pub(super) source: SignatureSource,
}

impl Typed {
    pub(super) fn lookup(&self, name: &str) -> Option<ValueRef> {
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
    pub(super) fn positional(&self, name: &str) -> Option<(ValueRef, &str)> {
        let r = gprobe_crds::signature::positional_index(name)?;
        let real = match r {
            ValueRef::Param(i) => self.params.get(i)?,
            ValueRef::Result(i) => self.results.get(i)?,
        };
        (real != name).then_some((r, real.as_str()))
    }

    pub(super) fn known(&self) -> Vec<String> {
        let mut v: Vec<String> = self.params.iter().chain(&self.results).cloned().collect();
        v.extend(self.aliases.iter().map(|(n, _)| n.clone()));
        v
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
pub(super) fn types(
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
    let shapes = |store: &mut TypeStore<'_>, ps: &[gprobe_crds::signature::Param]| {
        store
            .signature_shapes(ps)
            .map_err(|(param, e)| PlanError::SignatureType {
                symbol: symbol.clone(),
                param,
                source: Box::new(e),
            })
    };
    let (param_types, tp) = shapes(store, &sig.params)?;
    let (result_types, tr) = shapes(store, &sig.results)?;
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
        let bin = Binary::open(&std::env::current_exe().unwrap()).unwrap();
        let mut store = TypeStore::new(&bin, "main");
        let (_, tp) = store.signature_shapes(&sig.params).unwrap();
        let (_, tr) = store.signature_shapes(&sig.results).unwrap();
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
