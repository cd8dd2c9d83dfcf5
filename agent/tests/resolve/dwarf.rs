//! Signatures from DWARF.

use gprobe_agent::resolve::gotype::GoType;
use gprobe_agent::resolve::{DwarfParam, ResolveError};

use crate::go::GoVersion;
use crate::{open, sig_bin, sig_stripped, VERSIONS};

fn p(name: &str, type_name: &str, ty: GoType) -> DwarfParam {
    DwarfParam {
        name: name.into(),
        type_name: type_name.into(),
        ty,
    }
}

#[test]
fn dwarf_signatures_of_go_functions() {
    let int = GoType::Int {
        size: 8,
        signed: true,
    };
    for v in VERSIONS {
        let b = open(&sig_bin(v));
        let mix = b.find_function("main.mix").unwrap();
        let sig = b
            .dwarf_signature(&mix)
            .unwrap()
            .expect("main.mix has DWARF");
        let g = GoType::Struct {
            fields: vec![
                (
                    "x".into(),
                    GoType::Int {
                        size: 4,
                        signed: true,
                    },
                ),
                ("y".into(), GoType::Bool),
            ],
            size: 8,
            align: 4,
        };
        assert_eq!(
            sig.params[..6],
            vec![
                p(
                    "a",
                    "int64",
                    GoType::Int {
                        size: 8,
                        signed: true
                    }
                ),
                p("b", "string", GoType::String),
                p("c", "[]uint8", GoType::Slice { bytes: true }),
                p("d", "error", GoType::Interface),
                p("e", "*int", GoType::Pointer),
                p("f", "float64", GoType::Float { size: 8 }),
            ],
            "{}",
            v.tag()
        );
        // Go names anonymous struct types with package-qualified field names.
        assert_eq!(
            sig.params[6].type_name,
            "struct { main.x int32; main.y bool }"
        );
        assert_eq!(sig.params[6].ty, g);
        assert_eq!(
            sig.results,
            vec![
                p("n", "int", int.clone()),
                p("err", "error", GoType::Interface)
            ]
        );

        let unnamed = b.find_function("main.unnamed").unwrap();
        match v {
            // Go 1.19 leaves unnamed parameters out of DWARF: the signature would put the
            // results' registers wrong, so it is refused with a reason.
            GoVersion::Go119 => {
                let e = b.dwarf_signature(&unnamed).unwrap_err();
                assert!(matches!(e, ResolveError::Dwarf { .. }), "{e:?}");
                let msg = e.to_string();
                assert!(
                    msg.contains("main.unnamed") && msg.contains("signature:"),
                    "{msg}"
                );
                assert!(!b.dwarf_signatures().unwrap().contains_key(&unnamed.addr));
            }
            _ => {
                let sig = b.dwarf_signature(&unnamed).unwrap().unwrap();
                assert_eq!(
                    sig.params,
                    vec![
                        p("p0", "int", int.clone()),
                        p("p1", "string", GoType::String)
                    ]
                );
                assert_eq!(
                    sig.results,
                    vec![
                        p("r0", "int", int.clone()),
                        p("r1", "error", GoType::Interface)
                    ]
                );
            }
        }

        // An inlinable function: its out-of-line copy refers to an abstract subprogram,
        // which Go 1.19 writes without the unnamed result; the copy lists it.
        let twice = b.find_function("main.twice").unwrap();
        let sig = b.dwarf_signature(&twice).unwrap().unwrap();
        assert_eq!(sig.params, vec![p("x", "int", int.clone())], "{}", v.tag());
        assert_eq!(
            sig.results,
            vec![p("r0", "int", int.clone())],
            "{}",
            v.tag()
        );

        let add = b.find_function("main.(*Counter).Add").unwrap();
        let sig = b.dwarf_signature(&add).unwrap().unwrap();
        assert_eq!(
            sig.params,
            vec![
                p("c", "*main.Counter", GoType::Pointer),
                p("delta", "int", int.clone())
            ]
        );
        assert_eq!(sig.results, vec![p("r0", "int", int.clone())]);

        let kinds = b.find_function("main.kinds").unwrap();
        let sig = b.dwarf_signature(&kinds).unwrap().unwrap();
        let got: Vec<(&str, &str, &GoType)> = sig
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.type_name.as_str(), &p.ty))
            .collect();
        let u16t = GoType::Int {
            size: 2,
            signed: false,
        };
        let arr = GoType::Array {
            len: 3,
            elem: Box::new(u16t),
            size: 6,
            align: 2,
        };
        let pair = GoType::Struct {
            fields: vec![
                (
                    "x".into(),
                    GoType::Int {
                        size: 4,
                        signed: true,
                    },
                ),
                ("y".into(), GoType::Bool),
            ],
            size: 8,
            align: 4,
        };
        assert_eq!(
            got,
            vec![
                ("m", "map[string]int", &GoType::Pointer),
                ("ch", "chan int", &GoType::Pointer),
                ("fn", "func() int", &GoType::Pointer),
                ("arr", "[3]uint16", &arr),
                ("p", "main.pair", &pair),
                ("u", "uintptr", &GoType::Uintptr),
                ("c", "complex128", &GoType::Complex { size: 16 }),
                ("f32", "float32", &GoType::Float { size: 4 }),
                ("b", "bool", &GoType::Bool),
                (
                    "i8",
                    "int8",
                    &GoType::Int {
                        size: 1,
                        signed: true
                    }
                ),
                (
                    "u32",
                    "uint32",
                    &GoType::Int {
                        size: 4,
                        signed: false
                    }
                ),
                ("any", "interface {}", &GoType::Interface),
                ("names", "[]string", &GoType::Slice { bytes: false }),
            ],
            "{}",
            v.tag()
        );
        assert_eq!(sig.results, vec![p("r0", "bool", GoType::Bool)]);

        let all = b.dwarf_signatures().unwrap();
        assert!(all.len() > 500, "{} signatures", all.len());
        assert_eq!(
            all.get(&mix.addr),
            b.dwarf_signature(&mix).unwrap().as_ref()
        );

        let s = open(&sig_stripped(v));
        assert!(!s.has_dwarf());
        let smix = s.find_function("main.mix").unwrap();
        assert_eq!(s.dwarf_signature(&smix).unwrap(), None);
        assert!(s.dwarf_signatures().unwrap().is_empty());
    }
}
