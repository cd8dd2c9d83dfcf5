//! The BPF configurations (`GpProbeCfg`, the `probes` map's values) of a probe plan: one
//! per entry group ([`crate::plan::ProbePlan::entry_groups`]) and one for the returns.
//! What the BPF program reads of them (gprobe.h, `struct gp_probe_cfg`):
//! - `kind`: `PROBE_ENTRY` when the returns are probed (the entry opens a call the return
//!   closes), `PROBE_CALL` when not (a record per hit), `PROBE_RETURN`.
//! - `flags`: the shape of the records ([`record_shape`]: the in-place fast paths),
//!   `CFG_PAIR_BY_THREAD` for C and USDT (entries and returns keyed by thread, not by
//!   goroutine), `CFG_PROPAGATE` for a probe that propagates its spans, `CFG_NEWPROC` for
//!   gprobe's own runtime.newproc1 probe.
//! - `jcc`: 1 + the condition of Go's stack-check jump when the entry site is that jump.
//! - `cost_ns`: what a hit costs the process, for its overhead budget.
//! - `aux`: a propagating entry's header capture (its index + 1).

use crate::abi::{self, GpProbeCfg};
use crate::plan::{CapturePlan, Pairing, ProbePlan, Role};
use crate::resolve::sites;

/// BPF configurations for the entry (at `entry_offset`) and (if any) the return uprobes.
pub fn configs(
    plan: &ProbePlan,
    func_id: u32,
    rate_limit: u32,
) -> (GpProbeCfg, Option<GpProbeCfg>) {
    let entry = config(
        plan,
        entry_kind(plan),
        &plan.entry_captures,
        func_id,
        rate_limit,
    );
    let ret = plan.has_return().then(|| {
        config(
            plan,
            abi::PROBE_RETURN,
            &plan.return_captures,
            func_id,
            rate_limit,
        )
    });
    (entry, ret)
}

/// The BPF configuration of one entry group's captures (from [`ProbePlan::entry_groups`]).
pub fn entry_config(
    plan: &ProbePlan,
    caps: &[CapturePlan],
    func_id: u32,
    rate_limit: u32,
) -> GpProbeCfg {
    config(plan, entry_kind(plan), caps, func_id, rate_limit)
}

/// The configuration of one kind of uprobe with `caps`.
fn config(
    plan: &ProbePlan,
    kind: u8,
    caps: &[CapturePlan],
    func_id: u32,
    rate_limit: u32,
) -> GpProbeCfg {
    let mut cfg = GpProbeCfg {
        func_id,
        kind,
        n_captures: caps.len() as u8,
        // Where the calls are kept: the entry; or, for a `when:` decided at the return
        // (a result, the duration), the return, so that the limit counts kept calls.
        rate_limit: if (kind == abi::PROBE_RETURN) == filter_of(plan, abi::PROBE_RETURN).is_some() {
            rate_limit
        } else {
            0
        },
        flags: if has_filter(plan, kind) {
            // Decided on the record assembled in the scratch buffer (emit_any).
            abi::CFG_FILTER
        } else {
            record_shape(caps)
        } | if plan.pairing == Pairing::Thread {
            abi::CFG_PAIR_BY_THREAD
        } else {
            0
        } | if plan.role == Role::Propagating {
            abi::CFG_PROPAGATE
        } else {
            0
        } | if plan.role == Role::Newproc {
            abi::CFG_NEWPROC
        } else {
            0
        } | if kind == abi::PROBE_ENTRY
            && !has_filter(plan, kind)
            && has_filter(plan, abi::PROBE_RETURN)
        {
            // Nothing at the entry decides its `when:`: without the return, nothing does.
            abi::CFG_WHEN_RETURN
        } else {
            0
        },
        // What a hit costs the process, for its overhead budget (0: not known).
        cost_ns: {
            let class = if kind == abi::PROBE_RETURN {
                plan.costs.ret
            } else {
                Some(plan.costs.entry)
            };
            match class.map_or(0, |c| c.cost_ns(sites::kernel())) {
                0 => 0,
                trap => trap + sites::PROGRAM_NS,
            }
        },
        // Only the entry site can be the stack check's jump.
        jcc: match (kind, plan.entry_jcc) {
            (abi::PROBE_ENTRY | abi::PROBE_CALL, Some(cc)) => cc + 1,
            _ => 0,
        },
        // A propagating entry finds the caller's traceparent through its header capture.
        aux: caps
            .iter()
            .position(|c| plan.role == Role::Propagating && c.bpf.kind == abi::CAP_HEADER)
            .map_or(0, |i| i as u64 + 1),
        // The traces a propagating entry starts are sampled in BPF, for its requests.
        sample_bound: if plan.role == Role::Propagating && kind != abi::PROBE_RETURN {
            plan.sample_bound
        } else {
            0
        },
        ..Default::default()
    };
    for (slot, c) in cfg.caps.iter_mut().zip(caps) {
        *slot = c.bpf;
    }
    cfg
}

/// Whether the configurations of `kind` have a `when:` to decide (`plan.filter`).
fn has_filter(plan: &ProbePlan, kind: u8) -> bool {
    filter_of(plan, kind).is_some()
}

/// The `when:` of a configuration of `kind` of `plan`, as map `filters` holds it.
pub fn filter_of(plan: &ProbePlan, kind: u8) -> Option<abi::GpFilter> {
    let f = plan.filter?;
    if kind == abi::PROBE_RETURN {
        f.ret
    } else {
        f.entry
    }
}

/// The kind of the entry configurations: ENTRY when returns are probed, else CALL.
fn entry_kind(plan: &ProbePlan) -> u8 {
    if plan.has_return() {
        abi::PROBE_ENTRY
    } else {
        abi::PROBE_CALL
    }
}

/// The flags that let the BPF program write a configuration's records in place in the ring
/// buffer: captures all words (one record size), or a single string/bytes (a few sizes).
fn record_shape(caps: &[CapturePlan]) -> u8 {
    // The fast paths read flat locations only: a field path (CAPF_PATH) is walked by the
    // general writer (emit_any), like the kinds they do not know.
    let flat = |c: &CapturePlan, kind: u8| c.bpf.kind == kind && c.bpf.flags & abi::CAPF_PATH == 0;
    match caps {
        [c] if flat(c, abi::CAP_BYTES) => abi::CFG_ONE_BYTES,
        _ if caps.iter().all(|c| flat(c, abi::CAP_WORD)) => abi::CFG_WORDS,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
