//! The kernel side of overhead budgets (engine/budget.rs): what each (process, spec) pair's
//! probes have cost, by budget slot, and the slots whose return probes were taken off.

use super::object::{take, LoadError};
use aya::maps::{Array, MapData, PerCpuArray, PerCpuValues};
use aya::Ebpf;

pub(super) struct BudgetMaps {
    /// Estimated ns of traps, summed over the CPUs.
    spent: PerCpuArray<MapData, u64>,
    /// Non-zero: the slot's return probes are off (gprobe.bpf.c reads it at every hit).
    returns_off: Array<MapData, u32>,
}

impl BudgetMaps {
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<Self, LoadError> {
        Ok(Self {
            spent: take(ebpf, "budget")?,
            returns_off: take(ebpf, "returns_off")?,
        })
    }

    pub(super) fn spent(&self, slot: u32) -> u64 {
        self.spent
            .get(&slot, 0)
            .map(|per_cpu| per_cpu.iter().sum())
            .unwrap_or(0)
    }

    /// Back to nothing spent, returns on: the slot is given to another pair.
    pub(super) fn clear(&mut self, slot: u32) {
        if let Ok(cpus) = aya::util::nr_cpus() {
            if let Ok(zeros) = PerCpuValues::try_from(vec![0u64; cpus]) {
                let _ = self.spent.set(slot, zeros, 0);
            }
        }
        let _ = self.returns_off.set(slot, 0, 0);
    }

    pub(super) fn set_returns_off(
        &mut self,
        slot: u32,
        off: bool,
    ) -> Result<(), aya::maps::MapError> {
        self.returns_off.set(slot, u32::from(off), 0)
    }
}
