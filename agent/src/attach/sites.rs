//! Which probe fired, on kernels without BPF cookies (before 5.15): the program looks the
//! process and the address hit up in the `sites` map (agent-ebpf/src/cookie.h), which this
//! module fills. For each uprobe attached in a process it writes the probe's cookie at every
//! address where the process maps the probed file's offset executable (read from
//! /proc/PID/maps at attach: the process is held or running, its mappings of that file
//! made), and removes them when the uprobe is detached, unless a newer uprobe at the same
//! address wrote its own since (a spec changed: the new link is made before the old one is
//! dropped, on another thread).

use super::error::{MapError, SiteError};
use crate::abi::GpSiteKey;
use aya::maps::{HashMap as BpfHashMap, MapData};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The `sites` map, shared by the thread that attaches and the one that detaches.
pub struct SiteTable {
    map: Mutex<BpfHashMap<MapData, GpSiteKey, u64>>,
}

impl std::fmt::Debug for SiteTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SiteTable")
    }
}

impl SiteTable {
    pub(super) fn new(map: BpfHashMap<MapData, GpSiteKey, u64>) -> Arc<SiteTable> {
        Arc::new(SiteTable {
            map: Mutex::new(map),
        })
    }

    /// Writes `cookie` at every address of `offset` in `mapped` (the target's executable
    /// mappings in its process); they are removed when the returned entries are dropped.
    pub(super) fn add(
        self: &Arc<SiteTable>,
        mapped: &TargetMappings,
        offset: u64,
        cookie: u64,
    ) -> Result<SiteEntries, SiteError> {
        let pid = mapped.pid;
        let addrs = mapped.addresses(offset)?;
        let keys: Vec<GpSiteKey> = addrs
            .into_iter()
            .map(|addr| GpSiteKey {
                tgid: pid,
                _pad: 0,
                addr,
            })
            .collect();
        // Each key written is in `entries` at once: on an error, dropping them removes
        // those written before it.
        let mut entries = SiteEntries {
            table: self.clone(),
            keys: Vec::with_capacity(keys.len()),
            cookie,
        };
        {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            for k in keys {
                map.insert(k, cookie, 0)
                    .map_err(|e| SiteError::Map(MapError(Box::new(e))))?;
                entries.keys.push(k);
            }
        }
        Ok(entries)
    }
}

/// One uprobe's entries in `sites`: removed on drop (after the uprobe's perf event is
/// closed: [`super::perf::PerfLink`] drops its event first).
#[derive(Debug)]
pub struct SiteEntries {
    table: Arc<SiteTable>,
    keys: Vec<GpSiteKey>,
    cookie: u64,
}

impl Drop for SiteEntries {
    fn drop(&mut self) {
        let mut map = self.table.map.lock().unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            // Under the lock that writers take: a newer uprobe's cookie at this address
            // stays.
            if map.get(k, 0).ok() == Some(self.cookie) {
                let _ = map.remove(k);
            }
        }
    }
}

/// A target file's executable mappings in one process, read once for all the uprobes
/// attached to it there.
#[derive(Debug)]
pub struct TargetMappings {
    pid: u32,
    path: PathBuf,
    /// (start, end, file offset) of each.
    ranges: Vec<(u64, u64, u64)>,
}

impl TargetMappings {
    /// `target`'s executable mappings in `pid`, from /proc/PID/maps.
    pub(super) fn read(pid: u32, target: &Path) -> Result<TargetMappings, SiteError> {
        let stat = |path: &Path| {
            std::fs::metadata(path)
                .map(|m| (m.dev(), m.ino()))
                .map_err(|source| SiteError::Stat {
                    path: path.to_path_buf(),
                    source,
                })
        };
        let want = stat(target)?;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map_err(|source| SiteError::Maps { pid, source })?;
        // Each mapped path is compared once, seen through the process's root as the target
        // is (on overlayfs both stat the same overlay file).
        let mut same: HashMap<String, bool> = HashMap::new();
        let mut ranges = Vec::new();
        for m in parse_maps(&maps) {
            if !m.exec {
                continue;
            }
            let is_target = *same.entry(m.path.to_string()).or_insert_with(|| {
                let seen = PathBuf::from(format!("/proc/{pid}/root{}", m.path));
                stat(&seen).is_ok_and(|k| k == want)
            });
            if is_target {
                ranges.push((m.start, m.end, m.offset));
            }
        }
        Ok(TargetMappings {
            pid,
            path: target.to_path_buf(),
            ranges,
        })
    }

    /// The addresses of file offset `offset` in these mappings.
    fn addresses(&self, offset: u64) -> Result<Vec<u64>, SiteError> {
        let out: Vec<u64> = self
            .ranges
            .iter()
            .filter(|(start, end, off)| offset >= *off && offset - off < end - start)
            .map(|(start, _, off)| start + (offset - off))
            .collect();
        if out.is_empty() {
            return Err(SiteError::NotMapped {
                pid: self.pid,
                path: self.path.clone(),
                offset,
            });
        }
        Ok(out)
    }
}

/// A file mapping of a /proc/PID/maps text.
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    start: u64,
    end: u64,
    exec: bool,
    offset: u64,
    path: &'a str,
}

/// The file mappings (absolute paths) of a /proc/PID/maps text.
fn parse_maps(maps: &str) -> impl Iterator<Item = Mapping<'_>> {
    maps.lines().filter_map(|line| {
        // start-end perms offset dev inode path
        let mut f = line.splitn(6, ' ');
        let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
        let path = f.nth(2)?.trim_start();
        if !path.starts_with('/') {
            return None;
        }
        let (start, end) = range.split_once('-')?;
        Some(Mapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            exec: perms.contains('x'),
            offset: u64::from_str_radix(offset, 16).ok()?,
            path,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_mappings_are_read_with_their_offsets_and_permissions() {
        let maps = "\
00400000-00401000 r--p 00000000 fd:01 1234 /usr/bin/app
00401000-00480000 r-xp 00001000 fd:01 1234 /usr/bin/app
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
7f1000000000-7f1000100000 r-xp 00028000 fd:01 99 /usr/lib/a b.so
";
        let got: Vec<Mapping> = parse_maps(maps).collect();
        assert_eq!(
            got,
            [
                Mapping {
                    start: 0x400000,
                    end: 0x401000,
                    exec: false,
                    offset: 0,
                    path: "/usr/bin/app"
                },
                Mapping {
                    start: 0x401000,
                    end: 0x480000,
                    exec: true,
                    offset: 0x1000,
                    path: "/usr/bin/app"
                },
                Mapping {
                    start: 0x7f1000000000,
                    end: 0x7f1000100000,
                    exec: true,
                    offset: 0x28000,
                    path: "/usr/lib/a b.so"
                },
            ]
        );
    }

    #[test]
    fn an_offset_is_found_at_its_address_in_this_process() {
        // This test binary's own code: the mapping holding a function's address, and the
        // offset in the file that address comes from.
        let here =
            file_mappings_are_read_with_their_offsets_and_permissions as fn() as usize as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let m = parse_maps(&maps)
            .find(|m| m.exec && m.start <= here && here < m.end)
            .expect("the test's code is mapped");
        let offset = m.offset + (here - m.start);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mapped = TargetMappings::read(std::process::id(), &exe).unwrap();
        assert_eq!(mapped.addresses(offset).unwrap(), [here]);
        assert!(matches!(
            mapped.addresses(u64::MAX / 2),
            Err(SiteError::NotMapped { .. })
        ));
    }
}
