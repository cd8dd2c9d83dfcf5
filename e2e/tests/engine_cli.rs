//! What a user sees when things are not as they should be: nothing attached (exit status),
//! bad flags and hostile specs, control characters in paths, symlinks, secrets in captured
//! URLs, and a shutdown with many uprobes. They need root (BPF).

use gprobe_e2e::go::{GoVersion, TempDir};
use gprobe_e2e::harness::{gprobe_bin, program, require_trace, run_program, serial, Gprobe};
use gprobe_e2e::spec::{multi_yaml, ProbeBuilder, SpecBuilder};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Child processes killed (by pid) when the test ends, passed or not.
struct Kids(Vec<std::process::Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for k in &mut self.0 {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

fn lifecycle() -> PathBuf {
    program("e2e/testdata/lifecycle", GoVersion::Go127, false)
}

fn work(exe: impl AsRef<Path>) -> SpecBuilder {
    SpecBuilder::new("work").executable(exe).probe(
        ProbeBuilder::new("main.work")
            .signature("func(i int64) int64")
            .capture(["i"]),
    )
}

#[test]
fn nothing_attached_is_a_failure_with_the_reason() {
    require_trace("exit status");
    let _guard = serial();
    // Nothing matches while it runs.
    let run = Gprobe::cmd(&work("/nonexistent/dir/app").yaml())
        .args(&["--duration", "1s"])
        .once();
    assert_eq!(run.status.code(), Some(3), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("no running process matches selector.executable \"/nonexistent/dir/app\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("no probe was attached at any time"),
        "{}",
        run.stderr
    );

    // A process matches but the symbol does not exist in it.
    let bin = lifecycle();
    let mut child = Command::new(&bin)
        .args(["-mode", "block"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let spec = SpecBuilder::new("typo")
        .executable(&bin)
        .probe(ProbeBuilder::new("main.wrok"))
        .yaml();
    let run = Gprobe::cmd(&spec).args(&["--duration", "1s"]).once();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("symbol main.wrok not found in {}", bin.display()))
            && run.stderr.contains("gprobe symbols"),
        "{}",
        run.stderr
    );
}

#[test]
fn bad_flags_and_hostile_specs_are_clear_errors() {
    // No BPF needed: these stop before loading anything.
    let spec = work("/bin/x").yaml();
    let run = Gprobe::cmd(&spec).args(&["--poll-interval", "0s"]).once();
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("out of range: use 1ms to 10s"),
        "{}",
        run.stderr
    );

    let dir = TempDir::new("hostile");
    let deep = dir.path().join("deep.yaml");
    std::fs::write(&deep, "[".repeat(100_000)).unwrap();
    let t0 = Instant::now();
    let out = Command::new(gprobe_bin())
        .arg("run")
        .arg(&deep)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("nests collections 100000 levels deep"),
        "{stderr}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "refused at once: {:?}",
        t0.elapsed()
    );
    // User errors are a message, not a backtrace, even with RUST_BACKTRACE set.
    let out = Command::new(gprobe_bin())
        .arg("run")
        .arg(&deep)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Stack backtrace") && !stderr.contains("stack backtrace"),
        "{stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");

    // A capture listed twice is refused for that probe (and nothing else runs here).
    let twice = SpecBuilder::new("twice")
        .executable("/bin/x")
        .probe(
            ProbeBuilder::new("main.work")
                .signature("func(i int64) int64")
                .capture(["i", "i"]),
        )
        .yaml();
    let run = Gprobe::cmd(&twice).args(&["--duration", "1s"]).once();
    assert!(
        run.stderr
            .contains("\"i\" is already captured at capture[0]"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_same_spec_twice_is_refused_once_and_records_are_not_doubled() {
    require_trace("duplicate spec");
    let bin = lifecycle();
    let _guard = serial();
    let spec = work(&bin).build();
    let g = Gprobe::cmd(&multi_yaml([&spec, &spec]))
        .summary_file()
        .start();
    let out = run_program(&bin, &["-mode", "short", "-calls", "7"]);
    let run = g.stop();
    assert!(out.contains("calls=7"));
    assert!(
        run.stderr
            .contains("work: a ProbeSpec of this name is already loaded"),
        "{}",
        run.stderr
    );
    assert_eq!(run.records_of("main.work").len(), 7, "{}", run.stdout);
    assert_eq!(run.summary().probe("main.work").delivered, 7);
}

#[test]
fn a_selector_naming_a_symlink_matches_and_control_characters_are_escaped_in_logs() {
    require_trace("symlink");
    let bin = lifecycle();
    let dir = TempDir::new("paths");
    // The real file sits in a folder whose name holds a newline and an escape sequence;
    // the selector names a symlink to it, as /usr/bin/redis-server -> redis-check-rdb.
    let odd = dir.path().join("odd\nERROR forged line\x1b[31m");
    std::fs::create_dir_all(&odd).unwrap();
    let real = odd.join("lifecycle-real");
    std::fs::copy(&bin, &real).unwrap();
    let link = dir.path().join("lifecycle-link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let _guard = serial();
    let g = Gprobe::cmd(&work(&link).yaml()).summary_file().start();
    let out = run_program(&link, &["-mode", "short", "-calls", "3"]);
    let run = g.stop();
    assert!(out.contains("calls=3"));
    assert_eq!(run.records_of("main.work").len(), 3, "{}", run.stderr);
    assert_eq!(run.summary().processes.traced, 1);
    assert!(
        run.stderr.lines().all(|l| !l.starts_with("ERROR forged")),
        "a path forged a log line:\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("odd\\nERROR forged line\\u{1b}[31m"),
        "{}",
        run.stderr
    );
}

#[test]
fn secrets_in_captured_urls_are_redacted_unless_the_probe_says_otherwise() {
    require_trace("redaction");
    let bin = lifecycle();
    let _guard = serial();
    let visit = |name: &str, redact: bool| {
        SpecBuilder::new(name)
            .executable(&bin)
            .probe(
                ProbeBuilder::new("main.visit")
                    .signature("func(url string) int")
                    .capture(["url"])
                    .redact(redact),
            )
            .build()
    };
    let g = Gprobe::cmd(&multi_yaml([
        &visit("redacted", true),
        &visit("verbatim", false),
    ]))
    .start();
    let urls = [
        "https://alice:s3cret@shop.example/cart?id=7&token=abc123",
        "http://shop.example/s3?X-Amz-Signature=deadbeef&AWSAccessKeyId=AKIA&page=2",
        "http://shop.example/plain?q=shoes",
    ];
    let mut args = vec!["-mode", "secrets"];
    args.extend(urls);
    run_program(&bin, &args);
    let run = g.stop();
    let seen = |probe: &str| -> Vec<String> {
        let mut v: Vec<String> = run
            .records_of("main.visit")
            .iter()
            .filter(|r| r["probe"] == probe)
            .map(|r| r["args"]["url"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let mut want = vec![
        "https://REDACTED@shop.example/cart?id=7&token=REDACTED".to_string(),
        "http://shop.example/s3?X-Amz-Signature=REDACTED&AWSAccessKeyId=REDACTED&page=2"
            .to_string(),
        "http://shop.example/plain?q=shoes".to_string(),
    ];
    want.sort();
    assert_eq!(seen("redacted"), want, "{}", run.stdout);
    let mut raw: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
    raw.sort();
    assert_eq!(seen("verbatim"), raw);
}

#[test]
fn stopping_with_150_uprobes_takes_less_than_five_seconds() {
    require_trace("shutdown");
    let bin = lifecycle();
    let _guard = serial();
    // 30 processes x 5 functions: 150 per-process uprobes.
    let mut spec = SpecBuilder::new("many").executable(&bin);
    for f in [
        "main.work",
        "main.rec",
        "main.block",
        "main.main",
        "main.visit",
    ] {
        spec = spec.probe(ProbeBuilder::new(f));
    }
    let g = Gprobe::cmd(&spec.yaml()).summary_file().start();
    let _kids = Kids(
        (0..30)
            .map(|_| {
                Command::new(&bin)
                    .args(["-mode", "block"])
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    g.wait_for_stderr(
        |s| s.matches("attached many / ").count() == 150,
        Duration::from_secs(30),
    );
    let t0 = Instant::now();
    let run = g.stop();
    let took = t0.elapsed();
    let detach_line = run
        .stderr
        .lines()
        .find(|l| l.contains("every uprobe detached in"))
        .unwrap_or_else(|| panic!("{}", run.stderr))
        .to_string();
    eprintln!("stopped in {took:?}; {detach_line}");
    assert!(
        took < Duration::from_secs(5),
        "stopping took {took:?}\n{}",
        run.stderr
    );
    assert!(run.status.success());
    assert_eq!(run.summary().processes.traced, 30);
}
