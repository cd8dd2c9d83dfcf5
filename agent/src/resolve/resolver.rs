//! The engine's [`crate::engine::Resolver`]: plans a batch of probes against one binary,
//! and finds gprobe's own probe points (the dynamic loader's hook, runtime.newproc1).

use super::planner::plan_probe;
use super::Binary;
use crate::plan::ProbePlan;
use gprobe_crds::Probe;

/// Binary resolution as the engine asks for it: opens the file once per batch of probes.
#[derive(Debug, Default)]
pub struct BinaryResolver;

impl crate::engine::Resolver for BinaryResolver {
    fn plan(
        &mut self,
        path: &std::path::Path,
        shown: &std::path::Path,
        probes: &[crate::engine::PlanRequest<'_>],
    ) -> Vec<Result<ProbePlan, std::sync::Arc<crate::engine::ProbeError>>> {
        use crate::engine::ProbeError;
        use std::sync::Arc;
        match Binary::open_as(path, shown) {
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
                    plan_probe(&bin, r.probe, r.limits.max_string_bytes)
                        .map_err(|e| Arc::new(ProbeError::Plan(e)))
                })
                .collect(),
        }
    }

    fn newproc_plan(&mut self, path: &std::path::Path) -> Option<ProbePlan> {
        let bin = Binary::open(path).ok()?;
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
        let mut plan = plan_probe(&bin, &probe, 0).ok().or_else(|| {
            probe.signature =
                Some("func(fn uintptr, callergp uintptr, callerpc uintptr) uintptr".into());
            plan_probe(&bin, &probe, 0).ok()
        })?;
        plan.role = crate::plan::Role::Newproc;
        Some(plan)
    }

    fn propagate_plan(
        &mut self,
        path: &std::path::Path,
    ) -> Result<super::propagate::PropagatePlan, super::propagate::PropagateError> {
        let bin = Binary::open(path).map_err(|e| super::propagate::PropagateError::Open {
            source: Box::new(e),
        })?;
        super::propagate::plan(&bin)
    }

    fn through_gone_process(&self, path: &std::path::Path) -> bool {
        proc_pid(path).is_some_and(|pid| !crate::discover::procs::process_runs(pid))
    }

    fn loader_hook(&mut self, path: &std::path::Path) -> Option<u64> {
        let bin = Binary::open(path).ok()?;
        let f = bin.find_c_function("_dl_debug_state").ok()?;
        bin.c_entry_offset(&f).ok()
    }
}

/// True when `path` could not be opened because it leads through a process that exited
/// (`/proc/PID/exe`, `/proc/PID/root/...`): the file itself may be fine, and readable
/// through another process that runs it, so this is no error of the binary's.
fn read_through_gone_process(path: &std::path::Path, e: &super::ResolveError) -> bool {
    let super::ResolveError::Io { source, .. } = e else {
        return false;
    };
    let gone_kind =
        source.kind() == std::io::ErrorKind::NotFound || source.raw_os_error() == Some(libc::ESRCH);
    gone_kind && proc_pid(path).is_some_and(|pid| !crate::discover::procs::process_runs(pid))
}

/// The pid of a `/proc/PID/...` path.
fn proc_pid(path: &std::path::Path) -> Option<u32> {
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
