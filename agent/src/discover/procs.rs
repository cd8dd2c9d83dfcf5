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

/// A file a process has mapped executable (a shared library, its loader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedFile {
    /// Its path as the process sees it (inside its mount namespace).
    pub path: PathBuf,
    /// The real file (device and inode from /proc/PID/maps).
    pub key: FileKey,
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
    /// The other files it has mapped executable: shared libraries and the dynamic loader.
    pub libraries: Vec<MappedFile>,
}

impl ProcInfo {
    /// A path to `file` (as the process sees it) that is valid from here: through the
    /// process's root, so a container's files are reached in its mount namespace.
    pub fn host_path(&self, file: &std::path::Path) -> PathBuf {
        let rel = file.strip_prefix("/").unwrap_or(file);
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(rel)
    }
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

/// The container id of a running process, if it runs in one.
pub fn container_of_pid(pid: u32) -> Option<String> {
    super::cgroup::container_id(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

/// Every process of a container (scanning /proc).
pub fn pids_of_container(id: &str) -> Vec<u32> {
    list_pids()
        .into_iter()
        .filter(|p| container_of_pid(*p).as_deref() == Some(id))
        .collect()
}

/// The start time (clock ticks since boot) of `pid`, from /proc/PID/stat.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields restart after
    // its last ')'. starttime is field 22, the 20th after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// True while `pid` is a process that runs (or is stopped): not gone, not a zombie.
pub fn process_runs(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state (field 3) follows the command name's last ')'.
    !matches!(
        stat.rfind(')').and_then(|i| stat.get(i + 2..i + 3)),
        Some("Z" | "X" | "x") | None
    )
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
    let mapped = std::fs::read_to_string(base.join("maps"))
        .map(|maps| mapped_files(&maps))
        .unwrap_or_default();
    let key = mapped
        .iter()
        .find(|m| m.path == exe)
        .map(|m| m.key)
        .unwrap_or(FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        });
    let libraries = mapped.into_iter().filter(|m| m.path != exe).collect();
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
        libraries,
    })
}

/// The files of a process's executable mappings, once each, from a /proc/PID/maps text.
pub fn libraries_of(pid: u32) -> Vec<MappedFile> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|maps| mapped_files(&maps))
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.path != exe)
        .collect()
}

/// The files mapped executable in a /proc/PID/maps text (each once, in order), with the
/// real device and inode: on overlayfs (container images) stat reports the overlay mount's
/// device, different in every container, while uprobes attach to the real file
/// underneath, shared by all containers of one image; maps shows the real one.
fn mapped_files(maps: &str) -> Vec<MappedFile> {
    let mut out: Vec<MappedFile> = Vec::new();
    for line in maps.lines() {
        // addr perms offset dev inode path
        let mut f = line.split_whitespace();
        let (Some(_), Some(perms), Some(_), Some(dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path: Vec<&str> = f.collect();
        // A deleted file ("... (deleted)") cannot be opened by its path any more.
        if !perms.contains('x') || path.is_empty() || path.last() == Some(&"(deleted)") {
            continue;
        }
        let path = PathBuf::from(path.join(" "));
        if !path.is_absolute() {
            continue; // [vdso] and the like
        }
        let Some(key) = parse_dev_ino(dev, ino) else {
            continue;
        };
        if !out.iter().any(|m| m.key == key) {
            out.push(MappedFile { path, key });
        }
    }
    out
}

fn parse_dev_ino(dev: &str, ino: &str) -> Option<FileKey> {
    let (maj, min) = dev.split_once(':')?;
    let (maj, min) = (
        u64::from_str_radix(maj, 16).ok()?,
        u64::from_str_radix(min, 16).ok()?,
    );
    let ino: u64 = ino.parse().ok()?;
    (ino != 0).then(|| FileKey {
        dev: libc::makedev(maj as u32, min as u32),
        ino,
    })
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
    fn mapped_files_come_from_maps_with_their_real_identity() {
        let maps = "00400000-00401000 r--p 00000000 00:3f 123 /app/shop\n\
                    00401000-00500000 r-xp 00001000 00:3f 123 /app/shop\n\
                    7f00-7f10 r-xp 00000000 fd:01 555 /usr/lib/x86_64-linux-gnu/libssl.so.3\n\
                    7f20-7f30 r-xp 00000000 fd:01 777 /tmp/my lib.so\n\
                    7f40-7f50 r-xp 00000000 fd:01 888 /tmp/gone.so (deleted)\n\
                    7ff0-7ff1 r-xp 00000000 00:00 0 [vdso]\n";
        let m = mapped_files(maps);
        let paths: Vec<&str> = m.iter().map(|f| f.path.to_str().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "/app/shop",
                "/usr/lib/x86_64-linux-gnu/libssl.so.3",
                "/tmp/my lib.so"
            ]
        );
        assert_eq!(
            m[0].key,
            FileKey {
                dev: libc::makedev(0, 0x3f),
                ino: 123
            }
        );
        assert_eq!(m[1].key.ino, 555);
    }
}
