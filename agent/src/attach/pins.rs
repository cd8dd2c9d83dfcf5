//! The agent's map of held processes, pinned in the BPF filesystem so that a later agent
//! finds what this one held if it dies without resuming them (the exit hook resumes them
//! in the kernel; the pin is for whatever escapes it). Each agent pins its own map, named
//! by its tgid and start time: a pin whose agent no longer runs is an orphan, which the
//! next agent reads, hands to its engine and removes.

use crate::abi::GpHold;
use aya::maps::{HashMap as BpfHashMap, Map, MapData};
use std::path::{Path, PathBuf};

/// Where bpffs is mounted, and gprobe's folder in it.
pub const BPFFS: &str = "/sys/fs/bpf";
const DIR: &str = "gprobe";
/// The mount's source when gprobe mounted it: it unmounts it again when it is empty.
const SOURCE: &str = "gprobe-bpffs";
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("mounting the BPF filesystem at {BPFFS} failed: {0}")]
    Mount(#[source] std::io::Error),
    #[error("creating {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pinning the map of held processes at {path}: {source}")]
    Pin {
        path: PathBuf,
        #[source]
        source: aya::pin::PinError,
    },
}

/// This agent's pin; removed by [`HeldPin::remove`] when the agent stops cleanly.
#[derive(Debug)]
pub struct HeldPin {
    path: PathBuf,
}

/// A process an agent that died left held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orphan {
    pub pid: u32,
    pub hold: GpHold,
}

/// The start time (clock ticks since boot) of `pid`, from /proc/PID/stat.
fn start_time(pid: u32) -> Option<u64> {
    crate::discover::procs::start_time(pid)
}

/// The pin's name for the agent `tgid` started at `start` (bpffs refuses names with dots).
fn pin_name(tgid: u32, start: u64) -> String {
    format!("held_{tgid}_{start}")
}

/// The agent a pin belongs to, from its name.
fn owner_of(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_prefix("held_")?.split('_');
    let (tgid, start) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    parts.next().is_none().then_some((tgid, start))
}

fn is_bpffs(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes the struct we pass and reads the NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0) && st.f_type == BPF_FS_MAGIC
}

/// Mounts bpffs at [`BPFFS`] when nothing is mounted there (as systemd does on most
/// distributions; a node's DaemonSet mounts the host's).
fn ensure_bpffs() -> Result<(), PinError> {
    if is_bpffs(Path::new(BPFFS)) {
        return Ok(());
    }
    std::fs::create_dir_all(BPFFS).map_err(PinError::Mount)?;
    let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
    let (src, target, fstype, opts) = (c(SOURCE), c(BPFFS), c("bpf"), c("mode=0700"));
    // SAFETY: NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            opts.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(PinError::Mount(std::io::Error::last_os_error()));
    }
    tracing::debug!("mounted the BPF filesystem at {BPFFS}");
    Ok(())
}

impl HeldPin {
    /// Pins `held` (this agent's map) and returns the processes that agents which died
    /// left held (their pins removed).
    pub fn pin(held: &Map) -> Result<(HeldPin, Vec<Orphan>), PinError> {
        ensure_bpffs()?;
        let dir = Path::new(BPFFS).join(DIR);
        std::fs::create_dir_all(&dir).map_err(|source| PinError::Dir {
            path: dir.clone(),
            source,
        })?;
        let orphans = adopt(&dir);
        let me = std::process::id();
        let path = dir.join(pin_name(me, start_time(me).unwrap_or(0)));
        // A pin of this very name is this process's own from before an exec: replaced.
        let _ = std::fs::remove_file(&path);
        held.pin(&path).map_err(|source| PinError::Pin {
            path: path.clone(),
            source,
        })?;
        Ok((HeldPin { path }, orphans))
    }

    /// Whether another gprobe that runs holds `pid` too (its pinned map lists it). Every
    /// gprobe's exec hook stops a process whose name it watches, so two of them on one
    /// machine (an agent and a `gprobe run`, two users) can hold the same process: the
    /// first to resume it would let it run before the other attached, and the other would
    /// miss its first calls believing it held it. So a gprobe removes its own hold first,
    /// then resumes the process only when no other lists it: the last one to let go
    /// resumes it (two letting go at once may both resume it: harmless).
    pub fn held_by_another(&self, pid: u32) -> bool {
        let Some(dir) = self.path.parent() else {
            return false;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let live = owner_of(&name).is_some_and(|(tgid, start)| start_time(tgid) == Some(start));
            e.path() != self.path && live && pin_holds(&e.path(), pid)
        })
    }

    /// Removes the pin (the agent stops cleanly, having resumed what it held), gprobe's
    /// folder when it is empty, and the bpffs mount when gprobe made it and it is empty.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
        unmount_if_ours();
    }
}

/// Reads and removes the pins of agents that no longer run.
fn adopt(dir: &Path) -> Vec<Orphan> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((tgid, start)) = owner_of(&name) else {
            continue;
        };
        if start_time(tgid) == Some(start) {
            continue; // its agent runs
        }
        match read_pin(&e.path()) {
            Ok(holds) => {
                if !holds.is_empty() {
                    tracing::warn!(
                        "a gprobe agent (pid {tgid}) ended leaving {} process{} held; this one takes them over",
                        holds.len(),
                        if holds.len() == 1 { "" } else { "es" }
                    );
                }
                out.extend(holds);
            }
            Err(e) => tracing::warn!(
                "reading {name}, the held processes of gprobe agent pid {tgid} that ended: {e}"
            ),
        }
        let _ = std::fs::remove_file(e.path());
    }
    out
}

/// Whether the pinned map at `path` lists `pid`: one lookup, not a read of the whole map.
fn pin_holds(path: &Path, pid: u32) -> bool {
    MapData::from_pin(path)
        .and_then(|m| BpfHashMap::<MapData, u32, GpHold>::try_from(Map::HashMap(m)))
        .is_ok_and(|map| map.get(&pid, 0).is_ok())
}

fn read_pin(path: &Path) -> Result<Vec<Orphan>, aya::maps::MapError> {
    let map = BpfHashMap::<MapData, u32, GpHold>::try_from(Map::HashMap(MapData::from_pin(path)?))?;
    Ok(map
        .iter()
        .filter_map(Result::ok)
        .map(|(pid, hold)| Orphan { pid, hold })
        .collect())
}

/// Unmounts [`BPFFS`] when gprobe mounted it (its source says so) and nothing is pinned.
fn unmount_if_ours() {
    let ours = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            // ... mount point ... - fstype source options
            let f: Vec<&str> = l.split_whitespace().collect();
            let dash = f.iter().position(|w| *w == "-");
            f.get(4) == Some(&BPFFS)
                && dash
                    .is_some_and(|d| f.get(d + 1) == Some(&"bpf") && f.get(d + 2) == Some(&SOURCE))
        });
    // The kernel's own iterators (maps.debug, progs.debug) come with every bpffs mount.
    let empty = std::fs::read_dir(BPFFS).is_ok_and(|d| {
        d.flatten()
            .all(|e| e.file_name().to_string_lossy().ends_with(".debug"))
    });
    if ours && empty {
        let target = std::ffi::CString::new(BPFFS).expect("no NUL");
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_names_its_agent() {
        assert_eq!(owner_of(&pin_name(4242, 987654)), Some((4242, 987654)));
        assert_eq!(owner_of("held_1_2_3"), None);
        assert_eq!(owner_of("held_x_2"), None);
        assert_eq!(owner_of("other"), None);
    }

    #[test]
    fn pins_of_agents_that_ended_are_taken_and_removed_and_live_ones_left() {
        let dir = std::env::temp_dir().join(format!("gprobe-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let live = dir.join(pin_name(me, start_time(me).unwrap()));
        // An agent that ended: no process has pid_max + 7; its file is no map (outside
        // bpffs), so nothing is read from it, but it is removed all the same.
        let dead = dir.join(pin_name(4_194_304 + 7, 1));
        let other = dir.join("unrelated");
        for p in [&live, &dead, &other] {
            std::fs::write(p, b"").unwrap();
        }
        assert_eq!(adopt(&dir), []);
        assert!(live.exists() && other.exists());
        assert!(!dead.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
