//! The attacher's errors that the engine's `TraceError` carries as its sources. A leaf: it
//! imports nothing of gprobe, so the engine can name these without depending on attach/
//! (which depends on the engine's tracer boundary).

use std::num::ParseIntError;
use std::path::PathBuf;
use std::sync::Arc;

/// Why the uprobe PMU's description in sysfs could not be read. Clone: the first answer is
/// kept for the process's life.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PmuError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: ParseIntError,
    },
}

/// Why a uprobe could not be opened or given its program.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("the kernel's uprobe PMU is not available ({0}); gprobe needs CONFIG_UPROBE_EVENTS")]
    Pmu(#[source] PmuError),
    #[error(
        "USDT semaphores need the kernel's uprobe reference counters (Linux 4.20+), which \
        this kernel does not describe in sysfs"
    )]
    NoRefCtr,
    #[error("perf_event_open of a uprobe failed: {0}")]
    Open(#[source] std::io::Error),
    #[error("attaching the BPF program to the uprobe failed (bpf_link_create): {0}")]
    Link(#[source] std::io::Error),
    #[error("attaching the BPF program to the uprobe failed (PERF_EVENT_IOC_SET_BPF): {0}")]
    SetBpf(#[source] std::io::Error),
    #[error(transparent)]
    Site(SiteError),
    #[error(
        "a C function's return cannot be probed on this kernel: without BPF cookies (Linux \
        5.15) gprobe finds a probe by the address hit, and a return probe fires at its \
        caller's; trace the entry alone (no `result` or latency of a C function)"
    )]
    ReturnWithoutCookie,
}

/// Why the kernel refused a BPF map operation (aya's error, behind the project's type).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct MapError(pub(super) Box<aya::maps::MapError>);

/// Why the kernel refused the header writer (gprobe_propagate). Clone: the first answer is
/// kept for the tracer's life.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriterRefused {
    /// The kernel gives bpf_probe_write_user only to programs loaded with CAP_SYS_ADMIN
    /// (kernel/trace/bpf_trace.c), which gprobe's effective set lacks.
    #[error(
        "the kernel lets only programs loaded with CAP_SYS_ADMIN write to a process's memory \
         (bpf_probe_write_user), and gprobe runs without it: give gprobe CAP_SYS_ADMIN (the \
         Helm chart's agent.traceparentWrites: true)"
    )]
    NoSysAdmin,
    /// Refused although gprobe has CAP_SYS_ADMIN: the kernel forbids the write itself.
    #[error(
        "this kernel does not let BPF programs write to a process's memory \
         (bpf_probe_write_user){}: kernels in lockdown mode (e.g. with Secure Boot) forbid it",
        lockdown.as_ref().map(|on| format!(" (lockdown: {on})")).unwrap_or_default()
    )]
    Kernel {
        /// The lockdown mode in force (`[integrity]`, `[confidentiality]`), when
        /// /sys/kernel/security/lockdown names one.
        lockdown: Option<String>,
    },
}

/// Why a probe's addresses could not be written (kernels without BPF cookies: sites.rs).
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    #[error("reading /proc/{pid}/maps failed: {source}")]
    Maps {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {} failed: {source}", path.display())]
    Stat {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "process {pid} does not map offset {offset:#x} of {} executable: on this kernel \
        (no BPF cookies) gprobe finds a probe by its address in the process",
        path.display()
    )]
    NotMapped {
        pid: u32,
        path: PathBuf,
        offset: u64,
    },
    #[error("writing a probe's address into the BPF map `sites` failed: {0}")]
    Map(#[source] MapError),
    #[error(
        "another probe is at {addr:#x} in process {pid}: on this kernel (no BPF cookies, \
        before Linux 5.15) gprobe finds a probe by its address, so one address of a process \
        takes one probe; this one is not attached there (probe the function from one \
        ProbeSpec)"
    )]
    Shared { pid: u32, addr: u64 },
    #[error(
        "the probe this one replaces at {addr:#x} in process {pid} was still being detached \
        after {waited:?} (on this kernel an address of a process takes one probe)"
    )]
    StillDetaching {
        pid: u32,
        addr: u64,
        waited: std::time::Duration,
    },
}
