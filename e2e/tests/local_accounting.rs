//! Calls gprobe could not deliver are counted, never lost silently: over the rate limit
//! (throttled), with a full ring buffer (lost), with and without return probes, and nested
//! deeper than the pairing stack (too deep). They need root (BPF).

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::path::Path;

/// `N calls delivered, L lost (ring buffer full), T throttled` from gprobe's summary.
fn summary_counts(stderr: &str, symbol: &str) -> (u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(&format!("/ {symbol}: ")) && l.contains("calls delivered"))
        .unwrap_or_else(|| panic!("no summary line for {symbol}:\n{stderr}"));
    let num = |after: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let i = words
            .iter()
            .position(|w| w.trim_end_matches(',') == after)
            .unwrap();
        words[i - 1].parse().unwrap()
    };
    (num("calls"), num("lost"), num("throttled"))
}

fn burst_spec(bin: &Path, limit: u32) -> String {
    SpecBuilder::new("burst")
        .executable(bin)
        .probe(
            ProbeBuilder::new("main.tick")
                .signature("func(i int64) int64")
                .capture(["i"]),
        )
        .events_per_second(limit)
        .yaml()
}

#[test]
fn calls_over_the_rate_limit_are_counted_not_lost_silently() {
    require_trace("rate limit");
    let bin = program("e2e/testdata/burst", GoVersion::Go127, false);
    let _guard = serial();
    let g = Gprobe::start(&burst_spec(&bin, 50), &[]);
    let out = run_program(&bin, &["-n", "20000"]);
    assert!(out.contains("calls=20000"));
    let run = g.stop();
    let (delivered, lost, throttled) = summary_counts(&run.stderr, "main.tick");
    assert_eq!(run.records_of("main.tick").len() as u64, delivered);
    assert_eq!(delivered + lost + throttled, 20_000, "{}", run.stderr);
    // A one-second window: the burst lasts well under two of them.
    assert!((50..=150).contains(&delivered), "delivered {delivered}");
    assert!(throttled > 0);
}

/// 8 KiB hold about 110 records, under a millisecond of two goroutines calling flat out
/// while they keep both CPUs busy: the reader (woken per 4 KiB) cannot keep up.
const TINY_RING: &[&str] = &["--ring-buffer-size", "8KiB", "--wakeup-size", "4KiB"];

#[test]
fn a_full_ring_buffer_loses_calls_but_counts_every_one() {
    require_trace("ring buffer full");
    let bin = program("e2e/testdata/burst", GoVersion::Go127, false);
    let _guard = serial();
    let g = Gprobe::start(&burst_spec(&bin, 0), TINY_RING);
    run_program(&bin, &["-n", "100000", "-goroutines", "2"]);
    let run = g.stop();
    let (delivered, lost, throttled) = summary_counts(&run.stderr, "main.tick");
    assert_eq!(throttled, 0);
    assert_eq!(delivered + lost, 100_000, "{}", run.stderr);
    assert!(lost > 0, "the buffer never filled: the test proves nothing");
    assert!(
        run.stderr
            .contains("calls lost (ring buffer full; raise --ring-buffer-size)"),
        "{}",
        run.stderr
    );
    // The delivered ones are real, distinct calls.
    let mut seen: Vec<i64> = run
        .records_of("main.tick")
        .iter()
        .map(|r| r["args"]["i"].as_i64().unwrap())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len() as u64, delivered);
}

#[test]
fn a_full_ring_buffer_with_latency_probes_counts_every_call_once() {
    require_trace("ring buffer full, latency");
    let bin = program("e2e/testdata/burst", GoVersion::Go127, false);
    let _guard = serial();
    let spec = SpecBuilder::new("burst")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("main.tick")
                .signature("func(i int64) int64")
                .capture(["i", "r0"])
                .latency(),
        )
        .events_per_second(0)
        .yaml();
    let g = Gprobe::start(&spec, TINY_RING);
    run_program(&bin, &["-n", "100000", "-goroutines", "2"]);
    let run = g.stop();
    let (delivered, lost, throttled) = summary_counts(&run.stderr, "main.tick");
    assert_eq!(throttled, 0);
    assert!(lost > 0, "the buffer never filled: the test proves nothing");
    // A call whose RETURN record was dropped is delivered (unfinished), not lost.
    assert_eq!(delivered + lost, 100_000, "{}", run.stderr);
    let records = run.records_of("main.tick");
    assert_eq!(records.len() as u64, delivered);
    let unfinished = records
        .iter()
        .filter(|r| r["unfinished"] == serde_json::json!(true))
        .count() as u64;
    let returns_lost = run
        .stderr
        .lines()
        .find(|l| l.contains("of the delivered calls lost their return"))
        .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .unwrap_or(0);
    assert_eq!(unfinished, returns_lost, "{}", run.stderr);
    // Every finished call is paired with its own return: r0 = 2 * i.
    for r in records
        .iter()
        .filter(|r| r["unfinished"] != serde_json::json!(true))
    {
        let i = r["args"]["i"].as_i64().unwrap();
        assert_eq!(r["returns"]["r0"].as_i64(), Some(2 * i), "{r}");
        assert!(r["duration_ns"].as_u64().is_some(), "{r}");
    }
}

/// Traces e2e/testdata/recurse's `main.depth` (its argument, result and latency) at
/// `limit` calls per second while it makes `rounds` rounds of `deepest + 1` nested calls;
/// returns gprobe's run once the program printed that it made them all.
fn run_recursion(limit: u32, rounds: i64, deepest: i64) -> gprobe_e2e::harness::Run {
    let bin = program("e2e/testdata/recurse", GoVersion::Go127, false);
    let _guard = serial();
    let spec = SpecBuilder::new("recurse")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("main.depth")
                .signature("func(n int64) int64")
                .capture(["n", "r0"])
                .latency(),
        )
        .events_per_second(limit)
        .yaml();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let out = run_program(
        &bin,
        &[
            "-rounds",
            &rounds.to_string(),
            "-depth",
            &deepest.to_string(),
        ],
    );
    assert!(
        out.contains(&format!("calls={}", rounds * (deepest + 1))),
        "{out}"
    );
    g.stop()
}

/// The pairing stack's depth (GP_MAX_DEPTH in agent-ebpf/include/gprobe.h).
const MAX_DEPTH: i64 = 16;

#[test]
fn recursive_calls_pair_with_their_own_returns_and_the_too_deep_are_counted() {
    require_trace("recursion");
    // Rounds of depth(20): 21 calls nested, the outer 16 recorded, the inner 5 too deep.
    let (rounds, deepest) = (30, 20);
    let run = run_recursion(0, rounds, deepest);
    let records = run.records_of("main.depth");
    let recorded = MAX_DEPTH;
    assert_eq!(records.len() as i64, rounds * recorded, "{}", run.stderr);
    let mut per_n = std::collections::BTreeMap::<i64, Vec<u64>>::new();
    for r in &records {
        // depth(n) returns n: each entry paired with its own return, nesting or not.
        let n = r["args"]["n"].as_i64().unwrap();
        assert_eq!(r["returns"]["r0"].as_i64(), Some(n), "{r}");
        assert!(
            n > deepest - MAX_DEPTH,
            "a call nested too deep was recorded: {r}"
        );
        per_n
            .entry(n)
            .or_default()
            .push(r["duration_ns"].as_u64().unwrap());
    }
    assert_eq!(per_n.len() as i64, recorded);
    assert!(per_n.values().all(|d| d.len() as i64 == rounds));
    // An outer call lasts longer than the call it contains, in the median.
    let medians: Vec<u64> = per_n
        .values()
        .map(|d| {
            let mut d = d.clone();
            d.sort_unstable();
            d[d.len() / 2]
        })
        .collect();
    assert!(medians.windows(2).all(|w| w[0] < w[1]), "{medians:?}");
    let summary = run.summary_json();
    let p = summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["symbol"] == "main.depth")
        .unwrap();
    assert_eq!(p["too_deep"], rounds * (deepest + 1 - MAX_DEPTH), "{p}");
    assert_eq!(p["delivered"], rounds * recorded, "{p}");
    for k in ["lost", "throttled", "unfinished", "abandoned"] {
        assert_eq!(p[k], 0, "{k}: {p}");
    }
}

/// Over the rate limit in the middle of a recursion: the outer calls of a round were
/// recorded, the inner ones throttled, and the inner ones return first. Every recorded call
/// still pairs with its own return, not with the return of a throttled call nested in it.
#[test]
fn a_throttled_call_inside_recorded_ones_leaves_their_pairing_exact() {
    require_trace("throttled recursion");
    // Rounds of depth(10), 11 calls each, in a burst far shorter than the one-second window:
    // the first 50 entries are recorded, so the fifth round is cut after depth(5), and the
    // returns of its throttled inner calls come before those of its recorded outer ones.
    let (rounds, deepest) = (200, 10);
    let calls = rounds * (deepest + 1);
    let run = run_recursion(50, rounds, deepest);
    let records = run.records_of("main.depth");
    let (delivered, lost, throttled) = summary_counts(&run.stderr, "main.depth");
    assert_eq!(records.len() as u64, delivered);
    assert_eq!(lost, 0, "{}", run.stderr);
    assert_eq!(delivered + throttled, calls as u64, "{}", run.stderr);
    assert!(
        throttled > 0,
        "nothing was throttled: the test proves nothing"
    );
    // The witness that a round was cut with its outer calls recorded: more outermost calls
    // recorded than innermost ones.
    let recorded_n = |n: i64| records.iter().filter(|r| r["args"]["n"] == n).count();
    assert!(
        recorded_n(deepest) > recorded_n(0),
        "no round was cut after its outer calls: {} outermost, {} innermost recorded",
        recorded_n(deepest),
        recorded_n(0)
    );
    for r in &records {
        // depth(n) returns n: each recorded entry paired with its own return.
        assert_ne!(r["unfinished"], serde_json::json!(true), "{r}");
        let n = r["args"]["n"].as_i64().unwrap();
        assert_eq!(r["returns"]["r0"].as_i64(), Some(n), "{r}");
    }
}
