//! A selected process gets its probes: a held one is attached before it runs, a probe that
//! cannot be placed is reported while the others run, and exit or exec into another program
//! takes them away again (the plans stay for the next process of the file).

use super::*;

#[test]
fn a_held_process_is_attached_before_it_is_resumed_and_others_are_left_alone() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: \"**/shop\"}", TWO))
        .unwrap();
    assert_eq!(
        w.kernel.borrow().comms,
        BTreeSet::from(["shop".to_string()])
    );
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, true));
    w.engine
        .process_seen(proc(11, "/app/other", 8), exec(&w, 11, true));
    let k = w.kernel.borrow();
    assert_eq!(
        k.log,
        [
            ("attach", 10),
            ("attach returns", 10),
            ("attach", 10),
            ("resume", 10),
            ("resume", 11)
        ],
        "probes first (a probe's returns before its entry), then the process runs; an \
         unselected one is resumed at once"
    );
    // main.a: 1 site; main.b (latency): its entry, and its 2 RETs in a link of their own.
    let mut sites: Vec<usize> = k.links.values().map(|(_, n)| *n).collect();
    sites.sort();
    assert_eq!(sites, [1, 1]);
    let rets: Vec<(u32, usize)> = k.ret_links.values().copied().collect();
    assert_eq!(rets, [(10, 2)]);
    assert!(k.links.values().all(|(p, _)| *p == 10), "nothing in pid 11");
    assert!(
        k.inos.contains(&7),
        "the next process of this file is held too"
    );
    drop(k);
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced, ps.missed_total), (1, 1, 0));
}

#[test]
fn a_probe_that_fails_is_reported_and_the_others_run() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "s",
            None,
            "{executable: /app/shop}",
            "[{symbol: main.missing}, {symbol: main.a}, {symbol: main.b, latency: true}]",
        ))
        .unwrap();
    // main.b's second RET cannot be placed: the whole probe is refused, nothing half-done.
    w.kernel.borrow_mut().bad_offset = Some(0x1011);
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, true));
    assert_eq!(live_links(&w, 10), 1, "main.a only");
    let probes = w.stats.probes();
    let by_symbol = |s: &str| {
        probes
            .iter()
            .find(|(k, _)| &*k.symbol == s)
            .unwrap()
            .1
            .clone()
    };
    assert!(by_symbol("main.a").attached);
    assert!(!by_symbol("main.missing").attached);
    assert!(by_symbol("main.missing")
        .error
        .unwrap()
        .contains("no function table"));
    assert!(by_symbol("main.b").error.unwrap().contains("0x1011"));
    let snap = w.engine.snapshot();
    assert_eq!(snap.specs[0].processes[0].probes.len(), 3);
    assert_eq!(w.kernel.borrow().resumed, [10]);
    assert_eq!(w.stats.processes().traced, 1);
}

#[test]
fn exit_detaches_flushes_the_reader_and_the_next_process_reuses_the_plans() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 2);
    let cfgs = w.kernel.borrow().configs.len();
    assert_eq!(cfgs, 3, "main.a entry, main.b entry and return");
    w.engine.process_exited(10);
    assert_eq!(live_links(&w, 10), 0);
    assert_eq!(w.exits.try_recv(), Ok(10));
    assert_eq!(
        w.kernel.borrow().configs.len(),
        3,
        "kept for the next process"
    );
    w.engine
        .process_seen(proc(12, "/app/shop", 7), exec(&w, 12, true));
    assert_eq!(live_links(&w, 12), 2);
    assert_eq!(*w.opened.borrow(), 1, "the binary was resolved once");
    // Idle binaries are freed after the TTL; their counts stay.
    w.kernel.borrow_mut().counts.insert(
        1,
        KernelCounts {
            hits: 5,
            lost: 2,
            ..Default::default()
        },
    );
    w.engine.process_exited(12);
    w.engine.tick(Instant::now() + Duration::from_secs(61));
    assert!(w.kernel.borrow().configs.is_empty());
    let key = ProbeKey {
        spec: "s".into(),
        name: "s".into(),
        index: 0,
        symbol: "main.a".into(),
    };
    assert_eq!(w.stats.probe(&key).lost, 2);
    assert_eq!(w.stats.probe(&key).hits, 5);
}

#[test]
fn exec_into_a_new_program_replaces_the_old_ones_probes() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "s",
            None,
            "{executable: \"/app/*\"}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    let mut other = proc(10, "/app/cart", 9);
    other.start_time = proc(10, "", 0).start_time; // exec keeps the start time
    w.engine.process_exited(10); // what the driver does on exec
    w.engine.process_seen(other, exec(&w, 10, true));
    assert_eq!(live_links(&w, 10), 1);
    assert_eq!(w.kernel.borrow().links.len(), 1);
    assert_eq!(w.exits.try_recv(), Ok(10));
}

#[test]
fn with_only_pid_set_other_processes_of_the_file_are_left_alone() {
    let mut w = world(Mode::Local);
    w.engine.opts.only_pid = Some(11);
    w.engine
        .add_spec(spec("s", None, "{executable: \"**/shop\"}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), exec(&w, 10, true));
    w.engine
        .process_seen(proc(11, "/app/shop", 7), Origin::Running);
    let k = w.kernel.borrow();
    assert!(!k.links.is_empty(), "pid 11 is traced");
    assert!(k.links.values().all(|(p, _)| *p == 11), "nothing in pid 10");
    assert_eq!(k.resumed, [10], "pid 10 runs on at once");
    drop(k);
    assert_eq!(w.stats.processes().matched, 1);
}
