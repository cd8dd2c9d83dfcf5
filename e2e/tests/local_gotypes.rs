//! `gprobe run` sees into Go values of real programs (e2e/testdata/values), built by Go
//! 1.19 and 1.27, with and without DWARF: field paths through pointers (null through a
//! nil one), `len()`, slices, `[]string`, `[]any`, `[]error`, errors (errors.New,
//! fmt.Errorf with %w, a type of the program's own, nil), interfaces, the parameters of a
//! generic function's instantiation, and a net/http handler's request; and dynamic type
//! names of a position-independent build. Every value is compared with the program's own
//! record of the call. They need root (BPF).

use gprobe_e2e::go::GoVersion;
use gprobe_e2e::harness::{
    build_dir, program, require_trace, run_program, serial, Gprobe, Run, VERSIONS,
};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::{Map, Value};
use std::path::Path;

const SRC: &str = "e2e/testdata/values";
const ROUNDS: usize = 4;

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

/// gprobe's records of `symbol` whose arguments include `key`, each as one object of its
/// arguments and results.
fn gprobe_records(run: &Run, symbol: &str, key: &str) -> Vec<Map<String, Value>> {
    run.records_of(symbol)
        .into_iter()
        .filter(|r| r["args"].get(key).is_some())
        .map(|r| {
            let mut m = r["args"].as_object().cloned().unwrap_or_default();
            if let Some(ret) = r.get("returns").and_then(Value::as_object) {
                m.extend(ret.clone());
            }
            m
        })
        .collect()
}

/// Asserts that gprobe recorded each of the program's calls of `func`, with exactly the
/// values of `keys` that the program printed.
fn same_calls(run: &Run, out: &str, symbol: &str, func: &str, keys: &[&str], what: &str) {
    let want = program_records(out, func);
    let got = gprobe_records(run, symbol, keys[0]);
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: calls of {symbol} recorded (the program made {}):\n{}",
        want.len(),
        run.stderr
    );
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let w: Map<String, Value> = keys
            .iter()
            .map(|k| (k.to_string(), w[*k].clone()))
            .collect();
        assert_eq!(g, &w, "{what}: call {i} of {symbol}");
    }
}

/// The instantiation `Sum[int64]` as the binary names it: Go 1.19 suffixes shapes with
/// `_0`, and its stripped function table writes every instantiation `[...]`.
fn sum_symbol(v: GoVersion, stripped: bool) -> &'static str {
    match (v, stripped) {
        (GoVersion::Go119, true) => "main.Sum[...]",
        (GoVersion::Go119, false) => "main.Sum[go.shape.int64_0]",
        _ => "main.Sum[go.shape.int64]",
    }
}

const PROCESS_A: [&str; 8] = [
    "o.ID",
    "o.Customer.Name",
    "o.Customer.Addr.City",
    "o.Note.Next.Text",
    "len(o.Meta)",
    "len(o.Tags)",
    "o.Small",
    "o.Any",
];
const PROCESS_B: [&str; 4] = ["o.Qtys", "o.Tags", "o.Flags", "o.Err"];
const REPORT: [&str; 3] = ["vals", "errs", "len(vals)"];
const HANDLER: [&str; 4] = ["r.Method", "r.URL.Path", "r.Host", "r.ContentLength"];

/// Signatures are given: stripped binaries have no DWARF, and their types come from Go's
/// runtime type descriptors.
fn values_spec(bin: &Path, v: GoVersion, stripped: bool) -> String {
    let order = "func(o *main.order) int";
    SpecBuilder::new("values")
        .executable(bin)
        // Two []any/[]error captures of 16 elements fit one record with 64-byte strings.
        .max_string_bytes(64)
        .probe(
            ProbeBuilder::new("main.process")
                .signature(order)
                .capture(PROCESS_A),
        )
        .probe(
            ProbeBuilder::new("main.process")
                .signature(order)
                .capture(PROCESS_B),
        )
        .probe(
            ProbeBuilder::new("main.lookup")
                .signature("func(id int) error")
                .capture(["id", "r0"]),
        )
        .probe(
            ProbeBuilder::new("main.report")
                .signature("func(vals []any, errs []error) int")
                .capture(REPORT),
        )
        .probe(
            ProbeBuilder::new(sum_symbol(v, stripped))
                .signature("func(xs []int64) int64")
                .capture(["xs", "r0"]),
        )
        .probe(
            ProbeBuilder::new("main.handleOrder")
                .signature("func(w http.ResponseWriter, r *http.Request)")
                .capture(HANDLER),
        )
        .yaml()
}

/// Runs the program under gprobe for every Go version and build kind, and hands each run
/// to `check`.
fn each_build(test: &str, check: impl Fn(&Run, &str, GoVersion, bool, &str)) {
    require_trace(test);
    for v in VERSIONS {
        for stripped in [false, true] {
            let bin = program(SRC, v, stripped);
            let what = format!("{} {}", v.tag(), if stripped { "stripped" } else { "full" });
            let _guard = serial();
            let g = Gprobe::start(&values_spec(&bin, v, stripped), &[]);
            let out = run_program(&bin, &["-rounds", &ROUNDS.to_string()]);
            let run = g.stop();
            assert!(run.status.success(), "{what}: {}", run.stderr);
            assert!(
                !run.stderr.contains("cannot capture"),
                "{what}: every capture planned:\n{}",
                run.stderr
            );
            check(&run, &out, v, stripped, &what);
        }
    }
}

#[test]
fn field_paths_slices_and_interfaces_of_a_struct_behind_a_pointer() {
    each_build("field_paths", |run, out, _, _, what| {
        same_calls(run, out, "main.process", "main.process", &PROCESS_A, what);
        same_calls(run, out, "main.process", "main.process", &PROCESS_B, what);
        // The nil cases happened and are null (or a nil map's length 0), not dropped.
        let nil_calls = gprobe_records(run, "main.process", "o.ID")
            .into_iter()
            .filter(|r| r["o.Customer.Name"].is_null() && r["len(o.Meta)"] == 0)
            .count();
        assert_eq!(nil_calls, ROUNDS / 2, "{what}");
    });
}

#[test]
fn errors_show_their_message_or_dynamic_type_and_nil_is_null() {
    each_build("errors", |run, out, _, _, what| {
        same_calls(run, out, "main.lookup", "main.lookup", &["id", "r0"], what);
        let r0: Vec<Value> = gprobe_records(run, "main.lookup", "id")
            .iter()
            .map(|r| r["r0"].clone())
            .collect();
        assert_eq!(
            r0,
            [
                Value::Null,
                "not found".into(),
                "lookup 2: not found".into(),
                "*main.codeError".into()
            ],
            "{what}: nil, errors.New, fmt.Errorf with %w, a type without a message field"
        );
        same_calls(run, out, "main.report", "main.report", &REPORT, what);
    });
}

#[test]
fn a_generic_instantiation_captures_its_declared_parameters() {
    each_build("generic", |run, out, v, stripped, what| {
        let sym = sum_symbol(v, stripped);
        same_calls(run, out, sym, "main.Sum", &["xs", "r0"], what);
        let first = &gprobe_records(run, sym, "xs")[0];
        assert_eq!(first["xs"], serde_json::json!([1, 2, 0]), "{what}");
    });
}

#[test]
fn http_handler_request_method_path_host_and_length() {
    each_build("http_handler", |run, out, _, _, what| {
        same_calls(
            run,
            out,
            "main.handleOrder",
            "main.handleOrder",
            &HANDLER,
            what,
        );
        let posts = gprobe_records(run, "main.handleOrder", "r.Method")
            .into_iter()
            .filter(|r| r["r.Method"] == "POST" && r["r.Host"] == "shop1.example")
            .count();
        assert_eq!(posts, 1, "{what}");
    });
}

#[test]
fn a_position_independent_binary_names_dynamic_types_through_its_load_bias() {
    require_trace("pie");
    // -buildmode=pie: type descriptors sit at the link address plus where the process was
    // loaded, which gprobe reads from /proc/PID/maps when it attaches.
    let v = GoVersion::Go127;
    let dir = build_dir().join("values-pie");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = gprobe_e2e::go::build(
        v,
        &gprobe_e2e::go::repo_root().join(SRC),
        &dir.join("values"),
        false,
        &["-buildmode=pie"],
    );
    let _guard = serial();
    let g = Gprobe::start(&values_spec(&bin, v, false), &[]);
    let out = run_program(&bin, &["-rounds", &ROUNDS.to_string()]);
    let run = g.stop();
    let what = "go1.27 pie";
    same_calls(
        &run,
        &out,
        "main.lookup",
        "main.lookup",
        &["id", "r0"],
        what,
    );
    same_calls(&run, &out, "main.report", "main.report", &REPORT, what);
    same_calls(&run, &out, "main.process", "main.process", &PROCESS_A, what);
}
