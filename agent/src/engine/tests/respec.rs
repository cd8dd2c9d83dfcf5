//! ProbeSpecs added, changed and deleted: a new version's probes replace the old ones' in
//! the processes it selects, which stay tracked; nothing of the old versions piles up; a
//! deleted spec takes its probes and configurations with it.

use super::*;

fn shop(probes: &str) -> ProbeSpec {
    spec("s", None, "{executable: /app/shop}", probes)
}

#[test]
fn spec_add_change_and_delete() {
    let mut w = world(Mode::Local);
    let id = w
        .engine
        .add_spec(spec(
            "s",
            None,
            "{executable: /app/shop}",
            "[{symbol: main.a}]",
        ))
        .unwrap();
    assert!(matches!(
        w.engine.add_spec(spec(
            "s",
            None,
            "{executable: /app/shop}",
            "[{symbol: main.a}]"
        )),
        Err(SpecRejected::Duplicate { .. })
    ));
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 1);
    // The same spec again changes nothing.
    assert!(!w.engine.upsert_spec(spec(
        "s",
        None,
        "{executable: /app/shop}",
        "[{symbol: main.a}]"
    )));
    assert_eq!(live_links(&w, 10), 1);
    // A changed spec replaces the old one's probes in the processes it selects, which
    // stay tracked (not counted again, not reported as exited).
    assert!(w.engine.upsert_spec(spec(
        "s",
        None,
        "{executable: /app/shop}",
        "[{symbol: main.a}, {symbol: main.c}]"
    )));
    assert_eq!(
        live_links(&w, 10),
        2,
        "old probes detached, new ones attached"
    );
    assert_eq!(
        w.kernel.borrow().configs.len(),
        2,
        "old configurations freed"
    );
    assert!(
        w.engine.find_spec(&SpecKey {
            namespace: None,
            name: "s".into()
        }) != Some(id)
    );
    assert!(w.engine.is_tracked(10));
    assert!(w.exits.try_recv().is_err());
    assert_eq!(w.stats.processes().matched, 1);
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 2);
    let id2 = w.engine.spec_ids()[0];
    w.engine.remove_spec(id2);
    assert_eq!(live_links(&w, 10), 0);
    assert!(w.kernel.borrow().configs.is_empty(), "configurations freed");
    assert!(!w.engine.is_tracked(10));
    assert!(w.kernel.borrow().comms.is_empty());
}

#[test]
fn a_changed_selector_lets_go_of_the_processes_it_no_longer_selects() {
    let mut w = world(Mode::Local);
    w.engine.add_spec(shop("[{symbol: main.a}]")).unwrap();
    w.engine
        .add_spec(spec(
            "other",
            None,
            "{executable: \"**/cart\"}",
            "[{symbol: main.b}]",
        ))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    w.engine
        .process_seen(proc(11, "/app/cart", 8), Origin::Running);
    assert_eq!((live_links(&w, 10), live_links(&w, 11)), (1, 1));
    // "s" now selects cart instead of shop.
    assert!(w.engine.upsert_spec(spec(
        "s",
        None,
        "{executable: \"**/cart\"}",
        "[{symbol: main.a}, {symbol: main.c}]"
    )));
    assert!(!w.engine.is_tracked(10), "shop is no longer selected");
    assert_eq!(live_links(&w, 10), 0);
    assert_eq!(w.exits.try_recv(), Ok(10));
    // cart is matched by the caller's rescan; its other spec's link was left alone.
    assert_eq!(live_links(&w, 11), 1);
    w.engine
        .process_seen(proc(11, "/app/cart", 8), Origin::Running);
    assert_eq!(live_links(&w, 11), 3);
    assert!(w.exits.try_recv().is_err());
}

#[test]
fn a_rejected_new_version_leaves_nothing_of_the_old_one() {
    let mut w = world(Mode::Local);
    w.engine.add_spec(shop("[{symbol: main.a}]")).unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 1);
    // No probes: refused as a whole.
    assert!(!w.engine.upsert_spec(shop("[]")));
    assert!(w.engine.spec_ids().is_empty());
    assert!(!w.engine.is_tracked(10));
    assert_eq!(live_links(&w, 10), 0);
    assert!(w.kernel.borrow().configs.is_empty());
}

#[test]
fn a_thousand_changes_keep_one_version_of_everything() {
    let mut w = world(Mode::Local);
    w.engine.add_spec(shop(TWO)).unwrap();
    for pid in [10, 11] {
        w.engine
            .process_seen(proc(pid, "/app/shop", 7), Origin::Running);
    }
    let registry = w.engine.registry.clone();
    let mut reader =
        crate::events::reader::Processor::new(registry.clone(), crate::events::Clock::new(), 1024);
    for i in 0..1000 {
        let probes = if i % 2 == 0 {
            "[{symbol: main.a}]"
        } else {
            TWO
        };
        assert!(w.engine.upsert_spec(shop(probes)));
        // What the reader does after each drain: drops the decoders of freed
        // configurations once it has read past them.
        reader.retire(Instant::now() + Duration::from_secs(1));
    }
    let k = w.kernel.borrow();
    assert_eq!(k.configs.len(), 3, "main.a, main.b entry and return");
    assert_eq!(k.links.len(), 4, "two probes in two processes");
    assert_eq!(
        registry.live_probes(),
        3,
        "decoders of the configurations in use only"
    );
    drop(k);
    let ps = w.stats.processes();
    assert_eq!((ps.matched, ps.traced), (2, 2), "counted once");
    assert_eq!(w.stats.processes_of("s").matched, 2);
    assert!(w.exits.try_recv().is_err(), "no process reported exited");
    assert_eq!(w.stats.probes().len(), 2);
    assert_eq!(
        *w.opened.borrow(),
        1,
        "the binary was resolved once: the next versions' probes were planned already"
    );
}
