//! `gprobe trace PROBE` on real programs, tested as `gprobe run` is: a Go function's
//! arguments and results, a stripped binary with `--signature`, a C function, a command
//! after `--`, a running process by `--pid`, `--when`, `--dry-run`'s ProbeSpec run by
//! `gprobe run`, a wrong expression (one message, exit 2, nothing started), and `--hist`:
//! the histogram's counts add up to the calls made, delivered and left out. They need root
//! (BPF, ptrace).

use gprobe_e2e::cc;
use gprobe_e2e::go::{repo_root, GoVersion, TempDir};
use gprobe_e2e::harness::{program, program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);
const WORK: &str = "main.work(id, name) -> r0, r1";
const WORK_SIG: &str = "func(id int64, name string) (int64, error)";

fn adhoc(stripped: bool) -> PathBuf {
    program("e2e/testdata/adhoc", GoVersion::Go127, stripped)
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// What adhoc printed about each call, by id.
fn calls_of(out: &str) -> BTreeMap<i64, BTreeMap<String, String>> {
    program_lines(out, "work ")
        .into_iter()
        .map(|l| (l["id"].parse().unwrap(), l))
        .collect()
}

/// Each record of main.work matches the program's own line of that call: the arguments,
/// and the results where captured.
fn assert_records_match(records: &[Value], calls: &BTreeMap<i64, BTreeMap<String, String>>) {
    for r in records {
        let id = r["args"]["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("no id: {r}"));
        let line = &calls[&id];
        assert_eq!(r["args"]["name"], line["name"].as_str(), "{r}");
        assert_eq!(r["probe"], "main-work", "{r}");
        assert!(
            r["duration_ns"].as_u64().is_some(),
            "latency is always on: {r}"
        );
        if let Some(ret) = r.get("returns") {
            assert_eq!(ret["r0"].to_string(), line["r0"], "{r}");
            let err = if line["err"] == "nil" {
                Value::Null
            } else {
                Value::from(line["err"].as_str())
            };
            assert_eq!(ret["r1"], err, "{r}");
        }
    }
}

#[test]
fn a_go_functions_arguments_and_results_in_a_command() {
    require_trace("a_go_functions_arguments_and_results_in_a_command");
    let _guard = serial();
    let bin = adhoc(false);
    let run = Gprobe::trace(WORK)
        .summary_file()
        .args(&["--", path(&bin), "-n", "12", "-slow-every", "0"])
        .once();
    assert!(run.status.success(), "{:?}\n{}", run.status, run.stderr);
    // gprobe's stdout is a pipe: the program's own lines went to stderr.
    let calls = calls_of(&run.stderr);
    assert_eq!(calls.len(), 12, "{}", run.stderr);
    let records = run.records_of("main.work");
    assert_eq!(
        records.len(),
        12,
        "every call, the first included:\n{}",
        run.stderr
    );
    assert_records_match(&records, &calls);
    let s = run.summary();
    assert_eq!((s.processes.matched, s.processes.traced), (1, 1));
    assert_eq!(s.probes[0].spec, "main-work");
    assert_eq!(s.probes[0].delivered, 12);
}

#[test]
fn a_stripped_binary_with_a_signature_by_executable() {
    require_trace("a_stripped_binary_with_a_signature_by_executable");
    let _guard = serial();
    let bin = adhoc(true);
    let g = Gprobe::trace(WORK)
        .args(&["--signature", WORK_SIG, "--executable", path(&bin)])
        .start();
    let out = run_program(&bin, &["-n", "6", "-slow-every", "0"]);
    let t0 = Instant::now();
    while g.stdout_now().lines().count() < 6 {
        assert!(t0.elapsed() < TIMEOUT, "{}", g.stderr_now());
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    let records = run.records_of("main.work");
    assert_eq!(records.len(), 6, "{}", run.stderr);
    assert!(
        records.iter().all(|r| r["returns"].is_object()),
        "{records:?}"
    );
    assert_records_match(&records, &calls_of(&out));
}

#[test]
fn a_c_function_in_a_command() {
    require_trace("a_c_function_in_a_command");
    let _guard = serial();
    let dir = TempDir::new("trace-c");
    let src = repo_root().join("e2e/testdata/ctarget/ctarget.c");
    let bin = cc::build(&src, &dir.path().join("ctarget"), &["-g"], None);
    let run = Gprobe::trace("add(a, b) -> r0")
        .args(&["--", path(&bin), "-n", "3", "-threads", "2"])
        .once();
    assert!(run.status.success(), "{}", run.stderr);
    let adds = program_lines(&run.stderr, "add ");
    assert_eq!(adds.len(), 6, "{}", run.stderr);
    let mut got: Vec<(i64, i64, i64)> = run
        .records_of("add")
        .iter()
        .map(|r| {
            let n = |v: &Value| v.as_i64().unwrap();
            (
                n(&r["args"]["a"]),
                n(&r["args"]["b"]),
                n(&r["returns"]["r0"]),
            )
        })
        .collect();
    let mut want: Vec<(i64, i64, i64)> = adds
        .iter()
        .map(|l| {
            (
                l["a"].parse().unwrap(),
                l["b"].parse().unwrap(),
                l["r"].parse().unwrap(),
            )
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{}", run.stderr);
}

/// adhoc with -wait: started, and waiting on its stdin for the word to go.
struct Waiting {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Waiting {
    fn start(bin: &std::path::Path, n: &str) -> Waiting {
        let mut child = Command::new(bin)
            .args(["-n", n, "-slow-every", "0", "-wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready pid="), "{line}");
        Waiting { child, out }
    }

    fn go_and_wait(mut self) -> String {
        self.child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.out, &mut rest).unwrap();
        assert!(self.child.wait().unwrap().success());
        rest
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_running_process_by_pid_and_no_other_of_its_file() {
    require_trace("a_running_process_by_pid_and_no_other_of_its_file");
    let _guard = serial();
    let bin = adhoc(false);
    let traced = Waiting::start(&bin, "5");
    let other = Waiting::start(&bin, "7");
    let pid = traced.child.id();
    // gprobe run --pid: a spec must select that process, or nothing can run.
    let elsewhere = SpecBuilder::new("elsewhere")
        .executable("/usr/bin/true")
        .probe(ProbeBuilder::new("main.work"))
        .yaml();
    let run = Gprobe::cmd(&elsewhere)
        .args(&["--pid", &pid.to_string()])
        .once();
    assert_eq!(run.status.code(), Some(3), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "--pid {pid}: no ProbeSpec's selector matches it ({})",
            path(&bin)
        )),
        "{}",
        run.stderr
    );
    let g = Gprobe::trace(WORK)
        .args(&["--pid", &pid.to_string()])
        .summary_file()
        .start();
    let out = traced.go_and_wait();
    let other_out = other.go_and_wait();
    assert_eq!(calls_of(&other_out).len(), 7);
    // It stops by itself once its process has exited.
    let run = g.wait_end(TIMEOUT);
    assert!(run.status.success(), "{:?}\n{}", run.status, run.stderr);
    assert!(
        run.stderr
            .contains(&format!("process {pid} has exited: stopping")),
        "{}",
        run.stderr
    );
    let records = run.records_of("main.work");
    assert_eq!(records.len(), 5, "{}", run.stderr);
    assert!(records.iter().all(|r| r["pid"] == pid), "{records:?}");
    assert_records_match(&records, &calls_of(&out));
    assert_eq!(run.summary().processes.matched, 1, "{}", run.stderr);
}

/// The histogram of `symbol` on stderr, its last print: the heading's count and each row's
/// bucket (log2 of its lower bound in ns) and count.
fn histogram(stderr: &str, symbol: &str) -> (u64, Vec<(u32, u64)>) {
    let head = format!("@ns[{symbol}]: ");
    let at = stderr
        .rfind(&head)
        .unwrap_or_else(|| panic!("no histogram of {symbol}:\n{stderr}"));
    let mut lines = stderr[at..].lines();
    let heading = lines.next().unwrap();
    let total: u64 = heading[head.len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {heading}"));
    let mut rows = Vec::new();
    for line in lines {
        if line.is_empty() {
            break;
        }
        if line.starts_with("  (") {
            continue;
        }
        let (label, rest) = line.split_once(')').unwrap_or_else(|| panic!("{line}"));
        let lo = label.trim_start_matches('[').split(',').next().unwrap();
        let (digits, power) = match lo.as_bytes().last() {
            Some(b'K') => (&lo[..lo.len() - 1], 10),
            Some(b'M') => (&lo[..lo.len() - 1], 20),
            Some(b'G') => (&lo[..lo.len() - 1], 30),
            _ => (lo, 0),
        };
        let lo: u64 = digits.parse().unwrap_or_else(|e| panic!("{e}: {line}"));
        let bucket = if lo == 0 { 0 } else { lo.ilog2() + power };
        let count: u64 = rest.split('|').next().unwrap().trim().parse().unwrap();
        assert!(rest.trim_end().ends_with('|'), "{line}");
        rows.push((bucket, count));
    }
    (total, rows)
}

#[test]
fn the_histogram_counts_every_call_delivered_and_left_out() {
    require_trace("the_histogram_counts_every_call_delivered_and_left_out");
    let _guard = serial();
    let bin = adhoc(false);
    // 200 calls, every 10th sleeps 2 ms; --when keeps the calls of 2^20 ns (1.05 ms) or
    // more, which is where a bucket starts: kept and left out split at a row boundary.
    let run = Gprobe::trace("main.work(id)")
        .summary_file()
        .args(&[
            "--hist",
            "--when",
            "duration >= 1048576ns",
            "--",
            path(&bin),
            "-n",
            "200",
            "-slow-every",
            "10",
        ])
        .once();
    assert!(run.status.success(), "{}", run.stderr);
    let calls = calls_of(&run.stderr);
    assert_eq!(calls.len(), 200);
    let (total, rows) = histogram(&run.stderr, "main.work");
    let sum: u64 = rows.iter().map(|(_, n)| n).sum();
    assert_eq!(
        (total, sum),
        (200, 200),
        "every call, once:\n{}",
        run.stderr
    );
    let records = run.records_of("main.work");
    let kept: u64 = rows.iter().filter(|(b, _)| *b >= 20).map(|(_, n)| n).sum();
    assert_eq!(records.len() as u64, kept, "{}", run.stderr);
    // Each slow call took 2 ms or more: kept, and in a row of 1M or more.
    let slow: Vec<i64> = calls
        .iter()
        .filter(|(_, l)| l["slow"] == "true")
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(slow.len(), 20);
    for id in &slow {
        assert!(
            records.iter().any(|r| r["args"]["id"] == *id),
            "slow call {id} is missing:\n{}",
            run.stderr
        );
    }
    let s = run.summary();
    assert_eq!(s.probes[0].delivered, kept);
    assert_eq!(s.probes[0].filtered, 200 - kept, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "({} of them left out by when: or sample:",
            200 - kept
        )),
        "{}",
        run.stderr
    );
    eprintln!(
        "200 calls: {kept} kept, {} left out by when:, all in the histogram",
        200 - kept
    );
}

#[test]
fn gprobe_run_prints_hist_probes_on_sigusr1_every_interval_and_at_the_end() {
    require_trace("gprobe_run_prints_hist_probes_on_sigusr1_every_interval_and_at_the_end");
    let _guard = serial();
    let bin = adhoc(false);
    let spec = SpecBuilder::new("work")
        .executable(&bin)
        .probe(
            ProbeBuilder::new("main.work")
                .capture(["id"])
                .latency()
                .hist(),
        )
        .yaml();
    let heading = "@ns[main.work]: 30 calls";

    // SIGUSR1: printed while gprobe runs on.
    let g = Gprobe::cmd(&spec).start();
    run_program(&bin, &["-n", "30", "-slow-every", "0"]);
    let t0 = Instant::now();
    let mut sent = 0;
    while !g.stderr_now().contains(heading) {
        assert!(t0.elapsed() < TIMEOUT, "{}", g.stderr_now());
        // Asked again until every call is counted (the last ones may be on their way).
        if g.stderr_now().matches("@ns[main.work]").count() == sent {
            g.signal(libc::SIGUSR1);
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = g.stop();
    assert!(
        run.status.success(),
        "SIGUSR1 did not end it: {}",
        run.stderr
    );
    assert_eq!(
        run.stderr.matches(heading).count(),
        2,
        "once asked, once at the end:\n{}",
        run.stderr
    );

    // --hist-interval: printed again and again.
    let g = Gprobe::cmd(&spec)
        .args(&["--hist-interval", "200ms"])
        .start();
    run_program(&bin, &["-n", "30", "-slow-every", "0"]);
    let t0 = Instant::now();
    while g.stderr_now().matches(heading).count() < 2 {
        assert!(t0.elapsed() < TIMEOUT, "{}", g.stderr_now());
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = g.stop();
    assert!(run.status.success(), "{}", run.stderr);
    let (total, rows) = histogram(&run.stderr, "main.work");
    assert_eq!((total, rows.iter().map(|(_, n)| n).sum::<u64>()), (30, 30));
}

/// (symbol, args, returns) of each record, sorted: what two runs of one probe share.
fn calls(records: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r["probe"], r["symbol"], r["args"], r["returns"]
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn dry_run_prints_a_spec_that_gprobe_run_runs_the_same() {
    require_trace("dry_run_prints_a_spec_that_gprobe_run_runs_the_same");
    let _guard = serial();
    let bin = adhoc(true);
    let flags = ["--signature", WORK_SIG, "--when", "id >= 5"];
    let cmd = [path(&bin), "-n", "10", "-slow-every", "0"];
    let with = |extra: &[&str]| -> Vec<String> {
        flags
            .iter()
            .chain(extra)
            .chain(&["--"])
            .chain(&cmd)
            .map(|s| s.to_string())
            .collect()
    };
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    let dry = Gprobe::trace(WORK)
        .args(&args(&with(&["--dry-run"])))
        .once();
    assert!(dry.status.success(), "{}", dry.stderr);
    assert!(
        dry.stdout.starts_with(&format!(
            "# Run it with: gprobe run FILE.yaml -- {} -n 10 -slow-every 0\n",
            path(&bin)
        )),
        "{}",
        dry.stdout
    );
    assert!(!dry.stderr.contains("INFO"), "nothing runs: {}", dry.stderr);
    let spec: Value = serde_yaml::from_str(&dry.stdout).unwrap();
    assert_eq!(
        spec["spec"]["probes"][0]["capture"],
        serde_json::json!(["id", "name", "r0", "r1"])
    );

    let traced = Gprobe::trace(WORK).args(&args(&with(&[]))).once();
    let ran = Gprobe::cmd(&dry.stdout).args(&["--"]).args(&cmd).once();
    for r in [&traced, &ran] {
        assert!(r.status.success(), "{}", r.stderr);
    }
    let (a, b) = (calls(&traced.records()), calls(&ran.records()));
    assert_eq!(a.len(), 5, "ids 5 to 9: {}", traced.stderr);
    assert_eq!(
        a, b,
        "gprobe run of the printed spec records the same calls"
    );
}

#[test]
fn a_wrong_probe_is_one_message_with_exit_2_and_nothing_starts() {
    let _guard = serial();
    let dir = TempDir::new("trace-bad");
    let marker = dir.path().join("started");
    let touch = format!("touch {}", path(&marker));
    for (probe, extra, says) in [
        (
            "main.work(id,, name)",
            &[][..],
            "error: invalid probe: an empty capture (two commas, or a comma at the start): \
             write a name between the commas, or remove one\n  main.work(id,, name)\n",
        ),
        (
            "main.work(id, nme) -> r0",
            &["--signature", WORK_SIG][..],
            "error: invalid probe: \"nme\" is not a parameter or result of \"func(id int64, \
             name string) (int64, error)\"; known names: id, name, r0, r1\n  main.work(id, nme) \
             -> r0\n  ",
        ),
        (
            "main.work(id, r0)",
            &[][..],
            "error: invalid probe: `r0` is a result, read when the call returns: write it \
             after `->`",
        ),
        (
            "main.work(id)",
            &["--when", "id = 3"][..],
            "error: --when: ",
        ),
    ] {
        let run = Gprobe::trace(probe)
            .args(extra)
            .args(&["--", "sh", "-c", &touch])
            .once();
        assert_eq!(run.status.code(), Some(2), "{probe}: {}", run.stderr);
        assert!(
            run.stderr.starts_with(says),
            "{probe}:\n{}\nexpected:\n{says}",
            run.stderr
        );
        assert_eq!(
            run.stderr.matches("error: ").count(),
            1,
            "one message: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("INFO") && run.stdout.is_empty(),
            "{}",
            run.stderr
        );
        assert!(!marker.exists(), "{probe}: the command was started");
    }
    // What the binary says (DWARF here) is checked before the program starts: a capture it
    // lacks, or a symbol it does not have, is a mistake of the expression too.
    let bin = adhoc(false);
    for (probe, says, under) in [
        ("main.work(id, nme)", "cannot capture \"nme\"", "nme)"),
        (
            "main.wrok(id)",
            "symbol main.wrok not found",
            "main.wrok(id)",
        ),
    ] {
        let run = Gprobe::trace(probe)
            .args(&["--", path(&bin), "-n", "3"])
            .once();
        assert_eq!(run.status.code(), Some(2), "{probe}: {}", run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 3, "{probe}: one message: {}", run.stderr);
        assert!(
            lines[0].starts_with("error: invalid probe: ") && lines[0].contains(says),
            "{}",
            run.stderr
        );
        let col = lines[2].len() - 1 - 2;
        assert_eq!(&probe[col..], under, "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
    // Said before anything about the target (here a process that does not exist).
    let run = Gprobe::trace("main.work(id,, name)")
        .args(&["--pid", &u32::MAX.to_string()])
        .once();
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    let caret = run.stderr.lines().nth(2).unwrap_or_default();
    assert_eq!(
        caret,
        format!("{}^", " ".repeat(2 + "main.work(id,".len())),
        "{}",
        run.stderr
    );
}
