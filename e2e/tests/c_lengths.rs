//! `NAME[:LEN]` reads nothing that was not asked for (e2e/testdata/clen): a negative
//! signed length (`int`, `long`, `short`, INT_MIN, a USDT `-4@` argument) gives `""` listed
//! in `"invalid"`, a length above `maxStringBytes` is cut and listed in `"truncated"`, and
//! the canary that follows the 8-byte buffer in memory appears in no record or log line;
//! also a positional name (`p0`) of a named parameter is refused, naming it. With DWARF and
//! without it (then from the prototypes in `signature`). They need root (BPF).

use gprobe_e2e::cc;
use gprobe_e2e::go::{repo_root, TempDir};
use gprobe_e2e::harness::{program_lines, require_trace, run_program, serial, Gprobe, Run};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::path::{Path, PathBuf};

const CANARY: &str = "CANARY-0123456789";
const MAX: usize = 64;

fn clen(dir: &Path, dwarf: bool) -> PathBuf {
    let src = repo_root().join("e2e/testdata/clen/clen.c");
    let out = dir.join(if dwarf { "clen" } else { "clen-nodebug" });
    if dwarf {
        cc::build(&src, &out, &["-g"], None)
    } else {
        cc::build(&src, &out, &[], Some("-g"))
    }
}

fn spec(bin: &Path, prototypes: bool) -> String {
    let sig = |p: ProbeBuilder, s: &str| if prototypes { p.signature(s) } else { p };
    SpecBuilder::new("clen")
        .executable(bin)
        .max_string_bytes(MAX as u32)
        .probe(
            sig(
                ProbeBuilder::new("put_int"),
                "int put_int(const char *buf, int len)",
            )
            .capture(["buf[:len]", "len"]),
        )
        .probe(
            sig(
                ProbeBuilder::new("put_long"),
                "long put_long(const char *buf, long len)",
            )
            .capture(["buf[:len]", "len"]),
        )
        .probe(
            sig(
                ProbeBuilder::new("put_short"),
                "int put_short(const char *buf, short len)",
            )
            .capture(["buf[:len]", "len"]),
        )
        .probe(
            sig(
                ProbeBuilder::new("put_uint"),
                "unsigned put_uint(const char *buf, unsigned len)",
            )
            .capture(["buf[:len]", "len"]),
        )
        .probe(
            ProbeBuilder::usdt("clen:put")
                .signature("(const char *buf, int len)")
                .capture(["buf[:len]", "len"]),
        )
        // `p1` names `len` by position: refused, with the names to write.
        .probe(
            sig(
                ProbeBuilder::new("put_long"),
                "long put_long(const char *buf, long len)",
            )
            .capture(["p1"]),
        )
        .yaml()
}

fn listed(r: &Value, list: &str, key: &str) -> bool {
    r.get(list)
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|k| k == key))
}

/// Every record of `symbol` (with a `buf[:len]`) against the program's `len=` of each call.
fn check(run: &Run, out: &str, symbol: &str, prefix: &str) -> usize {
    let want: Vec<i64> = program_lines(out, prefix)
        .iter()
        .map(|l| l["len"].parse().unwrap())
        .collect();
    let got: Vec<Value> = run
        .records_of(symbol)
        .into_iter()
        .filter(|r| r["args"].get("buf[:len]").is_some())
        .collect();
    assert_eq!(got.len(), want.len(), "{symbol}: {}", run.stderr);
    for (r, &len) in got.iter().zip(&want) {
        let a = &r["args"];
        assert_eq!(a["len"].as_i64(), Some(len), "{symbol}: {r}");
        let bytes = a["buf[:len]"].as_str().unwrap();
        let (invalid, truncated) = (
            listed(r, "invalid", "buf[:len]"),
            listed(r, "truncated", "buf[:len]"),
        );
        match len {
            l if l < 0 => {
                assert_eq!(bytes, "", "{symbol}: a negative length reads nothing: {r}");
                assert!(invalid && !truncated, "{symbol}: marked invalid: {r}");
            }
            l if l as usize > MAX => {
                assert_eq!(bytes, "x".repeat(MAX), "{symbol}: {r}");
                assert!(truncated && !invalid, "{symbol}: marked truncated: {r}");
            }
            l => {
                assert_eq!(bytes, &"visible"[..l as usize], "{symbol}: {r}");
                assert!(!truncated && !invalid, "{symbol}: {r}");
            }
        }
    }
    got.len()
}

fn trace(bin: &Path, prototypes: bool) {
    let g = Gprobe::start(&spec(bin, prototypes), &[]);
    let out = run_program(bin, &[]);
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    let negatives = out.lines().filter(|l| l.contains("len=-")).count();
    assert_eq!(negatives, 4, "the program's negative lengths:\n{out}");
    // put_int: 7, -1, 0, INT_MIN, 150; put_long: -5, 7; put_short: -1; put_uint: 150.
    assert_eq!(check(&run, &out, "put_int", "put_int "), 5);
    assert_eq!(check(&run, &out, "put_long", "put_long "), 2);
    assert_eq!(check(&run, &out, "put_short", "put_short "), 1);
    assert_eq!(check(&run, &out, "put_uint", "put_uint "), 1);
    // The USDT probe inside put_int: its note's `-4@` length is signed too.
    assert_eq!(check(&run, &out, "usdt:clen:put", "put_int "), 5);
    assert!(
        !run.stdout.contains(CANARY) && !run.stderr.contains(CANARY),
        "bytes past the buffer were read:\n{}",
        run.stdout
    );
    // From the prototype (the spec's validation) or from DWARF (the planner): the same
    // words.
    for words in [
        "\"p1\" names parameter 1 by its position, but",
        "names it \"len\": write len",
    ] {
        assert!(run.stderr.contains(words), "{words}:\n{}", run.stderr);
    }
    assert_eq!(
        run.records_of("put_long")
            .iter()
            .filter(|r| r["args"].get("p1").is_some())
            .count(),
        0
    );
}

#[test]
fn negative_lengths_read_nothing_and_are_marked_invalid_with_dwarf() {
    let _serial = serial();
    require_trace("negative_lengths_read_nothing_and_are_marked_invalid_with_dwarf");
    let dir = TempDir::new("clen-dwarf");
    trace(&clen(dir.path(), true), false);
}

#[test]
fn negative_lengths_read_nothing_and_are_marked_invalid_from_prototypes() {
    let _serial = serial();
    require_trace("negative_lengths_read_nothing_and_are_marked_invalid_from_prototypes");
    let dir = TempDir::new("clen-nodebug");
    trace(&clen(dir.path(), false), true);
}
