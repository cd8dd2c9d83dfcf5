//! Predicates under pressure, on e2e/testdata/burst (`main.tick(i) = 2 * i`, called as fast
//! as it can): a ring buffer too small for the calls, and a rate limit, with terms decided
//! at the entry and at the return. Every call is still delivered, filtered, lost or
//! throttled, exactly once.

use super::{probe_of, records, trace_with};
use gprobe_crds::ProbeSpec;
use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, require_trace};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::path::Path;

const SRC: &str = "e2e/testdata/burst";

/// 8 KiB hold about 110 records: two goroutines calling flat out fill it.
const TINY_RING: &[&str] = &["--ring-buffer-size", "8KiB", "--wakeup-size", "4KiB"];

fn tick(name: &str, bin: &Path, when: &str, limit: u32) -> ProbeSpec {
    SpecBuilder::new(name)
        .executable(bin)
        .events_per_second(limit)
        .max_overhead_percent(0.0)
        .probe(
            ProbeBuilder::new("main.tick")
                .signature("func(i int64) int64")
                .capture(["i", "r0"])
                .latency()
                .when(when),
        )
        .build()
}

#[test]
fn a_full_ring_buffer_with_predicates_counts_every_call_once() {
    require_trace("filters, ring buffer full");
    let bin = program(SRC, GoVersion::Go127, false);
    let calls: u64 = 100_000;
    let specs = [
        tick("entry", &bin, "i >= 50000", 0),
        tick("return", &bin, "r0 >= 100000", 0),
    ];
    let args = ["-n", "100000", "-goroutines", "2"];
    let (run, out) = trace_with(&specs, TINY_RING, &bin, &args);
    assert!(out.contains("calls=100000"), "{out}");
    let summary = run.summary();
    for name in ["entry", "return"] {
        let p = probe_of(&summary, name);
        let got = records(&run, "main.tick", name);
        assert_eq!(got.len() as u64, p.delivered, "{name}: {p:?}");
        assert!(
            p.lost > 0,
            "{name}: the buffer never filled: the test proves nothing"
        );
        // A call that fails the predicate is never delivered, finished or not.
        let unfinished: Vec<i64> = got
            .iter()
            .filter(|r| r["unfinished"] == serde_json::json!(true))
            .map(|r| r["args"]["i"].as_i64().unwrap())
            .collect();
        let failing: Vec<i64> = got
            .iter()
            .map(|r| r["args"]["i"].as_i64().unwrap())
            .filter(|i| *i < 50_000)
            .collect();
        assert!(
            failing.is_empty(),
            "{name}: {} calls that fail the predicate (i < 50000) delivered, e.g. i = {:?}; \
             {} records unfinished, e.g. i = {:?}; delivered + filtered + lost + throttled + \
             undecided = {}; {p:?}",
            failing.len(),
            &failing[..failing.len().min(8)],
            unfinished.len(),
            &unfinished[..unfinished.len().min(8)],
            p.delivered + p.filtered + p.lost + p.throttled + p.undecided,
        );
        // A call decided at the return whose RETURN record found the ring full is
        // undecided: counted, not delivered.
        assert_eq!(
            p.delivered + p.filtered + p.lost + p.throttled + p.undecided,
            calls,
            "{name}: every call delivered, filtered, lost or undecided, once: {p:?}"
        );
        if name == "entry" {
            assert_eq!(p.undecided, 0, "{name}: decided at the entry: {p:?}");
        } else {
            // Its lost RETURNs made their calls undecided: none was delivered without it.
            assert_eq!(p.returns_lost, 0, "{name}: {p:?}");
            assert_eq!(p.unfinished, 0, "{name}: {p:?}");
        }
        // The calls that fail the predicate (half) are filtered or lost.
        assert!(p.filtered <= calls / 2, "{name}: {p:?}");
        for r in &got {
            let i = r["args"]["i"].as_i64().unwrap();
            if r["unfinished"] != serde_json::json!(true) {
                assert_eq!(r["returns"]["r0"].as_i64(), Some(2 * i), "{name}: {r}");
            }
        }
    }
}

#[test]
fn the_rate_limit_counts_calls_kept_at_the_return_only() {
    require_trace("filters, rate limit at the return");
    let bin = program(SRC, GoVersion::Go127, false);
    let specs = [
        tick("entry", &bin, "i >= 10000", 50),
        tick("return", &bin, "r0 >= 20000", 50),
    ];
    let (run, out) = trace_with(&specs, &[], &bin, &["-n", "20000"]);
    assert!(out.contains("calls=20000"), "{out}");
    let summary = run.summary();
    for name in ["entry", "return"] {
        let p = probe_of(&summary, name);
        let got = records(&run, "main.tick", name);
        assert_eq!(got.len() as u64, p.delivered, "{name}: {p:?}");
        assert_eq!(
            p.filtered, 10_000,
            "{name}: the calls with i < 10000: {p:?}"
        );
        assert_eq!(p.delivered + p.throttled + p.lost, 10_000, "{name}: {p:?}");
        // A one-second window: the burst lasts well under two of them.
        assert!((50..=150).contains(&p.delivered), "{name}: {p:?}");
        for r in &got {
            let i = r["args"]["i"].as_i64().unwrap();
            assert!(i >= 10_000, "{name}: {r}");
            assert_eq!(r["returns"]["r0"].as_i64(), Some(2 * i), "{name}: {r}");
        }
    }
}
