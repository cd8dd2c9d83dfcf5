//! Uprobes as perf events of one process, with the BPF program attached through a BPF link
//! that carries the cookie, or, on kernels without BPF links on perf events or cookies
//! (before 5.15), attached to the event itself and found by its address (sites.rs). aya's
//! own uprobe attach cannot set a reference-counter offset (USDT semaphores) and keeps
//! links inside the program object (so they could not be closed from other threads); the
//! kernel interface itself is small.

use super::sites::{SiteEntries, SiteTable, TargetMappings};
use super::sys::{self, Cmd};
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

pub use super::error::{PerfError, PmuError};
pub use crate::engine::ProbePoint;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `perf_event_attr` up to `config2` (PERF_ATTR_SIZE_VER1).
const PERF_ATTR_SIZE_VER1: u32 = 72;
const BPF_PERF_EVENT: u32 = 41;
/// `_IOW('$', 8, __u32)`: runs a BPF program on the event (before BPF links).
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// The uprobe PMU as this kernel describes it in sysfs.
#[derive(Debug, Clone, Copy)]
struct UprobePmu {
    ty: u32,
    /// Bit of `config` that makes a return probe.
    ret_bit: u32,
    /// First bit of `config` holding the reference-counter offset (USDT semaphores).
    ref_ctr_shift: Option<u32>,
}

fn pmu() -> Result<UprobePmu, PmuError> {
    static PMU: OnceLock<Result<UprobePmu, PmuError>> = OnceLock::new();
    PMU.get_or_init(|| {
        let dir = Path::new("/sys/bus/event_source/devices/uprobe");
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).map(|s| s.trim().to_string());
        let path = dir.join("type");
        let ty = read("type")
            .map_err(|e| PmuError::Read {
                path: path.clone(),
                source: Arc::new(e),
            })?
            .parse::<u32>()
            .map_err(|source| PmuError::Parse { path, source })?;
        // "config:0" and "config:32-63".
        let first_bit =
            |s: &str| -> Option<u32> { s.strip_prefix("config:")?.split('-').next()?.parse().ok() };
        let ret_bit = read("format/retprobe")
            .ok()
            .and_then(|s| first_bit(&s))
            .unwrap_or(0);
        let ref_ctr_shift = read("format/ref_ctr_offset")
            .ok()
            .and_then(|s| first_bit(&s));
        Ok(UprobePmu {
            ty,
            ret_bit,
            ref_ctr_shift,
        })
    })
    .clone()
}

/// One attached uprobe: the perf event and the BPF link running the program on it (or the
/// program set on the event, and its addresses in `sites`). Dropping it detaches (closing
/// the perf event unregisters the uprobe, which waits for an RCU grace period: drop these
/// off the event path); fields drop in order, the addresses after the event.
#[derive(Debug)]
pub struct PerfLink {
    _link: Option<OwnedFd>,
    _event: OwnedFd,
    sites: Option<SiteEntries>,
}

impl PerfLink {
    /// Said when it is handed over to be detached: a probe that comes to its addresses
    /// waits for it (sites.rs).
    pub(super) fn retire(&self) {
        if let Some(s) = &self.sites {
            s.retire();
        }
    }
}

/// How the program is told which probe fired.
#[derive(Debug, Clone, Copy)]
pub enum Identify<'a> {
    /// A BPF link carrying the cookie (5.15+).
    Cookie,
    /// The program set on the event; the cookie written at the probe's addresses in the
    /// process, found in the target's mappings there (kernels without cookies).
    Address(&'a Arc<SiteTable>, &'a TargetMappings),
    /// The program set on the event, no configuration (the kernel self-test's probes).
    Nothing,
}

/// Opens a uprobe on `target` at `point` that fires only in process `pid`, and runs `prog`
/// there with `cookie`.
pub fn attach(
    prog: BorrowedFd<'_>,
    target: &Path,
    point: ProbePoint,
    pid: u32,
    cookie: u64,
    identify: Identify<'_>,
) -> Result<PerfLink, PerfError> {
    let pmu = pmu().map_err(PerfError::Pmu)?;
    let mut config = 0u64;
    if point.ret {
        config |= 1 << pmu.ret_bit;
    }
    if point.ref_ctr_offset != 0 {
        let shift = pmu.ref_ctr_shift.ok_or(PerfError::NoRefCtr)?;
        config |= point.ref_ctr_offset << shift;
    }
    let path = CString::new(target.as_os_str().as_bytes()).map_err(|_| {
        PerfError::Open(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "path with a NUL byte",
        ))
    })?;
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&pmu.ty.to_ne_bytes());
    attr[4..8].copy_from_slice(&PERF_ATTR_SIZE_VER1.to_ne_bytes());
    attr[8..16].copy_from_slice(&config.to_ne_bytes());
    attr[56..64].copy_from_slice(&(path.as_ptr() as u64).to_ne_bytes());
    attr[64..72].copy_from_slice(&point.offset.to_ne_bytes());
    // SAFETY: `attr` is a zero-initialized perf_event_attr of the size it declares; the
    // path it points to outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            pid as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(PerfError::Open(std::io::Error::last_os_error()));
    }
    // SAFETY: a new fd we own.
    let event = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // Written before the program runs on the event: its first hit finds its probe.
    let sites = match identify {
        Identify::Cookie => None,
        Identify::Address(table, mapped) => Some(
            table
                .add(mapped, point.offset, cookie)
                .map_err(PerfError::Site)?,
        ),
        Identify::Nothing => None,
    };
    if !matches!(identify, Identify::Cookie) {
        // SAFETY: an ioctl taking a program fd by value, on an event fd we own.
        let r = unsafe {
            libc::ioctl(
                event.as_raw_fd(),
                PERF_EVENT_IOC_SET_BPF as _,
                prog.as_raw_fd(),
            )
        };
        if r < 0 {
            return Err(PerfError::SetBpf(std::io::Error::last_os_error()));
        }
        return Ok(PerfLink {
            _link: None,
            _event: event,
            sites,
        });
    }

    // union bpf_attr, link_create: prog_fd, target_fd, attach_type, flags, then
    // perf_event.bpf_cookie at offset 16.
    let mut battr = [0u8; 64];
    battr[0..4].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
    battr[4..8].copy_from_slice(&(event.as_raw_fd() as u32).to_ne_bytes());
    battr[8..12].copy_from_slice(&BPF_PERF_EVENT.to_ne_bytes());
    battr[16..24].copy_from_slice(&cookie.to_ne_bytes());
    // SAFETY: a zero-initialized bpf_attr of the size passed, naming fds we hold.
    let link = unsafe { sys::bpf_fd(Cmd::LinkCreate, &mut battr) }.map_err(PerfError::Link)?;
    Ok(PerfLink {
        _link: Some(link),
        _event: event,
        sites: None,
    })
}
