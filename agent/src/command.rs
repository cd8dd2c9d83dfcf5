//! `gprobe run SPEC... -- CMD ARGS...`: starts a program under gprobe, held from its first
//! instruction until its probes are attached, and reports how it ended.
//!
//! The hold does not depend on the exec tracepoint: gprobe forks, seizes the child with
//! ptrace (`PTRACE_O_TRACEEXEC`) before it execs, and the exec then stops it in a
//! ptrace-event stop, before the program's first instruction. Once the engine has attached
//! the probes that select it, gprobe detaches (`PTRACE_DETACH`) and the program runs on. An
//! exec event stop queues no signal, so if gprobe dies while holding it (kill -9), the
//! kernel detaches and the program simply runs on.
//!
//! ptrace ties the tracee to the thread that seized it: one thread of its own does the
//! fork, the seize, the detach and the final wait.
//!
//! Signals: the program stays in gprobe's process group, so a terminal's Ctrl-C (SIGINT),
//! Ctrl-\ (SIGQUIT) or hang-up reach it directly; a signal sent to gprobe alone (`kill`, a
//! supervisor) is passed on to it. Either way gprobe keeps tracing until the program exits.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CommandError {
    #[error("{0}: command not found (not a path, and not in $PATH)")]
    NotFound(String),
    #[error("{}: {what}", path.display())]
    NotExecutable { path: PathBuf, what: String },
    #[error("the command's arguments and environment must not contain NUL bytes")]
    Nul,
    #[error("starting the command: {what}: {err}")]
    Start {
        what: &'static str,
        err: std::io::Error,
    },
    #[error("running {}: {err}", path.display())]
    Exec { path: PathBuf, err: std::io::Error },
    #[error("the command's thread ended unexpectedly")]
    Thread,
}

impl CommandError {
    /// The exit status a shell would give: 127 for a command not found, 126 for one that
    /// cannot be run.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::NotFound(_) => 127,
            CommandError::NotExecutable { .. } | CommandError::Exec { .. } => 126,
            _ => 1,
        }
    }
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitedWith {
    Code(i32),
    Signal(i32),
}

impl ExitedWith {
    /// gprobe's own exit status for it: the program's, or 128 + the signal that killed it
    /// (as a shell reports it).
    pub fn status(self) -> u8 {
        match self {
            ExitedWith::Code(c) => (c & 0xff) as u8,
            ExitedWith::Signal(s) => (128 + s).min(255) as u8,
        }
    }

    fn from_wait(status: libc::c_int) -> Option<Self> {
        if libc::WIFEXITED(status) {
            Some(ExitedWith::Code(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(ExitedWith::Signal(libc::WTERMSIG(status)))
        } else {
            None
        }
    }
}

impl std::fmt::Display for ExitedWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitedWith::Code(c) => write!(f, "exit status {c}"),
            ExitedWith::Signal(s) => write!(f, "killed by signal {s} ({})", signal_name(*s)),
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "signal",
    }
}

/// Where the program's stdout goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildStdout {
    /// gprobe's stdout, as it is.
    Inherit,
    /// gprobe's stderr: gprobe's stdout carries the call records and is not a terminal,
    /// where the program's output would corrupt them.
    Stderr,
}

/// The program, as `execve` takes it: prepared before the fork, since the child of a
/// multi-threaded process may only make async-signal-safe calls until it execs.
struct Prepared {
    path: CString,
    shown: PathBuf,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

/// `name` as a shell finds it: a path when it holds a `/`, else the first executable file
/// of that name in `$PATH`.
pub fn find_program(name: &OsStr) -> Result<PathBuf, CommandError> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.as_bytes().contains(&b'/') {
        let p = PathBuf::from(name);
        return match std::fs::metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(CommandError::NotFound(p.display().to_string()))
            }
            Err(e) => Err(CommandError::NotExecutable {
                path: p,
                what: e.to_string(),
            }),
            Ok(m) if m.is_dir() => Err(CommandError::NotExecutable {
                path: p,
                what: "is a directory".into(),
            }),
            Ok(_) if !executable(&p) => Err(CommandError::NotExecutable {
                path: p,
                what: "is not executable".into(),
            }),
            Ok(_) => Ok(p),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| executable(p))
        .ok_or_else(|| CommandError::NotFound(name.to_string_lossy().into_owned()))
}

fn prepare(argv: &[OsString]) -> Result<Prepared, CommandError> {
    let shown = find_program(&argv[0])?;
    let cstr = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| CommandError::Nul);
    let envp = std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k;
            kv.push("=");
            kv.push(v);
            cstr(&kv)
        })
        .collect::<Result<_, _>>()?;
    Ok(Prepared {
        path: cstr(shown.as_os_str())?,
        argv: argv.iter().map(|a| cstr(a)).collect::<Result<_, _>>()?,
        envp,
        shown,
    })
}

/// A started program, held at its exec until [`Held::release`].
pub struct Held {
    pub pid: u32,
    pub path: PathBuf,
    release: mpsc::Sender<()>,
    /// How it ended (sent once it has exited).
    pub exited: tokio::sync::oneshot::Receiver<Result<ExitedWith, CommandError>>,
}

impl Held {
    /// Lets the program run on (gprobe detaches from it).
    pub fn release(&self) {
        let _ = self.release.send(());
    }
}

fn os_err(what: &'static str) -> CommandError {
    CommandError::Start {
        what,
        err: std::io::Error::last_os_error(),
    }
}

/// Starts `argv` held at its exec: returns once it has exec'd (and is stopped before its
/// first instruction), or why it could not run. `before_exec` is told the child's pid
/// before the child may exec.
pub fn start(
    argv: &[OsString],
    stdout: ChildStdout,
    before_exec: impl FnOnce(u32) + Send + 'static,
) -> Result<Held, CommandError> {
    let prepared = prepare(argv)?;
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let (exited_tx, exited_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("gprobe-command".into())
        .spawn(move || {
            let pid = match spawn_seized(&prepared, stdout, before_exec) {
                Ok(pid) => pid,
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                    return;
                }
            };
            let _ = started_tx.send(Ok((pid, prepared.shown.clone())));
            // Whether released or gprobe gave up on it, the program runs on.
            let _ = release_rx.recv();
            // SAFETY: detaching our own tracee; no memory is passed.
            unsafe {
                libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize);
            }
            let _ = exited_tx.send(wait_exit(pid));
        })
        .map_err(|err| CommandError::Start {
            what: "spawning its thread",
            err,
        })?;
    let (pid, path) = started_rx.recv().map_err(|_| CommandError::Thread)??;
    Ok(Held {
        pid: pid as u32,
        path,
        release: release_tx,
        exited: exited_rx,
    })
}

/// Waits for the (detached) child to end.
fn wait_exit(pid: libc::pid_t) -> Result<ExitedWith, CommandError> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status we pass it.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(CommandError::Start {
                what: "waiting for it",
                err,
            });
        }
        if let Some(e) = ExitedWith::from_wait(status) {
            return Ok(e);
        }
    }
}

/// Forks, seizes the child, lets it exec and waits for the exec stop. Returns its pid.
fn spawn_seized(
    p: &Prepared,
    stdout: ChildStdout,
    before_exec: impl FnOnce(u32),
) -> Result<libc::pid_t, CommandError> {
    let mut sync = [0; 2];
    let mut err = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the arrays we pass.
    if unsafe { libc::pipe2(sync.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_err("pipe2"));
    }
    // SAFETY: as above.
    if unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        let e = os_err("pipe2");
        // SAFETY: closing descriptors we own.
        unsafe {
            libc::close(sync[0]);
            libc::close(sync[1]);
        }
        return Err(e);
    }
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: fork in a multi-threaded process: the child only makes async-signal-safe calls
    // (read, close, dup2, sigaction, sigprocmask, execve, write, _exit) on memory prepared
    // before the fork, then execs or exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(os_err("fork"));
    }
    if pid == 0 {
        // SAFETY: see above; every pointer refers to memory prepared before the fork.
        unsafe { child(sync[0], err[1], p.path.as_ptr(), &argv, &envp, stdout) }
    }
    // SAFETY: closing the child's ends, which we own.
    unsafe {
        libc::close(sync[0]);
        libc::close(err[1]);
    }
    let close_parent = |fds: &[i32]| {
        for &fd in fds {
            // SAFETY: closing descriptors we own.
            unsafe { libc::close(fd) };
        }
    };
    // SAFETY: seizing our own child; no memory is passed.
    let seized = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            pid,
            0usize,
            libc::PTRACE_O_TRACEEXEC as usize,
        )
    };
    if seized != 0 {
        let e = os_err("PTRACE_SEIZE (is ptrace forbidden here? check kernel.yama.ptrace_scope)");
        // The child reads EOF and exits without running the program.
        close_parent(&[sync[1], err[0]]);
        let _ = wait_exit(pid);
        return Err(e);
    }
    before_exec(pid as u32);
    // SAFETY: writing one byte we own into our pipe.
    unsafe { libc::write(sync[1], b"x".as_ptr().cast(), 1) };
    close_parent(&[sync[1]]);
    let result = wait_exec_stop(pid, err[0], &p.shown);
    close_parent(&[err[0]]);
    result.map(|()| pid)
}

/// The child's side: waits until the parent has seized it, resets what exec keeps
/// (an ignored SIGPIPE, the blocked signals), redirects stdout if asked, and execs.
///
/// # Safety
/// Only in the child of a fork; every pointer must stay valid (memory of the parent,
/// copied by the fork).
unsafe fn child(
    sync: i32,
    err: i32,
    path: *const libc::c_char,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    stdout: ChildStdout,
) -> ! {
    // SAFETY: the caller's contract: async-signal-safe calls on memory prepared before
    // the fork.
    unsafe {
        let mut b = 0u8;
        loop {
            let n = libc::read(sync, (&mut b as *mut u8).cast(), 1);
            if n == 1 {
                break;
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            // gprobe went away before holding it: do not run the program untraced.
            libc::_exit(127);
        }
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGPIPE, &dfl, std::ptr::null_mut());
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if stdout == ChildStdout::Stderr {
            libc::dup2(2, 1);
        }
        libc::execve(path, argv.as_ptr(), envp.as_ptr());
        let e = *libc::__errno_location();
        libc::write(err, (&e as *const i32).cast(), std::mem::size_of::<i32>());
        libc::_exit(127)
    }
}

/// Waits until the seized child stops at its exec; signals that reach it before are
/// passed on to it.
fn wait_exec_stop(pid: libc::pid_t, err_fd: i32, shown: &Path) -> Result<(), CommandError> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status we pass it.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(CommandError::Start {
                what: "waiting for its exec",
                err: e,
            });
        }
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            // It never exec'd: the errno it wrote says why.
            let mut e = 0i32;
            // SAFETY: reading at most 4 bytes into an i32 we own.
            let n = unsafe {
                libc::read(
                    err_fd,
                    (&mut e as *mut i32).cast(),
                    std::mem::size_of::<i32>(),
                )
            };
            let err = if n == std::mem::size_of::<i32>() as isize {
                std::io::Error::from_raw_os_error(e)
            } else {
                std::io::Error::other(format!(
                    "it ended before it ran ({:?})",
                    ExitedWith::from_wait(status)
                ))
            };
            return Err(CommandError::Exec {
                path: shown.to_path_buf(),
                err,
            });
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let event = (status >> 16) & 0xff;
        let sig = libc::WSTOPSIG(status);
        if event == libc::PTRACE_EVENT_EXEC {
            return Ok(());
        }
        // A signal-delivery stop (event 0): deliver it; a group stop under PTRACE_SEIZE
        // (PTRACE_EVENT_STOP): resume without a signal.
        let inject = if event == 0 { sig as usize } else { 0 };
        // SAFETY: resuming our own tracee; no memory is passed.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0usize, inject) };
    }
}

/// Signals gprobe takes while a command runs: blocked in every thread (call [`block`]
/// before any thread starts) and read by one of its own, so that gprobe can tell a
/// terminal's signal (which the program received too) from one sent to gprobe alone.
pub const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// One signal gprobe received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub signal: i32,
    /// Sent by the kernel (a terminal's Ctrl-C, Ctrl-\ or hang-up, which the whole
    /// foreground process group receives), not by a process to gprobe.
    pub from_terminal: bool,
}

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks [`FORWARDED`] in the calling thread and every thread it starts later, and
/// starts a thread that reads them; they arrive on the returned receiver.
pub fn block() -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<Received>> {
    let set = forwarded_set();
    // SAFETY: blocking signals of this thread with a set we own.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("gprobe-signals".into())
        .spawn(move || loop {
            // SAFETY: sigwaitinfo fills the siginfo we own.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let s = unsafe { libc::sigwaitinfo(&set, &mut info) };
            if s < 0 {
                continue;
            }
            let received = Received {
                signal: s,
                from_terminal: info.si_code == libc::SI_KERNEL,
            };
            if tx.send(received).is_err() {
                return;
            }
        })?;
    Ok(rx)
}

/// Passes a signal on to the program.
pub fn forward(pid: u32, signal: i32) {
    // SAFETY: kill has no memory preconditions; `pid` is our own child, which is not
    // reaped before gprobe stops forwarding.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

/// How long a command may stay held while its probes are attached; past it, it runs on
/// (its first calls may then be missed, which is said).
pub const HOLD_LIMIT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_as_a_shell_reports_them() {
        assert_eq!(ExitedWith::Code(0).status(), 0);
        assert_eq!(ExitedWith::Code(7).status(), 7);
        assert_eq!(ExitedWith::Signal(libc::SIGTERM).status(), 143);
        assert_eq!(ExitedWith::Signal(libc::SIGKILL).status(), 137);
        assert_eq!(
            ExitedWith::Signal(libc::SIGSEGV).to_string(),
            "killed by signal 11 (SIGSEGV)"
        );
    }

    #[test]
    fn programs_are_found_as_a_shell_finds_them() {
        assert_eq!(
            find_program(OsStr::new("sh")).unwrap().file_name().unwrap(),
            "sh"
        );
        assert!(matches!(
            find_program(OsStr::new("no-such-program-anywhere")),
            Err(CommandError::NotFound(_))
        ));
        assert!(matches!(
            find_program(OsStr::new("/nonexistent/prog")),
            Err(CommandError::NotFound(_))
        ));
        assert!(matches!(
            find_program(OsStr::new("/tmp")),
            Err(CommandError::NotExecutable { .. })
        ));
        assert_eq!(
            find_program(OsStr::new("no-such-program-anywhere"))
                .unwrap_err()
                .exit_code(),
            127
        );
    }

    /// The hold itself, without BPF: the child is stopped at its exec (its first
    /// instruction not run) until released, then runs and reports its status.
    #[test]
    fn a_started_program_is_held_at_exec_until_released() {
        // `sh -c 'exit 7'`: if it ran before the release, its status would be there early.
        let argv: Vec<OsString> = ["sh", "-c", "exit 7"].iter().map(|s| s.into()).collect();
        let mut held = start(&argv, ChildStdout::Inherit, |_| {}).expect("start sh");
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", held.pid)).unwrap();
        let state = stat.rsplit(')').next().unwrap().split_whitespace().next();
        assert_eq!(state, Some("t"), "traced-stopped at exec: {stat}");
        let exe = std::fs::read_link(format!("/proc/{}/exe", held.pid)).unwrap();
        assert_ne!(exe, std::env::current_exe().unwrap(), "it has exec'd");
        std::thread::sleep(Duration::from_millis(50));
        assert!(held.exited.try_recv().is_err(), "still held");
        held.release();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got = rt.block_on(held.exited).unwrap().unwrap();
        assert_eq!(got, ExitedWith::Code(7));
    }

    #[test]
    fn a_program_that_cannot_run_is_an_error_before_anything_runs() {
        let dir = std::env::temp_dir().join(format!("gprobe-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("not-exec");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        let argv = vec![f.clone().into_os_string()];
        let e = start(&argv, ChildStdout::Inherit, |_| {}).err().unwrap();
        assert_eq!(e.exit_code(), 126, "{e}");
        // Executable, but not a format the kernel runs: execve fails in the child.
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&f, [0u8; 64]).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = start(&argv, ChildStdout::Inherit, |_| {}).err().unwrap();
        assert!(e.to_string().contains("Exec format error"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
