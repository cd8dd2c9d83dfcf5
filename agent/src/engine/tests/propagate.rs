//! Processes with a propagating probe get gprobe's request probes (one attach of their five
//! sites: the round trip's entry and two returns, the hand-off to a connection, the header
//! writer), configured once per executable, and lose them with their last propagating
//! probe, when the spans BPF kept for them are forgotten too; an executable where they
//! cannot go still traces, and the summary counts what was carried.

use super::*;

const PROP: &str = "[{symbol: main.handle, latency: true, propagate: true}]";

#[test]
fn propagating_probes_bring_the_request_probes_and_take_them_away() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("plain", None, "{executable: /app/shop}", TWO))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 2, "the two probes, no request probes");
    let prop = w
        .engine
        .add_spec(spec("prop", None, "{executable: /app/shop}", PROP))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    w.engine
        .process_seen(proc(11, "/app/shop", 7), Origin::Running);
    for pid in [10, 11] {
        assert_eq!(live_links(&w, pid), 4, "main.handle and the request probes");
    }
    let five_sites = w
        .kernel
        .borrow()
        .links
        .values()
        .filter(|(_, n)| *n == 5)
        .count();
    assert_eq!(five_sites, 2, "one link of five sites per process");
    let configs = w.kernel.borrow().configs.len();
    // The request probe configurations are shared by the processes of the executable.
    assert_eq!(
        configs,
        3 + 2 + 4,
        "plain (a; b's entry, return), handle's two, the requests' four"
    );
    w.engine.remove_spec(prop);
    for pid in [10, 11] {
        assert_eq!(
            live_links(&w, pid),
            2,
            "the request probes went with the spec"
        );
        assert!(w.kernel.borrow().log.contains(&("forget_spans", pid)));
    }
    w.engine.refresh_counters();
    assert!(w.stats.propagation().active);
}

#[test]
fn an_executable_without_net_http_requests_traces_without_them() {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(spec("prop", None, "{executable: /app/nohttp}", PROP))
        .unwrap();
    w.engine
        .process_seen(proc(20, "/app/nohttp", 9), Origin::Running);
    assert_eq!(live_links(&w, 20), 1, "main.handle alone");
    assert_eq!(w.stats.probes().values().filter(|p| p.attached).count(), 1);
}
