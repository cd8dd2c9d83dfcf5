//! The records and map values of the process hooks (procs.bpf.c): the agent's lease, the
//! held processes, the process events and their counters.

use super::layout::{self as c, GP_PATH_MAX};

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpControl {
    /// Hold nothing from this time (CLOCK_MONOTONIC ns): the lease the agent renews.
    pub holds_until_ns: u64,
    /// The agent's tgid: processes are held only while it lives (0: none).
    pub agent: u32,
    pub _pad: u32,
}

/// A held process (map `held`, keyed by pid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpHold {
    /// When it was held (CLOCK_MONOTONIC ns): names the hold.
    pub since_ns: u64,
    /// The tgid of the agent that holds it.
    pub holder: u32,
    /// `HOLD_*`.
    pub kind: u32,
    /// `HOLD_FORK`: the parent.
    pub ppid: u32,
    pub _pad: u32,
}

/// A record of the process ring buffer (`proc_events`), or the start of one: exit, fork
/// and loader records are this, an exec record is a [`GpProcExec`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpProcEvent {
    /// `EV_EXEC`, `EV_EXIT`, `EV_FORK` or `EV_LOADER`.
    pub kind: u32,
    pub pid: u32,
    /// `EV_FORK`: the parent.
    pub ppid: u32,
    pub _pad: u32,
    /// The process is held: its `GpHold::since_ns`; 0: it is not.
    pub hold: u64,
}

/// `EV_EXEC`: a process executed a file.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GpProcExec {
    pub ev: GpProcEvent,
    /// The inode number of the executed file.
    pub ino: u64,
    /// The path given to execve (may be relative), NUL-terminated unless it fills this.
    pub filename: [u8; GP_PATH_MAX],
}

/// Counters of the process hooks, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpProcStats {
    pub lost: u64,
    pub hold_failed: u64,
    pub released: u64,
}

check_layout!(GpControl, SIZEOF_GP_CONTROL, holds_until_ns => OFFSETOF_GP_CONTROL_HOLDS_UNTIL_NS,
    agent => OFFSETOF_GP_CONTROL_AGENT);
check_layout!(GpHold, SIZEOF_GP_HOLD, since_ns => OFFSETOF_GP_HOLD_SINCE_NS, holder => OFFSETOF_GP_HOLD_HOLDER,
    kind => OFFSETOF_GP_HOLD_KIND, ppid => OFFSETOF_GP_HOLD_PPID);
check_layout!(GpProcStats, SIZEOF_GP_PROC_STATS, lost => OFFSETOF_GP_PROC_STATS_LOST,
    hold_failed => OFFSETOF_GP_PROC_STATS_HOLD_FAILED, released => OFFSETOF_GP_PROC_STATS_RELEASED);
check_layout!(GpProcEvent, SIZEOF_GP_PROC_EVENT, kind => OFFSETOF_GP_PROC_EVENT_KIND, pid => OFFSETOF_GP_PROC_EVENT_PID,
    ppid => OFFSETOF_GP_PROC_EVENT_PPID, hold => OFFSETOF_GP_PROC_EVENT_HOLD);
check_layout!(GpProcExec, SIZEOF_GP_PROC_EXEC, ev => OFFSETOF_GP_PROC_EXEC_EV, ino => OFFSETOF_GP_PROC_EXEC_INO,
    filename => OFFSETOF_GP_PROC_EXEC_FILENAME);
