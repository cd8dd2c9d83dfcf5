//! A probe's `when:` keeps exactly the calls its predicate holds for, and counts the others
//! (`filtered` in the summary), on e2e/testdata/filters (Go 1.27 stripped, with a
//! `signature:` whose types come from the runtime type descriptors; the oldest Go with
//! DWARF) and e2e/testdata/cfilter (C): integers, strings, `nil`, paths through a nil
//! pointer, bools, results, `duration`; values that are not captured; predicates planning
//! refuses; and `sample:`. Which calls a predicate holds for is computed here from the
//! programs' own lines, never written down. They need root (BPF).

mod c;
mod edges;
mod go;
mod goroutines;
mod kinds;
mod otlp;
mod pressure;
mod sample;

use gprobe_crds::ProbeSpec;
use gprobe_e2e::harness::{run_program, serial, Gprobe, Run};
use gprobe_e2e::spec::{multi_yaml, ProbeBuilder, SpecBuilder};
use gprobe_e2e::summary::{ProbeSummary, Summary};
use serde_json::Value;
use std::path::Path;

/// A spec named `name` on `bin` with one probe, and no rate limit or budget to blur counts.
fn spec(name: &str, bin: &Path, probe: ProbeBuilder) -> ProbeSpec {
    SpecBuilder::new(name)
        .executable(bin)
        .events_per_second(0)
        .max_overhead_percent(0.0)
        .probe(probe)
        .build()
}

/// One predicate under test: the spec's name, the `when:` text, and which calls it holds
/// for (the test's own reading of the program's lines).
struct Case<T> {
    name: &'static str,
    when: &'static str,
    keep: fn(&T) -> bool,
}

/// Runs `bin args` under gprobe with `specs` (one spec each, as several documents) and
/// returns gprobe's run and the program's output.
fn trace(specs: &[ProbeSpec], bin: &Path, args: &[&str]) -> (Run, String) {
    trace_with(specs, &[], bin, args)
}

/// [`trace`], with more arguments for gprobe.
fn trace_with(
    specs: &[ProbeSpec],
    gprobe_args: &[&str],
    bin: &Path,
    args: &[&str],
) -> (Run, String) {
    let _guard = serial();
    let g = Gprobe::cmd(&multi_yaml(specs))
        .args(gprobe_args)
        .summary_file()
        .start();
    let out = run_program(bin, args);
    let run = g.stop();
    assert!(run.status.success(), "gprobe failed:\n{}", run.stderr);
    (run, out)
}

/// The summary of the (one) probe of the spec named `spec`.
fn probe_of<'a>(s: &'a Summary, spec: &str) -> &'a ProbeSummary {
    let found: Vec<&ProbeSummary> = s.probes.iter().filter(|p| p.spec == spec).collect();
    match found[..] {
        [one] => one,
        _ => panic!(
            "{} probes of spec {spec} in the summary: {:?}",
            found.len(),
            s.probes
        ),
    }
}

/// The records of the spec named `spec`.
fn records(run: &Run, symbol: &str, spec: &str) -> Vec<Value> {
    run.records_of(symbol)
        .into_iter()
        .filter(|r| r["probe"] == spec)
        .collect()
}

/// Asserts that the spec named `spec` delivered exactly the calls `kept` says its predicate
/// holds for, each once, and counted every other one as filtered. `calls` are
/// the program's calls in order: how a record names each (`id_of`), and how to show it.
fn assert_kept(
    run: &Run,
    symbol: &str,
    spec: &str,
    calls: &[(String, String)],
    kept: &[bool],
    id_of: impl Fn(&Value) -> String,
    what: &str,
) {
    let p = probe_of(&run.summary(), spec).clone();
    assert!(
        p.attached && p.error.is_none(),
        "{what}: spec {spec}: {p:?}\n{}",
        run.stderr
    );
    // In the order of the ids (numbers): records come in the order calls end.
    let order = |a: &&String, b: &&String| (a.len(), a).cmp(&(b.len(), b));
    let mut want: Vec<&String> = calls
        .iter()
        .zip(kept)
        .filter(|(_, k)| **k)
        .map(|((id, _), _)| id)
        .collect();
    want.sort_by(order);
    let mut got: Vec<String> = records(run, symbol, spec).iter().map(id_of).collect();
    got.sort_by(|a, b| order(&a, &b));
    if got.iter().ne(want.iter().copied()) {
        let show = |ids: Vec<&String>| -> String {
            ids.iter()
                .map(|id| match calls.iter().find(|(i, _)| i == *id) {
                    Some((_, call)) => format!("\n  {call}"),
                    None => format!("\n  {id} (not a call of the program)"),
                })
                .collect()
        };
        let missing = show(want.iter().copied().filter(|w| !got.contains(w)).collect());
        let extra = show(got.iter().filter(|g| !want.contains(g)).collect());
        panic!(
            "{what}: spec {spec} delivered {} calls, its predicate holds for {}.\n\
             Left out:{missing}\nDelivered though it does not hold:{extra}\n\
             delivered: {got:?}\nexpected: {want:?}\nstderr:\n{}",
            got.len(),
            want.len(),
            run.stderr
        );
    }
    let total = calls.len() as u64;
    assert_eq!(
        (p.delivered, p.filtered, p.lost, p.throttled, p.too_deep),
        (want.len() as u64, total - want.len() as u64, 0, 0, 0),
        "{what}: spec {spec} of {total} calls: (delivered, filtered, lost, throttled, \
         too deep); {p:?}"
    );
    assert_eq!(p.unfinished, 0, "{what}: {p:?}");
}
