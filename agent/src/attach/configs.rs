//! The probe configurations in the BPF `probes` array: slots handed out by slots.rs and
//! freed (only the kind changes, to FREED, as programs may still read them), the error
//! tables that captures of errors read, and the per-configuration counters summed into a
//! probe's. Kept apart from the attaching in mod.rs: this is the bookkeeping of the maps.

use super::encode::{configs, entry_config, filter_of};
use super::object::trace_map_err;
use super::BpfTracer;
use crate::abi::{self, GpProbeCfg, GpStats, GP_MAX_PROBES};
use crate::engine::{CfgId, ProbeConfig, TraceError};
use crate::plan::ProbePlan;
use crate::stats::{DurationBuckets, KernelCounts};

impl BpfTracer {
    /// The configurations of `plan`'s probe: one per entry group and one for the returns
    /// (ids from the free list, all or none).
    pub(super) fn add_probe_configs(
        &mut self,
        plan: &ProbePlan,
        rate_limit: u32,
    ) -> Result<ProbeConfig, TraceError> {
        self.add_error_table(plan)?;
        let groups = plan.entry_groups();
        let (_, ret) = configs(plan, 0, rate_limit);
        let mut cfgs: Vec<GpProbeCfg> = groups
            .iter()
            .map(|(_, caps)| entry_config(plan, caps, 0, rate_limit))
            .collect();
        cfgs.extend(ret);
        let mut ids = Vec::with_capacity(cfgs.len());
        for c in &cfgs {
            match self.add_config(c) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for id in ids {
                        self.remove_config(id);
                    }
                    return Err(e);
                }
            }
        }
        // func_id pairs entries and returns in BPF: the first entry configuration's handle
        // is unique, over time too (an in-flight stack left by a freed probe is never
        // taken for a later one's).
        for (id, c) in ids.iter().zip(cfgs.iter_mut()) {
            c.func_id = ids[0];
            // The durations of the calls its `when:` leaves out, counted at the return.
            if c.kind == abi::PROBE_RETURN && plan.filter.is_some() {
                let zeros =
                    aya::maps::PerCpuValues::try_from(vec![abi::GpDurations::default(); self.cpus])
                        .expect("one value per possible CPU");
                if let Err(e) = self.left_out.insert(abi::cfg_slot(*id), zeros, 0) {
                    for id in &ids {
                        self.remove_config(*id);
                    }
                    return Err(trace_map_err("left_out")(e));
                }
            }
            // Its `when:` first: a configuration whose predicate is missing keeps every call.
            if let Some(f) = filter_of(plan, c.kind).filter(|_| c.flags & abi::CFG_FILTER != 0) {
                if let Err(e) = self.filters.insert(abi::cfg_slot(*id), f, 0) {
                    for id in &ids {
                        self.remove_config(*id);
                    }
                    return Err(trace_map_err("filters")(e));
                }
            }
            if let Err(e) = self.probes.set(abi::cfg_slot(*id), *c, 0) {
                for id in &ids {
                    self.remove_config(*id);
                }
                return Err(trace_map_err("probes")(e));
            }
        }
        Ok(ProbeConfig {
            entry: ids[0],
            extra_entries: ids[1..groups.len()].to_vec(),
            ret: ret.map(|_| ids[groups.len()]),
        })
    }

    /// Stores `cfg` in a free slot; returns its handle (the slot and its new generation).
    pub(super) fn add_config(&mut self, cfg: &GpProbeCfg) -> Result<CfgId, TraceError> {
        let handle = self
            .slots
            .take()
            .ok_or(TraceError::Full { max: GP_MAX_PROBES })?;
        let slot = abi::cfg_slot(handle);
        let zeros = aya::maps::PerCpuValues::try_from(vec![GpStats::default(); self.cpus])
            .expect("one value per possible CPU");
        let stored = self
            .stats
            .set(slot, zeros, 0)
            .and_then(|_| self.probes.set(slot, cfg, 0));
        if let Err(e) = stored {
            self.slots.untake(handle);
            return Err(trace_map_err("probes")(e));
        }
        Ok(handle)
    }

    /// Adds the error table of `plan`'s binary where a capture of it reads errors with it.
    /// A table is named by its contents and never changes: entries already there are
    /// the same (or, in a 32-bit name collision, another table's, which the decoder
    /// notices: it checks every field against its own table).
    pub(super) fn add_error_table(&mut self, plan: &ProbePlan) -> Result<(), TraceError> {
        let Some(names) = &plan.type_names else {
            return Ok(());
        };
        let uses = plan
            .entry_sites()
            .flat_map(|(_, caps)| caps.iter())
            .chain(&plan.return_captures)
            .any(|c| c.bpf.kind == abi::CAP_ERROR);
        if !uses {
            return Ok(());
        }
        for (k, v) in names.errors().bpf_entries() {
            if self.errtypes.get(&k, 0).is_ok() {
                continue;
            }
            self.errtypes
                .insert(k, v, 0)
                .map_err(trace_map_err("errtypes"))?;
        }
        Ok(())
    }

    pub(super) fn remove_config(&mut self, handle: CfgId) {
        let id = abi::cfg_slot(handle);
        // The links that run this configuration may fire until the detach threads have
        // unregistered them, and a program may be reading it while it is written (an array
        // map's update copies the value in place). Only its kind changes, to FREED: a
        // reader sees either the whole old configuration or FREED. Rewriting the rest too
        // (zeroes) tore it: a program that had read the old kind went on with zeroed
        // captures, and a call was recorded with its argument null (1 in ~30,000 records
        // under spec churn).
        let freed = match self.probes.get(&id, 0) {
            Ok(old) => GpProbeCfg {
                kind: abi::PROBE_FREED,
                ..old
            },
            Err(_) => GpProbeCfg {
                kind: abi::PROBE_FREED,
                ..GpProbeCfg::default()
            },
        };
        let _ = self.probes.set(id, freed, 0);
        // A program still running the freed configuration sees FREED and reads no filter.
        let _ = self.filters.remove(&id);
        let _ = self.left_out.remove(&id);
        self.slots.free(handle);
    }

    /// The durations of the calls left out by the `when:` of return configuration `handle`.
    fn left_out_of(&self, handle: CfgId) -> DurationBuckets {
        let mut sum = DurationBuckets::default();
        if let Ok(per_cpu) = self.left_out.get(&abi::cfg_slot(handle), 0) {
            for d in per_cpu.iter() {
                sum += DurationBuckets(d.n);
            }
        }
        sum
    }

    fn stats_of(&self, handle: CfgId) -> GpStats {
        let id = abi::cfg_slot(handle);
        let mut sum = GpStats::default();
        if let Ok(per_cpu) = self.stats.get(&id, 0) {
            for s in per_cpu.iter() {
                sum.hits += s.hits;
                sum.emitted += s.emitted;
                sum.lost += s.lost;
                sum.throttled += s.throttled;
                sum.unpaired += s.unpaired;
                sum.too_deep += s.too_deep;
                sum.incomplete += s.incomplete;
                sum.filtered += s.filtered;
                sum.undecided += s.undecided;
            }
        }
        sum
    }

    /// The kernel's counters of a probe, summed over its configurations and the CPUs.
    pub(super) fn kernel_counts(&self, cfg: &ProbeConfig) -> KernelCounts {
        let mut k = KernelCounts::default();
        for id in std::iter::once(cfg.entry).chain(cfg.extra_entries.iter().copied()) {
            let e = self.stats_of(id);
            k.hits += e.hits;
            k.emitted += e.emitted;
            k.lost += e.lost;
            k.throttled += e.throttled;
            k.too_deep += e.too_deep;
            k.incomplete += e.incomplete;
            k.filtered += e.filtered;
            k.undecided += e.undecided;
        }
        if let Some(ret) = cfg.ret {
            let r = self.stats_of(ret);
            // The ENTRY of such a call was delivered: it is not a lost call. Unless the
            // probe's `when:` needed that return: the reader then counts the call undecided
            // and delivers nothing of it.
            let decided_here = self
                .probes
                .get(&abi::cfg_slot(ret), 0)
                .is_ok_and(|c| c.flags & abi::CFG_FILTER != 0);
            if !decided_here {
                k.returns_lost = r.lost;
            }
            // Failed its `when:` at the return, or over the rate limit after it: its entry
            // is dropped by the reader.
            k.filtered += r.filtered;
            k.throttled += r.throttled;
            k.undecided += r.undecided;
            k.filtered_durations = self.left_out_of(ret);
        }
        k
    }
}
