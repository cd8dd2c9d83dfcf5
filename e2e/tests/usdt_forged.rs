//! USDT notes that sys/sdt.h did not write are refused, and the program is not harmed:
//! e2e/testdata/forged has a note whose pc is one byte into a 10-byte `movabs` (a
//! breakpoint there replaces a byte of its immediate: every result would be wrong), one at
//! an `add` (a boundary, but not sys/sdt.h's `nop`), and a real STAP_PROBE2 that must still
//! be traced. The program checks each of its 200 results itself. It needs root (BPF).

use gprobe_e2e::cc;
use gprobe_e2e::go::{repo_root, TempDir};
use gprobe_e2e::harness::{program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};

#[test]
fn forged_usdt_notes_are_refused_and_the_program_computes_right() {
    let _serial = serial();
    require_trace("forged_usdt_notes_are_refused_and_the_program_computes_right");
    let dir = TempDir::new("forged");
    let bin = cc::build(
        &repo_root().join("e2e/testdata/forged/forged.c"),
        &dir.path().join("forged"),
        &["-g"],
        None,
    );
    let spec = SpecBuilder::new("forged")
        .executable(&bin)
        .probe(ProbeBuilder::usdt("forged:inside"))
        .probe(ProbeBuilder::usdt("forged:notnop"))
        .probe(
            ProbeBuilder::usdt("forged:good")
                .signature("(long i, long r)")
                .capture(["i", "r"]),
        )
        .yaml();
    let g = Gprobe::cmd(&spec).summary_file().start();
    // run_program asserts that it exits 0: it exits 1 when any result was wrong.
    let out = run_program(&bin, &["-n", "200"]);
    let run = g.stop();
    assert!(run.status.success(), "gprobe failed:\n{}", run.stderr);

    let lines = program_lines(&out, "calls=");
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0]["calls"], "200", "{out}");
    assert_eq!(lines[0]["wrong"], "0", "{out}");

    // The real note is traced: every call, with the values the program passed.
    let good = run.records_of("usdt:forged:good");
    let got: Vec<(i64, i64)> = good
        .iter()
        .map(|r| {
            (
                r["args"]["i"].as_i64().unwrap(),
                r["args"]["r"].as_i64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(i64, i64)> = (0..200).map(|i| (i, i * 3 + 0x1122334455667788)).collect();
    assert_eq!(got, want);

    // The forged ones are refused, each with its provider:name and the reason.
    let summary = run.summary();
    for (point, reason) in [
        ("forged:inside", "inside the instruction"),
        ("forged:notnop", "not the `nop`"),
    ] {
        let p = summary.probe(&format!("usdt:{point}"));
        assert!(!p.attached, "{point}: {p:?}");
        let e = p.error.as_deref().unwrap_or_default();
        assert!(e.contains(point) && e.contains(reason), "{point}: {e}");
        assert!(
            run.stderr.contains(point) && run.stderr.contains(reason),
            "{point}:\n{}",
            run.stderr
        );
        assert!(run.records_of(&format!("usdt:{point}")).is_empty());
    }
    assert!(summary.probe("usdt:forged:good").attached);
}
