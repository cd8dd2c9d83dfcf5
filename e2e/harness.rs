//! Shared by the end-to-end tests: builds Go programs, runs `gprobe` against them and
//! collects what it printed.
#![allow(dead_code)]

#[path = "../agent/tests/common/go.rs"]
pub mod go;

use go::{GoVersion, TempDir};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// gprobe runs one at a time: tests share 2 cores and latency checks need quiet ones.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// True when this process may load BPF programs; otherwise prints why the test is skipped.
pub fn can_trace(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED {test}: needs root (CAP_BPF, CAP_PERFMON) to load BPF programs");
        return false;
    }
    true
}

pub fn gprobe_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gprobe"))
}

/// Go programs built once per test binary, in one temporary folder, removed when the
/// test binary exits (a static is never dropped, so an exit hook removes it).
pub fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_build_dir() {
        if let Some(d) = DIR.get() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    DIR.get_or_init(|| {
        let dir = TempDir::new("e2e-builds");
        // SAFETY: registers a plain function without captures; it only reads DIR.
        unsafe { libc::atexit(remove_build_dir) };
        let path = dir.path().to_path_buf();
        std::mem::forget(dir);
        path
    })
}

/// Builds (once) `src` (relative to the repo root) with Go `v`, stripped or not.
pub fn program(src: &str, v: GoVersion, stripped: bool) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let key = format!("{src}-{v:?}-{stripped}");
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(&key) {
        return p.clone();
    }
    let name = Path::new(src)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let dir = build_dir()
        .join(format!("{v:?}-{}", if stripped { "stripped" } else { "full" }).to_lowercase());
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(&name);
    go::build(v, &go::repo_root().join(src), &out, stripped, &[]);
    built.insert(key, out.clone());
    out
}

pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub status: ExitStatus,
}

impl Run {
    /// Every JSON line of stdout, parsed (a line that is not JSON fails the test).
    pub fn records(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    pub fn records_of(&self, symbol: &str) -> Vec<serde_json::Value> {
        self.records()
            .into_iter()
            .filter(|r| r["symbol"] == symbol)
            .collect()
    }
}

/// A running `gprobe run`.
pub struct Gprobe {
    child: Option<Child>,
    dir: TempDir,
}

impl Gprobe {
    /// Starts `gprobe run` on `spec` (YAML text) and waits until it has scanned /proc.
    pub fn start(spec: &str, extra: &[&str]) -> Gprobe {
        let dir = TempDir::new("gprobe-run");
        let spec_path = dir.path().join("spec.yaml");
        std::fs::write(&spec_path, spec).unwrap();
        let child = Command::new(gprobe_bin())
            .arg("run")
            .arg(&spec_path)
            .args(["--output", "jsonl"])
            .args(extra)
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("start gprobe");
        let g = Gprobe {
            child: Some(child),
            dir,
        };
        g.wait_for_stderr(
            |s| s.contains("waiting for one to start") || s.contains("attached "),
            Duration::from_secs(30),
        );
        g
    }

    pub fn stderr_now(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    pub fn stdout_now(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    /// Waits until stderr satisfies `pred`; panics with the stderr after `timeout`.
    pub fn wait_for_stderr(&self, pred: impl Fn(&str) -> bool, timeout: Duration) {
        let t0 = Instant::now();
        loop {
            let s = self.stderr_now();
            if pred(&s) {
                return;
            }
            if t0.elapsed() > timeout {
                panic!("gprobe did not get there in {timeout:?}; stderr:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGINT (by pid) and collects the output.
    pub fn stop(mut self) -> Run {
        let mut child = self.child.take().unwrap();
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!(
                    "gprobe did not stop within 30s of SIGINT; stderr:\n{}",
                    self.stderr_now()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Run {
            stdout: self.stdout_now(),
            stderr: self.stderr_now(),
            status,
        }
    }
}

impl Drop for Gprobe {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a traced program to completion; asserts it succeeded; returns its stdout.
pub fn run_program(bin: &Path, args: &[&str]) -> String {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "{} failed ({status}); stderr:\n{err}",
        bin.display()
    );
    out
}

/// Runs gprobe to completion with a spec (for errors that stop it early).
pub fn gprobe_once(spec: &str, extra: &[&str]) -> Run {
    let dir = TempDir::new("gprobe-once");
    let spec_path = dir.path().join("spec.yaml");
    std::fs::write(&spec_path, spec).unwrap();
    let out = Command::new(gprobe_bin())
        .arg("run")
        .arg(&spec_path)
        .args(extra)
        .output()
        .unwrap();
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status,
    }
}

pub const VERSIONS: [GoVersion; 2] = [GoVersion::Go119, GoVersion::Go127];
