//! The guardian: a process forked from the agent, where the process hooks cannot resume
//! held processes themselves (kernels without the task kfuncs, before 6.13), that keeps
//! the promise "a hold never outlives gprobe". It waits on a pipe only the agent writes to;
//! when the agent is gone, however it went (kill -9, OOM kill, a crash), the pipe reads
//! end-of-file, and the guardian ends the agent's lease (no new holds) and resumes every
//! process the `held` map lists as the agent's.
//!
//! It is forked, not executed: it needs no binary on disk (tests run the tracer inside a
//! test binary), and its body makes system calls only (no allocation, no lock: the agent is
//! multi-threaded when it forks), on stack buffers.

use crate::abi::{GpControl, GpHold};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The running guardian, seen from the agent. Dropping it (a clean stop, after the agent
/// resumed what it held) ends it.
#[derive(Debug)]
pub struct Guardian {
    pid: libc::pid_t,
    /// The pipe's write end: the guardian reads end-of-file when the agent closes it.
    pipe: Option<OwnedFd>,
    exited: bool,
}

impl Guardian {
    /// Forks the guardian of this agent's holds, given the `control` and `held` maps.
    pub fn start(control: BorrowedFd<'_>, held: BorrowedFd<'_>) -> io::Result<Guardian> {
        let mut fds = [0; 2];
        // SAFETY: writes two fds into a live array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 made these two fds, owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let agent = std::process::id();
        let keep = [read.as_raw_fd(), control.as_raw_fd(), held.as_raw_fd()];
        // SAFETY: the child runs only `guard`, which makes system calls on its stack and
        // exits; the parent goes on as before.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the forked child, with the fds above open.
            unsafe { guard(agent, keep) };
        }
        drop(read);
        Ok(Guardian {
            pid,
            pipe: Some(write),
            exited: false,
        })
    }

    /// Whether the guardian still runs (it may be killed on its own: then this agent
    /// must stop holding, or a hold could outlive it).
    pub fn alive(&mut self) -> bool {
        if !self.exited {
            let mut status = 0;
            // SAFETY: polls our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            self.exited = r == self.pid || r < 0;
        }
        !self.exited
    }

    pub fn pid(&self) -> u32 {
        self.pid as u32
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        drop(self.pipe.take());
        if !self.exited {
            let mut status = 0;
            // SAFETY: reaps our own child, which exits on the pipe's end-of-file.
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        }
    }
}

/// The guardian's body. Never returns.
///
/// # Safety
/// Only in the child just forked by [`Guardian::start`], with `keep` = the pipe's read end
/// and the fds of the maps `control` and `held`.
unsafe fn guard(agent: u32, keep: [libc::c_int; 3]) -> ! {
    let [pipe, control, held] = keep;
    // SAFETY (all below): system calls on this process and on stack buffers.
    unsafe {
        // Out of the terminal's process group: Ctrl-C stops gprobe, which then resumes what
        // it held itself; this one only acts when gprobe could not.
        libc::setpgid(0, 0);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::prctl(libc::PR_SET_NAME, c"gprobe-guardian".as_ptr());
        // Holding no other file of the agent: its uprobes, hooks and output end with it.
        close_all_but(&keep);
        let mut buf = [0u8; 64];
        loop {
            let n = libc::read(pipe, buf.as_mut_ptr().cast(), buf.len());
            if n == 0 || (n < 0 && *libc::__errno_location() != libc::EINTR) {
                break;
            }
        }
        // The lease first: the hooks hold nothing more for this agent.
        let zero = GpControl {
            holds_until_ns: 0,
            agent: 0,
            _pad: 0,
        };
        let key = 0u32;
        map_update(control, &key, &zero);
        // A hook that read the lease just before it ended may add one more hold: a
        // second pass after it finds that one.
        let mut resumed = 0u32;
        for pass in 0..3 {
            let n = resume_holds_of(held, agent);
            resumed += n;
            if n == 0 && pass > 0 {
                break;
            }
            libc::usleep(20_000);
        }
        if resumed > 0 {
            say_resumed(agent, resumed);
        }
        libc::_exit(0);
    }
}

/// Resumes every process `held` lists as held by `agent` (removing its entry first, as the
/// agent does), and returns how many.
unsafe fn resume_holds_of(held: libc::c_int, agent: u32) -> u32 {
    let mut n = 0;
    let mut key: u32 = 0;
    let mut first = true;
    // At most the map's size of visits: deleting the current key restarts the walk.
    for _ in 0..(4096 * 2) {
        let mut next: u32 = 0;
        // SAFETY: stack buffers of the map's key size.
        let r = unsafe { map_next_key(held, if first { None } else { Some(&key) }, &mut next) };
        if !r {
            break;
        }
        first = false;
        key = next;
        let mut h = GpHold::default();
        // SAFETY: a stack buffer of the map's value size.
        if unsafe { map_lookup(held, &key, &mut h) } && h.holder == agent {
            // SAFETY: as above; kill has no memory preconditions.
            unsafe {
                map_delete(held, &key);
                libc::kill(key as libc::pid_t, libc::SIGCONT);
            }
            n += 1;
            first = true;
        }
    }
    n
}

/// union bpf_attr for the map element commands: map_fd, key, value (or next_key), flags.
fn elem_attr(map: libc::c_int, key: u64, value: u64) -> [u8; 32] {
    let mut attr = [0u8; 32];
    attr[0..4].copy_from_slice(&(map as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&key.to_ne_bytes());
    attr[16..24].copy_from_slice(&value.to_ne_bytes());
    attr
}

unsafe fn bpf(cmd: super::sys::Cmd, attr: &mut [u8; 32]) -> bool {
    // SAFETY: the callers' attrs point to live stack buffers of the map's sizes.
    unsafe { super::sys::bpf(cmd, attr) }.is_ok()
}

unsafe fn map_update<V>(map: libc::c_int, key: &u32, value: &V) {
    let mut attr = elem_attr(map, key as *const u32 as u64, value as *const V as u64);
    // SAFETY: key and value outlive the call.
    unsafe { bpf(super::sys::Cmd::MapUpdateElem, &mut attr) };
}

unsafe fn map_lookup<V>(map: libc::c_int, key: &u32, value: &mut V) -> bool {
    let mut attr = elem_attr(map, key as *const u32 as u64, value as *mut V as u64);
    // SAFETY: key and value outlive the call.
    unsafe { bpf(super::sys::Cmd::MapLookupElem, &mut attr) }
}

unsafe fn map_delete(map: libc::c_int, key: &u32) {
    let mut attr = elem_attr(map, key as *const u32 as u64, 0);
    // SAFETY: key outlives the call.
    unsafe { bpf(super::sys::Cmd::MapDeleteElem, &mut attr) };
}

unsafe fn map_next_key(map: libc::c_int, key: Option<&u32>, next: &mut u32) -> bool {
    let key = key.map_or(0, |k| k as *const u32 as u64);
    let mut attr = elem_attr(map, key, next as *mut u32 as u64);
    // SAFETY: key and next outlive the call.
    unsafe { bpf(super::sys::Cmd::MapGetNextKey, &mut attr) }
}

/// Closes every fd but stderr and `keep`.
unsafe fn close_all_but(keep: &[libc::c_int; 3]) {
    let mut k = *keep;
    k.sort_unstable();
    // SAFETY: closing fds of this process.
    unsafe {
        libc::close(0);
        libc::close(1);
        let mut from = 3u32;
        for fd in k {
            let fd = fd as u32;
            if fd > from {
                close_range(from, fd - 1);
            }
            from = fd + 1;
        }
        close_range(from, u32::MAX);
    }
}

unsafe fn close_range(first: u32, last: u32) {
    // SAFETY: closing fds of this process (close_range: Linux 5.9).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
    if r != 0 {
        let end = last.min(65_535);
        for fd in first..=end {
            // SAFETY: as above.
            unsafe { libc::close(fd as libc::c_int) };
        }
    }
}

/// Writes what the guardian did to stderr.
fn say_resumed(agent: u32, n: u32) {
    let (buf, len) = resumed_message(agent, n);
    // SAFETY: writes a live buffer to stderr.
    unsafe { libc::write(2, buf.as_ptr().cast(), len) };
}

/// "gprobe guardian: gprobe (pid N) ended ...; resumed M held process(es)", formatted on the
/// stack (the guardian may not allocate).
fn resumed_message(agent: u32, n: u32) -> ([u8; 128], usize) {
    let mut buf = [0u8; 128];
    let mut len = 0;
    let mut put = |s: &[u8]| {
        let end = (len + s.len()).min(buf.len());
        buf[len..end].copy_from_slice(&s[..end - len]);
        len = end;
    };
    let digits = |mut v: u32| {
        let mut d = [0u8; 10];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        (d, i)
    };
    put(b"gprobe guardian: gprobe (pid ");
    let (a, from) = digits(agent);
    put(&a[from..]);
    put(b") ended without resuming what it held; resumed ");
    let (m, from) = digits(n);
    put(&m[from..]);
    put(b" held process(es)\n");
    (buf, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_agent_and_the_count() {
        let (b, n) = resumed_message(4_294_967_295, 0);
        assert_eq!(
            std::str::from_utf8(&b[..n]).unwrap(),
            "gprobe guardian: gprobe (pid 4294967295) ended without resuming what it held; \
             resumed 0 held process(es)\n"
        );
        let (b, n) = resumed_message(7, 12);
        assert!(std::str::from_utf8(&b[..n])
            .unwrap()
            .contains("(pid 7) ended"));
        assert!(std::str::from_utf8(&b[..n])
            .unwrap()
            .ends_with("resumed 12 held process(es)\n"));
    }
}
