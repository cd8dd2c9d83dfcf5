//! The Go program, e2e/testdata/filters: `main.handle(o *Order, path string, n int64, ok bool)
//! (int64, error)`, on Go 1.27 stripped (with a signature) and Go 1.19 with DWARF.

use super::{assert_kept, probe_of, records, spec, trace, Case};
use gprobe_crds::ProbeSpec;
use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, program_lines, require_trace};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::{json, Value};
use std::collections::BTreeSet;

pub(crate) const SRC: &str = "e2e/testdata/filters";
pub(crate) const SYMBOL: &str = "main.handle";
pub(crate) const SIGNATURE: &str =
    "func(o *main.Order, path string, n int64, ok bool) (total int64, err error)";
/// The call's index, captured by every probe here: it names the call in a record.
pub(crate) const ID: &str = "o.ID";

/// One call of `main.handle`, as the program printed it.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) id: i64,
    pub(crate) n: i64,
    pub(crate) path: String,
    pub(crate) ok: bool,
    /// `o.Customer` is not nil.
    pub(crate) customer: bool,
    /// `o.Customer.Name` ("" when there is no customer).
    pub(crate) name: String,
    pub(crate) items: i64,
    pub(crate) total: i64,
    pub(crate) err: bool,
    /// The call's duration as the program timed it.
    pub(crate) dur_ns: u64,
}

pub(crate) fn calls(out: &str) -> Vec<Call> {
    let calls: Vec<Call> = program_lines(out, "call ")
        .iter()
        .map(|l| Call {
            id: l["id"].parse().unwrap(),
            n: l["n"].parse().unwrap(),
            path: l["path"].clone(),
            ok: l["ok"].parse().unwrap(),
            customer: l["customer"] == "yes",
            name: l["name"].clone(),
            items: l["items"].parse().unwrap(),
            total: l["total"].parse().unwrap(),
            err: l["err"] != "nil",
            dur_ns: l["dur_ns"].parse().unwrap(),
        })
        .collect();
    assert!(
        out.contains(&format!("calls={}\n", calls.len())),
        "the program's lines:\n{out}"
    );
    calls
}

/// The two builds every Go test runs on: Go 1.27 stripped (types from the signature and
/// the runtime type descriptors) and the oldest Go with DWARF (no signature).
pub(crate) fn builds() -> [(GoVersion, bool); 2] {
    [(GoVersion::Go127, true), (GoVersion::Go119, false)]
}

pub(crate) fn what(v: GoVersion, stripped: bool) -> String {
    format!(
        "{} {}",
        v.tag(),
        if stripped { "stripped" } else { "DWARF" }
    )
}

/// A probe on `main.handle` capturing `capture`, with the signature a stripped build needs.
pub(crate) fn handle(stripped: bool, capture: &[&str]) -> ProbeBuilder {
    let p = ProbeBuilder::new(SYMBOL).capture(capture.iter().copied());
    if stripped {
        p.signature(SIGNATURE)
    } else {
        p
    }
}

/// Traces the Go program (`args`) on both builds with one spec per case (each capturing
/// only the call's index, `latency` as asked) and checks each case's records and counts.
pub(crate) fn check_go(cases: &[Case<Call>], latency: bool, args: &[&str]) {
    require_trace("filters");
    for (v, stripped) in builds() {
        let what = what(v, stripped);
        let bin = program(SRC, v, stripped);
        let specs: Vec<ProbeSpec> = cases
            .iter()
            .map(|c| {
                let p = handle(stripped, &[ID]).when(c.when);
                spec(c.name, &bin, if latency { p.latency() } else { p })
            })
            .collect();
        let (run, out) = trace(&specs, &bin, args);
        let calls = calls(&out);
        let ids = named(&calls);
        for c in cases {
            let kept: Vec<bool> = calls.iter().map(c.keep).collect();
            assert!(
                kept.iter().any(|k| *k) && !kept.iter().all(|k| *k),
                "{what}: {:?} holds for all or none of the calls: the case proves nothing",
                c.when
            );
            let what = format!("{what}, when: {}", c.when);
            assert_kept(&run, SYMBOL, c.name, &ids, &kept, go_id, &what);
        }
        // A term's value is not output unless captured: the records hold the index only.
        for r in run.records_of(SYMBOL) {
            let keys: Vec<&String> = r["args"].as_object().unwrap().keys().collect();
            assert_eq!(keys, [ID], "{what}: {r}");
        }
    }
}

/// Each call's index (as [`go_id`] reads it from a record) and the call shown.
pub(crate) fn named(calls: &[Call]) -> Vec<(String, String)> {
    calls
        .iter()
        .map(|c| (c.id.to_string(), format!("{c:?}")))
        .collect()
}

/// The call's index in a record.
pub(crate) fn go_id(r: &Value) -> String {
    r["args"][ID]
        .as_i64()
        .unwrap_or_else(|| panic!("no {ID} in {r}"))
        .to_string()
}

#[test]
fn integer_terms_keep_exactly_the_calls_they_hold_for() {
    check_go(
        &[
            Case {
                name: "int-and",
                when: "n > 5 && n != 7",
                keep: |c| c.n > 5 && c.n != 7,
            },
            Case {
                name: "int-negative",
                when: "n < 0 || n >= 8",
                keep: |c| c.n < 0 || c.n >= 8,
            },
            Case {
                name: "int-len",
                when: "(len(o.Items) <= 1 || o.ID == 9) && !(n == 3)",
                keep: |c| (c.items <= 1 || c.id == 9) && c.n != 3,
            },
        ],
        false,
        &["-n", "70"],
    );
}

#[test]
fn string_terms_keep_exactly_the_calls_they_hold_for() {
    check_go(
        &[
            Case {
                name: "str-ne",
                when: r#"path != "/healthz""#,
                keep: |c| c.path != "/healthz",
            },
            Case {
                name: "str-prefix",
                when: r#"hasPrefix(path, "/api/")"#,
                keep: |c| c.path.starts_with("/api/"),
            },
            Case {
                name: "str-empty",
                when: r#"path == """#,
                keep: |c| c.path.is_empty(),
            },
            Case {
                // Equal to a prefix of longer paths ("/healthz/live"): equality is whole.
                name: "str-eq",
                when: r#"path == "/healthz" || path == "/ap""#,
                keep: |c| c.path == "/healthz" || c.path == "/ap",
            },
        ],
        false,
        &["-n", "70"],
    );
}

#[test]
fn nil_and_paths_through_a_nil_pointer() {
    check_go(
        &[
            Case {
                name: "nil",
                when: "o.Customer == nil",
                keep: |c| !c.customer,
            },
            Case {
                name: "not-nil",
                when: "o.Customer != nil",
                keep: |c| c.customer,
            },
            Case {
                // Calls without a customer: the path crosses a nil pointer, the term is
                // false. Long names starting "acme" are not equal to it.
                name: "through-nil",
                when: r#"o.Customer.Name == "acme""#,
                keep: |c| c.customer && c.name == "acme",
            },
            Case {
                // The term is false through a nil pointer, so its negation holds.
                name: "not-through-nil",
                when: r#"!(o.Customer.Name == "acme")"#,
                keep: |c| !(c.customer && c.name == "acme"),
            },
            Case {
                name: "prefix-through-nil",
                when: r#"hasPrefix(o.Customer.Name, "ac") && len(o.Items) > 2"#,
                keep: |c| c.customer && c.name.starts_with("ac") && c.items > 2,
            },
        ],
        false,
        &["-n", "70"],
    );
}

#[test]
fn bool_terms_keep_exactly_the_calls_they_hold_for() {
    check_go(
        &[
            Case {
                name: "bool",
                when: "ok",
                keep: |c| c.ok,
            },
            Case {
                name: "not-bool",
                when: "!ok",
                keep: |c| !c.ok,
            },
            Case {
                name: "bool-eq",
                when: "ok == false && n >= 0",
                keep: |c| !c.ok && c.n >= 0,
            },
        ],
        false,
        &["-n", "70"],
    );
}

#[test]
fn result_terms_are_decided_at_the_return() {
    check_go(
        &[
            Case {
                name: "err",
                when: "err != nil",
                keep: |c| c.err,
            },
            Case {
                name: "total",
                when: "total > 10",
                keep: |c| c.total > 10,
            },
            Case {
                // An entry term and a result term together.
                name: "entry-and-result",
                when: r#"hasPrefix(path, "/api/") && total > 10"#,
                keep: |c| c.path.starts_with("/api/") && c.total > 10,
            },
            Case {
                // The entry term decides some calls at entry, the rest wait for the return.
                name: "entry-or-result",
                when: "n > 5 || err == nil",
                keep: |c| c.n > 5 || !c.err,
            },
        ],
        false,
        &["-n", "70"],
    );
}

/// Calls the program timed within this of the threshold may go either way: its timer and
/// gprobe's do not start and stop at the same instants.
const SLACK_NS: u64 = 1_000_000;

/// A predicate on `duration`: which calls it keeps, given whether each took longer than
/// 5 ms.
struct DurationCase {
    name: &'static str,
    when: &'static str,
    keep: fn(&Call, bool) -> bool,
}

#[test]
fn duration_keeps_the_calls_that_took_longer() {
    require_trace("duration");
    let threshold = 5_000_000;
    let cases = [
        DurationCase {
            name: "slow",
            when: "duration > 5ms",
            keep: |_, slow| slow,
        },
        DurationCase {
            name: "slow-in-us",
            when: "duration >= 5000us",
            keep: |_, slow| slow,
        },
        DurationCase {
            name: "slow-or-odd",
            when: "duration >= 0.005s || err != nil",
            keep: |c, slow| slow || c.err,
        },
        DurationCase {
            // Decided at the entry for the calls not on /api/.
            name: "api-and-slow",
            when: r#"hasPrefix(path, "/api/") && duration > 5ms"#,
            keep: |c, slow| slow && c.path.starts_with("/api/"),
        },
        DurationCase {
            name: "fast",
            when: "!(duration > 5ms) && n >= 0",
            keep: |c, slow| !slow && c.n >= 0,
        },
    ];
    for (v, stripped) in builds() {
        let what = what(v, stripped);
        let bin = program(SRC, v, stripped);
        let specs: Vec<ProbeSpec> = cases
            .iter()
            .map(|c| spec(c.name, &bin, handle(stripped, &[ID]).latency().when(c.when)))
            .collect();
        let (run, out) = trace(&specs, &bin, &["-n", "40", "-sleep"]);
        let calls = calls(&out);
        let summary = run.summary();
        for DurationCase { name, keep, .. } in &cases {
            let got: BTreeSet<i64> = records(&run, SYMBOL, name)
                .iter()
                .map(|r| {
                    assert!(r["duration_ns"].as_u64().is_some(), "{what}: {r}");
                    r["args"][ID].as_i64().unwrap()
                })
                .collect();
            let (mut kept, mut left_out, mut unsure) = (0, 0, 0);
            for c in &calls {
                let slow = c.dur_ns > threshold;
                let near = c.dur_ns.abs_diff(threshold) <= SLACK_NS;
                if near && keep(c, slow) != keep(c, !slow) {
                    unsure += 1;
                    continue;
                }
                let want = keep(c, slow);
                if want {
                    kept += 1;
                } else {
                    left_out += 1;
                }
                assert_eq!(
                    got.contains(&c.id),
                    want,
                    "{what}: {name}: call {c:?} (as the program timed it; threshold 5 ms)"
                );
            }
            assert!(
                kept >= 4 && left_out >= 4 && unsure * 4 <= calls.len(),
                "{what}: {name}: {kept} calls surely kept, {left_out} surely left out, \
                 {unsure} within 1 ms of 5 ms: the test proves too little"
            );
            let p = probe_of(&summary, name);
            assert!(p.error.is_none(), "{what}: {p:?}");
            assert_eq!(p.delivered, got.len() as u64, "{what}: {p:?}");
            assert_eq!(
                (
                    p.delivered + p.filtered,
                    p.lost + p.throttled + p.unfinished
                ),
                (calls.len() as u64, 0),
                "{what}: {p:?}"
            );
        }
    }
}

#[test]
fn a_term_on_a_value_not_captured_is_not_output_and_captured_ones_are() {
    require_trace("not captured");
    for (v, stripped) in builds() {
        let what = what(v, stripped);
        let bin = program(SRC, v, stripped);
        let when = r#"hasPrefix(path, "/api/") && o.Customer != nil && total > 0"#;
        // Strings cut at 16 bytes: the long paths read for the predicate are cut, which the
        // record must not say either.
        let index_only = SpecBuilder::new("index-only")
            .executable(&bin)
            .max_string_bytes(16)
            .probe(handle(stripped, &[ID]).when(when))
            .build();
        let specs = [
            index_only,
            spec(
                "with-path",
                &bin,
                handle(stripped, &[ID, "path", "o.Customer.Name"]).when(when),
            ),
        ];
        let (run, out) = trace(&specs, &bin, &["-n", "50"]);
        let calls = calls(&out);
        let ids = named(&calls);
        let kept: Vec<bool> = calls
            .iter()
            .map(|c| c.path.starts_with("/api/") && c.customer && c.total > 0)
            .collect();
        assert!(
            calls
                .iter()
                .zip(&kept)
                .any(|(c, k)| *k && c.path.len() > 16),
            "{what}: no long path kept: the test proves less than it says"
        );
        for name in ["index-only", "with-path"] {
            assert_kept(&run, SYMBOL, name, &ids, &kept, go_id, &what);
        }
        for r in records(&run, SYMBOL, "index-only") {
            assert_eq!(r["args"], json!({ID: r["args"][ID]}), "{what}");
            // Nor the result read for it, nor that a string was cut or unreadable.
            for key in ["returns", "truncated", "invalid"] {
                assert!(
                    r.get(key)
                        .is_none_or(|x| x == &json!({}) || x == &json!([])),
                    "{what}: {key}: {r}"
                );
            }
        }
        for r in records(&run, SYMBOL, "with-path") {
            let c = &calls[r["args"][ID].as_i64().unwrap() as usize];
            assert_eq!(r["args"]["path"], c.path.as_str(), "{what}: {r}");
            assert_eq!(r["args"]["o.Customer.Name"], c.name.as_str(), "{what}: {r}");
        }
    }
}

#[test]
fn planning_refuses_a_term_that_cannot_hold_and_names_it() {
    require_trace("refused");
    for (v, stripped) in builds() {
        let what = what(v, stripped);
        let bin = program(SRC, v, stripped);
        let refused = [
            ("str-vs-int", r#"n == "x""#),
            ("no-such-path", "o.Customer.Nope == 1"),
            ("float", "o.Price > 1"),
            // A string literal has at most 64 bytes.
            (
                "long-literal",
                concat!(
                    r#"hasPrefix(path, "/"#,
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                    r#"")"#
                ),
            ),
            // `duration` is measured only by a latency probe.
            ("no-latency", "duration > 5ms"),
        ];
        let mut specs: Vec<ProbeSpec> = refused
            .iter()
            .map(|(name, term)| {
                let when = format!("ok && {term}");
                spec(name, &bin, handle(stripped, &[ID]).when(&when))
            })
            .collect();
        specs.push(spec("fine", &bin, handle(stripped, &[ID]).when("n > 5")));
        let (run, out) = trace(&specs, &bin, &["-n", "20"]);
        let calls = calls(&out);
        let summary = run.summary();
        for (name, term) in refused {
            let p = probe_of(&summary, name);
            let err = p.error.as_deref().unwrap_or_else(|| {
                panic!("{what}: {term:?} was not refused: {p:?}\n{}", run.stderr)
            });
            let named = |s: &str| s.contains(term) || s.contains(&format!("{term:?}"));
            assert!(
                named(err),
                "{what}: the error does not name {term:?}: {err}"
            );
            assert!(
                run.stderr.lines().any(named),
                "{what}: stderr does not name {term:?}:\n{}",
                run.stderr
            );
            assert_eq!((p.delivered, p.filtered), (0, 0), "{what}: {p:?}");
            assert!(records(&run, SYMBOL, name).is_empty(), "{what}: {name}");
        }
        // The other spec runs.
        let ids = named(&calls);
        let kept: Vec<bool> = calls.iter().map(|c| c.n > 5).collect();
        assert_kept(&run, SYMBOL, "fine", &ids, &kept, go_id, &what);
    }
}
