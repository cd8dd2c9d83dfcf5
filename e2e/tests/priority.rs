//! The priority of gprobe's threads: those that must keep up with a crowd of traced
//! processes run at nice -10, the others (and so the command of `gprobe run -- CMD`) at
//! gprobe's own. Needs root (BPF).

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, require_trace, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::collections::BTreeMap;

/// The engine thread, which processes held at exec or fork wait for, runs at a raised
/// priority (nice -10) so a busy node does not starve it past the hold deadline; so do the
/// runtime's threads (the ring buffer's reader) and the output thread, which a crowd would
/// otherwise starve until the ring fills. The other threads keep gprobe's own nice value.
#[test]
fn the_thread_that_held_processes_wait_for_runs_at_a_raised_priority() {
    require_trace("crowd");
    let bin = program("e2e/testdata/crowd", GoVersion::Go127, false);
    let spec = SpecBuilder::new("priority")
        .executable(&bin)
        .probe(ProbeBuilder::new("main.f1").latency())
        .yaml();
    let _guard = serial();
    let g = Gprobe::start(&spec, &[]);
    let mut nice = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", g.pid())).unwrap() {
        let task = task.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("stat")),
        ) else {
            continue;
        };
        // Fields after the command's closing parenthesis: state is field 3, nice 19.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let n: i32 = after.split(' ').nth(16).unwrap().parse().unwrap();
        nice.insert(comm.trim().to_string(), n);
    }
    g.stop();
    let raised = ["gprobe-engine", "gprobe-output", "tokio-rt-worker"];
    for t in raised {
        assert_eq!(nice.get(t), Some(&-10), "{t}: {nice:?}");
    }
    // The main thread, from which `gprobe run -- CMD` starts its command, as gprobe was
    // started (these tests may run under `nice`).
    let own = nice["gprobe"];
    assert!(own > -10, "{nice:?}");
    assert!(
        nice.iter()
            .filter(|(c, _)| !raised.contains(&c.as_str()))
            .all(|(_, n)| *n == own),
        "{nice:?}"
    );
}
