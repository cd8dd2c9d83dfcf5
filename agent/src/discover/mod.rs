//! Finding the processes to trace: /proc for what runs now, the exec/exit tracepoints for
//! what starts and stops later.

pub mod cgroup;
pub mod cri;
pub mod procs;

pub use procs::{inspect, libraries_of, list_pids, FileKey, MappedFile, ProcError, ProcInfo};

use crate::attach::abi::{EV_EXEC, EV_EXIT, EV_FORK, EV_LOADER, GP_PATH_MAX, PROC_EVENT_HEAD};
use crate::attach::ring::Ring;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A process lifecycle event from the kernel. `hold` is set when the process is held
/// (stopped until the agent has attached to it): the hold's id (when it was held,
/// CLOCK_MONOTONIC ns); whoever handles the event must end it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcEvent {
    /// `filename` is the path given to execve, `ino` the inode number of the file it
    /// executed.
    Exec {
        pid: u32,
        hold: Option<u64>,
        filename: PathBuf,
        ino: u64,
    },
    Exit(u32),
    /// The dynamic loader of `pid` changed its list of objects.
    Loader {
        pid: u32,
        hold: Option<u64>,
    },
    /// Process `ppid` forked `pid` (a process, not a thread).
    Fork {
        pid: u32,
        ppid: u32,
        hold: Option<u64>,
    },
}

/// Decodes one record of the process ring buffer.
pub fn decode_proc_event(item: &[u8]) -> Option<ProcEvent> {
    let u32_at = |o: usize| Some(u32::from_ne_bytes(item.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_ne_bytes(item.get(o..o + 8)?.try_into().ok()?));
    let (kind, pid) = (u32_at(0)?, u32_at(4)?);
    let hold = || u64_at(16).map(|h| (h != 0).then_some(h));
    match kind {
        EV_EXIT => Some(ProcEvent::Exit(pid)),
        EV_FORK => Some(ProcEvent::Fork {
            pid,
            ppid: u32_at(8)?,
            hold: hold()?,
        }),
        EV_LOADER => Some(ProcEvent::Loader { pid, hold: hold()? }),
        EV_EXEC => {
            let ino = u64_at(PROC_EVENT_HEAD)?;
            let name = item.get(PROC_EVENT_HEAD + 8..PROC_EVENT_HEAD + 8 + GP_PATH_MAX)?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            Some(ProcEvent::Exec {
                pid,
                hold: hold()?,
                filename: PathBuf::from(std::ffi::OsStr::from_bytes(&name[..end])),
                ino,
            })
        }
        _ => None,
    }
}

/// Hands exec/exit events from the process ring buffer to `sink` until it returns false.
pub async fn watch_processes(
    ring: Ring,
    mut sink: impl FnMut(ProcEvent) -> bool,
) -> std::io::Result<()> {
    // SAFETY: the Ring owns its fd for the AsyncFd's whole life.
    let mut afd = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    loop {
        let mut guard = afd.readable_mut().await?;
        {
            let ring = guard.get_inner_mut();
            while let Some(item) = ring.next_record() {
                if let Some(ev) = decode_proc_event(&item) {
                    if !sink(ev) {
                        return Ok(());
                    }
                }
            }
        }
        guard.clear_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_exit_fork_and_loader_records_decode() {
        let mut rec = vec![0u8; PROC_EVENT_HEAD + 8 + GP_PATH_MAX];
        rec[0..4].copy_from_slice(&EV_EXEC.to_ne_bytes());
        rec[4..8].copy_from_slice(&42u32.to_ne_bytes());
        rec[16..24].copy_from_slice(&1234u64.to_ne_bytes());
        rec[24..32].copy_from_slice(&77u64.to_ne_bytes());
        rec[32..41].copy_from_slice(b"/bin/true");
        assert_eq!(
            decode_proc_event(&rec),
            Some(ProcEvent::Exec {
                pid: 42,
                hold: Some(1234),
                filename: "/bin/true".into(),
                ino: 77,
            })
        );
        let mut exit = vec![0u8; PROC_EVENT_HEAD];
        exit[0..4].copy_from_slice(&EV_EXIT.to_ne_bytes());
        exit[4..8].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(decode_proc_event(&exit), Some(ProcEvent::Exit(7)));
        assert_eq!(decode_proc_event(&exit[..6]), None);
        let mut loader = vec![0u8; PROC_EVENT_HEAD];
        loader[0..4].copy_from_slice(&EV_LOADER.to_ne_bytes());
        loader[4..8].copy_from_slice(&9u32.to_ne_bytes());
        assert_eq!(
            decode_proc_event(&loader),
            Some(ProcEvent::Loader { pid: 9, hold: None })
        );
        loader[16..24].copy_from_slice(&5u64.to_ne_bytes());
        assert_eq!(
            decode_proc_event(&loader),
            Some(ProcEvent::Loader {
                pid: 9,
                hold: Some(5)
            })
        );
        loader[0..4].copy_from_slice(&EV_FORK.to_ne_bytes());
        loader[8..12].copy_from_slice(&1u32.to_ne_bytes());
        assert_eq!(
            decode_proc_event(&loader),
            Some(ProcEvent::Fork {
                pid: 9,
                ppid: 1,
                hold: Some(5)
            })
        );
        assert_eq!(decode_proc_event(&loader[..20]), None, "a short record");
    }
}
