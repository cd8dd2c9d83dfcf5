//! `gprobe trace PROBE (--pid PID | --executable PATH | -- CMD)`: the ProbeSpec a one-line
//! probe stands for (`gprobe_crds::oneliner`), with a selector made of the target, which
//! `gprobe run`'s code path then runs (local.rs): same engine, output, summary and exit
//! status.

use crate::check::{self, CheckError};
use crate::command::{find_program, CommandError};
use gprobe_crds::oneliner::{build_spec, parse, OneLiner, OneLinerError, TraceOptions};
use gprobe_crds::{ProbeSpec, Selector};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// What the probe is traced in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One running process (`--pid`).
    Pid(u32),
    /// The processes running a file, or a glob of files (`--executable`).
    Executable(String),
    /// The program gprobe starts (`-- CMD ARGS...`).
    Command(Vec<OsString>),
}

#[derive(Debug, Error)]
pub enum TraceError {
    /// The probe expression or a flag of it is wrong: nothing was started.
    #[error(transparent)]
    Probe(#[from] OneLinerError),
    #[error("--pid {0}: no such process")]
    NoProcess(u32),
    #[error("--pid {pid}: reading its executable: {err}")]
    Executable { pid: u32, err: std::io::Error },
    #[error("--executable {}: {err} (give the program's file, or a glob such as '**/{}')",
        path.display(), path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default())]
    NoFile { path: PathBuf, err: std::io::Error },
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error(transparent)]
    Check(#[from] CheckError),
}

/// True when `s` holds a glob metacharacter (crds/src/glob.rs).
fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The selector of a target: the executable's path (resolved, as /proc/PID/exe shows it),
/// or the glob given.
pub fn selector(target: &Target) -> Result<Selector, TraceError> {
    let executable = match target {
        Target::Pid(pid) => {
            let link = format!("/proc/{pid}/exe");
            match std::fs::read_link(&link) {
                Ok(p) => p.to_string_lossy().into_owned(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(TraceError::NoProcess(*pid))
                }
                Err(err) => return Err(TraceError::Executable { pid: *pid, err }),
            }
        }
        Target::Executable(p) if is_glob(p) => p.clone(),
        Target::Executable(p) => resolved(Path::new(p))?,
        Target::Command(argv) => {
            let found = find_program(argv.first().map(OsString::as_os_str).unwrap_or_default())?;
            resolved(&found)?
        }
    };
    Ok(Selector {
        executable: Some(executable),
        ..Selector::default()
    })
}

/// The file's path with every symlink resolved: what /proc/PID/exe of its processes shows.
fn resolved(path: &Path) -> Result<String, TraceError> {
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|err| TraceError::NoFile {
            path: path.to_path_buf(),
            err,
        })
}

/// The ProbeSpec `gprobe trace PROBE` with these flags stands for, its probe resolved in
/// the target's binary where there is one file to resolve it in: a symbol that is not
/// there or a value that cannot be read is a mistake of the expression, said before
/// anything starts. A mistake in the expression itself is said before anything about the
/// target.
pub fn spec(probe: &str, opts: &TraceOptions, target: &Target) -> Result<ProbeSpec, TraceError> {
    let one = parse(probe)?;
    let sel = selector(target)?;
    let spec = build_spec(probe, opts, sel, None)?;
    let binary = match target {
        Target::Pid(pid) => Some(check::Target::Pid(*pid)),
        Target::Executable(p) if is_glob(p) => None,
        Target::Executable(_) | Target::Command(_) => spec
            .spec
            .selector
            .executable
            .as_ref()
            .map(|p| check::Target::Binary(p.into())),
    };
    if let Some(b) = binary {
        let report = check::check_specs(std::slice::from_ref(&spec), &b)?;
        if let Some(problem) = report.problems.first() {
            return Err(unplaceable(&one, spec.display_name(), problem).into());
        }
    }
    Ok(spec)
}

/// A problem resolving the probe, as a mistake of the expression: the caret goes under the
/// capture the problem quotes, or under the symbol.
fn unplaceable(one: &OneLiner, spec_name: &str, problem: &str) -> OneLinerError {
    let message = problem
        .strip_prefix(spec_name)
        .and_then(|p| p.strip_prefix(" / "))
        .unwrap_or(problem);
    let at = one
        .captures()
        .find(|c| message.contains(&format!("{:?}", c.text)))
        .map_or(one.point.at(), |c| c.at);
    OneLinerError {
        expr: one.expr.clone(),
        at: Some(at),
        flag: None,
        message: message.to_string(),
    }
}

/// A word as a POSIX shell reads it back: quoted unless it is plainly safe.
fn shell_word(w: &str) -> String {
    let safe = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// What `--dry-run` prints: how to run it with `gprobe run` (where the target adds flags),
/// then the ProbeSpec.
pub fn dry_run_yaml(spec: &ProbeSpec, target: &Target) -> String {
    let mut run = String::from("gprobe run FILE.yaml");
    match target {
        Target::Pid(pid) => run.push_str(&format!(" --pid {pid}")),
        Target::Executable(_) => {}
        Target::Command(argv) => {
            run.push_str(" --");
            for a in argv {
                run.push(' ');
                run.push_str(&shell_word(&a.to_string_lossy()));
            }
        }
    }
    let yaml = gprobe_crds::oneliner::spec_yaml(spec);
    format!("# Run it with: {run}\n{yaml}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_is_resolved_in_the_targets_binary() {
        // This test binary has DWARF and a symbol table: a Rust function of it.
        let me = Target::Pid(std::process::id());
        let e = spec("no_such_function_here(x)", &TraceOptions::default(), &me).unwrap_err();
        let TraceError::Probe(e) = e else {
            panic!("{e}")
        };
        assert_eq!(e.at, Some(0), "{e}");
        assert!(e.message.contains("not found"), "{e}");
    }

    #[test]
    fn targets_select_the_resolved_executable() {
        let me = std::fs::canonicalize("/proc/self/exe").unwrap();
        let s = selector(&Target::Pid(std::process::id())).unwrap();
        assert_eq!(s.executable.as_deref(), Some(&*me.to_string_lossy()));
        // /bin is a symlink to usr/bin on merged-/usr systems: resolved either way.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let s = selector(&Target::Executable("/bin/sh".into())).unwrap();
        assert_eq!(s.executable.as_deref(), Some(&*sh.to_string_lossy()));
        let s = selector(&Target::Command(vec!["sh".into(), "-c".into()])).unwrap();
        assert_eq!(s.executable.as_deref(), Some(&*sh.to_string_lossy()));
        let s = selector(&Target::Executable("**/http-client".into())).unwrap();
        assert_eq!(s.executable.as_deref(), Some("**/http-client"));
        let e = selector(&Target::Executable("/no/such/app".into())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--executable /no/such/app: No such file")
                && e.to_string().contains("'**/app'"),
            "{e}"
        );
        assert!(matches!(
            selector(&Target::Pid(u32::MAX)),
            Err(TraceError::NoProcess(_))
        ));
        assert!(matches!(
            selector(&Target::Command(vec!["no-such-program-here".into()])),
            Err(TraceError::Command(CommandError::NotFound(_)))
        ));
    }

    /// The spec, not resolved in the target (its binary has no such function).
    fn unresolved(probe: &str, t: &Target) -> ProbeSpec {
        build_spec(probe, &TraceOptions::default(), selector(t).unwrap(), None).unwrap()
    }

    #[test]
    fn dry_run_says_how_to_run_the_same() {
        let t = Target::Command(vec!["sh".into(), "-c".into(), "echo 'hi'".into()]);
        let s = unresolved("main.f(x) -> r0", &t);
        let text = dry_run_yaml(&s, &t);
        assert!(
            text.starts_with("# Run it with: gprobe run FILE.yaml -- sh -c 'echo '\\''hi'\\'''\n"),
            "{text}"
        );
        let back = gprobe_crds::load_specs(&text, "dry.yaml").unwrap();
        assert_eq!(back[0].spec, s.spec);
        let pid = Target::Pid(std::process::id());
        let text = dry_run_yaml(&unresolved("main.f()", &pid), &pid);
        assert!(
            text.starts_with(&format!(
                "# Run it with: gprobe run FILE.yaml --pid {}\n",
                std::process::id()
            )),
            "{text}"
        );
    }
}
