//! The overhead budget on real programs (`limits.maxOverheadPercent`): two copies of
//! e2e/testdata/hot run before gprobe starts, one calling main.work 200,000 times a second,
//! one 100 times; with a 1% budget the first loses its probe within two windows (and its
//! time per call goes back to what it was unprobed), the second keeps its probe, and the
//! summary lists the first. A probe with `latency: true` whose returns alone take it over
//! its budget loses its returns and keeps recording every call. Each program reports its
//! own time per call every 250 ms.

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, require_trace, serial, Gprobe};
use gprobe_e2e::spec::{multi_yaml, ProbeBuilder, SpecBuilder};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running copy of the hot program and its reports (pid, calls so far, ns per call).
struct Hot {
    child: Child,
    ticks: mpsc::Receiver<(u64, f64)>,
}

impl Hot {
    fn start(bin: &std::path::Path, rate: u32) -> Hot {
        let mut child = Command::new(bin)
            .args(["-rate", &rate.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hot");
        let out = child.stdout.take().unwrap();
        let (tx, ticks) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let field = |k: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(k))
                        .and_then(|v| v.parse::<f64>().ok())
                };
                if let (Some(calls), Some(ns)) = (field("calls="), field("ns_per_call=")) {
                    if tx.send((calls as u64, ns)).is_err() {
                        return;
                    }
                }
            }
        });
        Hot { child, ticks }
    }

    /// The next `n` reports' ns per call.
    fn next(&self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| {
                self.ticks
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a report every 250 ms")
                    .1
            })
            .collect()
    }

    /// The calls made so far, as of the next report.
    fn calls(&self) -> u64 {
        self.drain();
        self.ticks
            .recv_timeout(Duration::from_secs(10))
            .expect("a report every 250 ms")
            .0
    }

    /// Reports that came in so far, dropped.
    fn drain(&self) {
        while self.ticks.try_recv().is_ok() {}
    }
}

impl Drop for Hot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[test]
fn a_process_over_its_budget_loses_its_probe_and_a_quiet_one_keeps_it() {
    require_trace("budget");
    let bin = program("e2e/testdata/hot", GoVersion::Go127, false);
    let spec = SpecBuilder::new("budget")
        .executable(&bin)
        .max_overhead_percent(1.0)
        .probe(ProbeBuilder::new("main.work").capture(["i"]))
        .yaml();
    let _guard = serial();
    let hot = Hot::start(&bin, 200_000);
    let quiet = Hot::start(&bin, 100);
    let (hot_pid, quiet_pid) = (hot.child.id(), quiet.child.id());
    // Unprobed: its own time per call, after a warm-up report.
    hot.next(1);
    let unprobed = median(hot.next(8));
    let g = Gprobe::cmd(&spec).summary_file().start();
    let attached = Instant::now();
    hot.drain();
    let probed = median(hot.next(8));
    // Two windows (10 s each) from the attach.
    g.wait_for_stderr(
        |s| s.contains(&format!("its probes cost pid {hot_pid} ")),
        Duration::from_secs(20) - attached.elapsed().min(Duration::from_secs(19)),
    );
    let detached_after = attached.elapsed();
    // Its links close asynchronously: until its calls cost what they did unprobed, and for
    // one rate-limit window (1 s) after, the hot one may still take the probe's share of
    // limits.eventsPerSecond (10,000 a second for both processes).
    hot.drain();
    let mut reports = 0;
    while hot.next(1)[0] > unprobed * 1.5 + 10.0 {
        reports += 1;
        assert!(reports < 40, "its calls still cost the probe 10 s later");
    }
    hot.next(4);
    // The quiet one's calls from here on are every one delivered.
    let quiet_from = quiet.calls();
    let after = median(hot.next(8));
    let quiet_to = quiet.calls();
    let run = g.stop();
    let s = run.summary();
    eprintln!(
        "hot: {unprobed:.0} ns per call unprobed, {probed:.0} probed, {after:.0} after its probe \
        was taken off {:.1} s after the attach; quiet made calls {quiet_from}..{quiet_to} since; budget: {:?}",
        detached_after.as_secs_f64(),
        s.budget
    );
    // The summary lists both: the hot one taken off, the quiet one within its budget.
    assert_eq!(s.budget.len(), 2, "{:?}\n{}", s.budget, run.stderr);
    let b = s
        .budget
        .iter()
        .find(|b| b.pid == hot_pid)
        .expect("the hot one");
    assert_eq!(
        (b.taken_off.as_str(), b.detached, b.backoff_s),
        ("all", 1, 60)
    );
    assert!(b.percent > 1.0, "{b:?}");
    // One goroutine calls work(): its probe cannot cost more than the one CPU it runs on
    // (plus what the Go runtime's other threads used). Once 118%.
    assert!(b.peak_percent <= 105.0, "{b:?}");
    let q = s
        .budget
        .iter()
        .find(|b| b.pid == quiet_pid)
        .expect("the quiet one");
    assert_eq!((q.taken_off.as_str(), q.detached), ("none", 0), "{q:?}");
    assert!(q.peak_percent < 1.0, "{q:?}");
    assert!(
        probed > unprobed * 2.0,
        "the probe showed: {unprobed} -> {probed}"
    );
    assert!(
        after <= unprobed * 1.05 + 10.0,
        "back to unprobed: {unprobed} ns before, {after} ns after"
    );
    // The quiet one kept its probe: each call it made after the hot one lost its probe was
    // delivered (work(i) is called with i = the calls made before it).
    let seen: std::collections::BTreeSet<u64> = run
        .records_of("main.work")
        .iter()
        .filter(|r| r["pid"].as_u64() == Some(quiet_pid as u64))
        .filter_map(|r| r["args"]["i"].as_u64())
        .collect();
    let missing: Vec<u64> = (quiet_from..quiet_to)
        .filter(|i| !seen.contains(i))
        .collect();
    assert!(quiet_to > quiet_from + 100, "{quiet_from}..{quiet_to}");
    assert_eq!(
        missing,
        Vec::<u64>::new(),
        "quiet calls {quiet_from}..{quiet_to} not delivered"
    );
    assert!(
        !run.stderr
            .contains(&format!("its probes cost pid {quiet_pid} ")),
        "{}",
        run.stderr
    );
}

#[test]
fn a_latency_probe_over_its_budget_loses_its_returns_and_still_records_every_call() {
    require_trace("budget");
    let bin = program("e2e/testdata/hot", GoVersion::Go127, false);
    // 2,000 calls a second: the entry (emulated, about 1 us a hit here) costs about 0.25%
    // of a CPU, the single-stepped RET about 1%; the budget is between the two.
    let spec = SpecBuilder::new("budget-returns")
        .executable(&bin)
        .max_overhead_percent(0.8)
        .probe(ProbeBuilder::new("main.work").capture(["i"]).latency())
        .yaml();
    let _guard = serial();
    let hot = Hot::start(&bin, 2_000);
    let pid = hot.child.id();
    hot.next(1);
    let unprobed = median(hot.next(8));
    let g = Gprobe::cmd(&spec).summary_file().start();
    let attached = Instant::now();
    hot.drain();
    let both = median(hot.next(8));
    g.wait_for_stderr(
        |s| s.contains(&format!("its probes cost pid {pid} ")),
        Duration::from_secs(25),
    );
    let off_after = attached.elapsed();
    // Calls made from here on, after the switch: each one recorded once, none with a
    // duration.
    hot.drain();
    hot.next(1);
    let from = hot.calls();
    let entries_only = median(hot.next(12));
    let to = hot.calls();
    let run = g.stop();
    let s = run.summary();
    let recs = run.records_of("main.work");
    let with_duration = recs
        .iter()
        .filter(|r| r["duration_ns"].as_u64().is_some())
        .count();
    eprintln!(
        "ns per call: {unprobed:.0} unprobed, {both:.0} with entry and returns, {entries_only:.0} \
        with the entry alone; returns taken off {:.1} s after the attach; {} records, \
            {with_duration} with a duration; checked calls {from}..{to}; budget: {:?}",
        off_after.as_secs_f64(),
        recs.len(),
        s.budget
    );
    assert_eq!(s.budget.len(), 1, "{:?}\n{}", s.budget, run.stderr);
    let b = &s.budget[0];
    assert_eq!(
        (b.pid, b.taken_off.as_str(), b.returns_detached, b.detached),
        (pid, "returns", 1, 0),
        "{b:?}\n{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("its return probes detached from that process"),
        "{}",
        run.stderr
    );
    assert!(
        with_duration > 1000,
        "calls before the switch had their durations"
    );
    let mut seen = std::collections::BTreeMap::<u64, usize>::new();
    for r in &recs {
        assert_eq!(r["pid"].as_u64(), Some(pid as u64), "{r}");
        let i = r["args"]["i"].as_u64().expect("i");
        *seen.entry(i).or_default() += 1;
        if i >= from {
            assert!(r["duration_ns"].as_u64().is_none(), "after the switch: {r}");
        }
    }
    let twice: Vec<u64> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(twice, Vec::<u64>::new(), "calls recorded twice");
    let missing: Vec<u64> = (from..to).filter(|i| !seen.contains_key(i)).collect();
    assert!(to > from + 2_000, "{from}..{to}");
    assert_eq!(
        missing,
        Vec::<u64>::new(),
        "calls {from}..{to} not recorded"
    );
}

/// A `when:` decided at the return (`duration`) that no call of main.work meets, alone and
/// with a term decided at the entry: with the returns taken off for their cost, the entries
/// cannot decide it, so every call since is counted `undecided` and none is delivered
/// (before, every one was, failing the condition).
#[test]
fn a_when_decided_at_the_return_leaves_calls_undecided_once_the_returns_are_off() {
    require_trace("budget");
    let bin = program("e2e/testdata/hot", GoVersion::Go127, false);
    // As above: the returns alone take each spec over its budget, the entries do not.
    let spec = |name: &str, when: &str| {
        SpecBuilder::new(name)
            .executable(&bin)
            .max_overhead_percent(0.8)
            .events_per_second(0)
            .probe(
                ProbeBuilder::new("main.work")
                    .capture(["i"])
                    .latency()
                    .when(when),
            )
            .build()
    };
    let specs = [
        spec("budget-when", "duration > 10s"),
        spec("budget-when-entry", "i >= 0 && duration > 10s"),
    ];
    let _guard = serial();
    let hot = Hot::start(&bin, 2_000);
    let pid = hot.child.id();
    hot.next(1);
    let g = Gprobe::cmd(&multi_yaml(&specs)).summary_file().start();
    g.wait_for_stderr(
        |s| s.matches(&format!("its probes cost pid {pid} ")).count() == 2,
        Duration::from_secs(25),
    );
    // A second of calls (2,000) with the returns off.
    hot.drain();
    let from = hot.calls();
    while hot.calls() < from + 2_000 {}
    let run = g.stop();
    let s = run.summary();
    let recs = run.records_of("main.work");
    eprintln!("{} records; budget: {:?}", recs.len(), s.budget);
    assert_eq!(
        recs.len(),
        0,
        "calls failing the condition delivered: {:?}",
        recs.first()
    );
    for spec in ["budget-when", "budget-when-entry"] {
        let p = s
            .probes
            .iter()
            .find(|p| p.spec == spec)
            .expect("the probe in the summary");
        eprintln!("{p:?}");
        let b = s.budget.iter().find(|b| b.spec == spec);
        assert_eq!(
            b.map(|b| (b.pid, b.taken_off.as_str())),
            Some((pid, "returns")),
            "{:?}\n{}",
            s.budget,
            run.stderr
        );
        assert!(p.filtered > 1_000, "decided at their returns before: {p:?}");
        assert!(p.undecided >= 2_000, "the calls since the switch: {p:?}");
        assert_eq!(p.delivered, 0, "{p:?}");
    }
}
