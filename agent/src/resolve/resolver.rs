//! The engine's [`crate::engine::Resolver`]: plans a batch of probes against one binary,
//! and finds gprobe's own probe points (the dynamic loader's hook, runtime.newproc1).

use std::path::{Path, PathBuf};

use super::planner::plan_probe;
use super::{Binary, ResolveError};
use crate::plan::ProbePlan;
use gprobe_crds::Probe;

/// Files kept open at once: the executable and the dynamic loader of a process, with room
/// for the libraries its probes name.
const KEEP: usize = 4;

/// Binary resolution as the engine asks for it. A file is opened and mapped once for all
/// that one resolution asks of it (its probes' plans, then gprobe's own probes on it), and
/// unmapped at [`crate::engine::Resolver::release`], when the engine has done with it.
#[derive(Debug, Default)]
pub struct BinaryResolver {
    /// The files opened since the last release, the most recently used last.
    open: Vec<Opened>,
    /// How many times a file was opened.
    opens: usize,
}

/// An opened file and what it was when opened.
#[derive(Debug)]
struct Opened {
    /// The path it was opened at.
    path: PathBuf,
    /// `None`: it changed while it was opened; never reused.
    id: Option<FileId>,
    bin: Binary,
}

/// What tells a file from the one it replaced at the same path (a new inode) or from its
/// own earlier contents (rewritten: another size or mtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(path: &Path) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
        })
    }
}

impl BinaryResolver {
    /// The file at `path`, opened now or earlier in this resolution. `shown`: what messages
    /// call it (a binary opened under another name is not reused); `None`: whatever name it
    /// has (the caller names it in nothing it returns), `path` when opened now.
    fn binary(&mut self, path: &Path, shown: Option<&Path>) -> Result<&Binary, ResolveError> {
        let id = FileId::of(path);
        let found = self.open.iter().position(|o| {
            id.is_some() && o.id == id && o.path == path && shown.is_none_or(|s| o.bin.path() == s)
        });
        let opened = match found {
            Some(i) => self.open.remove(i),
            None => {
                self.opens += 1;
                let bin = Binary::open_as(path, shown.unwrap_or(path))?;
                // Stat before and after: a file replaced meanwhile may not be what was mapped.
                let same = id.is_some() && FileId::of(path) == id;
                if self.open.len() >= KEEP {
                    self.open.remove(0);
                }
                Opened {
                    path: path.to_path_buf(),
                    id: id.filter(|_| same),
                    bin,
                }
            }
        };
        self.open.push(opened);
        Ok(&self.open[self.open.len() - 1].bin)
    }
}

impl crate::engine::Resolver for BinaryResolver {
    fn plan(
        &mut self,
        path: &Path,
        shown: &Path,
        probes: &[crate::engine::PlanRequest<'_>],
    ) -> Vec<Result<ProbePlan, std::sync::Arc<crate::engine::ProbeError>>> {
        use crate::engine::ProbeError;
        use std::sync::Arc;
        match self.binary(path, Some(shown)) {
            Err(e) => {
                let e = Arc::new(if read_through_gone_process(path, &e) {
                    ProbeError::Trace(crate::engine::error::TraceError::ProcessGone)
                } else {
                    ProbeError::Binary(e)
                });
                probes.iter().map(|_| Err(e.clone())).collect()
            }
            Ok(bin) => probes
                .iter()
                .map(|r| {
                    plan_probe(bin, r.probe, r.limits.max_string_bytes)
                        .map_err(|e| Arc::new(ProbeError::Plan(e)))
                })
                .collect(),
        }
    }

    fn newproc_plan(&mut self, path: &Path) -> Option<ProbePlan> {
        let bin = self.binary(path, None).ok()?;
        if !bin.is_go() {
            return None;
        }
        let mut probe = Probe {
            symbol: "runtime.newproc1".into(),
            capture: vec!["callergp".into(), "r0".into()],
            ..Default::default()
        };
        // DWARF names the parameters where the binary has it; the first three (and the
        // result) are the same from Go 1.19 to 1.27: (fn *funcval, callergp *g, callerpc
        // uintptr) *g, later ones added after them.
        let mut plan = plan_probe(bin, &probe, 0).ok().or_else(|| {
            probe.signature =
                Some("func(fn uintptr, callergp uintptr, callerpc uintptr) uintptr".into());
            plan_probe(bin, &probe, 0).ok()
        })?;
        plan.role = crate::plan::Role::Newproc;
        Some(plan)
    }

    fn propagate_plan(
        &mut self,
        path: &Path,
    ) -> Result<super::propagate::PropagatePlan, super::propagate::PropagateError> {
        use super::propagate::{plan, PropagateError};
        let open = |e| PropagateError::Open {
            source: Box::new(e),
        };
        let bin = self.binary(path, None).map_err(open)?;
        match plan(bin) {
            // A planning error names the file: by `path`, as when it is opened for this.
            Err(PropagateError::Plan { .. }) if bin.path() != path => {
                plan(self.binary(path, Some(path)).map_err(open)?)
            }
            r => r,
        }
    }

    fn through_gone_process(&self, path: &Path) -> bool {
        proc_pid(path).is_some_and(|pid| !crate::discover::procs::process_runs(pid))
    }

    fn loader_hook(&mut self, path: &Path) -> Option<u64> {
        let bin = self.binary(path, None).ok()?;
        let f = bin.find_c_function("_dl_debug_state").ok()?;
        bin.c_entry_offset(&f).ok()
    }

    fn release(&mut self) {
        self.open.clear();
    }
}

/// True when `path` could not be opened because it leads through a process that exited
/// (`/proc/PID/exe`, `/proc/PID/root/...`): the file itself may be fine, and readable
/// through another process that runs it, so this is no error of the binary's.
fn read_through_gone_process(path: &Path, e: &ResolveError) -> bool {
    let super::ResolveError::Io { source, .. } = e else {
        return false;
    };
    let gone_kind =
        source.kind() == std::io::ErrorKind::NotFound || source.raw_os_error() == Some(libc::ESRCH);
    gone_kind && proc_pid(path).is_some_and(|pid| !crate::discover::procs::process_runs(pid))
}

/// The pid of a `/proc/PID/...` path.
fn proc_pid(path: &Path) -> Option<u32> {
    path.strip_prefix("/proc")
        .ok()?
        .iter()
        .next()?
        .to_str()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn not_found(path: &str) -> crate::resolve::ResolveError {
        crate::resolve::ResolveError::Io {
            path: path.into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
    }

    use crate::engine::Resolver;

    /// Whether this process maps `path` now.
    fn mapped(path: &Path) -> bool {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|l| l.contains(&*path.to_string_lossy()))
    }

    #[test]
    fn a_file_is_opened_once_per_resolution_and_let_go_at_its_release() {
        let dir = std::env::temp_dir().join(format!("gprobe-resolver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ld = dir.join("ld-linux-x86-64.so.2");
        std::fs::copy("/lib64/ld-linux-x86-64.so.2", &ld).unwrap();
        let mut r = BinaryResolver::default();
        let hook = r.loader_hook(&ld);
        assert!(hook.is_some(), "no _dl_debug_state in {}", ld.display());
        assert!(mapped(&ld));
        // The same file again, for all gprobe asks of it: not reopened.
        assert_eq!(r.loader_hook(&ld), hook);
        assert!(r.newproc_plan(&ld).is_none(), "not Go");
        let planned = r.plan(&ld, Path::new("/lib/ld.so"), &[]);
        assert!(planned.is_empty());
        assert_eq!(r.opens, 2, "one open, and one for another name in messages");
        assert_eq!(r.loader_hook(&ld), hook);
        assert_eq!(r.opens, 2);
        // Released: nothing is held or mapped, and the next resolution opens it anew.
        r.release();
        assert!(r.open.is_empty());
        assert!(!mapped(&ld));
        assert_eq!(r.loader_hook(&ld), hook);
        assert_eq!(r.opens, 3);
        // Rewritten in place (another size): reopened.
        let mut bytes = std::fs::read(&ld).unwrap();
        bytes.extend_from_slice(&[0; 16]);
        std::fs::write(&ld, &bytes).unwrap();
        assert_eq!(r.loader_hook(&ld), hook);
        assert_eq!(r.opens, 4);
        // Replaced by another file (another inode) of the same size and times: reopened.
        let other = dir.join("other");
        std::fs::write(&other, &bytes).unwrap();
        let times = std::fs::metadata(&ld).unwrap().modified().unwrap();
        std::fs::File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(times)
            .unwrap();
        std::fs::rename(&other, &ld).unwrap();
        assert_eq!(r.loader_hook(&ld), hook);
        assert_eq!(r.opens, 5);
        assert_eq!(r.loader_hook(&ld), hook);
        assert_eq!(r.opens, 5);
        r.release();
        assert!(!mapped(&ld));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_read_through_an_exited_process_is_not_the_binarys_fault() {
        // A child that has exited and been reaped: its pid names no process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let through = format!("/proc/{pid}/root/app/bin");
        assert!(read_through_gone_process(
            Path::new(&through),
            &not_found(&through)
        ));
        // Through a live process (this one), or not through a process at all, it is.
        let me = format!("/proc/{}/root/no/such/file", std::process::id());
        assert!(!read_through_gone_process(Path::new(&me), &not_found(&me)));
        assert!(!read_through_gone_process(
            Path::new("/no/such/file"),
            &not_found("/no/such/file")
        ));
        let denied = crate::resolve::ResolveError::Io {
            path: through.clone().into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert!(!read_through_gone_process(Path::new(&through), &denied));
    }
}
