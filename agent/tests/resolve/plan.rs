//! Probe planning: where the types come from (signature, DWARF, and DWARF over a
//! signature that disagrees), the warnings, and typed refusals.

use gprobe_agent::plan::{
    Decode, Pairing, PlanWarning, ProbePlan, SignatureDifference, SignatureSource,
};
use gprobe_agent::resolve::planner::plan_probe;
use gprobe_agent::resolve::{Binary, PlanError, Uncapturable};
use gprobe_crds::Probe;

use crate::{open, sig_bin, sig_stripped, VERSIONS};

fn probe(symbol: &str, signature: Option<&str>, capture: &[&str]) -> Probe {
    Probe {
        symbol: symbol.into(),
        signature: signature.map(Into::into),
        capture: capture.iter().map(|c| c.to_string()).collect(),
        latency: true,
        ..Probe::default()
    }
}

fn plan(b: &Binary, p: &Probe) -> ProbePlan {
    plan_probe(b, p, 64).unwrap_or_else(|e| panic!("{}: {e}", p.symbol))
}

fn decodes(plan: &ProbePlan) -> Vec<(&str, Decode)> {
    plan.entry_captures
        .iter()
        .chain(&plan.return_captures)
        .map(|c| (c.name.as_str(), c.decode))
        .collect()
}

const MIX: &str = "func(a int64, b string, c []byte, d error, e *int, f float64, g struct{ x \
    int32; y bool }) (n int, err error)";

#[test]
fn signature_that_agrees_with_dwarf_is_used() {
    for v in VERSIONS {
        let b = open(&sig_bin(v));
        // Other names than DWARF's, same shapes: the signature's names are used.
        let sig = MIX.replace("a int64, b string", "count int64, label string");
        let p = plan(
            &b,
            &probe("main.mix", Some(&sig), &["label", "count", "err"]),
        );
        assert_eq!(p.signature_source, SignatureSource::Signature);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert_eq!(
            decodes(&p),
            vec![
                ("label", Decode::Str),
                (
                    "count",
                    Decode::Int {
                        size: 8,
                        signed: true
                    }
                ),
                ("err", Decode::ErrorText { max_len: 64 })
            ]
        );
        // Without a signature DWARF gives the same plan under its own names.
        let d = plan(&b, &probe("main.mix", None, &["b", "a", "err"]));
        assert_eq!(d.signature_source, SignatureSource::Dwarf);
        let bpf = |p: &ProbePlan| -> Vec<_> {
            p.entry_captures
                .iter()
                .chain(&p.return_captures)
                .map(|c| c.bpf)
                .collect()
        };
        assert_eq!(bpf(&p), bpf(&d));
    }
}

#[test]
fn signature_that_disagrees_with_dwarf_loses_with_a_warning() {
    for v in VERSIONS {
        let b = open(&sig_bin(v));
        // b is a string (two registers), not an int64; and five parameters are missing.
        let p = plan(
            &b,
            &probe(
                "main.mix",
                Some("func(a int64, b int64) (n int, err error)"),
                &["b", "n"],
            ),
        );
        assert_eq!(p.signature_source, SignatureSource::Dwarf);
        assert_eq!(
            decodes(&p),
            vec![
                ("b", Decode::Str),
                (
                    "n",
                    Decode::Int {
                        size: 8,
                        signed: true
                    }
                )
            ]
        );
        let [PlanWarning::SignatureDisagreesWithDwarf { differences, .. }] = &p.warnings[..] else {
            panic!("{:?}", p.warnings);
        };
        assert_eq!(
            differences,
            &vec![
                SignatureDifference::ParamCount {
                    signature: 2,
                    dwarf: 7
                },
                SignatureDifference::Param {
                    index: 1,
                    signature: "int64".into(),
                    dwarf: "string".into()
                },
            ]
        );
        let msg = p.warnings[0].to_string();
        assert!(
            msg.contains("parameter 1 is int64 in the signature but string in DWARF"),
            "{msg}"
        );
        assert!(msg.contains("DWARF was used"), "{msg}");

        // Names DWARF does not know map by position: `label` is DWARF's b (a string).
        let p = plan(
            &b,
            &probe(
                "main.mix",
                Some("func(x int32, label int64) (total int)"),
                &["label", "x", "total"],
            ),
        );
        assert_eq!(p.signature_source, SignatureSource::Dwarf);
        assert_eq!(
            decodes(&p),
            vec![
                ("label", Decode::Str),
                (
                    "x",
                    Decode::Int {
                        size: 8,
                        signed: true
                    }
                ),
                (
                    "total",
                    Decode::Int {
                        size: 8,
                        signed: true
                    }
                )
            ]
        );

        // A stripped binary has no DWARF: the signature is all there is.
        let s = open(&sig_stripped(v));
        let p = plan(
            &s,
            &probe("main.mix", Some("func(a int64, b int64)"), &["b"]),
        );
        assert_eq!(p.signature_source, SignatureSource::Signature);
        assert!(p.warnings.is_empty());
        assert_eq!(
            decodes(&p),
            vec![(
                "b",
                Decode::Int {
                    size: 8,
                    signed: true
                }
            )]
        );
    }
}

#[test]
fn inlined_call_sites_are_a_warning() {
    for v in VERSIONS {
        for path in [sig_bin(v), sig_stripped(v)] {
            let b = open(&path);
            let p = plan(&b, &probe("main.twice", Some("func(x int) int"), &["x"]));
            assert_eq!(
                p.warnings,
                vec![PlanWarning::InlinedCallSites {
                    symbol: "main.twice".into(),
                    count: 2
                }]
            );
            let msg = p.warnings[0].to_string();
            assert!(
                msg.contains("inlined it at 2 call site(s)") && msg.contains("-gcflags='main=-l'"),
                "{msg}"
            );
            assert!(plan(&b, &probe("main.leaf", None, &[])).warnings.is_empty());
        }
    }
}

#[test]
fn refusals_are_typed() {
    let b = open(&sig_bin(crate::go::GoVersion::Go127));
    let err = |p: Probe| plan_probe(&b, &p, 64).unwrap_err();
    match err(probe("main.mix", None, &["nope"])) {
        PlanError::UnknownCapture { name, known, .. } => {
            assert_eq!(name, "nope");
            assert!(known.contains(&"err".to_string()), "{known:?}");
        }
        e => panic!("{e:?}"),
    }
    match err(probe("main.mix", None, &["f"])) {
        PlanError::FloatInRegister {
            reg: 0,
            what: "float64",
            ..
        } => {}
        e => panic!("{e:?}"),
    }
    match err(probe("main.kinds", None, &["c"])) {
        PlanError::Uncapturable {
            kind: Uncapturable::Complex,
            ..
        } => {}
        e => panic!("{e:?}"),
    }
    // Slices of strings are read (their first elements); structs are not.
    let p = plan(&b, &probe("main.kinds", None, &["names"]));
    assert_eq!(decodes(&p), vec![("names", Decode::Strings)]);
    match err(probe("main.kinds", None, &["p"])) {
        PlanError::Uncapturable {
            kind: Uncapturable::Aggregate,
            type_name,
            ..
        } => {
            assert_eq!(type_name, "main.pair")
        }
        e => panic!("{e:?}"),
    }
    match err(probe("main.mix", Some("func(a int64"), &["a"])) {
        PlanError::SignatureSyntax { .. } => {}
        e => panic!("{e:?}"),
    }
    match err(probe("main.mix", Some("func(a Thing)"), &["a"])) {
        PlanError::SignatureType { param, .. } => assert_eq!(param, "a"),
        e => panic!("{e:?}"),
    }
    let s = open(&sig_stripped(crate::go::GoVersion::Go127));
    assert!(matches!(
        plan_probe(&s, &probe("main.mix", None, &["a"]), 64),
        Err(PlanError::NoSignature { .. })
    ));

    // Not a Go binary: a C function. Its entry is its first byte, its return a uretprobe
    // there (never RET scanning for C); a Go signature is refused.
    let exe = open(&std::env::current_exe().unwrap());
    let p = plan(&exe, &probe("main", None, &[]));
    assert_eq!(
        p.entry_offset,
        exe.probe_sites(&exe.find_function("main").unwrap())
            .unwrap()
            .entry_offset
    );
    assert_eq!(p.ret_offsets(), vec![p.entry_offset]);
    assert!(p.uretprobe() && p.pairing == Pairing::Thread);
    assert!(matches!(
        plan_probe(
            &exe,
            &probe("main", Some("func(argc int32)"), &["argc"]),
            64
        ),
        Err(PlanError::GoSignatureForC { .. })
    ));
    let p = plan(
        &exe,
        &probe("main", Some("int main(int argc, char **argv)"), &["argc"]),
    );
    assert_eq!(
        p.entry_captures[0].bpf.loc[0].reg,
        gprobe_agent::abi::reg::RDI
    );
}
