//! gprobe's BPF objects and their programs' names, and how their maps are taken when
//! they are loaded: what the tracer (mod.rs) and the kernel self-test (selftest.rs) both
//! load, apart from the tracer that holds them.

use super::error::MapError;
use super::hooks;
use crate::engine::TraceError;
use crate::kernel::{FeatureName, KernelFeatures};
use aya::Ebpf;
use thiserror::Error;

/// The uprobe object: gprobe_uprobe and the header writer (gprobe.bpf.c).
static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gprobe.bpf.o"));

/// The same built without bpf_loop (GP_NO_BPF_LOOP), for kernels before 5.17: the verifier
/// refuses a program that calls a helper the kernel does not have, and without it Go maps
/// (`Header[...]` captures, the trace context's headers) are not searched.
static BPF_NOLOOP_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gprobe_noloop.bpf.o"));

/// The same built without BPF cookies and atomic fetch too (GP_NO_COOKIE), for kernels
/// before 5.15: a probe is found by its address in the process (agent-ebpf/src/cookie.h,
/// sites.rs).
static BPF_NOCOOKIE_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gprobe_nocookie.bpf.o"));

/// Whether the program is told which probe fired by a cookie on a BPF link (else by the
/// address hit).
pub(super) fn has_cookies(kernel: &KernelFeatures) -> bool {
    kernel.has(FeatureName::BpfCookie) && kernel.has(FeatureName::PerfLink)
}

/// The uprobe object this kernel can load.
pub(super) fn uprobe_object(kernel: &KernelFeatures) -> &'static [u8] {
    if !has_cookies(kernel) {
        BPF_NOCOOKIE_OBJECT
    } else if kernel.has(FeatureName::BpfLoop) {
        BPF_OBJECT
    } else {
        BPF_NOLOOP_OBJECT
    }
}

/// Names the verifier's log of a refused program: `full` for every instruction it checked.
pub const VERIFIER_LOG_ENV: &str = "GPROBE_VERIFIER_LOG";

/// The verifier's log asked for when a program is refused: its message and statistics; the
/// instruction-by-instruction log with GPROBE_VERIFIER_LOG=full. That one runs to
/// megabytes, past the buffer (its end, the reason, cut off), and makes an old kernel
/// verify for minutes (5.10 in an emulated VM: over 5 minutes, against 42 s without it).
pub(super) fn verifier_log_level() -> aya::VerifierLogLevel {
    match std::env::var(VERIFIER_LOG_ENV).as_deref() {
        Ok("full") => aya::VerifierLogLevel::DEBUG | aya::VerifierLogLevel::STATS,
        _ => aya::VerifierLogLevel::STATS,
    }
}

pub(super) const UPROBE_PROG: &str = "gprobe_uprobe";
pub(super) const PROPAGATE_PROG: &str = "gprobe_propagate";
pub(super) const PROPAGATE_DRY_PROG: &str = "gprobe_propagate_dry";

#[derive(Debug, Error)]
pub enum LoadError {
    #[error(
        "loading gprobe's BPF programs failed: {0}. gprobe needs root (CAP_BPF and \
        CAP_PERFMON) and a kernel with BPF ring buffers (5.8+) and BTF"
    )]
    Load(#[source] Box<aya::EbpfError>),
    #[error("loading BPF program {program} failed: {source}")]
    Program {
        program: &'static str,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    #[error(
        "reading kernel BTF from /sys/kernel/btf/vmlinux failed: {0}; gprobe needs a kernel \
        built with CONFIG_DEBUG_INFO_BTF"
    )]
    Btf(#[source] Box<aya::BtfError>),
    #[error("BPF map {map} is missing or has another type: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error("counting possible CPUs failed: {0}")]
    Cpus(#[source] std::io::Error),
    #[error(transparent)]
    Hooks(#[from] hooks::HookError),
    /// A feature gprobe's programs need is missing (attach/features.rs).
    #[error("{0}")]
    Kernel(String),
    /// BPF memory is charged to RLIMIT_MEMLOCK, which could not be raised.
    #[error(transparent)]
    Memlock(#[from] super::features::MemlockError),
}

fn map_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> LoadError {
    move |e| LoadError::Map {
        map,
        source: Box::new(e),
    }
}

pub(super) fn trace_map_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> TraceError {
    move |e| TraceError::Map {
        map,
        source: MapError(Box::new(e)),
    }
}

pub(super) fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, LoadError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf.take_map(name).ok_or(LoadError::Map {
        map: name,
        source: Box::new(aya::maps::MapError::InvalidName {
            name: name.to_string(),
        }),
    })?;
    T::try_from(map).map_err(map_err(name))
}
