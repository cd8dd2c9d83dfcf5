//! Processes held at exec: released by the tick when the engine never heard of them,
//! and at shutdown.

use super::*;

#[test]
fn holds_past_the_deadline_are_released_by_the_tick() {
    let mut w = world(Mode::Local);
    w.kernel.borrow_mut().held.insert(
        42,
        Held {
            pid: 42,
            hold: Hold::new(0),
            kind: HoldKind::Exec,
        },
    );
    w.engine.tick(Instant::now());
    assert_eq!(w.kernel.borrow().resumed, [42]);
}

#[test]
fn shutdown_resumes_holds_and_detaches_everything() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    w.engine
        .process_seen(proc(11, "/app/shop", 7), Origin::Running);
    hold(&w, 99, HoldKind::Exec);
    assert!(w.engine.shutdown(Instant::now() + Duration::from_secs(1)));
    let k = w.kernel.borrow();
    assert!(k.links.is_empty());
    assert!(k.configs.is_empty());
    assert!(k.resumed.contains(&99));
}

#[test]
fn an_exec_event_of_the_image_already_traced_is_recognized() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    // Found by the startup scan; its exec event (queued before the scan) comes after.
    w.engine
        .process_seen(proc(40, "/app/shop", 7), Origin::Running);
    assert!(w.engine.traces_image(&proc(40, "/app/shop", 7)));
    // A new program in the pid, or another process in a reused pid: not the same image.
    assert!(!w.engine.traces_image(&proc(40, "/app/other", 8)));
    let mut reused = proc(40, "/app/shop", 7);
    reused.start_time += 1;
    assert!(!w.engine.traces_image(&reused));
    assert!(!w.engine.traces_image(&proc(41, "/app/shop", 7)));
    assert_eq!(w.stats.processes().matched, 1);
}

fn fork(w: &World, pid: u32, ppid: u32, held: bool) -> Origin {
    Origin::Fork {
        hold: held.then(|| hold(w, pid, HoldKind::Fork { ppid })),
        at: Instant::now(),
    }
}

#[test]
fn a_traced_process_is_marked_so_its_children_are_held_and_a_held_child_is_traced() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, true));
    assert!(w.kernel.borrow().traced.contains(&10));
    let log = w.kernel.borrow().log.clone();
    assert_eq!(
        log.last(),
        Some(&("resume", 10)),
        "marked traced before it runs: {log:?}"
    );
    // Its child, held at fork: attached, then resumed; traced from its first call.
    w.engine
        .process_seen(proc(11, "/app/shop", 7), fork(&w, 11, 10, true));
    let log = w.kernel.borrow().log.clone();
    let attach = log.iter().rposition(|e| *e == ("attach", 11)).unwrap();
    let resume = log.iter().rposition(|e| *e == ("resume", 11)).unwrap();
    assert!(attach < resume, "{log:?}");
    assert!(w.kernel.borrow().traced.contains(&11));
    // A child that was not held ran before its probes: it may have lost calls.
    w.engine
        .process_seen(proc(12, "/app/shop", 7), fork(&w, 12, 10, false));
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (3, 2, 1));
    assert_eq!(ps.missed[0].pid, 12);
    assert!(
        ps.missed[0].reason.contains("not held at fork"),
        "{}",
        ps.missed[0].reason
    );
    // Gone, it is no longer traced: a process reusing its pid forks unheld children.
    w.engine.process_ended(10);
    assert!(!w.kernel.borrow().traced.contains(&10));
}

#[test]
fn a_child_gone_before_inspection_counts_under_its_parents_specs() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    // Not held: it ran, and exited before gprobe saw it.
    w.engine.process_fork_gone(11, 10, None);
    // Held, then killed: it ran none of its code.
    let h = hold(&w, 12, HoldKind::Fork { ppid: 10 });
    w.engine.process_fork_gone(12, 10, Some(h));
    // The parent is not traced: not counted.
    w.engine.process_fork_gone(13, 99, None);
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (3, 2, 1));
    assert_eq!(
        (ps.missed[0].pid, ps.missed[0].executable.as_str()),
        (11, "/app/shop")
    );
    assert!(ps.missed[0]
        .reason
        .contains("exited before gprobe could inspect it"));
    assert_eq!(w.stats.processes_of("s").matched, 3);
}

#[test]
fn a_hold_past_the_deadline_is_resumed_and_its_process_counted_missed_when_handled() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    // Held 2.5 s ago at exec; the engine has not got to its event yet.
    let old = Hold::new(monotonic_ns() - 2_500_000_000);
    w.kernel.borrow_mut().held.insert(
        20,
        Held {
            pid: 20,
            hold: old,
            kind: HoldKind::Exec,
        },
    );
    assert_eq!(
        w.engine.due_holds(),
        [],
        "past the deadline: resumed, not queued"
    );
    assert_eq!(w.kernel.borrow().resumed, [20]);
    // Its event, handled now: attached, but it ran meanwhile.
    w.engine.process_seen(
        proc(20, "/app/shop", 7),
        Origin::Exec {
            hold: Some(old),
            at: Instant::now(),
        },
    );
    assert_eq!(live_links(&w, 20), 2);
    assert_eq!(w.kernel.borrow().resumed, [20], "resumed once");
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (1, 0, 1));
    assert!(
        ps.missed[0].reason.contains("past the hold deadline"),
        "{}",
        ps.missed[0].reason
    );
}

#[test]
fn holds_not_handled_yet_are_queued_oldest_first_and_their_late_events_ignored() {
    let mut w = world(Mode::Local);
    let now = monotonic_ns();
    let mut k = w.kernel.borrow_mut();
    for (pid, age_ms, kind) in [
        (30, 150, HoldKind::Exec),
        (31, 500, HoldKind::Fork { ppid: 3 }),
        (32, 10, HoldKind::Exec),
    ] {
        let hold = Hold::new(now - age_ms * 1_000_000);
        k.held.insert(pid, Held { pid, hold, kind });
    }
    drop(k);
    let due = w.engine.due_holds();
    let pids: Vec<u32> = due.iter().map(|h| h.pid).collect();
    assert_eq!(pids, [31, 30], "older than 100 ms, oldest first");
    assert!(!w.engine.was_handled(31, due[0].hold));
    w.engine.mark_handled(31, due[0].hold);
    assert!(w.engine.was_handled(31, due[0].hold));
    assert!(
        !w.engine.was_handled(31, Hold::new(1)),
        "another hold of it"
    );
}

#[test]
fn a_late_event_never_resumes_a_newer_hold() {
    let mut w = world(Mode::Local);
    let old = hold(&w, 40, HoldKind::Exec);
    w.engine.resume_held(40, old);
    assert_eq!(w.kernel.borrow().resumed, [40]);
    // Held again (its loader, say); the old hold's event comes late.
    let new = Hold::new(old.since_ns + 1);
    w.kernel.borrow_mut().held.insert(
        40,
        Held {
            pid: 40,
            hold: new,
            kind: HoldKind::Loader,
        },
    );
    w.engine.resume_held(40, old);
    assert_eq!(w.kernel.borrow().resumed, [40], "the new hold stays");
    w.engine.resume_held(40, new);
    assert_eq!(w.kernel.borrow().resumed, [40, 40]);
}

#[test]
fn holds_an_agent_that_died_left_are_attached_then_resumed_and_the_rest_let_go() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    let adopted = |pid| Held {
        pid,
        hold: Hold {
            since_ns: 5,
            adopted: true,
        },
        kind: HoldKind::Exec,
    };
    w.kernel.borrow_mut().adopted = vec![adopted(50), adopted(51), adopted(52)];
    w.engine.adopt_holds();
    // The scan finds 50 (selected) and 51 (not selected); 52 is gone.
    for (pid, exe) in [(50, "/app/shop"), (51, "/bin/other")] {
        let hold = w.engine.take_adopted(pid).unwrap().hold;
        w.engine
            .process_seen(proc(pid, exe, 7 + pid as u64), Origin::Adopted { hold });
    }
    assert_eq!(w.engine.take_adopted(50), None, "taken once");
    w.engine.release_adopted();
    let log = w.kernel.borrow().log.clone();
    let attach = log.iter().position(|e| *e == ("attach", 50)).unwrap();
    let resume = log.iter().position(|e| *e == ("resume", 50)).unwrap();
    assert!(attach < resume, "{log:?}");
    let mut resumed = w.kernel.borrow().resumed.clone();
    resumed.sort();
    assert_eq!(resumed, [50, 51, 52]);
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (1, 1, 0));
}

#[test]
fn lost_process_events_are_counted_and_call_for_one_rescan() {
    let mut w = world(Mode::Local);
    w.engine.tick(Instant::now());
    assert!(!w.engine.take_rescan());
    w.kernel.borrow_mut().proc_counts.lost = 7;
    w.engine.tick(Instant::now());
    assert_eq!(w.stats.processes().events_lost, 7);
    assert!(w.engine.take_rescan());
    assert!(!w.engine.take_rescan(), "once");
    w.engine.tick(Instant::now());
    assert!(!w.engine.take_rescan(), "no new losses");
    // A process the rescan finds started unseen: it may have lost calls.
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(60, "/app/shop", 7), Origin::Unseen);
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.missed_total), (1, 1));
    assert!(ps.missed[0].reason.contains("process events were lost"));
}
