//! Field paths, leaf kinds, generic functions and refusals on
//! e2e/testdata/resolve/values (see types.rs), stripped and not: every path plans to the
//! offsets the program itself prints (unsafe.Offsetof).

use gprobe_agent::abi;
use gprobe_agent::plan::{Decode, Elem};
use gprobe_agent::resolve::go::types::{PathError, TypeError, TypeSource};
use gprobe_agent::resolve::planner::plan_probe;
use gprobe_agent::resolve::{Binary, PlanError, Uncapturable};
use gprobe_crds::Probe;

use crate::go::GoVersion;
use crate::types::{cap, plan, printed, probe, reg, KINDS};
use crate::{open, values_bin, VERSIONS};

#[test]
fn paths_plan_to_the_offsets_go_uses() {
    for v in VERSIONS {
        let offsets = printed(&values_bin(v, "full")).paths;
        assert_eq!(offsets["r.URL.Path"].0.len(), 1, "{}", v.tag());
        for kind in KINDS {
            let b = open(&values_bin(v, kind));
            // (symbol, signature, register of the root)
            let probes = [
                (
                    "main.process",
                    "func(o *main.order) int",
                    'o',
                    abi::reg::RAX,
                ),
                ("main.track", "func(t *tracked) int64", 't', abi::reg::RAX),
                (
                    "main.handleOrder",
                    "func(w http.ResponseWriter, r *net/http.Request)",
                    'r',
                    abi::reg::RCX,
                ),
            ];
            for (symbol, sig, root, base) in probes {
                let mine: Vec<&str> = offsets
                    .keys()
                    .filter(|k| k.starts_with(root) || k.starts_with(&format!("len({root}")))
                    .map(String::as_str)
                    .collect();
                let sigs: &[Option<&str>] = if kind == "full" {
                    &[Some(sig), None]
                } else {
                    &[Some(sig)]
                };
                for &s in sigs {
                    for chunk in mine.chunks(abi::GP_MAX_CAPTURES) {
                        let p = plan(&b, &probe(symbol, s, chunk));
                        for name in chunk {
                            let (_, c) = cap(&p, name);
                            let (hops, off) = &offsets[*name];
                            let what = format!("{} {kind} {symbol} {name} {c:?}", v.tag());
                            assert_eq!(c.flags & abi::CAPF_PATH, abi::CAPF_PATH, "{what}");
                            assert_eq!(c.loc[0], reg(base), "{what}");
                            assert_eq!(&c.hops[..c.n_hops as usize], &hops[..], "{what}");
                            assert_eq!(c.off, *off, "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn leaves_read_what_their_types_hold() {
    for v in VERSIONS {
        for kind in KINDS {
            let b = open(&values_bin(v, kind));
            let p = plan(
                &b,
                &probe(
                    "main.process",
                    Some("func(o *order) int"),
                    &[
                        "o.Tags",
                        "o.Qtys",
                        "o.Flags",
                        "o.Err",
                        "o.Any",
                        "o.Total",
                        "o.Small",
                        "len(o.Meta)",
                    ],
                ),
            );
            let (d, c) = cap(&p, "o.Tags");
            assert_eq!(
                (d, c.kind, c.max_elems, c.max_len),
                (Decode::Strings, abi::CAP_STRS, 16, 64)
            );
            let (d, c) = cap(&p, "o.Qtys");
            let i64 = Elem::Int {
                size: 8,
                signed: true,
            };
            assert_eq!(
                (d, c.kind, c.size),
                (Decode::Slice { elem: i64 }, abi::CAP_SLICE, 8)
            );
            let (d, c) = cap(&p, "o.Flags");
            assert_eq!(
                (d, c.kind, c.size),
                (Decode::Slice { elem: Elem::Bool }, abi::CAP_SLICE, 1)
            );
            // An error: read with the layouts of the binary's standard error types.
            let (d, c) = cap(&p, "o.Err");
            assert_eq!(
                (d, c.kind, c.flags),
                (
                    Decode::ErrorText { max_len: 64 },
                    abi::CAP_ERROR,
                    abi::CAPF_PATH
                )
            );
            assert_ne!(c.table, 0, "the binary's error table");
            assert_eq!(c.table, b.error_table().id);
            let (d, c) = cap(&p, "o.Any");
            assert_eq!(
                (d, c.kind, c.flags),
                (Decode::Interface, abi::CAP_IFACE, abi::CAPF_PATH)
            );
            let (d, c) = cap(&p, "o.Total");
            assert_eq!(
                (d, c.kind, c.size),
                (Decode::Float { size: 8 }, abi::CAP_WORD, 8)
            );
            let (d, c) = cap(&p, "o.Small");
            let i8 = Decode::Int {
                size: 1,
                signed: true,
            };
            assert_eq!((d, c.kind, c.size), (i8, abi::CAP_WORD, 1));
            let (d, c) = cap(&p, "len(o.Meta)");
            assert_eq!(
                (d, c.n_hops, c.off),
                (Decode::Len { nil_is_zero: true }, 1, abi::MAP_COUNT_OFFSET)
            );

            // A by-value struct in registers: its fields are its registers, and a pointer
            // among them is the base of a path. A named integer is an integer.
            let p = plan(
                &b,
                &probe(
                    "main.processPair",
                    Some("func(p main.pair, m main.Money) int"),
                    &["p.Key", "p.Count", "p.Cust.Name", "m", "len(p.Key)"],
                ),
            );
            let (d, c) = cap(&p, "p.Key");
            assert_eq!(
                (d, c.kind, c.flags, c.loc),
                (
                    Decode::Str,
                    abi::CAP_BYTES,
                    // Go's lengths are ints: a negative one is not read.
                    abi::CAPF_LEN_SIGNED,
                    [reg(abi::reg::RAX), reg(abi::reg::RBX)]
                )
            );
            assert_eq!(cap(&p, "p.Count").1.loc[0], reg(abi::reg::RCX));
            let (_, c) = cap(&p, "p.Cust.Name");
            assert_eq!(
                (c.flags, c.loc[0], c.n_hops, c.off),
                // A string's length read through the path is signed too.
                (
                    abi::CAPF_PATH | abi::CAPF_LEN_SIGNED,
                    reg(abi::reg::RDI),
                    0,
                    0
                )
            );
            assert_eq!(cap(&p, "m").1.loc[0], reg(abi::reg::RSI));
            assert_eq!(cap(&p, "len(p.Key)").1.loc[0], reg(abi::reg::RBX));

            // An error result: the type word and data word in RAX, RBX.
            let p = plan(
                &b,
                &probe("main.lookup", Some("func(id int) error"), &["r0"]),
            );
            let (d, c) = cap(&p, "r0");
            assert_eq!(
                (d, c.kind, c.flags),
                (Decode::ErrorText { max_len: 64 }, abi::CAP_ERROR, 0)
            );
            assert_eq!(c.loc, [reg(abi::reg::RAX), reg(abi::reg::RBX)]);
        }
    }
}

#[test]
fn generic_instantiations_skip_their_dictionary() {
    for v in VERSIONS {
        let shape = |t: &str| match v {
            GoVersion::Go119 => format!("go.shape.{t}_0"),
            _ => format!("go.shape.{t}"),
        };
        for kind in KINDS {
            let b = open(&values_bin(v, kind));
            // Go 1.19's function table names every instantiation `main.Sum[...]`; only the
            // symbol table of an unstripped build has the shapes.
            let shape = |t: &str| match (v, kind) {
                (GoVersion::Go119, "full") | (GoVersion::Go127, _) => shape(t),
                _ => "...".to_string(),
            };
            let sum = format!("main.Sum[{}]", shape("int64"));
            let mut sigs = vec![Some("func(xs []int64) int64")];
            if !sum.contains("...") {
                sigs.push(Some("func Sum[T Number](xs []T) T"));
            }
            if kind == "full" {
                sigs.push(None);
            }
            for s in sigs {
                let p = plan(&b, &probe(&sum, s, &["xs", "len(xs)", "r0"]));
                let what = format!("{} {kind} {s:?}", v.tag());
                // RAX holds the dictionary: xs is (RBX, RCX, RDI).
                assert_eq!(
                    cap(&p, "xs").1.loc,
                    [reg(abi::reg::RBX), reg(abi::reg::RCX)],
                    "{what}"
                );
                assert_eq!(cap(&p, "len(xs)").1.loc[0], reg(abi::reg::RCX), "{what}");
                assert_eq!(cap(&p, "r0").1.loc[0], reg(abi::reg::RAX), "{what}");
            }
            if sum.contains("...") {
                continue;
            }
            let add = format!("main.Add[{}]", shape("int64"));
            for s in [
                Some("func(a, b int64) int64"),
                Some("func Add[T any](a, b T) T"),
            ] {
                let p = plan(&b, &probe(&add, s, &["a", "b"]));
                assert_eq!(
                    cap(&p, "a").1.loc[0],
                    reg(abi::reg::RBX),
                    "{} {kind}",
                    v.tag()
                );
                assert_eq!(
                    cap(&p, "b").1.loc[0],
                    reg(abi::reg::RCX),
                    "{} {kind}",
                    v.tag()
                );
            }
            let add = format!("main.Add[{}]", shape("string"));
            let p = plan(&b, &probe(&add, Some("func Add[T any](a, b T) T"), &["b"]));
            assert_eq!(cap(&p, "b").0, Decode::Str);
            assert_eq!(cap(&p, "b").1.loc, [reg(abi::reg::RDI), reg(abi::reg::RSI)]);
        }
    }
}

#[test]
fn refusals_say_what_is_missing() {
    let v = GoVersion::Go127;
    let stripped = open(&values_bin(v, "stripped"));
    let full = open(&values_bin(v, "full"));
    let err = |b: &Binary, p: Probe| plan_probe(b, &p, 64).unwrap_err();
    // main.secret is never boxed: a stripped build has no descriptor for it, DWARF has.
    let audit = probe("main.audit", Some("func(s *main.secret) int"), &["s.Level"]);
    match err(&stripped, audit.clone()) {
        PlanError::Path { source, .. } => match *source {
            PathError::Type(TypeError::NotFound {
                described_by: TypeSource::Descriptors,
                ref name,
                ..
            }) => {
                assert_eq!(name, "main.secret");
                let msg = source.to_string();
                assert!(
                    msg.contains("through an interface or reflection")
                        && msg.contains("without -w"),
                    "{msg}"
                );
            }
            e => panic!("{e:?}"),
        },
        e => panic!("{e:?}"),
    }
    assert_eq!(cap(&plan(&full, &audit), "s.Level").1.off, 0);
    // A by-value named type in a signature needs its layout: the parameter is named.
    match err(
        &stripped,
        probe("main.audit", Some("func(s main.secret) int"), &["s"]),
    ) {
        PlanError::SignatureType { param, source, .. } => {
            assert_eq!(param, "s");
            assert!(
                source.to_string().contains("main.secret is not described"),
                "{source}"
            );
        }
        e => panic!("{e:?}"),
    }
    for b in [&stripped, &full] {
        match err(
            b,
            probe(
                "main.process",
                Some("func(o *main.order) int"),
                &["o.Customer.Phone"],
            ),
        ) {
            PlanError::Path {
                source, capture, ..
            } => {
                assert_eq!(capture, "o.Customer.Phone");
                let PathError::NoField {
                    type_name,
                    field,
                    fields,
                } = *source
                else {
                    panic!()
                };
                assert_eq!(
                    (type_name.as_str(), field.as_str()),
                    ("main.Customer", "Phone")
                );
                assert_eq!(fields, ["Name", "Email", "Addr", "VIP"]);
            }
            e => panic!("{e:?}"),
        }
        let deep = format!("o.Note{}.Text", ".Next".repeat(8));
        match err(
            b,
            probe("main.process", Some("func(o *main.order) int"), &[&deep]),
        ) {
            PlanError::Path { source, .. } => {
                assert_eq!(*source, PathError::TooManyHops { hops: 9, max: 8 })
            }
            e => panic!("{e:?}"),
        }
        let ok = format!("o.Note{}.Text", ".Next".repeat(7));
        assert_eq!(
            cap(
                &plan(
                    b,
                    &probe("main.process", Some("func(o *main.order) int"), &[&ok])
                ),
                &ok
            )
            .1
            .n_hops,
            8
        );
    }
    // A pointer at the end of a path is its address.
    let p = plan(
        &stripped,
        &probe(
            "main.process",
            Some("func(o *main.order) int"),
            &["o.Customer.Addr"],
        ),
    );
    assert_eq!(cap(&p, "o.Customer.Addr").0, Decode::Pointer);
    match err(
        &stripped,
        probe("main.process", Some("func(o *Ordr) int"), &["o.ID"]),
    ) {
        PlanError::Path { source, .. } => {
            let msg = source.to_string();
            assert!(msg.contains("type main.Ordr is not described"), "{msg}");
        }
        e => panic!("{e:?}"),
    }
    match err(
        &stripped,
        probe("main.process", Some("func(o *main.order) int"), &["o.ID.X"]),
    ) {
        PlanError::Path { source, .. } => assert!(matches!(*source, PathError::NotAStruct { .. })),
        e => panic!("{e:?}"),
    }
    match err(
        &stripped,
        probe(
            "main.process",
            Some("func(o *main.order) int"),
            &["len(o.Total)"],
        ),
    ) {
        PlanError::Path { source, .. } => assert!(matches!(*source, PathError::NoLength { .. })),
        e => panic!("{e:?}"),
    }
    match err(
        &stripped,
        probe("main.process", Some("func(o *main.order) int"), &["o.len("]),
    ) {
        PlanError::CaptureSyntax { .. } => {}
        e => panic!("{e:?}"),
    }
    match err(
        &stripped,
        probe("main.process", Some("func(ps []main.pair) int"), &["ps"]),
    ) {
        PlanError::Uncapturable {
            kind: Uncapturable::Slice,
            type_name,
            ..
        } => assert_eq!(type_name, "[]main.pair"),
        e => panic!("{e:?}"),
    }
    // Each value's most bytes count against the record: 16 strings of a []string and two
    // 4 KiB strings do not fit.
    let big = probe(
        "main.process",
        Some("func(o *main.order) int"),
        &["o.Tags", "o.Customer.Name", "o.Customer.Email"],
    );
    match plan_probe(&stripped, &big, 4096).unwrap_err() {
        PlanError::TooLarge { bytes, limit, .. } => assert!(bytes > limit, "{bytes} {limit}"),
        e => panic!("{e:?}"),
    }
    assert!(plan_probe(&stripped, &big, 1024).is_ok());
    match err(&full, probe("main.process", None, &["o.Base"])) {
        PlanError::Uncapturable {
            kind: Uncapturable::Aggregate,
            type_name,
            ..
        } => assert_eq!(type_name, "main.Base"),
        e => panic!("{e:?}"),
    }
}
