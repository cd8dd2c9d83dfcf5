//! How the `gprobe run -- CMD` tests start gprobe and wait for it: run to its end with its
//! output in files, on a pseudo-terminal of its own, or writing into a closed pipe.

use gprobe_e2e::go::TempDir;
use gprobe_e2e::harness::gprobe_bin;
use serde_json::Value;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const TIMEOUT: Duration = Duration::from_secs(60);

/// What a finished gprobe left.
pub struct Done {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub dir: TempDir,
}

impl Done {
    pub fn records(&self, symbol: &str) -> Vec<Value> {
        records_in(&self.stdout, symbol)
    }
}

pub fn records_in(text: &str, symbol: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .filter(|r| r["symbol"] == symbol)
        .collect()
}

/// Runs `gprobe run SPEC ARGS...` to its end with stdout and stderr in files.
pub fn gprobe_run(spec: &str, args: &[&str]) -> Done {
    let dir = TempDir::new("gprobe-cmd");
    let spec_path = dir.path().join("spec.yaml");
    std::fs::write(&spec_path, spec).unwrap();
    let mut child = Command::new(gprobe_bin())
        .arg("run")
        .arg(&spec_path)
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let status = wait(&mut child, TIMEOUT);
    Done {
        status,
        stdout: std::fs::read_to_string(dir.path().join("stdout")).unwrap(),
        stderr: std::fs::read_to_string(dir.path().join("stderr")).unwrap(),
        dir,
    }
}

pub fn wait(child: &mut std::process::Child, timeout: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gprobe did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `gprobe run SPEC -- BIN` in a session of its own whose controlling terminal is a
/// new pseudo-terminal; returns the child and the terminal's master side.
pub fn gprobe_on_a_terminal(dir: &Path, spec: &str, bin: &Path) -> (std::process::Child, OwnedFd) {
    let spec_path = dir.join("spec.yaml");
    std::fs::write(&spec_path, spec).unwrap();
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the ints we pass; the rest may be null.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty returned these descriptors to us.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let slave_fd = slave.as_raw_fd();
    let mut cmd = Command::new(gprobe_bin());
    cmd.arg("run")
        .arg(&spec_path)
        .args(["--output", "jsonl", "--"])
        .arg(bin)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap());
    // SAFETY: setsid and ioctl are async-signal-safe; the slave descriptor stays open in
    // the child until exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    drop(slave);
    (child, master)
}

pub fn wait_for_file(path: &Path, what: &str) {
    let t0 = Instant::now();
    loop {
        let s = std::fs::read_to_string(path).unwrap_or_default();
        if s.contains(what) {
            return;
        }
        assert!(t0.elapsed() < TIMEOUT, "no {what:?} in:\n{s}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pipe whose reading end is already closed.
pub fn closed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array we pass.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both are ours; the reading end is closed at once.
    unsafe {
        libc::close(fds[0]);
        OwnedFd::from_raw_fd(fds[1])
    }
}
