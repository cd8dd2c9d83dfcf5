//! The engine's [`crate::engine::Resolver`]: plans a batch of probes against one binary,
//! and finds gprobe's own probe points (the dynamic loader's hook, runtime.newproc1).

use super::plan::{plan_probe, ProbePlan};
use super::Binary;
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
                let e = Arc::new(ProbeError::Binary(e));
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
        plan.newproc = true;
        Some(plan)
    }

    fn propagate_plan(
        &mut self,
        path: &std::path::Path,
    ) -> Result<super::propagate::PropagatePlan, String> {
        let bin = Binary::open(path).map_err(|e| e.to_string())?;
        super::propagate::plan(&bin)
    }

    fn loader_hook(&mut self, path: &std::path::Path) -> Option<u64> {
        let bin = Binary::open(path).ok()?;
        let f = bin.find_c_function("_dl_debug_state").ok()?;
        bin.c_entry_offset(&f).ok()
    }
}
