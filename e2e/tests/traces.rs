//! Spans form the trees the calls made: a probed call that starts while another is open
//! on the same goroutine is its child (same trace id, parent span id), siblings and
//! recursion included, with many goroutines interleaving on the threads; a goroutine
//! started inside a call (runtime.newproc1) has its calls in that call's trace. Checked against
//! e2e/testdata/nest's own record of its calls. They need root (BPF).

use gprobe_e2e::harness::{program, program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn arg(r: &Value, name: &str) -> i64 {
    r["args"][name]
        .as_i64()
        .unwrap_or_else(|| panic!("no {name} in {r}"))
}

fn id(r: &Value, key: &str) -> Option<String> {
    r.get(key).and_then(Value::as_str).map(str::to_string)
}

#[test]
fn spans_nest_by_goroutine_with_siblings_and_recursion_as_the_program_called() {
    let _serial = serial();
    require_trace("spans_nest_by_goroutine_with_siblings_and_recursion_as_the_program_called");
    for (v, stripped) in gprobe_e2e::harness::VERSIONS
        .into_iter()
        .flat_map(|v| [(v, false), (v, true)])
    {
        // Stripped: the probes' and runtime.newproc1's functions from the pclntab.
        let bin = program("e2e/testdata/nest", v, stripped);
        let sig = |p: ProbeBuilder, s: &str| if stripped { p.signature(s) } else { p };
        let spec = SpecBuilder::new("nest")
            .executable(&bin)
            .events_per_second(0)
            .probe(
                sig(ProbeBuilder::new("main.handle"), "func(id int) int")
                    .capture(["id"])
                    .latency(),
            )
            .probe(
                sig(ProbeBuilder::new("main.step"), "func(id, k int) int")
                    .capture(["id", "k"])
                    .latency(),
            )
            .probe(
                sig(ProbeBuilder::new("main.bg"), "func(id int) int")
                    .capture(["id"])
                    .latency(),
            )
            .probe(sig(ProbeBuilder::new("main.leaf"), "func(x int) int").capture(["x"]))
            .probe(
                sig(ProbeBuilder::new("main.fact"), "func(n int) int")
                    .capture(["n"])
                    .latency(),
            )
            .yaml();
        let g = Gprobe::start(&spec, &[]);
        let out = run_program(&bin, &["-requests", "40", "-workers", "4"]);
        let run = g.stop();
        assert!(run.status.success(), "{}", run.stderr);
        let records = run.records();
        let by_span: BTreeMap<String, &Value> = records
            .iter()
            .map(|r| (id(r, "span_id").expect("every record has a span id"), r))
            .collect();
        assert_eq!(by_span.len(), records.len(), "span ids are unique");
        let parent_of = |r: &Value| id(r, "parent_span_id").map(|p| by_span[&p]);
        for r in &records {
            if let Some(p) = parent_of(r) {
                assert_eq!(id(r, "trace_id"), id(p, "trace_id"), "{r} in {p}'s trace");
            }
        }

        // Every handle a root with two step children, each with one leaf.
        let handles: Vec<i64> = program_lines(&out, "handle ")
            .iter()
            .map(|l| l["id"].parse().unwrap())
            .collect();
        assert_eq!(handles.len(), 40);
        let mut seen = BTreeSet::new();
        for r in run.records_of("main.handle") {
            assert!(parent_of(&r).is_none(), "a handle span is a root: {r}");
            seen.insert(arg(&r, "id"));
        }
        assert_eq!(seen, handles.iter().copied().collect());
        let steps = run.records_of("main.step");
        assert_eq!(steps.len(), 80);
        let mut children: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for s in &steps {
            let p = parent_of(s).unwrap_or_else(|| panic!("a step has a parent: {s}"));
            assert_eq!(p["symbol"], "main.handle");
            assert_eq!(arg(p, "id"), arg(s, "id"), "{s} under {p}");
            children
                .entry(id(p, "span_id").unwrap())
                .or_default()
                .push(arg(s, "k"));
        }
        assert!(children
            .values()
            .all(|ks| ks.len() == 2 && ks.contains(&1) && ks.contains(&2)));
        // Nothing of gprobe's own runtime.newproc1 probe is output.
        assert!(run.records_of("runtime.newproc1").is_empty());
        // bg runs on a goroutine the handle started: in the handle's trace.
        let bgs = run.records_of("main.bg");
        assert_eq!(bgs.len(), 40);
        for b in &bgs {
            let p = parent_of(b).unwrap_or_else(|| panic!("bg has a parent: {b}"));
            assert_eq!(p["symbol"], "main.handle");
            assert_eq!(arg(p, "id"), arg(b, "id"), "{b} under {p}");
        }
        let leaves = run.records_of("main.leaf");
        assert_eq!(leaves.len(), 120);
        for l in &leaves {
            let p = parent_of(l).unwrap_or_else(|| panic!("a leaf has a parent: {l}"));
            let k = if p["symbol"] == "main.bg" {
                9
            } else {
                arg(p, "k")
            };
            assert!(
                p["symbol"] == "main.step" || p["symbol"] == "main.bg",
                "{l} under {p}"
            );
            assert_eq!(arg(l, "x"), arg(p, "id") * 10 + k, "{l} under {p}");
        }

        // Recursion: fact(n) is the child of fact(n+1), down to fact(1), one trace each.
        let facts = run.records_of("main.fact");
        let outer: Vec<i64> = program_lines(&out, "fact ")
            .iter()
            .map(|l| l["n"].parse().unwrap())
            .collect();
        assert_eq!(facts.len() as i64, outer.iter().sum::<i64>());
        let mut roots = Vec::new();
        for f in &facts {
            match parent_of(f) {
                None => roots.push(arg(f, "n")),
                Some(p) => assert_eq!(arg(p, "n"), arg(f, "n") + 1, "{f} under {p}"),
            }
        }
        roots.sort();
        assert_eq!(roots, outer);
        let traces: BTreeSet<String> = facts.iter().filter_map(|f| id(f, "trace_id")).collect();
        assert_eq!(traces.len(), outer.len(), "one trace per outer call");
    }
}
