//! What must not outlive a test: runc containers, shims, mounts and pod cgroups.

use super::Containerd;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

impl Containerd {
    /// Last resort when pods could not be removed: force-delete runc containers of our runc
    /// root, and kill the shims our containerd started (found by our socket in their command line).
    pub(super) fn kill_leftovers(&self) {
        let root = self.dir.join("runc").join("k8s.io");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(&root)
                    .args(["delete", "--force"])
                    .arg(e.file_name())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let needle = self.socket.as_os_str().as_bytes();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        for p in procs.flatten() {
            let Some(pid) = p
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else {
                continue;
            };
            let is_our_shim = cmdline
                .split(|&b| b == 0)
                .next()
                .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"))
                && cmdline.split(|&b| b == 0).any(|a| a == needle);
            if is_our_shim {
                // SAFETY: killing a shim started by the containerd we started, by its pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Lazily unmounts every mount point under `dir`, deepest first.
pub(super) fn unmount_under(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.as_os_str().as_bytes();
    let mut points: Vec<Vec<u8>> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| p.starts_with(prefix) && (p.len() == prefix.len() || p[prefix.len()] == b'/'))
        .collect();
    points.sort();
    points.dedup();
    points.sort_by_key(|p| std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count()));
    for p in points {
        if let Ok(c) = CString::new(p) {
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Removes `/kubepods/besteffort/pod<uid>` in every cgroup hierarchy (runc removes the
/// containers' own cgroups; the kubelet would remove the pod's).
pub(super) fn remove_pod_cgroups(uid: &str) {
    if uid.is_empty() || uid.contains('/') {
        return;
    }
    let rel = format!("kubepods/besteffort/pod{uid}");
    let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        roots.extend(entries.flatten().map(|e| e.path()));
    }
    for root in roots {
        let pod = root.join(&rel);
        if pod.is_dir() {
            // Sandbox/container cgroups left inside (normally runc removed them) go first.
            if let Ok(children) = std::fs::read_dir(&pod) {
                for c in children.flatten() {
                    if c.path().is_dir() {
                        let _ = std::fs::remove_dir(c.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(&pod);
        }
    }
}
