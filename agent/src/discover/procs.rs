//! What /proc says about a process: its executable (path and file identity).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use thiserror::Error;

/// Identity of a binary file: two processes of one file share it (and its uprobes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    /// The executable's path as the process sees it (inside its mount namespace).
    pub exe: PathBuf,
    /// The path the process was started with, when known (the exec event's, or argv[0]
    /// when it is a path): differs from `exe` when that was a symlink.
    pub exec_path: Option<PathBuf>,
    /// A path to the same file valid from here: `/proc/PID/exe`.
    pub exe_link: PathBuf,
    /// The file uprobes attach to (the real file under an overlay mount).
    pub key: FileKey,
    /// The inode number of the executed file as exec sees it (an overlay's own inode for a
    /// container): what the exec tracepoint compares to hold the next process of this file.
    pub exe_ino: u64,
    pub comm: String,
    /// The container it runs in (from its cgroup), if any.
    pub container_id: Option<String>,
    /// Start time in clock ticks since boot (/proc/PID/stat): tells a reused pid apart.
    pub start_time: u64,
}

#[derive(Debug, Error)]
pub enum ProcError {
    #[error("process {pid} is gone")]
    Gone { pid: u32 },
    #[error("process {pid} has no executable (a kernel thread)")]
    NoExe { pid: u32 },
    #[error("process {pid}: {what}: {source}")]
    Io {
        pid: u32,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Every pid in /proc.
pub fn list_pids() -> Vec<u32> {
    match procfs::process::all_processes() {
        Ok(it) => it.filter_map(|p| p.ok()).map(|p| p.pid as u32).collect(),
        Err(_) => Vec::new(),
    }
}

/// The start time (clock ticks since boot) of `pid`, from /proc/PID/stat.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields restart after
    // its last ')'. starttime is field 22, the 20th after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// argv[0] of `pid` when it is a path (it contains a '/'), made absolute against the
/// process's working directory.
fn argv0_path(base: &std::path::Path) -> Option<PathBuf> {
    let cmdline = std::fs::read(base.join("cmdline")).ok()?;
    let arg0 = cmdline.split(|&b| b == 0).next()?;
    if !arg0.contains(&b'/') {
        return None;
    }
    let p = PathBuf::from(std::ffi::OsStr::from_bytes(arg0));
    if p.is_absolute() {
        return Some(p);
    }
    Some(std::fs::read_link(base.join("cwd")).ok()?.join(p))
}

/// Reads a process's executable. Fails cleanly for processes that exit meanwhile.
/// `exec_path` is the path it was started with, when an exec event gave it (relative ones
/// are made absolute against its working directory); otherwise argv[0] is used when it is
/// a path.
pub fn inspect(pid: u32, exec_path: Option<&std::path::Path>) -> Result<ProcInfo, ProcError> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let io = |what, source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::NotFound
            || source.raw_os_error() == Some(libc::ESRCH)
        {
            ProcError::Gone { pid }
        } else {
            ProcError::Io { pid, what, source }
        }
    };
    let exe_link = base.join("exe");
    let exe = match std::fs::read_link(&exe_link) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && base.exists() => {
            return Err(ProcError::NoExe { pid })
        }
        Err(e) => return Err(io("reading /proc/PID/exe", e)),
    };
    let meta = std::fs::metadata(&exe_link).map_err(|e| io("stat of the executable", e))?;
    // On overlayfs (container images) stat reports the overlay mount's device, different in
    // every container, while uprobes attach to the real file underneath, shared by all
    // containers of one image. /proc/PID/maps shows the real device and inode.
    let key = std::fs::read_to_string(base.join("maps"))
        .ok()
        .and_then(|maps| real_file_key(&maps, &exe))
        .unwrap_or(FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        });
    let comm = std::fs::read_to_string(base.join("comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default();
    let exec_path = match exec_path {
        Some(p) if p.is_absolute() => Some(p.to_path_buf()),
        Some(p) => std::fs::read_link(base.join("cwd"))
            .ok()
            .map(|cwd| cwd.join(p)),
        None => argv0_path(&base),
    }
    .filter(|p| *p != exe);
    let container_id = std::fs::read_to_string(base.join("cgroup"))
        .ok()
        .and_then(|c| super::cgroup::container_id(&c));
    Ok(ProcInfo {
        pid,
        exe,
        exec_path,
        exe_link,
        key,
        exe_ino: meta.ino(),
        comm,
        container_id,
        start_time: start_time(pid).ok_or(ProcError::Gone { pid })?,
    })
}

/// The (device, inode) of the first mapping of `exe` in a /proc/PID/maps text.
fn real_file_key(maps: &str, exe: &std::path::Path) -> Option<FileKey> {
    let exe = exe.to_str()?;
    for line in maps.lines() {
        // addr perms offset dev inode path
        let mut f = line.split_whitespace();
        let (_, _, _, dev, ino) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        if f.next() != Some(exe) {
            continue;
        }
        let (maj, min) = dev.split_once(':')?;
        let (maj, min) = (
            u64::from_str_radix(maj, 16).ok()?,
            u64::from_str_radix(min, 16).ok()?,
        );
        let ino: u64 = ino.parse().ok()?;
        if ino == 0 {
            return None;
        }
        return Some(FileKey {
            dev: libc::makedev(maj as u32, min as u32),
            ino,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspects_this_process_and_reports_gone_ones() {
        let me = inspect(std::process::id(), None).unwrap();
        assert_eq!(me.exe, std::env::current_exe().unwrap());
        let meta = std::fs::metadata(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(me.key.ino, meta.ino());
        assert!(list_pids().contains(&std::process::id()));
        // Not on overlayfs: maps and stat agree.
        assert_eq!(me.key.dev, meta.dev());
        // pid_max is at most 2^22: this pid cannot exist.
        assert!(matches!(
            inspect(4_194_304 + 7, None),
            Err(ProcError::Gone { .. })
        ));
    }

    #[test]
    fn real_file_identity_comes_from_maps() {
        let maps = "00400000-00401000 r--p 00000000 00:3f 123 /app/shop\n00401000-00500000 r-xp 00001000 fd:01 98765 /app/shop\n";
        // The first mapping of the file wins (all mappings of one file agree in practice).
        let k = real_file_key(maps, std::path::Path::new("/app/shop")).unwrap();
        assert_eq!(
            k,
            FileKey {
                dev: libc::makedev(0, 0x3f),
                ino: 123
            }
        );
        assert_eq!(
            real_file_key(maps, std::path::Path::new("/app/other")),
            None
        );
    }
}
