//! Finding the processes to trace: /proc for what runs now, the exec/exit tracepoints for
//! what starts and stops later.

pub mod cgroup;
pub mod cri;
pub mod procs;

pub use procs::{inspect, list_pids, FileKey, ProcError, ProcInfo};

use crate::attach::abi::{GpProcEvent, EV_EXEC, EV_EXIT};
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::mpsc;

/// A process lifecycle event from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    Exec(u32),
    Exit(u32),
}

/// Forwards exec/exit events from the process ring buffer until the receiver is dropped.
pub async fn watch_processes(
    ring: RingBuf<MapData>,
    tx: mpsc::Sender<ProcEvent>,
) -> std::io::Result<()> {
    // SAFETY: the RingBuf owns its fd for the AsyncFd's whole life.
    let mut afd = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    loop {
        let mut guard = afd.readable_mut().await?;
        let mut batch = Vec::new();
        {
            let ring = guard.get_inner_mut();
            while let Some(item) = ring.next() {
                if item.len() < std::mem::size_of::<GpProcEvent>() {
                    continue;
                }
                let kind = u32::from_ne_bytes(item[0..4].try_into().unwrap());
                let pid = u32::from_ne_bytes(item[4..8].try_into().unwrap());
                match kind {
                    EV_EXEC => batch.push(ProcEvent::Exec(pid)),
                    EV_EXIT => batch.push(ProcEvent::Exit(pid)),
                    _ => {}
                }
            }
        }
        guard.clear_ready();
        for ev in batch {
            if tx.send(ev).await.is_err() {
                return Ok(());
            }
        }
    }
}
