//! Probe sites the kernel emulates (docs/DESIGN.md, "Probe sites"): a Go entry probe on the
//! stack check's conditional jump sees each call once while stacks grow (the jump is taken,
//! the function restarts after morestack, and BPF skips that hit), on Go 1.19 (whose
//! instruction after the check, `sub $N,%rsp`, is single-stepped), 1.21 and 1.27; a C
//! function built with CET is probed after its `endbr64` when a `push` follows, with its
//! arguments and results exact. Each probe's site class is in the summary file.

use gprobe_e2e::cc;
use gprobe_e2e::go::{repo_root, GoVersion, TempDir};
use gprobe_e2e::harness::{program, program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::collections::BTreeMap;

/// Runs e2e/testdata/stackgrow (built by `v`) under a probe on main.grow capturing `n`:
/// every call recorded exactly once (each `n` as many times as there were goroutines), and
/// the entry site is an emulated one.
fn grow_is_seen_once_per_call(v: GoVersion) {
    let bin = program("e2e/testdata/stackgrow", v, false);
    let spec = SpecBuilder::new("stackgrow")
        .executable(&bin)
        .probe(ProbeBuilder::new("main.grow").capture(["n"]))
        .yaml();
    let _guard = serial();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let (goroutines, depth) = (50u64, 40u64);
    let out = run_program(
        &bin,
        &[
            "-goroutines",
            &goroutines.to_string(),
            "-depth",
            &depth.to_string(),
        ],
    );
    let run = g.stop();
    let made: u64 = program_lines(&out, "calls=")[0]["calls"].parse().unwrap();
    assert_eq!(made, goroutines * (depth + 1));
    let mut per_n: BTreeMap<i64, u64> = BTreeMap::new();
    for r in run.records_of("main.grow") {
        *per_n.entry(r["args"]["n"].as_i64().unwrap()).or_default() += 1;
    }
    let want: BTreeMap<i64, u64> = (0..=depth as i64).map(|n| (n, goroutines)).collect();
    assert_eq!(per_n, want, "{v:?}: records per n\n{}", run.stderr);
    let s = run.summary();
    let p = s.probe("main.grow");
    assert_eq!(p.delivered, made);
    let site = p.site.as_ref().expect("the site of an attached probe");
    assert_eq!(site.entry, "emulated", "{v:?}: {site:?}\n{}", run.stderr);
    assert!(site.entry_ns.is_some_and(|ns| ns > 0), "{site:?}");
    assert!(
        run.stderr.contains("a conditional jump") && run.stderr.contains("(emulated)"),
        "the start-up measurement is logged\n{}",
        run.stderr
    );
}

#[test]
fn a_go_probe_on_the_stack_check_jump_sees_each_call_once_while_stacks_grow_go119() {
    require_trace("stackgrow");
    grow_is_seen_once_per_call(GoVersion::Go119);
}

#[test]
fn a_go_probe_on_the_stack_check_jump_sees_each_call_once_while_stacks_grow_go121() {
    require_trace("stackgrow");
    grow_is_seen_once_per_call(GoVersion::Go121);
}

#[test]
fn a_go_probe_on_the_stack_check_jump_sees_each_call_once_while_stacks_grow_go127() {
    require_trace("stackgrow");
    grow_is_seen_once_per_call(GoVersion::Go127);
}

/// framed() (endbr64; push %rbp) is probed on its push, square() (endbr64; imul) on its
/// first byte; both with a uretprobe for the result: every call's argument and result are
/// exact.
#[test]
fn a_cet_c_function_is_probed_after_its_endbr64_with_exact_values() {
    require_trace("cet");
    let dir = TempDir::new("cet");
    let bin = cc::build(
        &repo_root().join("e2e/testdata/cet/cet.c"),
        &dir.path().join("cet"),
        &["-O2", "-fcf-protection=full"],
        None,
    );
    let spec = SpecBuilder::new("cet")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("framed")
                .signature("long framed(long x)")
                .capture(["x", "r0"]),
        )
        .probe(
            ProbeBuilder::new("square")
                .signature("long square(long x)")
                .capture(["x", "r0"]),
        )
        .yaml();
    let _guard = serial();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let out = run_program(&bin, &["300"]);
    let run = g.stop();
    let calls = program_lines(&out, "call ");
    assert_eq!(calls.len(), 300);
    for (symbol, key) in [("framed", "framed"), ("square", "square")] {
        let mut seen: Vec<(i64, i64)> = run
            .records_of(symbol)
            .iter()
            .map(|r| {
                (
                    r["args"]["x"].as_i64().unwrap(),
                    r["returns"]["r0"].as_i64().unwrap(),
                )
            })
            .collect();
        seen.sort_unstable();
        let want: Vec<(i64, i64)> = calls
            .iter()
            .map(|c| (c["i"].parse().unwrap(), c[key].parse().unwrap()))
            .collect();
        assert_eq!(seen, want, "{symbol}\n{}", run.stderr);
    }
    let s = run.summary();
    let class = |symbol: &str| s.probe(symbol).site.as_ref().map(|x| x.entry.clone());
    assert_eq!(class("framed").as_deref(), Some("emulated"));
    assert_eq!(class("square").as_deref(), Some("single-stepped"));
}
