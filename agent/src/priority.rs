//! The agent's threads that must keep up with the traced programs run at a lower nice value
//! than them: on a busy node (a crowd of new processes is one) they would otherwise get the
//! same share of the CPU as each of those processes. The engine thread attaches while
//! processes are held at exec or fork; the reader drains the ring buffer the probes write to
//! (starved, the ring fills and calls are lost); the output thread takes what the reader
//! reads. Their work is bounded by what the probes record, so the priority takes nothing
//! from the traced programs that the probes did not make them cost. The traced programs
//! never inherit it: a thread's nice value passes only to the threads and processes it
//! creates, and `gprobe run -- CMD` forks from a thread that keeps the normal one.

use std::sync::atomic::{AtomicBool, Ordering};

/// The nice value of those threads.
pub const NICE: i32 = -10;

/// Raises the calling thread's scheduling priority to [`NICE`]. Where the kernel refuses
/// (no CAP_SYS_NICE) the thread runs at the normal priority, which is said once.
pub fn raise() {
    static SAID: AtomicBool = AtomicBool::new(false);
    // SAFETY: gettid and setpriority have no memory preconditions; PRIO_PROCESS with a
    // thread id sets that thread's nice value on Linux.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICE)
    };
    if rc != 0 && !SAID.swap(true, Ordering::Relaxed) {
        tracing::info!(
            "gprobe's threads run at the normal priority ({}): on a busy node, held processes \
            may wait longer for their probes, and calls may be lost from a full ring buffer",
            std::io::Error::last_os_error()
        );
    }
}
