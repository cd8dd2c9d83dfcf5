//! The C program, e2e/testdata/cfilter: `int handle(int n, const char *s)`, with DWARF and
//! from a prototype.

use super::edges::EXACT;
use super::{assert_kept, spec, trace, Case};
use gprobe_crds::ProbeSpec;
use gprobe_e2e::cc;
use gprobe_e2e::go::{repo_root, TempDir};
use gprobe_e2e::harness::{program_lines, require_trace};
use gprobe_e2e::spec::ProbeBuilder;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One call of the C `handle`, as the program printed it.
#[derive(Debug, Clone)]
struct CCall {
    n: i64,
    /// None for a NULL `s`.
    s: Option<String>,
    r0: i64,
}

fn cfilter(dir: &Path, dwarf: bool) -> PathBuf {
    let src = repo_root().join("e2e/testdata/cfilter/cfilter.c");
    if dwarf {
        cc::build(&src, &dir.join("cfilter"), &["-g"], None)
    } else {
        cc::build(&src, &dir.join("cfilter-nodebug"), &[], Some("-g"))
    }
}

#[test]
fn c_terms_on_integers_strings_and_results() {
    require_trace("C filters");
    let dir = TempDir::new("cfilter");
    let cases: [Case<CCall>; 8] = [
        Case {
            name: "c-int",
            when: "n > 5 && n != 7",
            keep: |c| c.n > 5 && c.n != 7,
        },
        Case {
            name: "c-negative",
            when: "n < 0",
            keep: |c| c.n < 0,
        },
        Case {
            // A NULL `s` is a nil pointer: the comparison is false.
            name: "c-prefix",
            when: r#"hasPrefix(s, "/api/")"#,
            keep: |c| c.s.as_deref().is_some_and(|s| s.starts_with("/api/")),
        },
        Case {
            name: "c-ne",
            when: r#"s != "/healthz""#,
            keep: |c| c.s.as_deref().is_some_and(|s| s != "/healthz"),
        },
        Case {
            // "/healthz/live" starts with it: a C string is equal only up to its NUL.
            name: "c-eq",
            when: r#"s == "/healthz""#,
            keep: |c| c.s.as_deref() == Some("/healthz"),
        },
        Case {
            name: "c-exact-64",
            when: r#"s == "/exact/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx""#,
            keep: |c| c.s.as_deref() == Some(EXACT),
        },
        Case {
            // Beyond int: always true, so n decides.
            name: "c-out-of-range",
            when: "n < 3000000000 && n > -3000000000 && n != 4294967299 && n >= 2",
            keep: |c| c.n >= 2,
        },
        Case {
            name: "c-result",
            when: "r0 > 10 || n == 0",
            keep: |c| c.r0 > 10 || c.n == 0,
        },
    ];
    for dwarf in [true, false] {
        let what = if dwarf {
            "C with DWARF"
        } else {
            "C from a prototype"
        };
        let bin = cfilter(dir.path(), dwarf);
        let specs: Vec<ProbeSpec> = cases
            .iter()
            .map(|c| {
                let p = ProbeBuilder::new("handle").capture(["n"]).when(c.when);
                let p = if dwarf {
                    p
                } else {
                    p.signature("int handle(int n, const char *s)")
                };
                spec(c.name, &bin, p)
            })
            .collect();
        let (run, out) = trace(&specs, &bin, &["-n", "49"]);
        let calls: Vec<CCall> = program_lines(&out, "call ")
            .iter()
            .map(|l| CCall {
                n: l["n"].parse().unwrap(),
                s: (l["null"] == "false").then(|| l["s"].clone()),
                r0: l["r0"].parse().unwrap(),
            })
            .collect();
        assert!(out.contains(&format!("calls={}\n", calls.len())) && calls.len() == 49);
        // Calls are identified by their order and argument: the program is one thread.
        let ids: Vec<(String, String)> = calls
            .iter()
            .map(|c| (c.n.to_string(), format!("{c:?}")))
            .collect();
        for c in &cases {
            let kept: Vec<bool> = calls.iter().map(c.keep).collect();
            assert!(
                kept.iter().any(|k| *k) && !kept.iter().all(|k| *k),
                "{}",
                c.when
            );
            let what = format!("{what}, when: {}", c.when);
            let n_of = |r: &Value| r["args"]["n"].as_i64().unwrap().to_string();
            assert_kept(&run, "handle", c.name, &ids, &kept, n_of, &what);
        }
    }
}
