//! `sample:` on e2e/testdata/filters (Go 1.27 stripped), alone and after a `when:`
//! decided at the entry or at the return.

use super::go::{builds, calls, handle, Call, ID, SRC, SYMBOL};
use super::{probe_of, records, spec, trace, Case};
use gprobe_crds::ProbeSpec;
use gprobe_e2e::harness::{program, require_trace};

/// `sample:` keeps a share of the calls, by trace id; `filtered` counts those `when` left
/// out, `sampled_out` those it kept and sampling did not.
#[test]
fn sampling_keeps_a_share_of_the_calls_that_pass() {
    require_trace("sample");
    let (v, stripped) = builds()[0];
    let bin = program(SRC, v, stripped);
    let cases: [(Case<Call>, f64); 3] = [
        (
            Case {
                name: "tenth",
                when: "",
                keep: |_| true,
            },
            0.1,
        ),
        (
            Case {
                name: "half-of-api",
                when: r#"hasPrefix(path, "/api/")"#,
                keep: |c| c.path.starts_with("/api/"),
            },
            0.5,
        ),
        (
            // Decided at the return, then sampled.
            Case {
                name: "half-of-errors",
                when: "err != nil",
                keep: |c| c.err,
            },
            0.5,
        ),
    ];
    let specs: Vec<ProbeSpec> = cases
        .iter()
        .map(|(c, share)| {
            let p = handle(stripped, &[ID]).sample(*share);
            spec(
                c.name,
                &bin,
                if c.when.is_empty() { p } else { p.when(c.when) },
            )
        })
        .collect();
    let (run, out) = trace(&specs, &bin, &["-n", "10000"]);
    let calls = calls(&out);
    assert_eq!(calls.len(), 10_000);
    let summary = run.summary();
    for (Case { name, keep, .. }, share) in cases {
        let passed = calls.iter().filter(|c| keep(c)).count() as u64;
        let p = probe_of(&summary, name);
        assert!(p.error.is_none(), "{p:?}\n{}", run.stderr);
        assert_eq!(p.throttled + p.too_deep, 0, "{p:?}");
        let got = records(&run, SYMBOL, name);
        assert_eq!(got.len() as u64, p.delivered, "{p:?}");
        assert_eq!(
            10_000 - passed,
            p.filtered,
            "{name}: filtered by when: {p:?}"
        );
        assert_eq!(
            p.delivered + p.lost + p.sampled_out,
            passed,
            "{name}: {p:?}"
        );
        // Sampling is decided where the records are read: of the calls read, this share.
        let kept = p.delivered as f64 / (p.delivered + p.sampled_out) as f64;
        assert!(
            (kept - share).abs() <= share * 0.2,
            "{name}: kept {kept:.3} of the calls that passed, not {share} +- 20%: {p:?}"
        );
        // Sampled calls are whole calls that passed `when`.
        for r in &got {
            let c = &calls[r["args"][ID].as_i64().unwrap() as usize];
            assert!(keep(c), "{name}: {r}\n{c:?}");
        }
    }
}
