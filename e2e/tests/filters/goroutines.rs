//! Calls of several goroutines at once, some sleeping inside `main.handle` while others
//! enter it (on the same thread, or move to another): a term on results is decided at each
//! call's own return, and each delivered record holds its own call's result.

use super::go::{builds, calls, go_id, handle, named, what, Call, ID, SRC, SYMBOL};
use super::{assert_kept, spec, trace, Case};
use gprobe_crds::ProbeSpec;
use gprobe_e2e::harness::{program, require_trace};

#[test]
fn result_terms_are_decided_at_each_calls_own_return_across_goroutines() {
    require_trace("goroutines");
    let cases: [Case<Call>; 3] = [
        Case {
            name: "api-or-err",
            when: r#"hasPrefix(path, "/api/") || err != nil"#,
            keep: |c| c.path.starts_with("/api/") || c.err,
        },
        Case {
            name: "big-not-ok",
            when: "total > 10 && !ok",
            keep: |c| c.total > 10 && !c.ok,
        },
        Case {
            name: "err-with-customer",
            when: "err != nil && o.Customer != nil",
            keep: |c| c.err && c.customer,
        },
    ];
    for (v, stripped) in builds() {
        let what = what(v, stripped);
        let bin = program(SRC, v, stripped);
        let specs: Vec<ProbeSpec> = cases
            .iter()
            .map(|c| {
                let p = handle(stripped, &[ID, "total"]).latency().when(c.when);
                spec(c.name, &bin, p)
            })
            .collect();
        let args = ["-n", "60", "-goroutines", "6", "-sleep"];
        let (run, out) = trace(&specs, &bin, &args);
        let calls = calls(&out);
        let ids = named(&calls);
        for c in &cases {
            let kept: Vec<bool> = calls.iter().map(c.keep).collect();
            let what = format!("{what}, 6 goroutines, when: {}", c.when);
            assert_kept(&run, SYMBOL, c.name, &ids, &kept, go_id, &what);
        }
        for r in run.records_of(SYMBOL) {
            let c = &calls[r["args"][ID].as_i64().unwrap() as usize];
            assert_eq!(r["returns"]["total"], c.total, "{what}: {r}\n{c:?}");
        }
    }
}
