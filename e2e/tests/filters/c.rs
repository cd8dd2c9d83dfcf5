//! The C program, e2e/testdata/cfilter: `int handle(int n, const char *s)`, with DWARF and
//! from a prototype.

use super::edges::EXACT;
use super::{assert_kept, probe_of, records, spec, trace, Case};
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

/// e2e/testdata/cpage: `handle(n, s)` with `s` on a page the process has not touched before
/// the first call (a uprobe cannot fault it in). That value is unreadable: `null`, listed in
/// the record's `"unreadable"`; a `when:` that needs it leaves the call `undecided`, never
/// `filtered` (it did not fail the condition). The second call finds the page mapped.
#[test]
fn a_string_on_a_page_not_yet_in_memory_is_unreadable_and_its_when_undecided() {
    require_trace("C filters");
    let dir = TempDir::new("cpage");
    let src = repo_root().join("e2e/testdata/cpage/cpage.c");
    let bin = cc::build(&src, &dir.path().join("cpage"), &["-g"], None);
    let all = ProbeBuilder::new("handle").capture(["n", "s"]);
    let eq = ProbeBuilder::new("handle")
        .capture(["n"])
        .when(r#"s == "abcdefgh""#);
    let specs = [spec("cpage-all", &bin, all), spec("cpage-eq", &bin, eq)];
    let (run, out) = trace(&specs, &bin, &[]);
    assert_eq!(program_lines(&out, "call ").len(), 2, "{out}");
    let recs = records(&run, "handle", "cpage-all");
    let by_n = |n: i64| {
        recs.iter()
            .find(|r| r["args"]["n"].as_i64() == Some(n))
            .unwrap_or_else(|| panic!("call {n} in {recs:?}\n{}", run.stderr))
    };
    let (first, second) = (by_n(1), by_n(2));
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(first["args"]["s"].is_null(), "{first}");
    assert_eq!(first["unreadable"], serde_json::json!(["s"]), "{first}");
    assert_eq!(second["args"]["s"], "abcdefgh", "{second}");
    assert!(second.get("unreadable").is_none(), "{second}");
    let kept = records(&run, "handle", "cpage-eq");
    assert_eq!(
        kept.iter()
            .map(|r| r["args"]["n"].as_i64())
            .collect::<Vec<_>>(),
        vec![Some(2)],
        "{kept:?}"
    );
    let p = probe_of(&run.summary(), "cpage-eq").clone();
    assert_eq!((p.delivered, p.undecided, p.filtered), (1, 1, 0), "{p:?}");
}

/// A call of `greet(buf, len)`: the first `len` bytes of `buf`.
#[derive(Debug)]
struct Greet {
    buf: String,
    len: i64,
    r0: i64,
}

/// A call of the recursive `fact(n)` (nested ones too).
#[derive(Debug)]
struct Fact {
    n: i64,
    r0: i64,
}

#[test]
fn c_bytes_with_a_length_and_results_of_nested_calls() {
    require_trace("C filters, greet and fact");
    let dir = TempDir::new("cfilter-more");
    let greets: [Case<Greet>; 4] = [
        Case {
            name: "bytes-prefix",
            when: r#"hasPrefix(buf[:len], "xyzzy")"#,
            keep: |g| g.buf.starts_with("xyzzy"),
        },
        Case {
            name: "bytes-eq",
            when: r#"buf[:len] == "xyz""#,
            keep: |g| g.buf == "xyz",
        },
        Case {
            name: "bytes-ne",
            when: r#"buf[:len] != "xyzzy-hello" && len != 0"#,
            keep: |g| g.buf != "xyzzy-hello" && g.len != 0,
        },
        Case {
            name: "size-result",
            when: "r0 > 124",
            keep: |g| g.r0 > 124,
        },
    ];
    let facts: [Case<Fact>; 3] = [
        Case {
            name: "fact-entry",
            when: "n >= 5",
            keep: |f| f.n >= 5,
        },
        Case {
            name: "fact-result",
            when: "r0 > 1000",
            keep: |f| f.r0 > 1000,
        },
        Case {
            name: "fact-both",
            when: "r0 > 100 && n != 8",
            keep: |f| f.r0 > 100 && f.n != 8,
        },
    ];
    for dwarf in [true, false] {
        let what = if dwarf {
            "C with DWARF"
        } else {
            "C from a prototype"
        };
        let bin = cfilter(dir.path(), dwarf);
        let sig = |p: ProbeBuilder, s: &str| if dwarf { p } else { p.signature(s) };
        let mut specs: Vec<ProbeSpec> = greets
            .iter()
            .map(|c| {
                let p = ProbeBuilder::new("greet").capture(["len"]).when(c.when);
                let p = sig(p, "size_t greet(const char *buf, size_t len)");
                spec(c.name, &bin, p)
            })
            .collect();
        specs.extend(facts.iter().map(|c| {
            let p = ProbeBuilder::new("fact").capture(["n"]).when(c.when);
            spec(c.name, &bin, sig(p, "long fact(long n)"))
        }));
        let (run, out) = trace(&specs, &bin, &["-n", "27"]);

        let calls: Vec<Greet> = program_lines(&out, "greet ")
            .iter()
            .map(|l| Greet {
                buf: l["buf"].clone(),
                len: l["len"].parse().unwrap(),
                r0: l["r0"].parse().unwrap(),
            })
            .collect();
        assert_eq!(calls.len(), 27, "{out}");
        let ids: Vec<(String, String)> = calls
            .iter()
            .map(|g| (g.len.to_string(), format!("{g:?}")))
            .collect();
        let len_of = |r: &Value| r["args"]["len"].as_i64().unwrap().to_string();
        for c in &greets {
            let kept: Vec<bool> = calls.iter().map(c.keep).collect();
            let what = format!("{what}, when: {}", c.when);
            assert_kept(&run, "greet", c.name, &ids, &kept, len_of, &what);
        }

        // fact(n) makes the calls fact(n), fact(n - 1) ... fact(1).
        let mut calls = Vec::new();
        for l in program_lines(&out, "fact ") {
            let n: i64 = l["n"].parse().unwrap();
            calls.extend((1..=n).map(|k| Fact {
                n: k,
                r0: (1..=k).product(),
            }));
            assert_eq!(l["r0"].parse::<i64>().unwrap(), calls.last().unwrap().r0);
        }
        let ids: Vec<(String, String)> = calls
            .iter()
            .map(|f| (f.n.to_string(), format!("{f:?}")))
            .collect();
        let n_of = |r: &Value| r["args"]["n"].as_i64().unwrap().to_string();
        for c in &facts {
            let kept: Vec<bool> = calls.iter().map(c.keep).collect();
            let what = format!("{what}, when: {}", c.when);
            assert_kept(&run, "fact", c.name, &ids, &kept, n_of, &what);
        }
    }
}
