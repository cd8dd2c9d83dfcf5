//! `gprobe run` captures values of every supported kind on real Go programs, reports the
//! probes it cannot place (while the rest run), and needs a signature on stripped binaries.
//! They need root (BPF).

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{
    program, program_lines, require_trace, run_program, serial, Gprobe, VERSIONS,
};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::path::Path;

/// Probes on e2e/testdata/zoo: one of every value kind, and the last four are wrong on
/// purpose (an unknown name, an absent symbol, an inlined one, an unknown type).
fn zoo_spec(bin: &Path) -> String {
    SpecBuilder::new("zoo")
        .executable(bin)
        .probe(
            ProbeBuilder::new("main.manyArgs")
                .signature("func(a, b, c, d, e, f, g, h int, s string, i int, j int8, k int64) int")
                .capture(["a", "s", "i", "j", "k", "r0"]),
        )
        .probe(
            ProbeBuilder::new("main.kinds")
                .signature(
                    "func(b bool, i8 int8, u16 uint16, i32 int32, u64 uint64, p *int, bs \
                    []byte, e error) (ok bool, n int)",
                )
                .capture(["b", "i8", "u16", "i32", "u64", "p", "bs", "e"]),
        )
        .probe(ProbeBuilder::new("main.kinds").capture(["ok", "n"]))
        .probe(
            ProbeBuilder::new("main.scale")
                .signature("func(x float64, n int) float64")
                .capture(["x", "n"]),
        )
        .probe(ProbeBuilder::new("main.area").capture(["p"]))
        .probe(
            ProbeBuilder::new("main.fail")
                .capture(["n", "r0"])
                .latency(),
        )
        .probe(ProbeBuilder::new("main.nope"))
        .probe(ProbeBuilder::new("net/http.Get"))
        .probe(
            ProbeBuilder::new("main.manyArgs")
                .signature("func(a int) int")
                .capture(["zz"]),
        )
        .probe(
            ProbeBuilder::new("main.kinds")
                .signature("func(b Thing)")
                .capture(["b"]),
        )
        .yaml()
}

#[test]
fn arguments_of_every_supported_kind_and_bad_probes_reported_while_the_rest_runs() {
    require_trace("zoo");
    for v in VERSIONS {
        let bin = program("e2e/testdata/zoo", v, false);
        let _guard = serial();
        let g = Gprobe::start(&zoo_spec(&bin), &[]);
        let out = run_program(&bin, &["-rounds", "4", "-delay", "1500ms"]);
        let run = g.stop();
        assert!(run.status.success());
        let err = &run.stderr;
        for expected in [
            r#"spec.probes[8].capture[0]: "zz" is not a parameter or result of "func(a int) int"; known names: a, r0"#,
            "cannot capture \"x\": the float64 is passed in register X0; uprobes see only the \
            general-purpose registers",
            r#"cannot capture "p": main.point values cannot be captured"#,
            "symbol main.nope not found in",
            "net/http.Get is inlined into its callers",
            "probe net/http.(*Client).Get instead",
            "type main.Thing is not described by",
        ] {
            assert!(
                err.contains(expected),
                "{v:?}: stderr lacks {expected:?}:\n{err}"
            );
        }

        let want = program_lines(&out, "manyArgs");
        let got = run.records_of("main.manyArgs");
        assert_eq!(got.len(), want.len(), "{err}");
        for (g, w) in got.iter().zip(&want) {
            let a = &g["args"];
            assert_eq!(a["a"].as_i64().unwrap().to_string(), w["a"]);
            assert_eq!(
                a["s"].as_str().unwrap(),
                w["s"],
                "string passed on the stack"
            );
            assert_eq!(
                a["i"].as_i64().unwrap().to_string(),
                w["i"],
                "int in R11 after a stack string"
            );
            assert_eq!(
                a["j"].as_i64().unwrap().to_string(),
                w["j"],
                "int8 on the stack"
            );
            assert_eq!(
                a["k"].as_i64().unwrap().to_string(),
                w["k"],
                "int64 on the stack"
            );
        }

        let want = program_lines(&out, "kinds");
        let all = run.records_of("main.kinds");
        let got: Vec<_> = all.iter().filter(|g| g.get("returns").is_none()).collect();
        assert_eq!(got.len(), want.len(), "{err}");
        for (g, w) in got.iter().zip(&want) {
            let a = &g["args"];
            assert_eq!(a["b"].as_bool().unwrap().to_string(), w["b"]);
            assert_eq!(a["i8"].as_i64().unwrap().to_string(), w["i8"]);
            assert_eq!(a["u16"].as_u64().unwrap().to_string(), w["u16"]);
            assert_eq!(a["i32"].as_i64().unwrap().to_string(), w["i32"]);
            assert_eq!(a["u64"].as_u64().unwrap().to_string(), w["u64"]);
            let p = a["p"].as_str().unwrap();
            assert!(p.starts_with("0x") && p != "0x0", "a non-nil pointer: {p}");
            assert_eq!(a["bs"].as_str().unwrap(), w["bs"]);
            // os.ErrNotExist is an errors.New error: its message.
            let e = if w["e"] == "true" {
                Value::from("file does not exist")
            } else {
                Value::Null
            };
            assert_eq!(a["e"], e);
        }
        let results: Vec<_> = all.iter().filter(|g| g.get("returns").is_some()).collect();
        assert_eq!(
            results.len(),
            want.len(),
            "results probe (signature from DWARF)"
        );
        for (g, w) in results.iter().zip(&want) {
            let r = &g["returns"];
            assert_eq!(r["ok"].as_bool().unwrap().to_string(), w["ok"]);
            assert_eq!(r["n"].as_i64().unwrap().to_string(), w["n"]);
        }

        let fails = run.records_of("main.fail");
        assert_eq!(fails.len(), 4);
        for (i, f) in fails.iter().enumerate() {
            assert_eq!(f["args"]["n"].as_i64().unwrap(), i as i64);
            assert_eq!(
                f["returns"]["r0"],
                if i % 2 == 1 {
                    Value::from("odd")
                } else {
                    Value::Null
                },
                "DWARF-derived signature"
            );
            assert!(f["duration_ns"].as_u64().is_some());
        }
        assert!(run.records_of("main.scale").is_empty());
    }
}

#[test]
fn stripped_binary_needs_a_signature_to_capture_but_can_count_calls() {
    require_trace("stripped");
    let bin = program("e2e/testdata/zoo", GoVersion::Go119, true);
    let _guard = serial();
    let spec = SpecBuilder::new("stripped")
        .executable(&bin)
        .probe(ProbeBuilder::new("main.fail").capture(["n"]))
        .probe(ProbeBuilder::new("main.area"))
        .yaml();
    let g = Gprobe::start(&spec, &[]);
    run_program(&bin, &["-rounds", "3"]);
    let run = g.stop();
    assert!(
        run.stderr
            .contains(&format!("main.fail: {}", bin.display()))
            && run.stderr.contains(
                "has no DWARF (stripped) and the probe has no signature: add `signature:"
            ),
        "{}",
        run.stderr
    );
    let area = run.records_of("main.area");
    assert_eq!(area.len(), 3, "{}", run.stderr);
    assert_eq!(area[0]["args"], Value::Object(Default::default()));
}
