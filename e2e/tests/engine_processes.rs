//! The engine on real processes: a probe costs only the process it selects, short-lived
//! processes are traced from their first call (or listed as missed, with the reason), calls
//! in flight when a process dies are reported at once, recursion deeper than the pairing
//! stack is counted. They need root (BPF); CI on the project's machines runs them all.

use gprobe_e2e::go::{GoVersion, TempDir};
use gprobe_e2e::harness::{program, program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::procmem::{byte_at_file_offset, probe_offset, INT3};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn lifecycle() -> PathBuf {
    program("e2e/testdata/lifecycle", GoVersion::Go127, false)
}

fn work_spec(name: &str, exe: &str) -> String {
    SpecBuilder::new(name)
        .executable(exe)
        .probe(
            ProbeBuilder::new("main.work")
                .signature("func(i int64) int64")
                .capture(["i"]),
        )
        .events_per_second(0)
        .yaml()
}

fn ns_per_call(out: &str) -> f64 {
    program_lines(out, "calls")[0]["ns_per_call"]
        .parse()
        .unwrap()
}

/// Waits (up to 10 s) for `cond`.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_unselected_process_of_the_same_file_pays_nothing_and_appears_nowhere() {
    require_trace("blast radius");
    let bin = lifecycle();
    // Two paths to one file (a hard link): only the first is selected.
    let dir = TempDir::new("blast");
    let (a, b) = (
        dir.path().join("a/lifecycle"),
        dir.path().join("b/lifecycle"),
    );
    for p in [&a, &b] {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    }
    std::fs::copy(&bin, &a).unwrap();
    std::fs::hard_link(&a, &b).unwrap();
    let baseline = ns_per_call(&run_program(&b, &["-mode", "loop", "-duration", "1s"]));

    let _guard = serial();
    let g = Gprobe::cmd(&work_spec("blast", a.to_str().unwrap()))
        .summary_file()
        .start();
    // Long enough to outlive a slow first attach: the file is planned when its first
    // process starts, which took up to about 3 s of a 3 s run on a loaded machine, and the
    // breakpoint is read from the live process after the attach line.
    let loop_args = ["-mode", "loop", "-duration", "8s"];
    let spawn = |p: &Path| {
        Command::new(p)
            .args(loop_args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (ca, cb) = (spawn(&a), spawn(&b));
    let (pa, pb) = (ca.id(), cb.id());
    g.wait_for_stderr(
        |s| s.contains(&format!("pid {pa})")),
        Duration::from_secs(10),
    );
    // The kernel wrote the breakpoint into the selected process only.
    let off = probe_offset(&a, "main.work");
    assert_eq!(
        byte_at_file_offset(pa, off),
        INT3,
        "selected process has the uprobe"
    );
    assert_ne!(
        byte_at_file_offset(pb, off),
        INT3,
        "the other process has none"
    );
    let (oa, ob) = (
        ca.wait_with_output().unwrap(),
        cb.wait_with_output().unwrap(),
    );
    let run = g.stop();
    let (oa, ob) = (
        String::from_utf8_lossy(&oa.stdout).into_owned(),
        String::from_utf8_lossy(&ob.stdout).into_owned(),
    );
    // Its rate is what it was without gprobe (a breakpoint on every call costs ~1000x;
    // the bound leaves room for a busy machine).
    let (traced, untraced) = (ns_per_call(&oa), ns_per_call(&ob));
    eprintln!("ns per call: unselected {untraced:.1} (alone {baseline:.1}), selected {traced:.1}");
    assert!(
        untraced < baseline * 5.0 + 20.0,
        "the unselected process slowed down: {untraced:.1} ns per call, {baseline:.1} alone"
    );
    assert!(
        traced > untraced * 20.0,
        "the selected one was traced: {traced:.1} ns"
    );
    let s = run.summary();
    assert_eq!((s.processes.matched, s.processes.traced), (1, 1));
    let calls_a: u64 = program_lines(&oa, "calls")[0]["calls"].parse().unwrap();
    let p = s.probe("main.work");
    assert_eq!(
        p.delivered + p.lost,
        calls_a,
        "every call of the selected process, delivered or counted: {p:?}"
    );
    assert!(!run.stderr.contains(&format!("pid {pb}")), "{}", run.stderr);
}

#[test]
fn short_lived_processes_are_traced_from_their_first_call() {
    require_trace("short-lived");
    let bin = lifecycle();
    let _guard = serial();
    let g = Gprobe::cmd(&work_spec("short", bin.to_str().unwrap()))
        .summary_file()
        .start();
    // 150 processes living about 40 ms, three at a time.
    let mut pids = BTreeSet::new();
    for _ in 0..50 {
        let kids: Vec<_> = (0..3)
            .map(|_| {
                Command::new(&bin)
                    .args(["-mode", "short", "-calls", "5", "-sleep", "8ms"])
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut k in kids {
            pids.insert(k.id());
            assert!(k.wait().unwrap().success());
        }
    }
    let run = g.stop();
    let s = run.summary();
    assert_eq!(s.processes.matched, 150, "{}", run.stderr);
    assert_eq!(
        s.processes.traced, 150,
        "missed: {:?}\n{}",
        s.processes.missed, run.stderr
    );
    // Every call of every process, from the first.
    let mut by_pid: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for r in run.records_of("main.work") {
        by_pid
            .entry(r["pid"].as_u64().unwrap())
            .or_default()
            .push(r["args"]["i"].as_i64().unwrap());
    }
    assert_eq!(
        by_pid.keys().map(|p| *p as u32).collect::<BTreeSet<_>>(),
        pids
    );
    for (pid, mut calls) in by_pid {
        calls.sort();
        assert_eq!(calls, [0, 1, 2, 3, 4], "pid {pid}");
    }
    assert_eq!(s.probe("main.work").delivered, 750);
}

#[test]
fn a_process_started_before_its_file_was_known_is_listed_as_missed_with_the_reason() {
    require_trace("missed");
    let bin = lifecycle();
    let dir = TempDir::new("missed");
    let exe = dir.path().join("lifecycle");
    std::fs::copy(&bin, &exe).unwrap();
    let _guard = serial();
    // A glob with a wildcard name: nothing tells gprobe to hold the first process at exec.
    let glob = format!("{}/*", dir.path().display());
    let g = Gprobe::cmd(&work_spec("missed", &glob))
        .summary_file()
        .start();
    let first = run_program(&exe, &["-mode", "short", "-calls", "20", "-sleep", "50ms"]);
    // Now its file is known: the next process is held at exec and traced from its first call.
    let second = run_program(&exe, &["-mode", "short", "-calls", "20", "-sleep", "1ms"]);
    let run = g.stop();
    assert!(first.contains("calls=20") && second.contains("calls=20"));
    let s = run.summary();
    assert_eq!(s.processes.matched, 2, "{}", run.stderr);
    assert_eq!(s.processes.traced, 1);
    assert_eq!(s.processes.missed.len(), 1);
    let m = &s.processes.missed[0];
    assert!(
        m.reason.contains("not held at exec") || m.reason.contains("exited before"),
        "{m:?}"
    );
    assert!(m.executable.ends_with("lifecycle"), "{m:?}");
    let traced_pid = run
        .records_of("main.work")
        .iter()
        .map(|r| r["pid"].as_u64().unwrap() as u32)
        .filter(|p| *p != m.pid)
        .collect::<BTreeSet<_>>();
    assert_eq!(traced_pid.len(), 1);
    let from_second = run
        .records_of("main.work")
        .iter()
        .filter(|r| r["pid"].as_u64().unwrap() as u32 != m.pid)
        .count();
    assert_eq!(from_second, 20, "the held process, from its first call");
    assert!(
        run.stderr.contains("not traced from its first call"),
        "{}",
        run.stderr
    );
}

#[test]
fn calls_in_flight_when_a_process_is_killed_are_reported_at_once() {
    require_trace("in flight");
    let bin = lifecycle();
    let _guard = serial();
    let spec = SpecBuilder::new("inflight")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("main.block")
                .signature("func(i int64) int64")
                .capture(["i"])
                .latency(),
        )
        .yaml();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let mut child = Command::new(&bin)
        .args(["-mode", "block"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "blocking=42");
    child.kill().unwrap();
    child.wait().unwrap();
    // Reported while gprobe runs, not only when it stops.
    wait_until("the unfinished call", || {
        g.stdout_now().contains("\"unfinished\":true")
    });
    let run = g.stop();
    let recs = run.records_of("main.block");
    assert_eq!(recs.len(), 1, "{}", run.stdout);
    assert_eq!(recs[0]["args"]["i"], 42);
    assert_eq!(recs[0]["unfinished"], true);
    assert!(recs[0].get("duration_ns").is_none() || recs[0]["duration_ns"].is_null());
    assert_eq!(run.summary().probe("main.block").unfinished, 1);
}

#[test]
fn recursion_deeper_than_the_pairing_stack_is_counted_and_the_rest_pairs_exactly() {
    require_trace("recursion");
    let bin = lifecycle();
    let _guard = serial();
    let spec = SpecBuilder::new("rec")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("main.rec")
                .signature("func(d int64) int64")
                .capture(["d", "r0"])
                .latency(),
        )
        .events_per_second(0)
        .yaml();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let out = run_program(&bin, &["-mode", "recurse", "-calls", "10", "-depth", "20"]);
    assert!(out.contains("calls=200"), "{out}");
    let run = g.stop();
    let recs = run.records_of("main.rec");
    // The outer 16 levels of each recursion (d = 20 down to 5) are paired, each with its
    // own result (rec(d) returns d); the 4 deeper ones are counted.
    let mut depths: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &recs {
        let d = r["args"]["d"].as_i64().unwrap();
        assert_eq!(r["returns"]["r0"].as_i64().unwrap(), d, "{r}");
        *depths.entry(d).or_default() += 1;
    }
    assert_eq!(
        depths,
        (5..=20).map(|d| (d, 10)).collect::<BTreeMap<_, _>>()
    );
    let json = run.summary_json();
    let p = json["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["symbol"] == "main.rec")
        .unwrap();
    assert_eq!(p["delivered"], 160);
    assert_eq!(p["too_deep"], 40, "{json}");
    assert_eq!(p["unfinished"], 0);
    assert!(run.stderr.contains("nested deeper"), "{}", run.stderr);
}
