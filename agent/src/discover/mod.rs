//! Finding the processes to trace: /proc for what runs now, the exec/exit tracepoints for
//! what starts and stops later.

pub mod cgroup;
pub mod cri;
pub mod procs;

pub use procs::{
    inspect, libraries_of, list_pids, pids_of_container, FileKey, MappedFile, ProcError, ProcInfo,
};

use crate::abi::decode::read_record;
use crate::abi::{GpProcEvent, GpProcExec, EV_EXEC, EV_EXIT, EV_FORK, EV_LOADER};
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

/// Decodes one record of the process ring buffer: a `GpProcEvent`, or for an exec a
/// `GpProcExec`. `None` for a record shorter than its kind's struct, or of an unknown kind.
pub fn decode_proc_event(item: &[u8]) -> Option<ProcEvent> {
    let ev: GpProcEvent = read_record(item)?;
    let hold = (ev.hold != 0).then_some(ev.hold);
    match ev.kind {
        EV_EXIT => Some(ProcEvent::Exit(ev.pid)),
        EV_FORK => Some(ProcEvent::Fork {
            pid: ev.pid,
            ppid: ev.ppid,
            hold,
        }),
        EV_LOADER => Some(ProcEvent::Loader { pid: ev.pid, hold }),
        EV_EXEC => {
            let exec: GpProcExec = read_record(item)?;
            let name = &exec.filename;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            Some(ProcEvent::Exec {
                pid: ev.pid,
                hold,
                filename: PathBuf::from(std::ffi::OsStr::from_bytes(&name[..end])),
                ino: exec.ino,
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

    use crate::abi::decode::bytes_of;
    use crate::abi::GP_PATH_MAX;

    fn exec_record(pid: u32, hold: u64, ino: u64, path: &[u8]) -> GpProcExec {
        let mut filename = [0u8; GP_PATH_MAX];
        filename[..path.len()].copy_from_slice(path);
        GpProcExec {
            ev: GpProcEvent {
                kind: EV_EXEC,
                pid,
                hold,
                ..Default::default()
            },
            ino,
            filename,
        }
    }

    #[test]
    fn exec_exit_fork_and_loader_records_decode() {
        let exec = bytes_of(&exec_record(42, 1234, 77, b"/bin/true"));
        assert_eq!(
            decode_proc_event(&exec),
            Some(ProcEvent::Exec {
                pid: 42,
                hold: Some(1234),
                filename: "/bin/true".into(),
                ino: 77,
            })
        );
        // A path that fills the whole field (no NUL) is kept whole.
        let long = [b'a'; GP_PATH_MAX];
        match decode_proc_event(&bytes_of(&exec_record(42, 0, 77, &long))) {
            Some(ProcEvent::Exec { filename, hold, .. }) => {
                assert_eq!(filename.as_os_str().len(), GP_PATH_MAX);
                assert_eq!(hold, None);
            }
            other => panic!("not an exec: {other:?}"),
        }
        let exit = GpProcEvent {
            kind: EV_EXIT,
            pid: 7,
            ..Default::default()
        };
        assert_eq!(
            decode_proc_event(&bytes_of(&exit)),
            Some(ProcEvent::Exit(7))
        );
        let mut loader = GpProcEvent {
            kind: EV_LOADER,
            pid: 9,
            ..Default::default()
        };
        assert_eq!(
            decode_proc_event(&bytes_of(&loader)),
            Some(ProcEvent::Loader { pid: 9, hold: None })
        );
        loader.hold = 5;
        assert_eq!(
            decode_proc_event(&bytes_of(&loader)),
            Some(ProcEvent::Loader {
                pid: 9,
                hold: Some(5)
            })
        );
        let fork = GpProcEvent {
            kind: EV_FORK,
            ppid: 1,
            ..loader
        };
        assert_eq!(
            decode_proc_event(&bytes_of(&fork)),
            Some(ProcEvent::Fork {
                pid: 9,
                ppid: 1,
                hold: Some(5)
            })
        );
        let unknown = GpProcEvent { kind: 99, ..fork };
        assert_eq!(decode_proc_event(&bytes_of(&unknown)), None);
    }

    #[test]
    fn a_short_record_is_refused() {
        let fork = bytes_of(&GpProcEvent {
            kind: EV_FORK,
            pid: 9,
            ppid: 1,
            _pad: 0,
            hold: 5,
        });
        for n in [0, 6, fork.len() - 1] {
            assert_eq!(decode_proc_event(&fork[..n]), None, "{n} bytes of a fork");
        }
        assert!(decode_proc_event(&fork).is_some());
        // An exec record cut anywhere in its inode or file name.
        let exec = bytes_of(&exec_record(42, 0, 77, b"/bin/true"));
        for n in [fork.len(), fork.len() + 8, exec.len() - 1] {
            assert_eq!(decode_proc_event(&exec[..n]), None, "{n} bytes of an exec");
        }
        assert!(decode_proc_event(&exec).is_some());
    }
}
