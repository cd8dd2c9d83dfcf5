//! `gprobe run` on the USDT probes of Debian's python3.11: `python:function__entry` is
//! guarded by a semaphore that gprobe raises in the traced process only, and (Python 3.11,
//! python/cpython#98894) fires only while a profile function is set. The script's profile
//! function records every Python call itself; gprobe's records must be that list.
//! Needs root (BPF) and python3.11 (`scripts/setup.sh --test`).

use gprobe_e2e::go::TempDir;
use gprobe_e2e::harness::{require_program, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;

/// The interpreter itself (not a pyenv shim found on PATH): its executable holds the notes.
const PYTHON: &str = "/usr/bin/python3.11";

/// Calls of every kind the interpreter enters through its frame evaluation: plain and
/// recursive functions, methods, a static method, a lambda, a closure, a generator (entered
/// again at each resume) and a generator expression; the profile function lists each as
/// [file, function, line], the line being where the frame starts executing.
const SCRIPT: &str = r#"
import json, sys

calls = []

def profile(frame, event, arg):
    if event == "call":
        calls.append([frame.f_code.co_filename, frame.f_code.co_name, frame.f_lineno])

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

class Cart:
    def __init__(self):
        self.items = {}

    def add(self, item, qty):
        self.items[item] = self.items.get(item, 0) + qty
        return self

    @staticmethod
    def total(items):
        return sum(q for q in items.values())

def countdown(n):
    while n > 0:
        yield n
        n -= 1

def make_scaler(k):
    def scale(x):
        return k * x
    return scale

def main():
    cart = Cart()
    for i, name in enumerate(["apple", "pear", "plum"]):
        cart.add(name, i + 1)
    scale = make_scaler(3)
    squares = list(map(lambda x: x * x, countdown(4)))
    return fib(7), Cart.total(cart.items), [scale(s) for s in squares]

sys.setprofile(profile)
main()
sys.setprofile(None)
print(json.dumps(calls))
"#;

fn spec() -> String {
    SpecBuilder::new("python-calls")
        .executable(PYTHON)
        .probe(
            ProbeBuilder::usdt("python:function__entry")
                .signature("(const char *filename, const char *funcname, int lineno)")
                .capture(["filename", "funcname", "lineno"]),
        )
        .events_per_second(0)
        .yaml()
}

#[test]
fn function_entry_reports_exactly_the_calls_the_script_profiles() {
    require_trace("python");
    let python = require_program("python", PYTHON, "python3.11");
    let dir = TempDir::new("python");
    let script = dir.path().join("calls.py");
    std::fs::write(&script, SCRIPT).unwrap();

    let _guard = serial();
    let g = Gprobe::cmd(&spec()).summary_file().start();
    // Started after gprobe: held at exec until the probe (and its semaphore) is in place.
    let out = run_program(&python, &[script.to_str().unwrap()]);
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);

    let profiled: Vec<Value> = serde_json::from_str(out.trim()).unwrap();
    // fib(7) alone makes 41 calls: the list is long enough to show any gap.
    assert!(profiled.len() > 60, "{profiled:?}");
    assert!(
        profiled.iter().all(|c| c[0] == script.to_str().unwrap()),
        "only the script's own functions run while profiled: {profiled:?}"
    );
    // The interpreter's own generators may fire the probe before the script starts;
    // the script's functions run only while profiled.
    let traced: Vec<Value> = run
        .records_of("usdt:python:function__entry")
        .into_iter()
        .filter(|r| r["args"]["filename"] == script.to_str().unwrap())
        .map(|r| {
            let a = &r["args"];
            serde_json::json!([a["filename"], a["funcname"], a["lineno"]])
        })
        .collect();
    assert_eq!(traced, profiled, "stderr:\n{}", run.stderr);

    let s = run.summary();
    assert_eq!(s.processes.traced, 1, "{}", run.stderr);
    let p = s.probe("usdt:python:function__entry");
    assert_eq!((p.lost, p.throttled), (0, 0));
}
