//! C functions (System V ABI, uretprobes, C strings, bytes with a length) and a
//! semaphore-guarded USDT probe on e2e/testdata/ctarget, built with DWARF and without it
//! (then from C prototypes in `signature`): every record equals the program's own line
//! for that call. They need root (BPF).

use gprobe_e2e::cc;
use gprobe_e2e::go::{repo_root, TempDir};
use gprobe_e2e::harness::{program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn ctarget(dir: &Path, dwarf: bool) -> PathBuf {
    let src = repo_root().join("e2e/testdata/ctarget/ctarget.c");
    let out = dir.join(if dwarf { "ctarget" } else { "ctarget-nodebug" });
    if dwarf {
        cc::build(&src, &out, &["-g"], None)
    } else {
        cc::build(&src, &out, &[], Some("-g"))
    }
}

/// The probes of every test here; `prototypes` adds the C prototypes a binary without
/// DWARF needs.
fn spec(bin: &Path, prototypes: bool, max_string_bytes: u32) -> String {
    let sig = |p: ProbeBuilder, s: &str| if prototypes { p.signature(s) } else { p };
    SpecBuilder::new("c")
        .executable(bin)
        .max_string_bytes(max_string_bytes)
        .probe(
            sig(ProbeBuilder::new("add"), "int add(int a, int b)")
                .capture(["a", "b", "r0"])
                .latency(),
        )
        .probe(
            sig(
                ProbeBuilder::new("greet"),
                "size_t greet(const char *name, const char *buf, size_t len)",
            )
            .capture(["name", "buf[:len]", "len", "r0"]),
        )
        .probe(sig(ProbeBuilder::new("fact"), "long fact(long n)").capture(["n", "r0"]))
        .probe(
            ProbeBuilder::usdt("ctarget:order")
                .signature("(const char *item, int qty)")
                .capture(["item", "qty"]),
        )
        .yaml()
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `keys` of every record of `symbol`, as the program prints them (`k=v`).
fn seen(records: &[Value], keys: &[(&str, &str)]) -> Vec<BTreeMap<String, String>> {
    records
        .iter()
        .map(|r| {
            keys.iter()
                .map(|(ours, theirs)| {
                    let v = r["args"]
                        .get(*ours)
                        .or_else(|| r["returns"].get(*ours))
                        .unwrap_or_else(|| panic!("no {ours} in {r}"));
                    (theirs.to_string(), text(v))
                })
                .collect()
        })
        .collect()
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

fn factorial(n: i64) -> i64 {
    (1..=n).product()
}

/// Traces one run of ctarget (6 iterations, 3 threads calling `add` at once) and checks
/// every probe's records against the program's output.
fn trace_and_compare(bin: &Path, prototypes: bool) {
    let g = Gprobe::start(&spec(bin, prototypes, 64), &[]);
    let out = run_program(bin, &["-n", "6", "-threads", "3"]);
    let run = g.stop();
    assert!(run.status.success(), "gprobe failed:\n{}", run.stderr);

    // add: from three threads at once; entries and returns pair by thread, so each
    // record's result is its own arguments' sum.
    let adds = run.records_of("add");
    let want = sorted(program_lines(&out, "add "));
    assert_eq!(want.len(), 18, "the program's add calls:\n{out}");
    assert_eq!(
        sorted(seen(&adds, &[("a", "a"), ("b", "b"), ("r0", "r")])),
        want
    );
    for r in &adds {
        assert!(r["duration_ns"].as_u64().unwrap() > 0, "{r}");
    }
    let threads: std::collections::BTreeSet<u64> =
        adds.iter().map(|r| r["tid"].as_u64().unwrap()).collect();
    assert_eq!(threads.len(), 3, "add ran on 3 threads: {threads:?}");

    // greet: a C string, bytes with a length, a size_t result; in call order.
    let greets = run.records_of("greet");
    let want = program_lines(&out, "greet ");
    assert_eq!(want.len(), 6);
    assert_eq!(
        seen(
            &greets,
            &[
                ("name", "name"),
                ("buf[:len]", "buf"),
                ("len", "len"),
                ("r0", "r")
            ]
        ),
        want
    );

    // fact: recursive; the program prints its outer calls, each of which makes n calls
    // (n, n-1, ..., 1), every one paired with its own result.
    let facts = run.records_of("fact");
    let mut want = Vec::new();
    for line in program_lines(&out, "fact ") {
        let n: i64 = line["n"].parse().unwrap();
        assert_eq!(line["r"].parse::<i64>().unwrap(), factorial(n));
        want.extend((1..=n).map(|k| (k, factorial(k))));
    }
    let got: Vec<(i64, i64)> = facts
        .iter()
        .map(|r| {
            (
                r["args"]["n"].as_i64().unwrap(),
                r["returns"]["r0"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(sorted(got), sorted(want));

    // order: the USDT probe fires only because gprobe raised its semaphore.
    let orders = run.records_of("usdt:ctarget:order");
    assert_eq!(
        seen(&orders, &[("item", "item"), ("qty", "qty")]),
        program_lines(&out, "order ")
    );
    assert!(run.records_of("sub").is_empty());
}

#[test]
fn c_functions_and_usdt_with_dwarf_equal_the_programs_record() {
    let _serial = serial();
    require_trace("c_functions_and_usdt_with_dwarf_equal_the_programs_record");
    let dir = TempDir::new("c-dwarf");
    trace_and_compare(&ctarget(dir.path(), true), false);
}

#[test]
fn c_functions_without_dwarf_use_the_prototypes_in_signature() {
    let _serial = serial();
    require_trace("c_functions_without_dwarf_use_the_prototypes_in_signature");
    let dir = TempDir::new("c-nodebug");
    let bin = ctarget(dir.path(), false);
    trace_and_compare(&bin, true);

    // Without DWARF or a prototype there are no names to capture: a clear error.
    let spec = SpecBuilder::new("c")
        .executable(&bin)
        .probe(ProbeBuilder::new("add").capture(["a"]))
        .probe(ProbeBuilder::new("fact"))
        .yaml();
    let g = Gprobe::start(&spec, &[]);
    run_program(&bin, &["-n", "2", "-threads", "1"]);
    let run = g.stop();
    assert!(
        run.stderr.contains("add") && run.stderr.contains("signature"),
        "{}",
        run.stderr
    );
    // fact(3) and fact(4), with their recursive calls.
    assert_eq!(run.records_of("fact").len(), 3 + 4, "{}", run.stdout);
    assert!(run.records_of("add").is_empty());
}

#[test]
fn c_strings_longer_than_max_string_bytes_are_cut_and_marked() {
    let _serial = serial();
    require_trace("c_strings_longer_than_max_string_bytes_are_cut_and_marked");
    let dir = TempDir::new("c-cut");
    let bin = ctarget(dir.path(), true);
    // 5 bytes: "grace" fits exactly, "linus" too, the long name is cut.
    let g = Gprobe::start(&spec(&bin, false, 5), &[]);
    let out = run_program(&bin, &["-n", "4", "-threads", "1"]);
    let run = g.stop();
    let greets = run.records_of("greet");
    let names: Vec<&str> = program_lines(&out, "greet ")
        .iter()
        .map(|l| match l["name"].as_str() {
            "ada" => "ada",
            "grace" => "grace",
            "linus" => "linus",
            _ => "a_nam",
        })
        .collect();
    let got: Vec<&str> = greets
        .iter()
        .map(|r| r["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(got, names);
    for r in &greets {
        let cut = r["args"]["name"] == "a_nam";
        let marked = r
            .get("truncated")
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().any(|n| n == "name"));
        assert_eq!(cut, marked, "{r}");
    }
}

#[test]
fn missing_usdt_probes_and_wrong_argument_counts_are_refused_one_by_one() {
    let _serial = serial();
    require_trace("missing_usdt_probes_and_wrong_argument_counts_are_refused_one_by_one");
    let dir = TempDir::new("c-bad");
    let bin = ctarget(dir.path(), true);
    let spec = SpecBuilder::new("c")
        .executable(&bin)
        .probe(ProbeBuilder::usdt("ctarget:nope"))
        .probe(
            ProbeBuilder::usdt("ctarget:order")
                .signature("(const char *item)")
                .capture(["item"]),
        )
        .probe(ProbeBuilder::new("sub").capture(["a", "b", "r0"]))
        .yaml();
    let g = Gprobe::start(&spec, &[]);
    let out = run_program(&bin, &["-n", "3", "-threads", "1"]);
    let run = g.stop();
    assert!(
        run.stderr.contains("ctarget:nope"),
        "the missing probe is named:\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("ctarget:order") && run.stderr.contains('2'),
        "the argument count mismatch names the probe and the note's count:\n{}",
        run.stderr
    );
    assert!(run.records_of("usdt:ctarget:order").is_empty());
    assert_eq!(
        seen(
            &run.records_of("sub"),
            &[("a", "a"), ("b", "b"), ("r0", "r")]
        ),
        program_lines(&out, "sub ")
    );
}

/// A process of `bin` that waits a minute before doing anything, killed on drop.
struct Waiting(std::process::Child);

impl Waiting {
    fn start(bin: &Path) -> Waiting {
        Waiting(
            std::process::Command::new(bin)
                .args(["-delay-ms", "60000"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn usdt_semaphores_are_raised_in_the_selected_process_only_and_lowered_at_detach() {
    let _serial = serial();
    require_trace("usdt_semaphores_are_raised_in_the_selected_process_only_and_lowered_at_detach");
    let dir = TempDir::new("c-sem");
    let bin = ctarget(dir.path(), true);
    // The same file under another name (a hard link): not selected.
    let other = dir.path().join("other");
    std::fs::hard_link(&bin, &other).unwrap();
    let semaphore = gprobe_e2e::procmem::data_symbol_file_offset(&bin, "ctarget_order_semaphore");
    let (selected, unselected) = (Waiting::start(&bin), Waiting::start(&other));
    let sem = |p: &Waiting| gprobe_e2e::procmem::byte_at_file_offset(p.pid(), semaphore);
    let spec = SpecBuilder::new("sem")
        .executable(&bin)
        .probe(ProbeBuilder::usdt("ctarget:order"))
        .yaml();
    let g = Gprobe::start(&spec, &[]);
    let pid = selected.pid();
    g.wait_for_stderr(
        |s| s.contains(&format!("pid {pid})")),
        std::time::Duration::from_secs(30),
    );
    assert_eq!((sem(&selected), sem(&unselected)), (1, 0));
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!((sem(&selected), sem(&unselected)), (0, 0));
}

#[test]
fn children_forked_by_a_traced_process_are_traced_too() {
    let _serial = serial();
    require_trace("children_forked_by_a_traced_process_are_traced_too");
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = TempDir::new("c-fork");
    let src = repo_root().join("e2e/testdata/forker/forker.c");
    let bin = cc::build(&src, &dir.path().join("forker"), &["-g"], None);
    let spec = SpecBuilder::new("fork")
        .executable(&bin)
        .probe(ProbeBuilder::new("work").capture(["x", "r0"]))
        .yaml();
    let g = Gprobe::cmd(&spec).summary_file().start();
    let mut child = std::process::Command::new(&bin)
        .args(["-n", "3"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut forked = Vec::new();
    while forked.len() < 3 {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "forker ended early");
        if let Some(pid) = line.trim().strip_prefix("forked pid=") {
            forked.push(pid.to_string());
        }
    }
    // Each child waits for its go-ahead; it prints its pid only once it runs, after gprobe
    // has attached to it.
    for pid in &forked {
        g.wait_for_stderr(
            |s| s.contains(&format!("pid {pid})")),
            std::time::Duration::from_secs(30),
        );
    }
    child.stdin.take().unwrap().write_all(b"xxx").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let run = g.stop();
    let want = sorted(program_lines(&rest, "work "));
    assert_eq!(want.len(), 15);
    let got = sorted(
        run.records_of("work")
            .iter()
            .map(|r| {
                BTreeMap::from([
                    ("pid".to_string(), r["pid"].to_string()),
                    ("x".to_string(), r["args"]["x"].to_string()),
                    ("r".to_string(), r["returns"]["r0"].to_string()),
                ])
            })
            .collect(),
    );
    assert_eq!(got, want);
    // Each child was held at fork until its probes were attached: traced from its first
    // call, not missed.
    let s = run.summary();
    assert!(s.processes.missed.is_empty(), "{:?}", s.processes.missed);
    assert_eq!((s.processes.matched, s.processes.traced), (4, 4));
}

/// Kernels without BPF cookies (before 5.15; here by turning them off): the program finds
/// which probe fired by the process and the address hit. Every entry of a C function and
/// every USDT probe equals the program's line; a probe that needs a C function's return
/// (`r0`, latency) is refused on its own, with the reason, and the others trace. A second
/// ProbeSpec on a function already probed in the process is refused there with the reason
/// (its hits could not be told apart): each call is recorded once, never twice.
#[test]
fn without_bpf_cookies_probes_are_found_by_their_address_and_c_returns_are_refused() {
    let _serial = serial();
    require_trace(
        "without_bpf_cookies_probes_are_found_by_their_address_and_c_returns_are_refused",
    );
    let dir = TempDir::new("c-nocookie");
    let bin = ctarget(dir.path(), true);
    let spec = SpecBuilder::new("c")
        .executable(&bin)
        .probe(ProbeBuilder::new("add").capture(["a", "b", "r0"]).latency())
        .probe(ProbeBuilder::new("greet").capture(["name", "len"]))
        .probe(ProbeBuilder::new("fact").capture(["n"]))
        .probe(
            ProbeBuilder::usdt("ctarget:order")
                .signature("(const char *item, int qty)")
                .capture(["item", "qty"]),
        )
        .yaml();
    let again = SpecBuilder::new("c2")
        .executable(&bin)
        .probe(ProbeBuilder::new("greet").capture(["name"]))
        .yaml();
    let g = Gprobe::cmd(&format!("{spec}---\n{again}"))
        .env("GPROBE_DISABLE_FEATURES", "bpf_cookie")
        .start();
    let out = run_program(&bin, &["-n", "6", "-threads", "3"]);
    let run = g.stop();
    assert!(run.status.success(), "gprobe failed:\n{}", run.stderr);
    assert!(
        run.stderr
            .contains("bpf_cookie missing: a probe is found by its address"),
        "gprobe says what the kernel lacks: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("c / add: 0 calls delivered")
            && run
                .stderr
                .contains("failed: not attached: attaching a uprobe to ")
            && run
                .stderr
                .contains("a C function's return cannot be probed on this kernel"),
        "the probe needing add's return is refused with the reason: {}",
        run.stderr
    );
    assert!(run.records_of("add").is_empty());
    let refused = [
        "c / greet: 0 calls delivered",
        "c2 / greet: 0 calls delivered",
    ]
    .iter()
    .filter(|line| run.stderr.contains(*line))
    .count();
    assert!(
        refused == 1 && run.stderr.contains("another probe is at 0x"),
        "one of the two probes of greet is refused with the reason: {}",
        run.stderr
    );
    // Whichever of the two was attached: c's captures name and len, c2's name.
    let keys: &[(&str, &str)] = if run.stderr.contains("c / greet: 0 calls delivered") {
        &[("name", "name")]
    } else {
        &[("name", "name"), ("len", "len")]
    };
    let greets = seen(&run.records_of("greet"), keys);
    let want: Vec<BTreeMap<String, String>> = program_lines(&out, "greet ")
        .into_iter()
        .map(|l| {
            l.into_iter()
                .filter(|(k, _)| keys.iter().any(|(_, theirs)| theirs == k))
                .collect()
        })
        .collect();
    assert_eq!(want.len(), 6);
    assert_eq!(greets, want);
    // fact is recursive: each outer call the program prints makes n calls.
    let mut facts: Vec<i64> = run
        .records_of("fact")
        .iter()
        .map(|r| r["args"]["n"].as_i64().unwrap())
        .collect();
    facts.sort();
    let mut want: Vec<i64> = program_lines(&out, "fact ")
        .iter()
        .flat_map(|l| 1..=l["n"].parse::<i64>().unwrap())
        .collect();
    want.sort();
    assert!(!want.is_empty());
    assert_eq!(facts, want);
    let orders = run.records_of("usdt:ctarget:order");
    assert_eq!(
        seen(&orders, &[("item", "item"), ("qty", "qty")]),
        program_lines(&out, "order ")
    );
}
