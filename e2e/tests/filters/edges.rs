//! The edges of the predicate language on e2e/testdata/filters: strings of 64 bytes (the
//! longest literal) and longer, escapes, lengths, hexadecimal and out-of-range integer
//! literals, a predicate of 16 terms and 32 steps, the rate limit spent on kept calls
//! only, and calls nested deeper than the pairing stack.

use super::go::{builds, calls, check_go, handle, what, Call, ID, SRC, SYMBOL};
use super::{probe_of, records, spec, trace, Case};
use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, require_trace};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};

/// A path of exactly 64 bytes, as the program makes it.
pub(crate) const EXACT: &str = "/exact/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
/// The first 64 bytes of the program's long paths ("/api/vvv.../3").
const LONG_HEAD: &str = "/api/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv";

#[test]
fn strings_of_64_bytes_and_longer_escapes_and_lengths() {
    check_go(
        &[
            Case {
                name: "exact-64",
                when: r#"path == "/exact/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx""#,
                keep: |c| c.path == EXACT,
            },
            Case {
                name: "prefix-64",
                when: r#"hasPrefix(path, "/api/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv")"#,
                keep: |c| c.path.starts_with(LONG_HEAD),
            },
            Case {
                // A longer path is not equal to its first 64 bytes.
                name: "head-not-whole",
                when: r#"path == "/api/vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv" || path == "/ap""#,
                keep: |c| c.path == "/ap",
            },
            Case {
                name: "escapes",
                when: r#"hasPrefix(path, "\x2fapi\x2f") || path == "\x2fhealthz\x2flive""#,
                keep: |c| c.path.starts_with("/api/") || c.path == "/healthz/live",
            },
            Case {
                name: "len-string",
                when: "len(path) > 20 && len(path) != 64",
                keep: |c| c.path.len() > 20 && c.path.len() != 64,
            },
            Case {
                // Through a nil customer: false.
                name: "len-through-nil",
                when: "len(o.Customer.Name) == 4",
                keep: |c| c.customer && c.name.len() == 4,
            },
        ],
        false,
        &["-n", "70"],
    );
}

#[test]
fn hexadecimal_and_out_of_range_integer_literals() {
    check_go(
        &[
            Case {
                name: "hex",
                when: "o.ID == 0x1f || o.ID >= 0x40",
                keep: |c| c.id == 31 || c.id >= 64,
            },
            Case {
                // Beyond int64 both ways: always true, so n decides.
                name: "out-of-range",
                when: "n < 9223372036854775808 && n > -9223372036854775809 && n > 2",
                keep: |c| c.n > 2,
            },
            Case {
                name: "out-of-range-eq",
                when: "n == 18446744073709551614 || n == -2",
                keep: |c| c.n == -2,
            },
        ],
        false,
        &["-n", "70"],
    );
}

#[test]
fn a_predicate_of_16_terms_and_32_steps() {
    // 16 terms, 15 && and ||, one !: 32 steps, the most a predicate may have.
    check_go(
        &[Case {
            name: "sixteen",
            when: "(n == -2 || n == 0 || n == 3 || n == 8) \
                   && !(path == \"/healthz\" || path == \"/ap\") \
                   && (ok || len(o.Items) >= 3 || o.Customer == nil) \
                   && (o.ID != 5 && o.ID != 11 && o.ID != 13 && o.ID < 60) \
                   && (err == nil || total > 3) && n != 99",
            keep: |c| {
                [-2, 0, 3, 8].contains(&c.n)
                    && !(c.path == "/healthz" || c.path == "/ap")
                    && (c.ok || c.items >= 3 || !c.customer)
                    && ![5, 11, 13].contains(&c.id)
                    && c.id < 60
                    && (!c.err || c.total > 3)
            },
        }],
        false,
        &["-n", "70"],
    );
}

/// The rate limit counts the calls a predicate keeps, not those it leaves out: every call
/// left out is `filtered` (none `throttled`), and the kept ones are delivered or throttled.
#[test]
fn the_rate_limit_spends_itself_on_kept_calls_only() {
    require_trace("rate limit");
    let (v, stripped) = builds()[0];
    let what = what(v, stripped);
    let bin = program(SRC, v, stripped);
    let when = r#"hasPrefix(path, "/api/")"#;
    let spec = SpecBuilder::new("limited")
        .executable(&bin)
        .events_per_second(50)
        .max_overhead_percent(0.0)
        .probe(handle(stripped, &[ID]).when(when))
        .build();
    let (run, out) = trace(&[spec], &bin, &["-n", "20000"]);
    let calls = calls(&out);
    let api: Vec<&Call> = calls
        .iter()
        .filter(|c| c.path.starts_with("/api/"))
        .collect();
    let p = probe_of(&run.summary(), "limited").clone();
    assert_eq!(
        p.filtered,
        (calls.len() - api.len()) as u64,
        "{what}: {p:?}"
    );
    assert_eq!(
        p.delivered + p.throttled + p.lost,
        api.len() as u64,
        "{what}: {p:?}"
    );
    // A one-second window: the burst lasts well under two of them.
    assert!((50..=150).contains(&p.delivered), "{what}: {p:?}");
    assert!(
        p.throttled > 0,
        "{what}: nothing throttled: the test proves nothing"
    );
    let got = records(&run, SYMBOL, "limited");
    assert_eq!(got.len() as u64, p.delivered, "{what}: {p:?}");
    for r in &got {
        let c = &calls[r["args"][ID].as_i64().unwrap() as usize];
        assert!(c.path.starts_with("/api/"), "{what}: {r}");
    }
}

/// The pairing stack's depth (GP_MAX_DEPTH in agent-ebpf/include/gprobe.h).
const MAX_DEPTH: i64 = 16;

/// Nested calls (e2e/testdata/recurse: rounds of depth(20) -> depth(0), each returning its
/// argument), some nested deeper than the pairing stack: a predicate on the argument or on
/// the result keeps exactly the calls it holds for among those recorded, each paired with
/// its own return, and every call is delivered, filtered or too deep.
#[test]
fn nested_calls_deeper_than_the_pairing_stack() {
    require_trace("recursion");
    let bin = program("e2e/testdata/recurse", GoVersion::Go127, false);
    let (rounds, deepest) = (30, 20);
    let probe = |when: &str| {
        ProbeBuilder::new("main.depth")
            .signature("func(n int64) int64")
            .capture(["n", "r0"])
            .latency()
            .when(when)
    };
    let specs = [
        spec("entry", &bin, probe("n >= 12")),
        spec("return", &bin, probe("r0 >= 12")),
    ];
    let args = [
        "-rounds",
        &rounds.to_string(),
        "-depth",
        &deepest.to_string(),
    ];
    let (run, out) = trace(&specs, &bin, &args);
    let calls = rounds * (deepest + 1);
    assert!(out.contains(&format!("calls={calls}")), "{out}");
    // The outer 16 calls of a round are recorded (n = 20 .. 5); of those, n >= 12 pass.
    assert!(deepest - MAX_DEPTH < 12);
    let summary = run.summary();
    for name in ["entry", "return"] {
        let got = records(&run, "main.depth", name);
        let mut per_n = std::collections::BTreeMap::<i64, i64>::new();
        for r in &got {
            let n = r["args"]["n"].as_i64().unwrap();
            assert_eq!(r["returns"]["r0"].as_i64(), Some(n), "{name}: {r}");
            *per_n.entry(n).or_default() += 1;
        }
        let want: std::collections::BTreeMap<i64, i64> =
            (12..=deepest).map(|n| (n, rounds)).collect();
        assert_eq!(per_n, want, "{name}: calls delivered per n\n{}", run.stderr);
        let p = probe_of(&summary, name);
        assert_eq!(p.delivered, got.len() as u64, "{name}: {p:?}");
        assert_eq!(
            p.delivered + p.filtered + p.too_deep,
            calls as u64,
            "{name}: every call delivered, filtered or too deep: {p:?}"
        );
        assert_eq!(
            (p.lost, p.throttled, p.unfinished),
            (0, 0, 0),
            "{name}: {p:?}"
        );
    }
}
