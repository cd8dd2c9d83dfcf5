//! The one module that talks to aya: loads gprobe's BPF object, writes probe
//! configurations and the pid filter, attaches and detaches uprobes, reads counters.

pub mod abi;

use abi::{GpPidKey, GpProbeCfg, GpStats, GP_MAX_PROBES};
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope};
use aya::programs::{BtfTracePoint, UProbe};
use aya::{Btf, Ebpf, EbpfLoader};
use std::path::{Path, PathBuf};
use thiserror::Error;

static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gprobe.bpf.o"));

const UPROBE_PROG: &str = "gprobe_uprobe";

#[derive(Debug, Error)]
pub enum AttachError {
    #[error("loading gprobe's BPF programs failed: {0}. gprobe needs root (CAP_BPF and CAP_PERFMON) and a kernel with BPF ring buffers (5.8+) and BTF")]
    Load(#[source] Box<aya::EbpfError>),
    #[error("loading BPF program {program} failed: {source}")]
    Program {
        program: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error("reading kernel BTF from /sys/kernel/btf/vmlinux failed: {0}; gprobe needs a kernel built with CONFIG_DEBUG_INFO_BTF")]
    Btf(#[source] Box<aya::BtfError>),
    #[error("BPF map {map} is missing or has another type: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("counting possible CPUs failed: {0}")]
    Cpus(#[source] std::io::Error),
    #[error("too many probe configurations: at most {GP_MAX_PROBES} entry and return probes can be active at once")]
    Full,
    #[error("attaching a uprobe to {path} at file offset {offset:#x} failed: {source}{hint}")]
    Uprobe {
        path: PathBuf,
        offset: u64,
        hint: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
}

/// Options fixed when the BPF object is loaded.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Size of the events ring buffer in bytes (a power of two, multiple of the page size).
    pub ring_buffer_bytes: u32,
    /// Wake the reader once this many bytes wait (0: the kernel's per-record wake-ups).
    pub wakeup_bytes: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            ring_buffer_bytes: 1 << 20,
            wakeup_bytes: 256 << 10,
        }
    }
}

/// A uprobe attached by [`Tracer::attach`].
#[derive(Debug)]
pub struct Link(UProbeLinkId);

/// Loaded BPF programs and maps. Not `Sync`: callers share it behind a mutex.
pub struct Tracer {
    ebpf: Ebpf,
    probes: Array<MapData, GpProbeCfg>,
    stats: PerCpuArray<MapData, GpStats>,
    pids: BpfHashMap<MapData, GpPidKey, u32>,
    /// FIFO: a freed id is reused last, so records still in the ring buffer decode right.
    free_ids: std::collections::VecDeque<u32>,
}

/// The two ring buffers the tracer's programs write to.
pub struct RingBuffers {
    pub events: RingBuf<MapData>,
    pub procs: RingBuf<MapData>,
}

fn map_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> AttachError {
    move |e| AttachError::Map {
        map,
        source: Box::new(e),
    }
}

impl Tracer {
    /// Loads the programs, attaches the exec/exit tracepoints and returns the ring buffers.
    pub fn load(opts: &LoadOptions) -> Result<(Tracer, RingBuffers), AttachError> {
        let wakeup = opts.wakeup_bytes;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("events", opts.ring_buffer_bytes)
            .override_global("wakeup_bytes", &wakeup, true)
            .load(BPF_OBJECT)
            .map_err(|e| AttachError::Load(Box::new(e)))?;
        let btf = Btf::from_sys_fs().map_err(|e| AttachError::Btf(Box::new(e)))?;
        for (prog, tp) in [
            ("gprobe_exec", "sched_process_exec"),
            ("gprobe_exit", "sched_process_exit"),
        ] {
            let p: &mut BtfTracePoint = ebpf
                .program_mut(prog)
                .and_then(|p| p.try_into().ok())
                .expect("BPF object has its tracepoint programs");
            let wrap = |e| AttachError::Program {
                program: if prog == "gprobe_exec" {
                    "gprobe_exec"
                } else {
                    "gprobe_exit"
                },
                source: Box::new(e),
            };
            p.load(tp, &btf).map_err(wrap)?;
            p.attach().map_err(wrap)?;
        }
        let up: &mut UProbe = ebpf
            .program_mut(UPROBE_PROG)
            .and_then(|p| p.try_into().ok())
            .expect("BPF object has its uprobe program");
        up.load().map_err(|e| AttachError::Program {
            program: UPROBE_PROG,
            source: Box::new(e),
        })?;

        let events = RingBuf::try_from(ebpf.take_map("events").expect("events map"))
            .map_err(map_err("events"))?;
        let procs = RingBuf::try_from(ebpf.take_map("proc_events").expect("proc_events map"))
            .map_err(map_err("proc_events"))?;
        let probes = Array::try_from(ebpf.take_map("probes").expect("probes map"))
            .map_err(map_err("probes"))?;
        let stats = PerCpuArray::try_from(ebpf.take_map("stats").expect("stats map"))
            .map_err(map_err("stats"))?;
        let pids = BpfHashMap::try_from(ebpf.take_map("pids").expect("pids map"))
            .map_err(map_err("pids"))?;
        let tracer = Tracer {
            ebpf,
            probes,
            stats,
            pids,
            free_ids: (0..GP_MAX_PROBES as u32).collect(),
        };
        Ok((tracer, RingBuffers { events, procs }))
    }

    /// Stores a probe configuration and returns its id (the uprobe cookie). Its counters
    /// start from zero.
    pub fn add_config(&mut self, cfg: &GpProbeCfg) -> Result<u32, AttachError> {
        let id = self.free_ids.pop_front().ok_or(AttachError::Full)?;
        self.probes.set(id, cfg, 0).map_err(map_err("probes"))?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| AttachError::Cpus(e))?;
        let zeros = aya::maps::PerCpuValues::try_from(vec![GpStats::default(); cpus])
            .map_err(AttachError::Cpus)?;
        self.stats.set(id, zeros, 0).map_err(map_err("stats"))?;
        Ok(id)
    }

    /// Rewrites a stored configuration.
    pub fn set_config(&mut self, id: u32, cfg: &GpProbeCfg) -> Result<(), AttachError> {
        self.probes.set(id, cfg, 0).map_err(map_err("probes"))
    }

    /// Frees a configuration id once nothing is attached with it.
    pub fn remove_config(&mut self, id: u32) {
        let _ = self.probes.set(id, GpProbeCfg::default(), 0);
        self.free_ids.push_back(id);
    }

    /// Attaches the uprobe program at `file_offset` of `target` for every process running
    /// that file; the pid filter decides whose hits are reported.
    pub fn attach(
        &mut self,
        target: &Path,
        file_offset: u64,
        cfg_id: u32,
    ) -> Result<Link, AttachError> {
        let up: &mut UProbe = self
            .ebpf
            .program_mut(UPROBE_PROG)
            .and_then(|p| p.try_into().ok())
            .expect("uprobe program");
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(file_offset),
            cookie: Some(cfg_id as u64),
        };
        up.attach(point, target, UProbeScope::AllProcesses)
            .map(Link)
            .map_err(|e| {
                let hint = if !target.exists() {
                    " (the file or its process is gone: a process that exits while gprobe attaches is skipped)"
                } else {
                    ""
                };
                AttachError::Uprobe {
                    path: target.to_path_buf(),
                    offset: file_offset,
                    hint,
                    source: Box::new(e),
                }
            })
    }

    pub fn detach(&mut self, link: Link) {
        if let Some(up) = self
            .ebpf
            .program_mut(UPROBE_PROG)
            .and_then(|p| TryInto::<&mut UProbe>::try_into(p).ok())
        {
            if let Err(e) = up.detach(link.0) {
                tracing::warn!("detaching a uprobe failed: {e}");
            }
        }
    }

    /// Lets `tgid`'s hits of spec `spec_id`'s probes through, for the configurations
    /// attached for binary `bin_id` only.
    pub fn allow_pid(&mut self, tgid: u32, spec_id: u32, bin_id: u32) -> Result<(), AttachError> {
        self.pids
            .insert(GpPidKey { tgid, spec_id }, bin_id, 0)
            .map_err(map_err("pids"))
    }

    pub fn forget_pid(&mut self, tgid: u32, spec_id: u32) {
        let _ = self.pids.remove(&GpPidKey { tgid, spec_id });
    }

    /// The configuration's counters summed over CPUs.
    pub fn stats(&self, id: u32) -> GpStats {
        let mut sum = GpStats::default();
        if let Ok(per_cpu) = self.stats.get(&id, 0) {
            for s in per_cpu.iter() {
                sum.hits += s.hits;
                sum.emitted += s.emitted;
                sum.lost += s.lost;
                sum.throttled += s.throttled;
                sum.unpaired += s.unpaired;
            }
        }
        sum
    }
}
