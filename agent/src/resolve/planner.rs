//! Turns one probe of a ProbeSpec and a resolved binary into a [`ProbePlan`] (uprobe
//! offsets and BPF captures for the kernel side, names and types for the decoder), whatever
//! the target kind: [`plan_probe`] dispatches to the USDT planner when the probe names
//! `usdt`, to Go when the binary is Go and the symbol is a Go function, else to C; each
//! target kind's module plans the probe (`go/plan.rs`, `c/plan.rs`, `usdt/plan.rs`). The
//! plan itself is `crate::plan`.

use gprobe_crds::Probe;

use super::error::PlanError;
use super::sizes::check_sizes;
use super::{c, go, usdt, when, Binary, ResolveError, TargetKind};
use crate::plan::ProbePlan;

/// Plans `probe` against `bin`: a USDT probe when it names `usdt`; a Go function when the
/// binary is Go and the symbol is one of its Go functions; else a C function (of any
/// binary, cgo's C functions of a Go binary included).
pub fn plan_probe(
    bin: &Binary,
    probe: &Probe,
    max_string_bytes: u32,
) -> Result<ProbePlan, PlanError> {
    let mut plan = plan_when(bin, probe, max_string_bytes)?;
    plan.sample_bound = probe.sample.map_or(0, crate::plan::sample_bound);
    Ok(plan)
}

/// Plans `probe` with its `when:`, if it has one.
fn plan_when(bin: &Binary, probe: &Probe, max_string_bytes: u32) -> Result<ProbePlan, PlanError> {
    let Some(w) = when::parse(probe)? else {
        return plan_kind(bin, probe, max_string_bytes);
    };
    // The values the terms read are planned as captures: hidden ones for those the spec
    // does not capture.
    let hidden = when::hidden(probe, &w);
    let mut plan = match plan_kind(bin, &when::with_hidden(probe, &hidden), max_string_bytes) {
        Ok(plan) => plan,
        Err(e) => {
            // The spec's own captures fail alone: say that. Else name the term whose value
            // cannot be read.
            plan_kind(bin, probe, max_string_bytes)?;
            for (i, h) in hidden.iter().enumerate() {
                if let Err(e) = plan_kind(
                    bin,
                    &when::with_hidden(probe, &hidden[..=i]),
                    max_string_bytes,
                ) {
                    return Err(PlanError::WhenTerm {
                        symbol: probe.point(),
                        term: when::term_reading(&w, h),
                        reason: {
                            let text = e.to_string();
                            let own = format!("{}: ", probe.point());
                            text.strip_prefix(&own).map_or(text.clone(), str::to_string)
                        },
                    });
                }
            }
            return Err(e);
        }
    };
    when::compile_into(&mut plan, &w, &hidden, probe)?;
    Ok(plan)
}

/// Plans `probe` against `bin` by its target kind (see [`plan_probe`]).
fn plan_kind(bin: &Binary, probe: &Probe, max_string_bytes: u32) -> Result<ProbePlan, PlanError> {
    let is_usdt = probe.usdt.as_deref().is_some_and(|u| !u.trim().is_empty());
    let plan = if is_usdt && probe.symbol.trim().is_empty() {
        usdt::plan::plan(bin, probe, max_string_bytes)?
    } else if bin.kind() == TargetKind::Go {
        match bin.find_function(&probe.symbol) {
            Ok(func) => go::plan::plan(bin, probe, func, max_string_bytes)?,
            // A C function that cgo linked in is in the ELF symbol tables only.
            Err(e @ ResolveError::NotFound { .. }) => match bin.find_c_function(&probe.symbol) {
                Ok(func) => c::plan::plan(bin, probe, func, max_string_bytes)?,
                Err(_) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    } else {
        let func = bin.find_c_function(&probe.symbol)?;
        c::plan::plan(bin, probe, func, max_string_bytes)?
    };
    if probe.propagate && plan.role != crate::plan::Role::Propagating {
        return Err(PlanError::PropagateNotGo {
            symbol: plan.symbol,
        });
    }
    check_sizes(
        &plan.symbol,
        plan.entry_sites()
            .map(|(_, c)| c)
            .chain(std::iter::once(plan.return_captures.as_slice())),
    )?;
    Ok(plan)
}
