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
    MapCreate = 0,
    MapLookupElem = 1,
    MapUpdateElem = 2,
    MapDeleteElem = 3,
    MapGetNextKey = 4,
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

/// The head of `union bpf_attr` for BPF_PROG_LOAD that every load gprobe makes itself sets:
/// prog_type, insn_cnt, insns, license, log_level, log_size, log_buf, prog_name and
/// expected_attach_type (offsets 0 to 72). The rest (BTF records) is the caller's.
pub(crate) struct ProgLoad<'a> {
    pub prog_type: u32,
    pub attach_type: u32,
    pub fun: &'a aya_obj::Function,
    pub license: &'a std::ffi::CStr,
    /// Cut to the kernel's 15 characters.
    pub name: &'a str,
}

impl ProgLoad<'_> {
    /// Writes the head into `attr` (at least 72 bytes, zeroed); with `log`, the verifier
    /// writes its log there.
    pub(crate) fn write(&self, attr: &mut [u8], log: Option<&mut Vec<u8>>) {
        let insns = &self.fun.instructions;
        attr[0..4].copy_from_slice(&self.prog_type.to_ne_bytes());
        attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
        attr[16..24].copy_from_slice(&(self.license.as_ptr() as u64).to_ne_bytes());
        if let Some(log) = log {
            attr[24..28].copy_from_slice(&1u32.to_ne_bytes());
            attr[28..32].copy_from_slice(&(log.len() as u32).to_ne_bytes());
            attr[32..40].copy_from_slice(&(log.as_mut_ptr() as u64).to_ne_bytes());
        }
        let short = &self.name.as_bytes()[..self.name.len().min(15)];
        attr[48..48 + short.len()].copy_from_slice(short);
        attr[68..72].copy_from_slice(&self.attach_type.to_ne_bytes());
    }
}

/// `err`, a program load the kernel refused, with the last lines of the verifier's log:
/// `load` loads the same program again, logging into the buffer it is given.
pub(crate) fn with_verifier_log(err: io::Error, load: impl FnOnce(&mut Vec<u8>)) -> io::Error {
    let mut log = vec![0u8; 4 << 20];
    load(&mut log);
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let text = String::from_utf8_lossy(&log[..end]);
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    io::Error::new(err.kind(), format!("{err}; verifier: {}", tail.join(" | ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_load_names_the_last_lines_of_the_verifiers_log() {
        let refused = io::Error::from_raw_os_error(libc::EACCES);
        let e = with_verifier_log(refused, |log| {
            let text = b"0: r1 = 0\n1: call 6\n2: r0 = 0\n3: exit\nR1 invalid mem access\nprocessed 4 insns\n";
            log[..text.len()].copy_from_slice(text);
        });
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let msg = e.to_string();
        assert!(
            msg.ends_with(
                "; verifier: 1: call 6 | 2: r0 = 0 | 3: exit | R1 invalid mem access | processed 4 insns"
            ),
            "{msg}"
        );
    }
}
