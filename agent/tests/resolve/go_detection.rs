//! A Go binary is recognised as Go on every kind of build (Go 1.19 and 1.27; linked
//! internally, externally, as PIE, and as PIE by the external linker with cgo, which with
//! Go 1.19 leaves no `.gopclntab` section; stripped or not) and in Debian's `age`; a
//! latency probe on a Go function returns through uprobes on its RETs; and whatever the
//! detection says, no uretprobe is planned inside a function of the pclntab.

use std::path::{Path, PathBuf};

use gprobe_agent::plan::{Pairing, ProbePlan};
use gprobe_agent::resolve::planner::plan_probe;
use gprobe_agent::resolve::{Binary, PlanError, TargetKind};
use gprobe_crds::Probe;

use crate::native::require_program;
use crate::{build, open, VERSIONS};
use gprobe_e2e::go::GoVersion;

/// Every build kind of the matrix: (label, `go build` flags, cgo).
const KINDS: [(&str, &[&str], bool); 8] = [
    ("full", &[], false),
    ("stripped", &["-ldflags=-s -w"], false),
    ("external", &["-ldflags=-linkmode=external"], true),
    (
        "external-stripped",
        &["-ldflags=-linkmode=external -s -w"],
        true,
    ),
    ("pie", &["-buildmode=pie"], false),
    ("pie-stripped", &["-buildmode=pie", "-ldflags=-s -w"], false),
    (
        "pie-external",
        &["-buildmode=pie", "-ldflags=-linkmode=external"],
        true,
    ),
    (
        "pie-external-stripped",
        &["-buildmode=pie", "-ldflags=-linkmode=external -s -w"],
        true,
    ),
];

fn builds(v: GoVersion) -> Vec<(&'static str, PathBuf)> {
    KINDS
        .iter()
        .map(|&(kind, flags, cgo)| (kind, build(v, "sig", kind, flags, cgo)))
        .collect()
}

fn latency_probe(symbol: &str, signature: Option<&str>) -> Probe {
    Probe {
        symbol: symbol.into(),
        signature: signature.map(Into::into),
        latency: true,
        ..Default::default()
    }
}

fn has_section(path: &Path, name: &str) -> bool {
    use object::{Object, ObjectSection};
    let data = std::fs::read(path).unwrap();
    let f = object::File::parse(&*data).unwrap();
    let found = f.sections().any(|s| s.name() == Ok(name));
    found
}

/// A Go latency plan: entry after the stack check, RET uprobes (each site a RET byte of
/// the file), never a uretprobe.
fn assert_ret_probes(what: &str, path: &Path, plan: &ProbePlan) {
    let data = std::fs::read(path).unwrap();
    assert!(
        !plan.uretprobe(),
        "{what}: a uretprobe on Go code: {plan:?}"
    );
    assert!(!plan.ret_offsets().is_empty(), "{what}: no RET sites");
    for &r in plan.ret_offsets() {
        assert!(
            matches!(data[r as usize], 0xc3 | 0xc2),
            "{what}: return site {r:#x} holds {:#x}, not a RET",
            data[r as usize]
        );
        assert_ne!(r, plan.entry_offset, "{what}");
    }
    assert_eq!(
        plan.pairing,
        Pairing::Goroutine,
        "{what}: Go pairs by goroutine"
    );
}

#[test]
fn every_build_kind_is_go_and_its_latency_probes_return_through_ret_uprobes() {
    let mut checked = 0;
    for v in VERSIONS {
        for (kind, path) in builds(v) {
            let what = format!("{} {kind}", v.tag());
            let b = open(&path);
            assert!(b.is_go(), "{what}: not taken for Go");
            assert_eq!(b.kind(), TargetKind::Go, "{what}");
            let ver = b.go_version().unwrap_or_default();
            assert!(ver.starts_with(v.tag()), "{what}: version {ver:?}");
            assert!(!b.go_marks().is_empty(), "{what}");
            if v == GoVersion::Go119 && kind.starts_with("pie-external") {
                // The case that was taken for C: no .gopclntab section at all.
                assert!(!has_section(&path, ".gopclntab"), "{what}");
                assert!(
                    b.go_marks()
                        .iter()
                        .any(|m| m.contains("found by its magic")),
                    "{what}: {:?}",
                    b.go_marks()
                );
            }
            // Function addresses agree with `go tool nm` of the unstripped twin (every
            // build kind of every release is compared in full by tests/addresses.rs).
            let f = b.find_function("main.bigFrame").unwrap();
            let sig = kind.ends_with("stripped").then_some("func(n int) string");
            let plan = plan_probe(&b, &latency_probe("main.bigFrame", sig), 256)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_ret_probes(&what, &path, &plan);
            assert!(
                plan.entry_offset > b.file_offset(f.addr).unwrap(),
                "{what}: the entry probe is after bigFrame's stack check"
            );
            // Captures use the Go register ABI: n is in RAX (register 0).
            let plan = plan_probe(
                &b,
                &Probe {
                    capture: vec!["n".into()],
                    ..latency_probe("main.bigFrame", Some("func(n int) string"))
                },
                256,
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(plan.entry_captures.len(), 1, "{what}");
            assert_eq!(
                plan.entry_captures[0].bpf.loc[0].reg, 0,
                "{what}: n not in RAX"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 16);
}

/// The uretprobe check does not rest on the detection: with it switched off (every
/// function taken for C, as Go 1.19 PIE builds linked externally were), a latency probe
/// on a Go function is refused with the Go function named, on every build that has the
/// function in its symbol tables; a C function of an externally linked build still gets
/// its uretprobe.
#[test]
fn no_uretprobe_is_planned_inside_go_code_whatever_the_detection_says() {
    let mut refused = 0;
    for v in VERSIONS {
        for (kind, path) in builds(v) {
            if kind.ends_with("stripped") {
                continue;
            }
            let what = format!("{} {kind}", v.tag());
            let b = Binary::open(&path).unwrap().with_go_detection_off();
            assert_eq!(b.kind(), TargetKind::Elf, "{what}");
            let e = plan_probe(&b, &latency_probe("main.bigFrame", None), 256)
                .expect_err(&format!("{what}: a uretprobe planned on main.bigFrame"));
            assert!(matches!(e, PlanError::UretprobeInGo { .. }), "{what}: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains("inside the Go function main.bigFrame") && msg.contains("latency"),
                "{what}: {msg}"
            );
            // Without a return there is no uretprobe to refuse (the entry is still
            // decoded from the function's start).
            let entry = plan_probe(
                &b,
                &Probe {
                    symbol: "main.bigFrame".into(),
                    ..Default::default()
                },
                256,
            );
            assert!(entry.is_ok(), "{what}: {entry:?}");
            if kind.contains("external") {
                // _start is the C runtime's (crt1.o), outside Go's text: C code.
                for b in [
                    open(&path),
                    Binary::open(&path).unwrap().with_go_detection_off(),
                ] {
                    let plan = plan_probe(&b, &latency_probe("_start", None), 256)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(plan.uretprobe(), "{what}: {plan:?}");
                }
            }
            refused += 1;
        }
    }
    assert_eq!(refused, 8);
}

/// Debian's age (Go 1.19, cgo, PIE, external linker, stripped): Go, with the version from
/// .go.buildinfo; its exported `crosscall2` is Go assembly (in the pclntab), so taken for
/// C it would get a uretprobe in Go code: refused; `x_cgo_mmap` is C and keeps it.
#[test]
fn debians_age_is_go_and_gets_no_uretprobe_in_go_code() {
    let test = "debians_age_is_go_and_gets_no_uretprobe_in_go_code";
    let age = require_program(test, "/usr/bin/age", "age");
    let path = age.as_path();
    let b = open(path);
    assert!(b.is_go() && b.kind() == TargetKind::Go);
    assert!(
        b.go_version().is_some_and(|v| v.starts_with("go1.19")),
        "{b:?}"
    );
    assert!(!has_section(path, ".gopclntab"));
    const WRITE: &str = "filippo.io/age/internal/stream.(*Writer).Write";
    let plan = plan_probe(
        &b,
        &Probe {
            capture: vec!["len(p)".into(), "n".into()],
            ..latency_probe(
                WRITE,
                Some("func(w *stream.Writer, p []byte) (n int, err error)"),
            )
        },
        256,
    )
    .unwrap();
    assert_ret_probes("age", path, &plan);
    // The Go register ABI: w in RAX, p in RBX (pointer), RCX (length), RDI (capacity).
    assert_eq!(
        plan.entry_captures[0].bpf.loc[0].reg, 1,
        "len(p) is read from RCX (x86 register 1): {plan:?}"
    );

    let c = Binary::open(path).unwrap().with_go_detection_off();
    let e = plan_probe(&c, &latency_probe("crosscall2", None), 256).unwrap_err();
    assert!(
        e.to_string().contains("inside the Go function crosscall2"),
        "{e}"
    );
    let plan = plan_probe(&c, &latency_probe("x_cgo_mmap", None), 256).unwrap();
    assert!(plan.uretprobe());
}
