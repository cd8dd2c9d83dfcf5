//! Probes on shared libraries, loaded at start or later (dlopen), and the dynamic loader
//! hook that stops a process until their probes are attached.

use super::*;

fn lib(path: &str, ino: u64) -> crate::discover::MappedFile {
    crate::discover::MappedFile {
        path: path.into(),
        key: FileKey { dev: 2, ino },
    }
}

#[test]
fn library_probes_go_into_the_libraries_the_glob_names_also_when_loaded_later() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "tls",
            None,
            "{executable: /app/shop}",
            "[{symbol: SSL_write, library: \"libssl.so*\"}, {symbol: main.a}]",
        ))
        .unwrap();
    let mut p = proc(10, "/app/shop", 7);
    p.libraries = vec![lib("/usr/lib/libc.so.6", 50)];
    w.engine.process_seen(p, exec(&w, 10, true));
    assert_eq!(
        live_links(&w, 10),
        1,
        "main.a now; SSL_write when libssl is loaded"
    );
    assert_eq!(
        w.stats.processes().traced,
        1,
        "waiting for a library is not a miss"
    );
    assert_eq!(w.engine.pids_with_library_probes(), [10]);
    w.engine.libraries_changed(
        10,
        vec![
            lib("/usr/lib/libc.so.6", 50),
            lib("/usr/lib/x86_64-linux-gnu/libssl.so.3", 51),
        ],
    );
    assert_eq!(live_links(&w, 10), 2);
    let snap = w.engine.snapshot();
    assert_eq!(snap.specs[0].processes[0].probes.len(), 2);
    // Seen again: nothing attached twice.
    w.engine.libraries_changed(
        10,
        vec![
            lib("/usr/lib/x86_64-linux-gnu/libssl.so.3", 51),
            lib("/usr/lib/libc.so.6", 50),
        ],
    );
    assert_eq!(live_links(&w, 10), 2);
    w.engine.process_exited(10);
    assert_eq!(live_links(&w, 10), 0);
}

#[test]
fn the_loader_of_a_process_with_library_probes_holds_it_until_new_libraries_are_attached() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec(
            "jvm",
            None,
            "{executable: /usr/bin/java}",
            "[{usdt: \"hotspot:class__loaded\", library: libjvm.so}]",
        ))
        .unwrap();
    w.engine
        .add_spec(spec("plain", None, "{executable: /usr/bin/other}", TWO))
        .unwrap();
    // Held at exec: only the executable and its loader are mapped.
    let mut java = proc(20, "/usr/bin/java", 8);
    java.libraries = vec![lib("/usr/lib64/ld-linux-x86-64.so.2", 60)];
    w.engine.process_seen(java, exec(&w, 20, true));
    let loader_sites: Vec<(u32, usize)> = w.kernel.borrow().links.values().copied().collect();
    assert_eq!(loader_sites, [(20, 1)], "one uprobe: the loader hook");
    assert_eq!(
        w.kernel.borrow().resumed,
        [20],
        "resumed after the hook is placed"
    );

    // A process without library probes pays nothing for its loader.
    let mut other = proc(21, "/usr/bin/other", 9);
    other.libraries = vec![lib("/usr/lib64/ld-linux-x86-64.so.2", 60)];
    w.engine.process_seen(other, exec(&w, 21, false));
    assert_eq!(live_links(&w, 21), 2, "main.a and main.b, no loader hook");

    // The hook stopped it after libjvm.so was mapped: attached, then resumed.
    let h = hold(&w, 20, HoldKind::Loader);
    w.engine.loader_event(
        20,
        Some(h),
        vec![
            lib("/usr/lib64/ld-linux-x86-64.so.2", 60),
            lib("/usr/lib/jvm/lib/server/libjvm.so", 61),
        ],
    );
    assert_eq!(live_links(&w, 20), 2, "the loader hook and the USDT probe");
    let log = w.kernel.borrow().log.clone();
    let attach = log.iter().rposition(|e| *e == ("attach", 20)).unwrap();
    let resume = log.iter().rposition(|e| *e == ("resume", 20)).unwrap();
    assert!(attach < resume, "attached before resumed: {log:?}");
    // A hook hit that changed nothing still resumes the process.
    let h = hold(&w, 20, HoldKind::Loader);
    w.engine.loader_event(
        20,
        Some(h),
        vec![
            lib("/usr/lib64/ld-linux-x86-64.so.2", 60),
            lib("/usr/lib/jvm/lib/server/libjvm.so", 61),
        ],
    );
    assert_eq!(w.kernel.borrow().resumed, [20, 20, 20]);
    assert_eq!(live_links(&w, 20), 2);
    // Exit detaches the hook with the rest.
    w.engine.process_exited(20);
    assert_eq!(live_links(&w, 20), 0);
}

#[test]
fn a_hold_past_the_deadline_is_resumed_by_the_tick_even_for_a_traced_process() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("s", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(30, "/app/shop", 7), exec(&w, 30, false));
    // Held 3 s ago (by its loader hook, say) and never reported.
    let long_ago = Hold::new(monotonic_ns().saturating_sub(3_000_000_000));
    w.kernel.borrow_mut().held.insert(
        30,
        Held {
            pid: 30,
            hold: long_ago,
            kind: HoldKind::Loader,
        },
    );
    w.engine.tick(Instant::now());
    assert_eq!(w.kernel.borrow().resumed, [30]);
}
