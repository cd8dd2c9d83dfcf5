//! Values of the standard library's types on real Go programs (e2e/testdata/stdvalues),
//! built by Go 1.19 and 1.27, with and without DWARF: the errors network and file calls
//! return show the text their `Error()` returns (`dial tcp 127.0.0.1:1: connect:
//! connection refused`, `Get "http://...": ...`, `open /nope: no such file or directory`,
//! a `*net.DNSError`, an i/o timeout between two addresses, `syscall.Errno`s, and one
//! behind a field path), nil pointers are null, type aliases in signatures are followed
//! (`os.FileInfo`, `*os.PathError`), and positional names of named values are refused.
//! Every value is compared with the program's own record of the call (`err.Error()`).
//! They need root (BPF).

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{program, require_trace, run_program, serial, Gprobe, Run, VERSIONS};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::{Map, Value};
use std::path::Path;

const SRC: &str = "e2e/testdata/stdvalues";
const ROUNDS: usize = 2;

/// The calls the program recorded for `func` ("REC {json}" lines), without the "func" key.
fn program_records(out: &str, func: &str) -> Vec<Map<String, Value>> {
    out.lines()
        .filter_map(|l| l.strip_prefix("REC "))
        .map(|j| serde_json::from_str::<Map<String, Value>>(j).expect("a JSON record"))
        .filter(|m| m["func"] == func)
        .map(|mut m| {
            m.remove("func");
            m
        })
        .collect()
}

/// gprobe's records of `symbol` that capture `key`: arguments and results in one object.
fn gprobe_records(run: &Run, symbol: &str, key: &str) -> Vec<Map<String, Value>> {
    run.records_of(symbol)
        .into_iter()
        .filter(|r| {
            r["args"].get(key).is_some() || r.get("returns").is_some_and(|x| x.get(key).is_some())
        })
        .map(|r| {
            let mut m = r["args"].as_object().cloned().unwrap_or_default();
            if let Some(ret) = r.get("returns").and_then(Value::as_object) {
                m.extend(ret.clone());
            }
            m
        })
        .collect()
}

/// Asserts that gprobe recorded each of the program's calls of `func` with exactly the
/// values of `keys` that the program printed.
fn same_calls(run: &Run, out: &str, func: &str, keys: &[&str], what: &str) {
    let want = program_records(out, func);
    let got = gprobe_records(run, func, keys[0]);
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: calls of {func} recorded (the program made {}):\n{}",
        want.len(),
        run.stderr
    );
    assert!(
        !want.is_empty(),
        "{what}: the program made no call of {func}"
    );
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let w: Map<String, Value> = keys
            .iter()
            .map(|k| (k.to_string(), w[*k].clone()))
            .collect();
        let g: Map<String, Value> = keys
            .iter()
            .map(|k| (k.to_string(), g.get(*k).cloned().unwrap_or(Value::Null)))
            .collect();
        assert_eq!(g, w, "{what}: call {i} of {func}");
    }
}

/// Signatures are given: stripped binaries have no DWARF. `redact: false`: the URLs
/// carry a query parameter the program prints as it is.
fn spec(bin: &Path) -> String {
    let err_probe = |sym: &str, sig: &str, arg: &str| {
        ProbeBuilder::new(sym)
            .signature(sig)
            .capture([arg, "r0"])
            .redact(false)
    };
    SpecBuilder::new("stdvalues")
        .executable(bin)
        .probe(err_probe("main.dial", "func(addr string) error", "addr"))
        .probe(err_probe("main.open", "func(path string) error", "path"))
        .probe(err_probe("main.get", "func(url string) error", "url"))
        .probe(err_probe("main.lookup", "func(name string) error", "name"))
        .probe(
            ProbeBuilder::new("main.readTimeout")
                .signature("func(c net.Conn) error")
                .capture(["r0"]),
        )
        .probe(err_probe("main.errno", "func(n int) error", "n"))
        .probe(
            ProbeBuilder::new("main.wrapped")
                .signature("func(h *main.holder) int")
                .capture(["h.Err"]),
        )
        .probe(
            ProbeBuilder::new("main.pointers")
                .signature("func(p *int, h *main.holder) int")
                .capture(["p", "h", "h.Next", "h.Next.Val", "h.Next.Next"]),
        )
        .probe(
            ProbeBuilder::new("main.stat")
                .signature("func(fi os.FileInfo, pe *os.PathError) string")
                .capture(["fi", "pe.Op", "pe.Path", "pe.Err"]),
        )
        // Positional names of named values: refused by the spec's check (signature) and
        // by the planner (DWARF, no signature).
        .probe(
            ProbeBuilder::new("main.errno")
                .signature("func(n int) (err error)")
                .capture(["p0"]),
        )
        .yaml()
}

/// Runs the program under gprobe for every Go version and build kind; hands each run to
/// `check`.
fn each_build(test: &str, check: impl Fn(&Run, &str, GoVersion, bool, &str)) {
    require_trace(test);
    for v in VERSIONS {
        for stripped in [false, true] {
            let bin = program(SRC, v, stripped);
            let what = format!("{} {}", v.tag(), if stripped { "stripped" } else { "full" });
            let _guard = serial();
            let g = Gprobe::start(&spec(&bin), &[]);
            let out = run_program(&bin, &["-rounds", &ROUNDS.to_string()]);
            let run = g.stop();
            assert!(run.status.success(), "{what}: {}", run.stderr);
            check(&run, &out, v, stripped, &what);
        }
    }
}

#[test]
fn standard_library_errors_show_the_text_their_error_method_returns() {
    each_build("std_errors", |run, out, _, _, what| {
        same_calls(run, out, "main.dial", &["addr", "r0"], what);
        same_calls(run, out, "main.open", &["path", "r0"], what);
        same_calls(run, out, "main.get", &["url", "r0"], what);
        same_calls(run, out, "main.lookup", &["name", "r0"], what);
        same_calls(run, out, "main.readTimeout", &["r0"], what);
        same_calls(run, out, "main.errno", &["n", "r0"], what);
        same_calls(run, out, "main.wrapped", &["h.Err"], what);
        // The texts are the real ones, not type names.
        let dials = gprobe_records(run, "main.dial", "r0");
        let text = dials[0]["r0"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("dial tcp 127.0.0.1:")
                && text.ends_with(": connect: connection refused"),
            "{what}: {text}"
        );
        let gets = gprobe_records(run, "main.get", "r0");
        let text = gets[0]["r0"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("Get \"http://127.0.0.1:"),
            "{what}: {text}"
        );
    });
}

#[test]
fn nil_pointers_are_null_and_aliases_are_followed() {
    each_build("nil_and_aliases", |run, out, _, _, what| {
        same_calls(
            run,
            out,
            "main.pointers",
            &["p", "h", "h.Next", "h.Next.Val", "h.Next.Next"],
            what,
        );
        let first = &gprobe_records(run, "main.pointers", "p")[0];
        assert_eq!(first["p"], Value::Null, "{what}: a nil *int");
        assert_eq!(first["h.Next"], Value::Null, "{what}: a path through nil");
        let second = &gprobe_records(run, "main.pointers", "p")[1];
        assert_eq!(
            second["h.Next.Next"],
            Value::Null,
            "{what}: a nil pointer field"
        );
        assert!(
            second["p"]
                .as_str()
                .is_some_and(|p| p.starts_with("0x") && p != "0x0"),
            "{what}: {second:?}"
        );
        // os.FileInfo (io/fs.FileInfo) and *os.PathError (*io/fs.PathError): the layout
        // of fs.PathError through the alias, in DWARF and in the type descriptors.
        assert!(
            !run.stderr.contains("type os.PathError is not described")
                && !run.stderr.contains("type os.FileInfo is not described"),
            "{what}: {}",
            run.stderr
        );
        same_calls(
            run,
            out,
            "main.stat",
            &["fi", "pe.Op", "pe.Path", "pe.Err"],
            what,
        );
    });
}

#[test]
fn positional_names_of_named_values_are_refused_with_their_names() {
    each_build("positional", |run, _, _, _, what| {
        for words in [
            "\"p0\" names parameter 0 by its position, but",
            "names it \"n\": write n",
        ] {
            assert!(
                run.stderr.contains(words),
                "{what}: {words}:\n{}",
                run.stderr
            );
        }
        // The other probe of main.errno runs: r0 of its signature's unnamed result.
        assert!(
            !gprobe_records(run, "main.errno", "r0").is_empty(),
            "{what}: {}",
            run.stderr
        );
        assert!(gprobe_records(run, "main.errno", "p0").is_empty(), "{what}");
    });
}

/// Without a signature (DWARF names the values), `p0` is refused by the planner.
#[test]
fn positional_names_are_refused_where_dwarf_names_the_values() {
    require_trace("positional_dwarf");
    for v in VERSIONS {
        let bin = program(SRC, v, false);
        let _guard = serial();
        let spec = SpecBuilder::new("positional")
            .executable(&bin)
            .probe(ProbeBuilder::new("main.errno").capture(["p0", "r0"]))
            .probe(ProbeBuilder::new("main.open").capture(["path"]))
            .yaml();
        let g = Gprobe::start(&spec, &[]);
        run_program(&bin, &["-rounds", "1"]);
        let run = g.stop();
        let what = v.tag();
        assert!(
            run.stderr.contains(
                "main.errno: cannot capture \"p0\": \"p0\" names parameter 0 by its position, but \
                DWARF names it \"n\": write n"
            ),
            "{what}: {}",
            run.stderr
        );
        assert_eq!(
            run.records_of("main.open").len(),
            1,
            "{what}: {}",
            run.stderr
        );
    }
}
