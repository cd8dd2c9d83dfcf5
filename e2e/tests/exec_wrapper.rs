//! A program started through a wrapper that execs it in the same pid (`taskset`, `env`,
//! `nice`): the wrapper's own exec event may be read after the program replaced it, and
//! must not be taken for the program. Every run is traced once, from its first call, and
//! none is listed as missed. And two gprobes that both hold a new process (both watch its
//! name): each traces it from its first call, the first to let go does not resume it under
//! the other. Needs root (BPF), cc and sys/sdt.h (systemtap-sdt-dev).

use gprobe_e2e::go::{repo_root, TempDir};
use gprobe_e2e::harness::{require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const RUNS: usize = 8;
const CALLS: u64 = 2000;

/// bench/c/loop.c built into `dir`.
fn c_loop(dir: &TempDir) -> std::path::PathBuf {
    let bin = dir.path().join("loop");
    let cc = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(repo_root().join("bench/c/loop.c"))
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    bin
}

fn loop_spec(name: &str, bin: &Path) -> String {
    SpecBuilder::new(name)
        .executable(bin)
        .probe(
            ProbeBuilder::new("target")
                .signature("long target(long n, const char *s)")
                .capture(["n", "r0"])
                .latency(),
        )
        .events_per_second(0)
        .yaml()
}

#[test]
fn programs_exec_d_by_a_wrapper_are_traced_once_from_their_first_call() {
    require_trace("exec wrapper");
    let dir = TempDir::new("exec-wrapper");
    let bin = c_loop(&dir);
    let spec = loop_spec("wrapped", &bin);

    let _guard = serial();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let wrappers: [&[&str]; 3] = [&["taskset", "-c", "0"], &["env"], &["nice", "-n", "1"]];
    for i in 0..RUNS {
        let w = wrappers[i % wrappers.len()];
        let mut args: Vec<&str> = w[1..].to_vec();
        let calls = CALLS.to_string();
        args.extend([bin.to_str().unwrap(), &calls]);
        let out = run_program(Path::new(w[0]), &args);
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["calls"], CALLS);
    }
    every_run_traced_once_from_its_first_call(g, "gprobe");
}

/// Stops `g` and checks that it traced each of the RUNS runs from its first call: every
/// process matched and traced, none missed, every call delivered once, in order.
fn every_run_traced_once_from_its_first_call(g: Gprobe, name: &str) {
    let run = g.stop();
    assert!(run.status.success(), "{name}: {}", run.stderr);
    let s = run.summary();
    assert_eq!(
        (
            s.processes.matched,
            s.processes.traced,
            s.processes.missed.len()
        ),
        (RUNS as u64, RUNS as u64, 0),
        "{name}: {}",
        run.stderr
    );
    let p = s.probe("target");
    assert_eq!(
        (p.delivered, p.lost, p.unfinished),
        (RUNS as u64 * CALLS, 0, 0),
        "{name}: every call of every run, from its first"
    );
    // Each run's calls exactly once, in order: n = 0, 1, 2, ...
    let mut by_pid: std::collections::BTreeMap<u64, Vec<i64>> = Default::default();
    for r in run.records_of("target") {
        let pid = r["pid"].as_u64().unwrap();
        by_pid
            .entry(pid)
            .or_default()
            .push(r["args"]["n"].as_i64().unwrap());
    }
    assert_eq!(by_pid.len(), RUNS, "{name}");
    let want: Vec<i64> = (0..CALLS as i64).collect();
    for (pid, ns) in by_pid {
        assert_eq!(ns, want, "{name}: pid {pid}");
    }
}

#[test]
fn two_gprobes_holding_one_process_each_trace_it_from_its_first_call() {
    require_trace("two gprobes");
    let dir = TempDir::new("two-gprobes");
    let bin = c_loop(&dir);
    let _guard = serial();
    let a = Gprobe::cmd(&loop_spec("first", &bin))
        .summary_file()
        .start();
    let b = Gprobe::cmd(&loop_spec("second", &bin))
        .summary_file()
        .start();
    a.wait_ready();
    b.wait_ready();
    for _ in 0..RUNS {
        let calls = CALLS.to_string();
        let out = run_program(&bin, &[&calls]);
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["calls"], CALLS);
    }
    // Neither let a process run before the other attached (pins::held_by_another).
    every_run_traced_once_from_its_first_call(a, "first");
    every_run_traced_once_from_its_first_call(b, "second");
}
