//! The edges of the predicate language on e2e/testdata/filters: strings of 64 bytes (the
//! longest literal) and longer, escapes, lengths, hexadecimal and out-of-range integer
//! literals, a predicate of 16 terms and 32 steps, and the rate limit spent on kept calls
//! only.

use super::go::{builds, calls, check_go, handle, what, Call, ID, SRC, SYMBOL};
use super::{probe_of, records, trace, Case};
use gprobe_e2e::harness::{program, require_trace};
use gprobe_e2e::spec::SpecBuilder;

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
