//! Processes not traced from their first call: gone before or while their probes were
//! attached, planned through a process that exited, or not held at exec. Each is counted
//! as missed with its reason (unless it was held) and blamed on no probe.

use super::*;

#[test]
fn a_process_gone_before_or_during_attach_is_missed_unless_held_and_blames_no_probe() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    // Not held, gone at its first attach.
    w.kernel.borrow_mut().gone.insert(10);
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, false));
    // Not held, gone after its first probe was attached: that one is detached again.
    w.kernel.borrow_mut().gone_after.insert(11, 1);
    w.engine
        .process_seen(proc(11, "/app/shop", 7), exec(&w, 11, false));
    // Held (stopped before its first instruction) and killed meanwhile: none of its calls
    // can have been missed.
    w.kernel.borrow_mut().gone.insert(12);
    w.engine
        .process_seen(proc(12, "/app/shop", 7), exec(&w, 12, true));
    for pid in [10, 11, 12] {
        assert_eq!(live_links(&w, pid), 0);
        assert!(!w.engine.is_tracked(pid));
    }
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (3, 1, 2));
    let reasons: Vec<(u32, &str)> = ps
        .missed
        .iter()
        .map(|m| (m.pid, m.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (10, "exited before gprobe could attach"),
            (11, "exited while its probes were being attached")
        ]
    );
    assert_eq!(
        w.kernel.borrow().resumed,
        [12],
        "the hold is released anyway"
    );
    for (k, p) in w.stats.probes() {
        assert_eq!(
            p.error, None,
            "{k}: a process that exits is no probe's fault"
        );
    }
    assert!(w.kernel.borrow().traced.is_empty());
    // A process gone before it could even be inspected counts when its path matches;
    // missed unless it was held.
    w.engine.process_exec_gone(13, Path::new("/app/shop"), None);
    w.engine.process_exec_gone(14, Path::new("/bin/true"), None);
    let h = hold(&w, 15, HoldKind::Exec);
    w.engine
        .process_exec_gone(15, Path::new("/app/shop"), Some(h));
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (5, 2, 3));
    assert_eq!(ps.missed[2].pid, 13);
}

#[test]
fn a_binary_read_through_a_process_that_exited_is_planned_again_for_the_next_one() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(66, "/app/shop", 7), exec(&w, 66, false));
    assert!(!w.engine.is_tracked(66));
    // The next process of the same file is planned through itself, not refused with the
    // error of the first (before: "cannot read ...; check that the file exists" for every
    // process of the file until the spec changed).
    w.engine
        .process_seen(proc(67, "/app/shop", 7), exec(&w, 67, true));
    assert_eq!(live_links(&w, 67), 2);
    assert_eq!(*w.opened.borrow(), 2, "planned again, through pid 67");
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (2, 1, 1));
    assert_eq!(ps.missed[0].reason, "exited before gprobe could attach");
    for (k, p) in w.stats.probes() {
        assert_eq!(
            p.error, None,
            "{k}: a process that exits is no probe's fault"
        );
    }
}

#[test]
fn a_process_not_held_at_exec_is_traced_but_listed_as_missed() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "s",
            None,
            "{executable: \"/app/*\"}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    assert!(
        w.kernel.borrow().comms.is_empty(),
        "no literal name to hold by"
    );
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, false));
    assert_eq!(live_links(&w, 10), 1);
    let ps = w.stats.processes();
    assert_eq!((ps.traced, ps.missed_total), (0, 1));
    assert!(
        ps.missed[0].reason.contains("not held at exec"),
        "{}",
        ps.missed[0].reason
    );
    // From now on this file's processes are held.
    assert!(w.kernel.borrow().inos.contains(&7));
}
