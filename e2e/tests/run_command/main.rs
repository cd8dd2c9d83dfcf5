//! `gprobe run SPEC -- CMD ARGS...` on real programs: the command is held before its first
//! instruction until its probes are attached (without the exec hook: the selector here is
//! a glob no exec hold covers), gprobe exits with its status, its output does not mix with
//! the records, signals reach it once, a closed output ends gprobe quietly, and log levels
//! say what is wrong and what is not. They need root (BPF, ptrace).

mod running;
mod targets;

use gprobe_e2e::go::TempDir;
use gprobe_e2e::harness::{gprobe_bin, program_lines, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use running::{
    closed_pipe, gprobe_on_a_terminal, gprobe_run, records_in, wait, wait_for_file, TIMEOUT,
};
use serde_json::Value;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use targets::{bytes, counter, ctarget, ctarget_spec};

#[test]
fn a_command_is_traced_from_its_first_call_and_gives_gprobe_its_status() {
    require_trace("a_command_is_traced_from_its_first_call_and_gives_gprobe_its_status");
    let _guard = serial();
    let dir = TempDir::new("run-command");
    let bin = ctarget(dir.path());
    let spec = ctarget_spec(dir.path());

    // The control: started beside a running gprobe, the same program is not held (its
    // selector names no file or name the exec hold could know), so it is listed missed.
    // It waits 300 ms before its first call: gone sooner, it could exit before gprobe
    // looked at it, and no reason would name it.
    let g = Gprobe::cmd(&spec).summary_file().start();
    run_program(&bin, &["-n", "3", "-threads", "0", "-delay-ms", "300"]);
    let t0 = Instant::now();
    while !g.stderr_now().contains("not traced from its first call") {
        assert!(t0.elapsed() < TIMEOUT, "{}", g.stderr_now());
        std::thread::sleep(Duration::from_millis(20));
    }
    let control = g.stop();
    assert_eq!(
        control.summary().processes.missed.len(),
        1,
        "{}",
        control.stderr
    );

    // Under gprobe: held before its first instruction, every call recorded.
    for round in 0..3 {
        let run = gprobe_run(
            &spec,
            &[
                "--output",
                "jsonl",
                "--summary-file",
                "summary.json",
                "--",
                bin.to_str().unwrap(),
                "-n",
                "3",
                "-threads",
                "2",
            ],
        );
        assert!(run.status.success(), "{:?}\n{}", run.status, run.stderr);
        // stdout is a file: it carries the records only; the program's lines went to
        // stderr.
        let subs = program_lines(&run.stderr, "sub ");
        let adds = program_lines(&run.stderr, "add ");
        assert_eq!((subs.len(), adds.len()), (3, 6), "{}", run.stderr);
        let mut got: Vec<(i64, i64)> = run
            .records("sub")
            .iter()
            .map(|r| {
                (
                    r["args"]["a"].as_i64().unwrap(),
                    r["args"]["b"].as_i64().unwrap(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [(100, 0), (100, 1), (100, 2)],
            "round {round}: {}",
            run.stderr
        );
        let add_records = run.records("add");
        assert_eq!(add_records.len(), 6, "{}", run.stderr);
        for line in &adds {
            let r: i64 = line["r"].parse().unwrap();
            assert_eq!(
                add_records
                    .iter()
                    .filter(|x| x["returns"]["r0"].as_i64() == Some(r))
                    .count(),
                1,
                "{line:?}"
            );
        }
        let summary: Value = serde_json::from_str(
            &std::fs::read_to_string(run.dir.path().join("summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(summary["processes"]["traced"], 1, "{summary}");
        assert_eq!(
            summary["processes"]["missed"],
            serde_json::json!([]),
            "{summary}"
        );
        assert!(
            run.stderr.contains("before its first instruction ran"),
            "{}",
            run.stderr
        );
        eprintln!(
            "round {round}: 3 of 3 sub and 6 of 6 add calls recorded, the first one included"
        );
    }

    // Its status is gprobe's; a signal's death is 128 + the signal, as a shell says.
    let exits = gprobe_run(&spec, &["--", "sh", "-c", "exit 7"]);
    assert_eq!(exits.status.code(), Some(7), "{}", exits.stderr);
    assert!(
        exits.stderr.contains("no ProbeSpec selects the command"),
        "{}",
        exits.stderr
    );
    let killed = gprobe_run(&spec, &["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(killed.status.code(), Some(143), "{}", killed.stderr);
    let missing = gprobe_run(&spec, &["--", "no-such-program-anywhere"]);
    assert_eq!(missing.status.code(), Some(127), "{}", missing.stderr);
    assert!(
        missing
            .stderr
            .contains("error: no-such-program-anywhere: command not found"),
        "{}",
        missing.stderr
    );
}

#[test]
fn with_an_output_file_the_commands_stdout_is_left_alone() {
    require_trace("with_an_output_file_the_commands_stdout_is_left_alone");
    let _guard = serial();
    let dir = TempDir::new("run-command-out");
    let bin = ctarget(dir.path());
    let run = gprobe_run(
        &ctarget_spec(dir.path()),
        &[
            "--output-file",
            "calls.jsonl",
            "--",
            bin.to_str().unwrap(),
            "-n",
            "2",
            "-threads",
            "0",
        ],
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(
        program_lines(&run.stdout, "sub ").len(),
        2,
        "{}",
        run.stdout
    );
    let calls = std::fs::read_to_string(run.dir.path().join("calls.jsonl")).unwrap();
    assert_eq!(records_in(&calls, "sub").len(), 2, "{calls}");
    assert!(!run.stderr.contains("sub a="), "{}", run.stderr);
}

#[test]
fn signals_reach_the_command_once_and_gprobe_traces_until_it_exits() {
    require_trace("signals_reach_the_command_once_and_gprobe_traces_until_it_exits");
    let _guard = serial();
    let dir = TempDir::new("run-command-signals");
    let bin = counter(dir.path());
    let spec = SpecBuilder::new("sig")
        .executable(dir.path().join("count?r"))
        .probe(ProbeBuilder::new("finish").capture(["k"]))
        .yaml();

    // Ctrl-C on the terminal: the whole foreground group gets SIGINT from the kernel,
    // gprobe and the program; gprobe does not send it again.
    let (mut child, master) = gprobe_on_a_terminal(dir.path(), &spec, &bin);
    let stderr = dir.path().join("stderr");
    wait_for_file(&stderr, "counter-ready");
    // SAFETY: writing one byte we own to the terminal's master side.
    let w = unsafe { libc::write(master.as_raw_fd(), b"\x03".as_ptr().cast(), 1) };
    assert_eq!(w, 1);
    let status = wait(&mut child, TIMEOUT);
    let err = std::fs::read_to_string(&stderr).unwrap();
    let out = std::fs::read_to_string(dir.path().join("stdout")).unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "one SIGINT, not two: {status:?}\n{err}"
    );
    assert!(err.contains("SIGINT from the terminal"), "{err}");
    let fin = records_in(&out, "finish");
    assert_eq!(fin.len(), 1, "the call made after the signal: {out}\n{err}");
    assert_eq!(fin[0]["args"]["k"], 1);
    drop(master);

    // SIGTERM sent to gprobe alone: passed on, once.
    let run_dir = TempDir::new("run-command-term");
    let spec_path = run_dir.path().join("spec.yaml");
    std::fs::write(&spec_path, &spec).unwrap();
    let stderr = run_dir.path().join("stderr");
    let mut child = Command::new(gprobe_bin())
        .arg("run")
        .arg(&spec_path)
        .args(["--output", "jsonl", "--"])
        .arg(&bin)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(run_dir.path().join("stdout")).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    wait_for_file(&stderr, "counter-ready");
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait(&mut child, TIMEOUT);
    let err = std::fs::read_to_string(&stderr).unwrap();
    let out = std::fs::read_to_string(run_dir.path().join("stdout")).unwrap();
    assert_eq!(status.code(), Some(1), "one SIGTERM: {status:?}\n{err}");
    assert!(err.contains("SIGTERM: passed on to the command"), "{err}");
    assert_eq!(records_in(&out, "finish")[0]["args"]["k"], 1, "{out}");
}

#[test]
fn a_closed_output_ends_gprobe_quietly() {
    require_trace("a_closed_output_ends_gprobe_quietly");
    let _guard = serial();
    let dir = TempDir::new("run-closed");
    let bin = ctarget(dir.path());
    let spec_path = dir.path().join("spec.yaml");
    let run = |extra: &[&str], exact: bool| {
        let spec = if exact {
            SpecBuilder::new("closed")
                .executable(&bin)
                .probe(ProbeBuilder::new("sub").capture(["a", "b"]))
                .yaml()
        } else {
            ctarget_spec(dir.path())
        };
        std::fs::write(&spec_path, spec).unwrap();
        let stderr = dir.path().join("stderr");
        let child = Command::new(gprobe_bin())
            .arg("run")
            .arg(&spec_path)
            .args(["--output", "jsonl"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(closed_pipe()))
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        (child, stderr)
    };

    // With a command: the records have nowhere to go, the command runs to its end.
    let (mut child, stderr) = run(&["--", bin.to_str().unwrap(), "-n", "3"], false);
    let status = wait(&mut child, TIMEOUT);
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("the output was closed"), "{err}");
    assert!(!err.contains("ERROR") && !err.contains("panicked"), "{err}");
    assert_eq!(program_lines(&err, "sub ").len(), 3, "{err}");

    // Without one: gprobe stops by itself once its output is gone.
    let (mut child, stderr) = run(&[], true);
    wait_for_file(&stderr, "ready: tracing");
    run_program(&bin, &["-n", "3", "-threads", "0"]);
    let status = wait(&mut child, TIMEOUT);
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("nothing is left to write calls to: stopping"),
        "{err}"
    );
    assert!(!err.contains("ERROR") && !err.contains("panicked"), "{err}");
}

#[test]
fn container_selectors_say_at_once_that_they_select_nothing_here() {
    // No BPF is loaded: the spec is refused before.
    let dir = TempDir::new("run-images");
    for (name, spec) in [
        (
            "images",
            SpecBuilder::new("shop")
                .images(["registry.example/shop:*"])
                .probe(ProbeBuilder::new("main.f"))
                .yaml(),
        ),
        (
            "pods",
            SpecBuilder::new("shop")
                .pod_labels([("app", "shop")])
                .probe(ProbeBuilder::new("main.f"))
                .yaml(),
        ),
    ] {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, spec).unwrap();
        let t0 = Instant::now();
        let out = Command::new(gprobe_bin())
            .arg("run")
            .arg(&path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let took = t0.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{name}: {err}");
        assert!(
            err.contains("selects nothing on this machine") && err.contains("gprobe agent"),
            "{name}: {err}"
        );
        assert!(took < Duration::from_secs(10), "{name}: took {took:?}");
        eprintln!("{name}: exit 3 after {took:?}");
    }
}

#[test]
fn waiting_is_info_and_a_spec_error_is_said_once() {
    require_trace("waiting_is_info_and_a_spec_error_is_said_once");
    let _guard = serial();
    let dir = TempDir::new("run-levels");
    let bin = ctarget(dir.path());
    // The only probe captures a name twice: a spec error, which every process it selects
    // shares. The exact path holds each new process at exec.
    let spec = SpecBuilder::new("levels")
        .executable(&bin)
        .probe(ProbeBuilder::new("add").capture(["a", "a"]))
        .yaml();
    let g = Gprobe::cmd(&spec)
        .args(&["--log-level", "debug"])
        .summary_file()
        .start();
    for _ in 0..3 {
        run_program(&bin, &["-n", "1", "-threads", "1"]);
    }
    let t0 = Instant::now();
    while g
        .stderr_now()
        .matches("not traced: no probe could be attached")
        .count()
        < 3
    {
        assert!(t0.elapsed() < TIMEOUT, "{}", g.stderr_now());
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = g.stop();
    assert_eq!(run.status.code(), Some(3), "{}", run.stderr);
    let (log, summary) = run.stderr.split_once("gprobe summary:").unwrap();
    let log: Vec<&str> = log.lines().filter(|l| !l.contains(" DEBUG ")).collect();
    let waiting: Vec<&&str> = log
        .iter()
        .filter(|l| l.contains("waiting for one to start"))
        .collect();
    assert_eq!(waiting.len(), 1, "{log:#?}");
    assert!(waiting[0].contains(" INFO "), "{}", waiting[0]);
    let error = "\"a\" is already captured";
    let said: Vec<&&str> = log.iter().filter(|l| l.contains(error)).collect();
    assert_eq!(said.len(), 1, "the spec error once, at start:\n{log:#?}");
    assert!(said[0].contains(" ERROR "), "{}", said[0]);
    // The summary names it under its probe, and the three processes without it.
    assert_eq!(summary.matches(error).count(), 1, "{summary}");
    let s = run.summary();
    assert_eq!(s.processes.matched, 3, "{}", run.stderr);
    eprintln!(
        "3 processes: the spec error in {} log line and {} summary line",
        said.len(),
        summary.matches(error).count()
    );
}

#[test]
fn the_table_shows_local_time_in_order_and_escapes_what_is_not_text() {
    require_trace("the_table_shows_local_time_in_order_and_escapes_what_is_not_text");
    let _guard = serial();
    let dir = TempDir::new("run-table");
    let bin = bytes(dir.path());
    let spec = SpecBuilder::new("a-spec-name-longer-than-sixteen")
        .executable(dir.path().join("byte?"))
        .probe(
            ProbeBuilder::new("a_function_whose_name_is_longer_than_the_column")
                .capture(["p[:n]"])
                .latency(),
        )
        .yaml();
    let spec_path = dir.path().join("spec.yaml");
    std::fs::write(&spec_path, spec).unwrap();
    let out = Command::new(gprobe_bin())
        .arg("run")
        .arg(&spec_path)
        .args(["--output", "table", "--"])
        .arg(&bin)
        // A zone of India's offset, half an hour off any whole-hour zone.
        .env("TZ", "IST-5:30")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("# times: IST (UTC+05:30), when each call returned"),
        "{text}"
    );
    let rows: Vec<&str> = lines[2..]
        .iter()
        .copied()
        .filter(|l| !l.starts_with(' '))
        .collect();
    assert_eq!(rows.len(), 800, "{text}\n{err}");
    let times: Vec<&str> = rows.iter().map(|r| &r[..15]).collect();
    for w in times.windows(2) {
        assert!(w[0] <= w[1], "backwards: {} then {}", w[0], w[1]);
    }
    // The clock of this machine in that zone, around the run.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 5 * 3600
        + 1800;
    let hhmm = format!("{:02}:{:02}", now / 3600 % 24, now / 60 % 60);
    let before = format!("{:02}:{:02}", (now - 60) / 3600 % 24, (now - 60) / 60 % 60);
    assert!(
        times[0].starts_with(&hhmm) || times[0].starts_with(&before),
        "{} is not the time in UTC+05:30 ({hhmm})",
        times[0]
    );
    for r in &rows {
        assert!(
            r.contains(" a-spec-name-lon… …is_longer_than_the_column "),
            "{r}"
        );
    }
    assert_eq!(
        text.matches("    p[:n]=\"caf\\xe9 \\xff!\"\n").count(),
        800,
        "{text}"
    );
    eprintln!(
        "800 rows, times from {} to {} (UTC+05:30), never backwards",
        times[0], times[799]
    );
}
