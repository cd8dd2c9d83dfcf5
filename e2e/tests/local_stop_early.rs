//! `gprobe run` stopped while it is still starting (loading BPF, scanning /proc): the
//! signal is kept and the run stops cleanly once ready, with its summary, instead of being
//! lost. Needs root (BPF).

use gprobe_e2e::go::TempDir;
use gprobe_e2e::harness::{gprobe_bin, require_trace, serial};
use gprobe_e2e::spec::{ProbeBuilder, SpecBuilder};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether the process has a handler for SIGINT (`SigCgt` of /proc/PID/status).
fn catches_sigint(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGINT - 1)) != 0)
}

#[test]
fn a_sigint_sent_before_ready_stops_the_run_once_ready() {
    require_trace("early SIGINT");
    let dir = TempDir::new("stop-early");
    let spec = dir.path().join("spec.yaml");
    let yaml = SpecBuilder::new("early")
        .executable(dir.path().join("nothing-runs-this"))
        .probe(ProbeBuilder::new("main.f"))
        .yaml();
    std::fs::write(&spec, yaml).unwrap();
    let stderr = dir.path().join("stderr");
    let _guard = serial();
    let mut child = Command::new(gprobe_bin())
        .arg("run")
        .arg(&spec)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    while !catches_sigint(pid) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "gprobe exited while starting"
        );
        assert!(t0.elapsed() < Duration::from_secs(30), "no SIGINT handler");
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = std::fs::read_to_string(&stderr).unwrap();
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gprobe still runs 30 s after an early SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let after = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        !before.contains("ready: tracing"),
        "the handler is in place before gprobe is ready:\n{before}"
    );
    // No process ran the selected file: exit status 3, after a clean stop.
    assert_eq!(status.code(), Some(3), "{after}");
    assert!(
        after.contains("ready: tracing") && after.contains("gprobe summary"),
        "{after}"
    );
}
