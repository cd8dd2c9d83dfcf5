//! Overhead budgets: a process whose probes cost more than its spec allows for a whole
//! window loses that spec's return probes first, then its other probes (said and
//! counted), gets them back when the back-off ends (doubled the next time), and other
//! processes keep theirs.

use super::*;
use crate::engine::budget::{FIRST_BACKOFF, WINDOW};
use std::time::Duration;

fn budgeted(percent: f64) -> ProbeSpec {
    budgeted_probe(percent, "{symbol: main.a}")
}

fn budgeted_probe(percent: f64, probe: &str) -> ProbeSpec {
    gprobe_crds::load_specs(
        &format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: \
            b}}\nspec:\n  selector: {{executable: /app/shop}}\n  limits: {{maxOverheadPercent: \
                {percent}}}\n  probes: [{probe}]\n"
        ),
        "t",
    )
    .unwrap()
    .remove(0)
}

fn return_links(w: &World, pid: u32) -> usize {
    w.kernel
        .borrow()
        .ret_links
        .values()
        .filter(|(p, _)| *p == pid)
        .count()
}

/// Over budget for a whole window from `from`, at 5% of a CPU a second.
fn over_for_a_window(w: &mut World, slot: u32, from: Instant) {
    for s in 1..=WINDOW.as_secs() {
        spend(w, &[(slot, 50)], from + Duration::from_secs(s));
    }
}

/// Pid 10 with a latency probe under a 1% budget, its slot, and the first tick's time.
fn latency_probe_in_pid_10() -> (World, u32, Instant) {
    let mut w = world(Mode::Local);
    w.engine
        .add_spec(budgeted_probe(1.0, "{symbol: main.a, latency: true}"))
        .unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!((live_links(&w, 10), return_links(&w, 10)), (1, 1));
    let slot = slot_of(&w, 10);
    let t0 = Instant::now();
    w.engine.tick(t0);
    (w, slot, t0)
}

#[test]
fn returns_go_first_and_the_rest_only_if_the_entries_alone_stay_over() {
    let (mut w, slot, t0) = latency_probe_in_pid_10();
    over_for_a_window(&mut w, slot, t0);
    // The returns are switched off in BPF and detached; the entry stays, on the same slot.
    assert_eq!((live_links(&w, 10), return_links(&w, 10)), (1, 0));
    assert!(w.kernel.borrow().returns_off.contains(&slot));
    let b = w.stats.budget();
    assert_eq!(b.len(), 1, "{b:?}");
    let e = &b[0].1;
    assert_eq!(e.taken_off, Some(crate::stats::TakenOff::Returns));
    assert_eq!((e.returns_detached, e.detached, e.off), (1, 0, true));
    // Its calls in flight in BPF are forgotten at the next tick.
    let t1 = t0 + WINDOW;
    spend(&mut w, &[(slot, 50)], t1 + Duration::from_secs(1));
    let forgotten = w.kernel.borrow().forgotten.clone();
    assert_eq!(forgotten.len(), 1, "{forgotten:?}");
    assert_eq!(forgotten[0].0, 10);
    assert_eq!(forgotten[0].1.len(), 1, "main.a's entry configuration");
    // The entry alone still over for a whole window of its own: everything goes.
    over_for_a_window(&mut w, slot, t1 + Duration::from_secs(1));
    assert_eq!((live_links(&w, 10), return_links(&w, 10)), (0, 0));
    let e = w.stats.budget()[0].1.clone();
    assert_eq!(e.taken_off, Some(crate::stats::TakenOff::All));
    assert_eq!((e.returns_detached, e.detached), (1, 1));
    // Back when the returns would have been, all of it, returns on.
    w.engine.tick(t0 + WINDOW + FIRST_BACKOFF);
    assert_eq!((live_links(&w, 10), return_links(&w, 10)), (1, 1));
    assert!(!w.kernel.borrow().returns_off.contains(&slot_of(&w, 10)));
    assert_eq!(w.stats.budget()[0].1.retried, 1);
}

#[test]
fn entries_that_fit_the_budget_keep_recording_and_the_returns_come_back_after_the_back_off() {
    let (mut w, slot, t0) = latency_probe_in_pid_10();
    over_for_a_window(&mut w, slot, t0);
    assert_eq!((live_links(&w, 10), return_links(&w, 10)), (1, 0));
    // The entries alone cost 0.5%: they stay.
    let mut t = t0 + WINDOW;
    while t < t0 + WINDOW + FIRST_BACKOFF - Duration::from_secs(1) {
        t += Duration::from_secs(1);
        spend(&mut w, &[(slot, 5)], t);
        assert_eq!(live_links(&w, 10), 1);
    }
    // A process seen again meanwhile gets no returns.
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(return_links(&w, 10), 0);
    w.kernel.borrow_mut().log.clear();
    w.engine.tick(t0 + WINDOW + FIRST_BACKOFF);
    // Only the returns are attached again (the entry was never off), then switched on.
    assert_eq!(w.kernel.borrow().log, [("attach returns", 10)]);
    assert_eq!((live_links(&w, 10), return_links(&w, 10)), (1, 1));
    assert!(!w.kernel.borrow().returns_off.contains(&slot));
    let e = w.stats.budget()[0].1.clone();
    assert_eq!(
        (e.returns_detached, e.detached, e.retried, e.off),
        (1, 0, 1, false)
    );
    // Over again: the returns go first again, after twice the back-off.
    over_for_a_window(&mut w, slot, t0 + WINDOW + FIRST_BACKOFF);
    assert_eq!((live_links(&w, 10), return_links(&w, 10)), (1, 0));
    let e = w.stats.budget()[0].1.clone();
    assert_eq!((e.returns_detached, e.backoff_s), (2, 120));
}

/// The budget slot of `pid`'s latest attach.
fn slot_of(w: &World, pid: u32) -> u32 {
    let k = w.kernel.borrow();
    k.slots.iter().rev().find(|(p, _)| *p == pid).unwrap().1
}

/// Adds `ms` milliseconds of probe cost to each slot, then ticks `at`.
fn spend(w: &mut World, costs: &[(u32, u64)], at: Instant) {
    {
        let mut k = w.kernel.borrow_mut();
        for &(slot, ms) in costs {
            *k.budget.entry(slot).or_default() += ms * 1_000_000;
        }
    }
    w.engine.tick(at);
}

#[test]
fn a_process_over_budget_for_a_window_loses_its_probes_until_the_back_off_ends() {
    let mut w = world(Mode::Local);
    w.engine.add_spec(budgeted(1.0)).unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    w.engine
        .process_seen(proc(11, "/app/shop", 7), Origin::Running);
    assert_eq!((live_links(&w, 10), live_links(&w, 11)), (1, 1));
    let (hot, cold) = (slot_of(&w, 10), slot_of(&w, 11));
    assert!(hot != 0 && cold != 0 && hot != cold, "{hot} {cold}");
    let t0 = Instant::now();
    w.engine.tick(t0);
    // Pid 10's probes cost 5% of a CPU (50 ms a second), pid 11's 0.1%.
    let window = WINDOW.as_secs();
    for s in 1..window {
        spend(&mut w, &[(hot, 50), (cold, 1)], t0 + Duration::from_secs(s));
        assert_eq!(live_links(&w, 10), 1, "within the window at {s} s");
    }
    spend(&mut w, &[(hot, 50), (cold, 1)], t0 + WINDOW);
    assert_eq!((live_links(&w, 10), live_links(&w, 11)), (0, 1));
    // Both are listed: the hot one taken off, the cold one within its budget.
    let b = w.stats.budget();
    assert_eq!(b.len(), 2, "{b:?}");
    assert_eq!((b[0].0 .1, b[1].0 .1), (10, 11));
    assert!((b[0].1.percent - 5.0).abs() < 0.01, "{b:?}");
    assert_eq!(
        (b[0].1.detached, b[0].1.retried, b[0].1.backoff_s),
        (1, 0, 60)
    );
    assert_eq!((b[1].1.taken_off, b[1].1.detached), (None, 0));
    assert!((b[1].1.peak_percent - 0.1).abs() < 0.01, "{b:?}");
    // Nothing comes back before the back-off ends, even when the process is seen again.
    w.engine
        .tick(t0 + WINDOW + FIRST_BACKOFF - Duration::from_secs(1));
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 0);
    let back = t0 + WINDOW + FIRST_BACKOFF;
    w.engine.tick(back);
    assert_eq!(live_links(&w, 10), 1);
    assert_eq!(w.stats.budget()[0].1.retried, 1);
    // Over budget again: the back-off doubles.
    let hot = slot_of(&w, 10);
    for s in 1..=window {
        spend(&mut w, &[(hot, 50)], back + Duration::from_secs(s));
    }
    assert_eq!(live_links(&w, 10), 0);
    let b = w.stats.budget();
    assert_eq!((b[0].1.detached, b[0].1.backoff_s), (2, 120));
    // An exit frees its slot for the next process.
    w.engine.process_exited(10);
    w.engine
        .process_seen(proc(12, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 12), 1);
    // A process that exited is listed only if its probes were ever taken off; at a stop,
    // the live ones stay listed.
    w.engine.process_exited(11);
    let pids: Vec<u32> = w.stats.budget().iter().map(|((_, p), _)| *p).collect();
    assert_eq!(pids, [10]);
    let slot = slot_of(&w, 12);
    spend(&mut w, &[(slot, 1)], back + WINDOW + Duration::from_secs(1));
    w.engine.shutdown(Instant::now() + Duration::from_secs(1));
    let pids: Vec<u32> = w.stats.budget().iter().map(|((_, p), _)| *p).collect();
    assert_eq!(pids, [10, 12]);
}

#[test]
fn probes_whose_cost_is_not_measured_have_no_budget() {
    let mut w = world(Mode::Local);
    let id = w.engine.add_spec(budgeted(1.0)).unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    // The fake resolver's plans are measured: a slot was given.
    assert_ne!(slot_of(&w, 10), 0);
    // Unmeasured: none (checked on the engine's rule directly).
    assert_eq!(w.engine.budget_slot(11, id, false), 0);
    assert_ne!(w.engine.budget_slot(11, id, true), 0);
}

#[test]
fn a_budget_of_0_is_none() {
    let mut w = world(Mode::Local);
    w.engine.add_spec(budgeted(0.0)).unwrap();
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    assert_eq!(live_links(&w, 10), 1);
    assert_eq!(slot_of(&w, 10), 0);
}

#[test]
fn a_share_is_never_more_than_the_cpu_time_the_process_used() {
    // A single-threaded loop: each hit counted at the cost measured at start, 1.18 s of
    // probes a second, where the process ran for 1 s a second (one CPU).
    let mut w = world(Mode::Local);
    w.engine.add_spec(budgeted(100.0)).unwrap();
    w.kernel.borrow_mut().cpu.insert(10, 5_000_000_000);
    w.engine
        .process_seen(proc(10, "/app/shop", 7), Origin::Running);
    let slot = slot_of(&w, 10);
    let t0 = Instant::now();
    w.engine.tick(t0);
    for s in 1..=3u64 {
        *w.kernel.borrow_mut().cpu.get_mut(&10).unwrap() += 1_000_000_000;
        spend(&mut w, &[(slot, 1180)], t0 + Duration::from_secs(s));
    }
    let b = w.stats.budget();
    assert_eq!(b.len(), 1, "{b:?}");
    assert!((b[0].1.peak_percent - 100.0).abs() < 0.01, "{b:?}");
    // Where the CPU time cannot be read, the estimate stands.
    w.kernel.borrow_mut().cpu.clear();
    spend(&mut w, &[(slot, 1500)], t0 + Duration::from_secs(4));
    let b = w.stats.budget();
    assert!((b[0].1.peak_percent - 150.0).abs() < 0.01, "{b:?}");
}
