//! Go processes with a latency probe get gprobe's probe on runtime.newproc1 (one attach of
//! its entry and returns), configured once per executable, and lose it when a changed spec
//! leaves them no latency probe, and at exit; processes without one pay nothing for it.

use super::*;

#[test]
fn latency_probes_bring_the_newproc_probe_and_take_it_away() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "plain",
            None,
            "{executable: /app/go}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    for pid in NEWPROC_PIDS {
        w.engine
            .process_seen(proc(pid, "/app/go", 12), Origin::Running);
        assert_eq!(live_links(&w, pid), 1, "main.a alone: no latency probe");
    }
    let configs = w.kernel.borrow().configs.len();
    w.engine
        .add_spec(spec(
            "lat",
            None,
            "{executable: /app/go}",
            "[{symbol: main.b, latency: true}]",
        ))
        .unwrap();
    for pid in NEWPROC_PIDS {
        w.engine
            .process_seen(proc(pid, "/app/go", 12), Origin::Running);
        assert_eq!(
            live_links(&w, pid),
            3,
            "main.a, main.b and runtime.newproc1"
        );
    }
    let three_sites = w
        .kernel
        .borrow()
        .links
        .values()
        .filter(|(_, n)| *n == 3)
        .count();
    assert_eq!(
        three_sites, 2,
        "one link of newproc1's entry and two returns per process"
    );
    assert_eq!(
        w.kernel.borrow().configs.len(),
        configs + 2 + 2,
        "main.b's two, and newproc1's two shared by the processes of the executable"
    );
    // The spec changed: main.b without latency, so no span a goroutine could inherit.
    assert!(w.engine.upsert_spec(spec(
        "lat",
        None,
        "{executable: /app/go}",
        "[{symbol: main.b}]",
    )));
    for pid in NEWPROC_PIDS {
        assert_eq!(
            live_links(&w, pid),
            2,
            "main.a and main.b: the newproc probe went with the last latency probe"
        );
    }
    for pid in NEWPROC_PIDS {
        w.engine.process_exited(pid);
        assert_eq!(live_links(&w, pid), 0);
    }
}

#[test]
fn the_newproc_probe_goes_with_the_last_spec_that_wanted_it() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "plain",
            None,
            "{executable: /app/go}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    let lat = w
        .engine
        .add_spec(spec(
            "lat",
            None,
            "{executable: /app/go}",
            "[{symbol: main.b, latency: true}]",
        ))
        .unwrap();
    let pid = NEWPROC_PIDS[0];
    w.engine
        .process_seen(proc(pid, "/app/go", 12), Origin::Running);
    assert_eq!(
        live_links(&w, pid),
        3,
        "main.a, main.b and runtime.newproc1"
    );
    // The spec with the latency probe is deleted; the other still selects the process.
    w.engine.remove_spec(lat);
    assert_eq!(
        live_links(&w, pid),
        1,
        "main.a alone: main.b and the newproc probe went with their spec"
    );
    w.engine.process_exited(pid);
    assert_eq!(live_links(&w, pid), 0);
}
