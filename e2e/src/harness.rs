//! Runs `gprobe` against programs the tests start and collects what it printed: the JSON
//! records on stdout, the log and summary on stderr, and (when asked) the summary file.

use crate::go::{GoVersion, TempDir};
use crate::summary::Summary;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use crate::binaries::{build_dir, build_go, gprobe_bin, program};

/// Every Go toolchain the tests build with.
pub const VERSIONS: [GoVersion; 2] = [GoVersion::Go119, GoVersion::Go127];

/// How long `gprobe run` may take to become ready, or to stop after SIGINT.
const GPROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// gprobe runs one at a time: tests share 2 cores and latency checks need quiet ones.
///
/// The lock is per test process; cargo test runs test binaries one after another, so it
/// holds across binaries too (a runner that runs binaries in parallel would break that).
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails the calling test, naming why, when this process may not load BPF programs: a
/// test that did not run must not pass.
pub fn require_trace(test: &str) {
    // SAFETY: geteuid has no preconditions.
    assert!(
        unsafe { libc::geteuid() } == 0,
        "{test}: needs root (CAP_BPF, CAP_PERFMON) to load BPF programs: run it as root"
    );
}

/// Fails the calling test, naming what is missing and how to install it, unless `program`
/// (an absolute path, or a command looked up on PATH) is an executable file here: a test
/// that did not run must not pass. `package` is the Debian package that installs it
/// (scripts/setup.sh --test installs them all). Returns the program's path.
#[track_caller]
pub fn require_program(test: &str, program: &str, package: &str) -> PathBuf {
    let found = if program.contains('/') {
        Some(PathBuf::from(program)).filter(|p| is_executable(p))
    } else {
        which(program)
    };
    // A match, not a closure: the panic then names the test's line (track_caller).
    match found {
        Some(path) => path,
        None => not_installed(test, program, package),
    }
}

/// Fails the calling test like [`require_program`] unless `path`, a file the test reads
/// but does not run (a library, a header, a separate debug file), is here. Returns it.
#[track_caller]
pub fn require_file(test: &str, path: &str, package: &str) -> PathBuf {
    let p = PathBuf::from(path);
    if !p.is_file() {
        not_installed(test, path, package);
    }
    p
}

#[track_caller]
fn not_installed(test: &str, what: &str, package: &str) -> ! {
    panic!(
        "{test}: needs {what}, which is not installed here: scripts/setup.sh --test \
         installs it (or apt-get install {package})"
    )
}

/// The executable file `tool` names on PATH, as a shell would find it.
pub(crate) fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What one `gprobe run` printed, and how it ended.
#[derive(Debug)]
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub status: ExitStatus,
    summary: SummaryFile,
}

/// The summary file of a run, as far as there is one.
#[derive(Debug)]
enum SummaryFile {
    NotRequested,
    Missing(PathBuf, std::io::Error),
    Written(String),
}

impl SummaryFile {
    fn read(path: Option<&Path>) -> SummaryFile {
        match path {
            None => SummaryFile::NotRequested,
            Some(p) => match std::fs::read_to_string(p) {
                Ok(text) => SummaryFile::Written(text),
                Err(e) => SummaryFile::Missing(p.to_path_buf(), e),
            },
        }
    }
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

    /// The records of calls of `symbol`.
    pub fn records_of(&self, symbol: &str) -> Vec<serde_json::Value> {
        self.records()
            .into_iter()
            .filter(|r| r["symbol"] == symbol)
            .collect()
    }

    /// The summary file gprobe wrote at exit, typed. Panics (with gprobe's stderr) unless
    /// the run was started with [`GprobeCmd::summary_file`] and the file holds a summary.
    pub fn summary(&self) -> Summary {
        let value = self.summary_json();
        serde_json::from_value(value.clone()).unwrap_or_else(|e| {
            panic!("the summary file does not fit the contract ({e}):\n{value:#}")
        })
    }

    /// The summary file gprobe wrote at exit, as JSON (for fields `Summary` lacks).
    pub fn summary_json(&self) -> serde_json::Value {
        match &self.summary {
            SummaryFile::NotRequested => {
                panic!("no summary file: start gprobe with Gprobe::cmd(..).summary_file()")
            }
            SummaryFile::Missing(path, e) => panic!(
                "gprobe wrote no summary file at {} ({e}); stderr:\n{}",
                path.display(),
                self.stderr
            ),
            SummaryFile::Written(text) => serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("the summary file is not JSON ({e}):\n{text}")),
        }
    }
}

/// What gprobe is asked to run: `gprobe run SPEC` or `gprobe trace PROBE`.
#[derive(Debug, Clone)]
enum Invocation {
    /// A spec's YAML text, written to a file for `gprobe run`.
    Run(String),
    /// A one-line probe for `gprobe trace`.
    Trace(String),
}

/// How to run gprobe: a spec or a probe, more arguments, and whether to ask for a summary
/// file.
#[derive(Debug, Clone)]
pub struct GprobeCmd {
    what: Invocation,
    args: Vec<String>,
    summary_file: bool,
    env: Vec<(String, String)>,
}

impl GprobeCmd {
    /// Appends command-line arguments (after `run SPEC` or `trace PROBE`).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Sets an environment variable of gprobe's (e.g. GPROBE_DISABLE_FEATURES).
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Passes `--summary-file` (off by default) so that [`Run::summary`] can read it.
    pub fn summary_file(mut self) -> Self {
        self.summary_file = true;
        self
    }

    /// Writes the spec into `dir` and returns the command and the summary file's path.
    fn command(&self, dir: &Path) -> (Command, Option<PathBuf>) {
        let mut cmd = Command::new(gprobe_bin());
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        match &self.what {
            Invocation::Run(spec) => {
                let spec_path = dir.join("spec.yaml");
                std::fs::write(&spec_path, spec).unwrap();
                cmd.arg("run").arg(&spec_path);
            }
            Invocation::Trace(probe) => {
                cmd.arg("trace").arg(probe);
            }
        }
        let summary = self.summary_file.then(|| dir.join("summary.json"));
        if let Some(s) = &summary {
            cmd.arg("--summary-file").arg(s);
        }
        (cmd, summary)
    }

    /// Starts `gprobe run --output jsonl` in the background and waits until it is ready.
    pub fn start(self) -> Gprobe {
        let dir = TempDir::new("gprobe-run");
        let (mut cmd, summary_path) = self.command(dir.path());
        let child = cmd
            .args(["--output", "jsonl"])
            .args(&self.args)
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("start gprobe");
        let g = Gprobe {
            child: Some(child),
            dir,
            summary_path,
        };
        g.wait_ready();
        g
    }

    /// Runs gprobe to completion (for errors that stop it early).
    pub fn once(self) -> Run {
        let dir = TempDir::new("gprobe-once");
        let (mut cmd, summary_path) = self.command(dir.path());
        let out = cmd.args(&self.args).output().unwrap();
        Run {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            status: out.status,
            summary: SummaryFile::read(summary_path.as_deref()),
        }
    }
}

/// A running `gprobe run`.
pub struct Gprobe {
    child: Option<Child>,
    dir: TempDir,
    summary_path: Option<PathBuf>,
}

impl Gprobe {
    /// How to run gprobe on `spec` (YAML text); `.start()` or `.once()` runs it.
    pub fn cmd(spec: &str) -> GprobeCmd {
        GprobeCmd {
            what: Invocation::Run(spec.to_string()),
            args: Vec::new(),
            summary_file: false,
            env: Vec::new(),
        }
    }

    /// How to run `gprobe trace PROBE`; its target (`--pid`, `--executable`, `-- CMD`)
    /// goes in `.args(..)`, a command last.
    pub fn trace(probe: &str) -> GprobeCmd {
        GprobeCmd {
            what: Invocation::Trace(probe.to_string()),
            args: Vec::new(),
            summary_file: false,
            env: Vec::new(),
        }
    }

    /// Starts `gprobe run` on `spec` (YAML text) with `extra` arguments and waits until it
    /// is ready ([`Gprobe::wait_ready`]).
    pub fn start(spec: &str, extra: &[&str]) -> Gprobe {
        Gprobe::cmd(spec).args(extra).start()
    }

    /// Waits until gprobe is ready to trace: it has scanned /proc and attached to what runs,
    /// or waits for a matching process to start. The one place that knows how that shows.
    pub fn wait_ready(&self) {
        self.wait_for_stderr(|s| s.contains("ready: tracing"), GPROBE_TIMEOUT);
    }

    /// gprobe's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
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

    /// Sends `signal` to gprobe (by pid), e.g. SIGUSR1 for its histograms.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own running child by its pid.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }

    /// Sends SIGKILL (by pid): gprobe ends without its stop, as an OOM kill or a crash
    /// ends it. [`Gprobe::wait_exit`] reaps it.
    pub fn kill(&self) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.pid() as i32, libc::SIGKILL) };
    }

    /// Waits until gprobe has exited and reaps it; false if it still runs after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let child = self.child.as_mut().expect("running");
        let t0 = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            if t0.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until gprobe ends by itself (it stops when what it traces exits), without a
    /// signal, and collects the output; panics (with the stderr) after `timeout`.
    pub fn wait_end(mut self, timeout: Duration) -> Run {
        assert!(
            self.wait_exit(timeout),
            "gprobe did not end by itself within {timeout:?}; stderr:\n{}",
            self.stderr_now()
        );
        let mut child = self.child.take().expect("exited");
        let status = child.wait().unwrap();
        Run {
            stdout: self.stdout_now(),
            stderr: self.stderr_now(),
            status,
            summary: SummaryFile::read(self.summary_path.as_deref()),
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
            if t0.elapsed() > GPROBE_TIMEOUT {
                let _ = child.kill();
                panic!(
                    "gprobe did not stop within {GPROBE_TIMEOUT:?} of SIGINT; stderr:\n{}",
                    self.stderr_now()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Run {
            stdout: self.stdout_now(),
            stderr: self.stderr_now(),
            status,
            summary: SummaryFile::read(self.summary_path.as_deref()),
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
    // stderr is read on its own thread: a program that fills the stderr pipe while we
    // wait for stdout's end would otherwise never finish.
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let err = err_reader.join().unwrap();
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
    Gprobe::cmd(spec).args(extra).once()
}

/// The `key=value` words of every line of a program's output that starts with `prefix`
/// (the test programs print their own view of each call that way).
pub fn program_lines(out: &str, prefix: &str) -> Vec<BTreeMap<String, String>> {
    out.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn run(summary: SummaryFile) -> Run {
        Run {
            stdout: "{\"symbol\":\"main.f\",\"args\":{}}\n\n{\"symbol\":\"main.g\"}\n".into(),
            stderr: "the log".into(),
            status: ExitStatus::from_raw(0),
            summary,
        }
    }

    #[test]
    fn records_and_the_summary_file() {
        let r = run(SummaryFile::Written(
            r#"{"probes":[{"spec":"s","symbol":"main.f","attached":true,"error":null,
                "delivered":1,"lost":0,"throttled":0,"unfinished":0,"abandoned":0}],
                "processes":{"matched":1,"traced":1,"missed":[]},
                "otlp":{"spans_exported":0,"spans_dropped":0,"export_errors":0},"new":1}"#
                .into(),
        ));
        assert_eq!(r.records().len(), 2);
        assert_eq!(r.records_of("main.f").len(), 1);
        let s = r.summary();
        assert_eq!(s.probe("main.f").delivered, 1);
        assert_eq!(s.processes.traced, 1);
        assert_eq!(r.summary_json()["new"], 1);
    }

    #[test]
    #[should_panic(expected = "no summary file: start gprobe with")]
    fn no_summary_unless_asked_for() {
        run(SummaryFile::NotRequested).summary();
    }

    #[test]
    #[should_panic(expected = "gprobe wrote no summary file at /nonexistent/summary.json")]
    fn a_missing_summary_file_fails_with_the_log() {
        run(SummaryFile::read(Some(Path::new(
            "/nonexistent/summary.json",
        ))))
        .summary();
    }

    #[test]
    fn program_lines_are_key_value_words() {
        let l = program_lines("call ms=5 tid=7\nother x=1\ncall ms=6\n", "call");
        assert_eq!(l.len(), 2);
        assert_eq!(l[0]["tid"], "7");
        assert_eq!(l[1]["ms"], "6");
    }
}
