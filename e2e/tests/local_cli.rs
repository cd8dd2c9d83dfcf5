//! gprobe's command line without tracing: clear errors for malformed specs, and
//! `gprobe symbols` on binaries with and without DWARF.

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{gprobe_bin, gprobe_once, program};
use gprobe_e2e::spec::{raw, ProbeBuilder, SpecBuilder};

#[test]
fn malformed_specs_are_clear_errors() {
    // Not YAML: the flow mapping is never closed.
    let run = gprobe_once(
        &raw("apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: x}\nspec:\n  selector: {executable: /bin/x\n"),
        &[],
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("spec.yaml: document 1:") && run.stderr.contains("line"),
        "{}",
        run.stderr
    );

    // An empty selector.
    let run = gprobe_once(
        &SpecBuilder::new("x")
            .probe(ProbeBuilder::new("main.f"))
            .yaml(),
        &[],
    );
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("no ProbeSpec can run") && run.stderr.contains("selects nothing"),
        "{}",
        run.stderr
    );
}

#[test]
fn symbols_lists_functions_with_dwarf_signatures_and_stripped_ones_without() {
    let full = program("e2e/testdata/zoo", GoVersion::Go127, false);
    let stripped = program("e2e/testdata/zoo", GoVersion::Go127, true);
    let list = |bin: &std::path::Path| {
        let o = std::process::Command::new(gprobe_bin())
            .args([
                "symbols",
                bin.to_str().unwrap(),
                "--filter",
                r"^main\.(kinds|fail)$",
            ])
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    let out = list(&full);
    assert!(
        out.starts_with(&format!("# {}: Go binary (go1.27", full.display())),
        "{out}"
    );
    assert!(out.contains("main.fail  func(n int) (r0 error)"), "{out}");
    assert!(
        out.contains("main.kinds  func(b bool, i8 int8, u16 uint16, i32 int32, u64 uint64, p *int, bs []uint8, e error) (ok bool, n int)"),
        "{out}"
    );
    let out = list(&stripped);
    assert!(
        out.contains("stripped (no symbol table), no DWARF: probes need a signature"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("main.")).count(),
        2,
        "{out}"
    );
    let o = std::process::Command::new(gprobe_bin())
        .args(["symbols", "/nonexistent/binary"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/binary"));
}
