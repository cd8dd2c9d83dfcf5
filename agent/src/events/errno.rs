//! The text of `syscall.Errno.Error()` on linux/amd64: Go's own table
//! (`syscall/zerrors_linux_amd64.go`, identical from Go 1.19 to 1.27 but for ESTALE, 116,
//! whose text Go 1.26 changed and the binary's [`ErrTable`] gives), and `errno N` for a
//! number the table has no text for, as `Error()` says.

use crate::plan::ErrTable;

/// Go's table: index = errno; "" where Go has no entry.
const TEXTS: [&str; 133] = [
    "",
    "operation not permitted",
    "no such file or directory",
    "no such process",
    "interrupted system call",
    "input/output error",
    "no such device or address",
    "argument list too long",
    "exec format error",
    "bad file descriptor",
    "no child processes",
    "resource temporarily unavailable",
    "cannot allocate memory",
    "permission denied",
    "bad address",
    "block device required",
    "device or resource busy",
    "file exists",
    "invalid cross-device link",
    "no such device",
    "not a directory",
    "is a directory",
    "invalid argument",
    "too many open files in system",
    "too many open files",
    "inappropriate ioctl for device",
    "text file busy",
    "file too large",
    "no space left on device",
    "illegal seek",
    "read-only file system",
    "too many links",
    "broken pipe",
    "numerical argument out of domain",
    "numerical result out of range",
    "resource deadlock avoided",
    "file name too long",
    "no locks available",
    "function not implemented",
    "directory not empty",
    "too many levels of symbolic links",
    "",
    "no message of desired type",
    "identifier removed",
    "channel number out of range",
    "level 2 not synchronized",
    "level 3 halted",
    "level 3 reset",
    "link number out of range",
    "protocol driver not attached",
    "no CSI structure available",
    "level 2 halted",
    "invalid exchange",
    "invalid request descriptor",
    "exchange full",
    "no anode",
    "invalid request code",
    "invalid slot",
    "",
    "bad font file format",
    "device not a stream",
    "no data available",
    "timer expired",
    "out of streams resources",
    "machine is not on the network",
    "package not installed",
    "object is remote",
    "link has been severed",
    "advertise error",
    "srmount error",
    "communication error on send",
    "protocol error",
    "multihop attempted",
    "RFS specific error",
    "bad message",
    "value too large for defined data type",
    "name not unique on network",
    "file descriptor in bad state",
    "remote address changed",
    "can not access a needed shared library",
    "accessing a corrupted shared library",
    ".lib section in a.out corrupted",
    "attempting to link in too many shared libraries",
    "cannot exec a shared library directly",
    "invalid or incomplete multibyte or wide character",
    "interrupted system call should be restarted",
    "streams pipe error",
    "too many users",
    "socket operation on non-socket",
    "destination address required",
    "message too long",
    "protocol wrong type for socket",
    "protocol not available",
    "protocol not supported",
    "socket type not supported",
    "operation not supported",
    "protocol family not supported",
    "address family not supported by protocol",
    "address already in use",
    "cannot assign requested address",
    "network is down",
    "network is unreachable",
    "network dropped connection on reset",
    "software caused connection abort",
    "connection reset by peer",
    "no buffer space available",
    "transport endpoint is already connected",
    "transport endpoint is not connected",
    "cannot send after transport endpoint shutdown",
    "too many references: cannot splice",
    "connection timed out",
    "connection refused",
    "host is down",
    "no route to host",
    "operation already in progress",
    "operation now in progress",
    // 116, ESTALE: ErrTable::estale
    "",
    "structure needs cleaning",
    "not a XENIX named type file",
    "no XENIX semaphores available",
    "is a named type file",
    "remote I/O error",
    "disk quota exceeded",
    "no medium found",
    "wrong medium type",
    "operation canceled",
    "required key not available",
    "key has expired",
    "key has been revoked",
    "key was rejected by service",
    "owner died",
    "state not recoverable",
    "operation not possible due to RF-kill",
];

/// `Errno(n).Error()` in the binary whose table is `table`; `None` where the text depends
/// on a release gprobe does not know (ESTALE of Go 1.25).
pub(super) fn errno_text(n: u64, table: &ErrTable) -> Option<String> {
    if n == 116 {
        return table.estale.map(str::to_string);
    }
    match usize::try_from(n).ok().and_then(|i| TEXTS.get(i)) {
        Some(t) if !t.is_empty() => Some(t.to_string()),
        // Go formats int(e): a uintptr above i64::MAX prints negative.
        _ => Some(format!("errno {}", n as i64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_go_s() {
        let t = ErrTable {
            estale: Some("stale file handle"),
            ..Default::default()
        };
        assert_eq!(errno_text(2, &t).unwrap(), "no such file or directory");
        assert_eq!(errno_text(111, &t).unwrap(), "connection refused");
        assert_eq!(errno_text(116, &t).unwrap(), "stale file handle");
        assert_eq!(errno_text(41, &t).unwrap(), "errno 41");
        assert_eq!(errno_text(0, &t).unwrap(), "errno 0");
        assert_eq!(errno_text(4000, &t).unwrap(), "errno 4000");
        assert_eq!(errno_text(u64::MAX, &t).unwrap(), "errno -1");
        assert_eq!(errno_text(116, &ErrTable::default()), None);
    }
}
