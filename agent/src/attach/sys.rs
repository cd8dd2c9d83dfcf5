//! The bpf(2) system call, for the commands gprobe issues itself. aya 0.14 has no API for
//! them: it cannot load a program with the uprobe_multi attach type (`multi.rs`) or with
//! kfunc calls (`hooks.rs`), nor create uprobe_multi links, nor link a program to a perf
//! event gprobe opened itself (`perf.rs`: aya's uprobe attach cannot set a USDT semaphore's
//! offset and keeps its links inside the program object). The callers build each
//! command's `union bpf_attr` byte by byte (the layout of `include/uapi/linux/bpf.h`, zero
//! beyond the fields they set), and this sends it.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// The `enum bpf_cmd` values used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Cmd {
    ProgLoad = 5,
    RawTracepointOpen = 17,
    BtfLoad = 18,
    LinkCreate = 28,
}

/// Issues `bpf(cmd, attr, attr.len())`: the kernel's non-negative result (a new fd for the
/// commands that make one), or its errno as an `io::Error`. The kernel may write back into
/// `attr`, hence `&mut`.
///
/// # Safety
/// `attr` must be a valid `union bpf_attr` for `cmd`: every pointer in it must point to
/// memory of the size given next to it, readable (or writable, for the buffers the kernel
/// fills) for the whole call, and every fd in it open.
pub(crate) unsafe fn bpf(cmd: Cmd, attr: &mut [u8]) -> io::Result<i32> {
    // SAFETY: `attr` is a live buffer of the length passed; what it points to is the
    // caller's promise.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr.as_mut_ptr(),
            attr.len() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as i32)
}

/// [`bpf`] for a command that returns a new fd, which the caller then owns.
///
/// # Safety
/// As for [`bpf`].
pub(crate) unsafe fn bpf_fd(cmd: Cmd, attr: &mut [u8]) -> io::Result<OwnedFd> {
    // SAFETY: the caller's promise, passed on.
    let fd = unsafe { bpf(cmd, attr) }?;
    // SAFETY: the kernel just made this fd for us, and nothing else holds it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
