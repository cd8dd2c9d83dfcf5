//! The maps of the process hooks (procs.bpf.c, attach/hooks.rs) as the engine changes
//! them: which processes are held and resuming them, the executables and names whose exec
//! is held, the traced processes whose children are held at fork, the hooks' counters and
//! the lease that keeps holds valid while this agent lives.

use super::object::{take, trace_map_err, LoadError};
use super::pins;
use crate::abi::{self, GpControl, GpHold, GpProcStats, GP_COMM_LEN};
use crate::engine::tracer::{Held, Hold, HoldKind, ProcCounts};
use crate::engine::TraceError;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::Ebpf;
use std::collections::BTreeSet;

pub(super) struct HoldMaps {
    control: Array<MapData, GpControl>,
    watch_ino: BpfHashMap<MapData, u64, u8>,
    watch_comm: BpfHashMap<MapData, [u8; GP_COMM_LEN], u8>,
    held: BpfHashMap<MapData, u32, GpHold>,
    traced: BpfHashMap<MapData, u32, u8>,
    proc_stats: PerCpuArray<MapData, GpProcStats>,
    /// The pin of `held`, removed at a clean stop.
    pin: Option<pins::HeldPin>,
    /// Processes that agents which died left held, until the engine takes them.
    orphans: Vec<pins::Orphan>,
}

impl HoldMaps {
    pub(super) fn take(
        ebpf: &mut Ebpf,
        pin: Option<pins::HeldPin>,
        orphans: Vec<pins::Orphan>,
    ) -> Result<Self, LoadError> {
        Ok(Self {
            control: take(ebpf, "control")?,
            watch_ino: take(ebpf, "watch_ino")?,
            watch_comm: take(ebpf, "watch_comm")?,
            held: take(ebpf, "held")?,
            traced: take(ebpf, "traced")?,
            proc_stats: take(ebpf, "proc_stats")?,
            pin,
            orphans,
        })
    }

    pub(super) fn resume(&mut self, pid: u32, hold: Hold) {
        if !hold.adopted {
            // Only a hold still in the map is ended: its entry is removed first, and the
            // process, stopped until then, cannot be held anew before it runs.
            match self.held.get(&pid, 0) {
                Ok(h) if h.since_ns == hold.since_ns => {
                    if self.held.remove(&pid).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
        // Another gprobe holding it too resumes it when it lets go (pins::held_by_another).
        if self.pin.as_ref().is_some_and(|p| p.held_by_another(pid)) {
            tracing::debug!("pid {pid} is held by another gprobe too: it resumes it");
            return;
        }
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
    }

    pub(super) fn held(&self) -> Vec<Held> {
        self.held
            .iter()
            .filter_map(Result::ok)
            .map(|(pid, h)| Held {
                pid,
                hold: Hold::new(h.since_ns),
                kind: hold_kind(&h),
            })
            .collect()
    }

    pub(super) fn take_adopted(&mut self) -> Vec<Held> {
        std::mem::take(&mut self.orphans)
            .into_iter()
            .map(|o| Held {
                pid: o.pid,
                hold: Hold {
                    since_ns: o.hold.since_ns,
                    adopted: true,
                },
                kind: hold_kind(&o.hold),
            })
            .collect()
    }

    pub(super) fn set_traced(&mut self, pid: u32, traced: bool) {
        if traced {
            if let Err(e) = self.traced.insert(pid, 1, 0) {
                tracing::debug!("marking pid {pid} as traced: {e}; its children are not held");
            }
        } else {
            let _ = self.traced.remove(&pid);
        }
    }

    pub(super) fn proc_counts(&self) -> ProcCounts {
        let mut c = ProcCounts::default();
        if let Ok(per_cpu) = self.proc_stats.get(&0, 0) {
            for s in per_cpu.iter() {
                c.lost += s.lost;
                c.hold_failed += s.hold_failed;
                c.released += s.released;
            }
        }
        c
    }

    pub(super) fn set_exec_watch(
        &mut self,
        inos: &BTreeSet<u64>,
        comms: &BTreeSet<String>,
    ) -> Result<(), TraceError> {
        let old_inos: Vec<u64> = self.watch_ino.keys().filter_map(Result::ok).collect();
        for k in old_inos.iter().filter(|k| !inos.contains(k)) {
            let _ = self.watch_ino.remove(k);
        }
        for k in inos {
            self.watch_ino
                .insert(k, 1, 0)
                .map_err(trace_map_err("watch_ino"))?;
        }
        let wanted: BTreeSet<[u8; GP_COMM_LEN]> = comms.iter().map(|c| comm_key(c)).collect();
        let old: Vec<[u8; GP_COMM_LEN]> = self.watch_comm.keys().filter_map(Result::ok).collect();
        for k in old.iter().filter(|k| !wanted.contains(*k)) {
            let _ = self.watch_comm.remove(k);
        }
        for k in &wanted {
            self.watch_comm
                .insert(k, 1, 0)
                .map_err(trace_map_err("watch_comm"))?;
        }
        Ok(())
    }

    pub(super) fn keep_holding(&mut self, until_ns: u64) {
        let _ = self.control.set(
            0,
            GpControl {
                holds_until_ns: until_ns,
                agent: if until_ns == 0 { 0 } else { std::process::id() },
                _pad: 0,
            },
            0,
        );
    }

    /// Ends the lease and resumes every process held by this agent or taken over from
    /// one that died; removes the pin (a clean stop).
    pub(super) fn release_all(&mut self) {
        self.keep_holding(0);
        for h in self.held() {
            self.resume(h.pid, h.hold);
        }
        for h in self.take_adopted() {
            self.resume(h.pid, h.hold);
        }
        if let Some(pin) = self.pin.take() {
            pin.remove();
        }
    }
}

fn comm_key(name: &str) -> [u8; GP_COMM_LEN] {
    let mut k = [0u8; GP_COMM_LEN];
    let b = name.as_bytes();
    let n = b.len().min(GP_COMM_LEN - 1);
    k[..n].copy_from_slice(&b[..n]);
    k
}

/// What a hold's kind says.
fn hold_kind(h: &GpHold) -> HoldKind {
    match h.kind {
        abi::HOLD_FORK => HoldKind::Fork { ppid: h.ppid },
        abi::HOLD_LOADER => HoldKind::Loader,
        _ => HoldKind::Exec,
    }
}
