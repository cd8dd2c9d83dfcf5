//! Which probe fired, on kernels without BPF cookies (before 5.15): the program looks the
//! process and the address hit up in the `sites` map (agent-ebpf/src/cookie.h), which this
//! module fills. For each uprobe attached in a process it writes the probe's cookie at every
//! address where the process maps the probed file's offset executable (read from
//! /proc/PID/maps at attach: the process is held or running, its mappings of that file
//! made), and removes them when the uprobe is detached.
//!
//! An address of a process takes one probe there: every uprobe at it runs the program, and
//! each run would find the same entry, so two probes' hits could not be told apart. A probe
//! at an address another live probe holds (two ProbeSpecs on one function) is refused with
//! the reason; one whose predecessor is being detached (a ProbeSpec changed: its old probes
//! are dropped on another thread) waits for it to be gone, so no hit is counted twice.

use super::error::{MapError, SiteError};
use crate::abi::GpSiteKey;
use aya::maps::{HashMap as BpfHashMap, MapData};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a probe waits for the one it replaces at its address to be detached (closing a
/// uprobe's perf event waits for an RCU grace period: milliseconds, more under load).
const REPLACED_WAIT: Duration = Duration::from_secs(5);

/// Who holds each address: the cookie written there, and whether its uprobe is being
/// detached. The rules, apart from the BPF map they guard.
#[derive(Debug, Default)]
struct Owners(HashMap<GpSiteKey, Owner>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    cookie: u64,
    retiring: bool,
}

/// What a new probe at an address finds there.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    Free,
    /// A probe being detached: wait for it.
    Retiring,
    /// A live probe: refuse.
    Held,
}

impl Owners {
    fn claim(&self, k: &GpSiteKey) -> Claim {
        match self.0.get(k) {
            None => Claim::Free,
            Some(o) if o.retiring => Claim::Retiring,
            Some(_) => Claim::Held,
        }
    }

    fn take(&mut self, k: GpSiteKey, cookie: u64) {
        self.0.insert(
            k,
            Owner {
                cookie,
                retiring: false,
            },
        );
    }

    fn retire(&mut self, k: &GpSiteKey, cookie: u64) {
        if let Some(o) = self.0.get_mut(k).filter(|o| o.cookie == cookie) {
            o.retiring = true;
        }
    }

    /// Whether `cookie` held `k` (then it no longer does).
    fn release(&mut self, k: &GpSiteKey, cookie: u64) -> bool {
        let held = self.0.get(k).is_some_and(|o| o.cookie == cookie);
        if held {
            self.0.remove(k);
        }
        held
    }
}

/// The BPF map the entries are written to (a plain map in the unit tests).
pub trait SiteMap: Send + 'static {
    fn put(&mut self, k: GpSiteKey, cookie: u64) -> Result<(), MapError>;
    fn delete(&mut self, k: &GpSiteKey);
}

impl SiteMap for BpfHashMap<MapData, GpSiteKey, u64> {
    fn put(&mut self, k: GpSiteKey, cookie: u64) -> Result<(), MapError> {
        self.insert(k, cookie, 0).map_err(|e| MapError(Box::new(e)))
    }

    fn delete(&mut self, k: &GpSiteKey) {
        let _ = self.remove(k);
    }
}

struct Inner<M> {
    map: M,
    owners: Owners,
}

/// The `sites` map, shared by the thread that attaches and the ones that detach.
pub struct SiteTable<M = BpfHashMap<MapData, GpSiteKey, u64>> {
    inner: Mutex<Inner<M>>,
    /// Notified when addresses are released.
    released: Condvar,
}

impl<M> std::fmt::Debug for SiteTable<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SiteTable")
    }
}

impl<M: SiteMap> SiteTable<M> {
    pub(super) fn new(map: M) -> Arc<SiteTable<M>> {
        Arc::new(SiteTable {
            inner: Mutex::new(Inner {
                map,
                owners: Owners::default(),
            }),
            released: Condvar::new(),
        })
    }

    /// Writes `cookie` at every address of `offset` in `mapped` (the target's executable
    /// mappings in its process); they are removed when the returned entries are dropped.
    /// Refused where another live probe is; waits (up to [`REPLACED_WAIT`]) where one is
    /// being detached.
    pub(super) fn add(
        self: &Arc<SiteTable<M>>,
        mapped: &TargetMappings,
        offset: u64,
        cookie: u64,
    ) -> Result<SiteEntries<M>, SiteError> {
        let pid = mapped.pid;
        let keys: Vec<GpSiteKey> = mapped
            .addresses(offset)?
            .into_iter()
            .map(|addr| GpSiteKey {
                tgid: pid,
                _pad: 0,
                addr,
            })
            .collect();
        self.add_keys(pid, keys, cookie, REPLACED_WAIT)
    }

    fn add_keys(
        self: &Arc<SiteTable<M>>,
        pid: u32,
        keys: Vec<GpSiteKey>,
        cookie: u64,
        wait: Duration,
    ) -> Result<SiteEntries<M>, SiteError> {
        // Each key written is in `entries` at once: on an error, dropping them removes
        // those written before it.
        let mut entries = SiteEntries {
            table: self.clone(),
            keys: Vec::with_capacity(keys.len()),
            cookie,
        };
        let deadline = Instant::now() + wait;
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for k in keys {
            loop {
                match inner.owners.claim(&k) {
                    Claim::Free => break,
                    Claim::Held => return Err(SiteError::Shared { pid, addr: k.addr }),
                    Claim::Retiring => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Err(SiteError::StillDetaching {
                                pid,
                                addr: k.addr,
                                waited: wait,
                            });
                        }
                        inner = self
                            .released
                            .wait_timeout(inner, left)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                }
            }
            inner.map.put(k, cookie).map_err(SiteError::Map)?;
            inner.owners.take(k, cookie);
            entries.keys.push(k);
        }
        drop(inner);
        Ok(entries)
    }
}

/// One uprobe's entries in `sites`: removed on drop (after the uprobe's perf event is
/// closed: [`super::perf::PerfLink`] drops its event first).
#[derive(Debug)]
pub struct SiteEntries<M: SiteMap = BpfHashMap<MapData, GpSiteKey, u64>> {
    table: Arc<SiteTable<M>>,
    keys: Vec<GpSiteKey>,
    cookie: u64,
}

impl<M: SiteMap> SiteEntries<M> {
    /// Marks these addresses as being detached: a probe that comes to them waits for them.
    pub(super) fn retire(&self) {
        let mut inner = self.table.inner.lock().unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            inner.owners.retire(k, self.cookie);
        }
    }
}

impl<M: SiteMap> Drop for SiteEntries<M> {
    fn drop(&mut self) {
        let mut inner = self.table.inner.lock().unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            if inner.owners.release(k, self.cookie) {
                inner.map.delete(k);
            }
        }
        drop(inner);
        self.table.released.notify_all();
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
    fn an_address_takes_one_live_probe_and_waits_only_for_one_being_detached() {
        let k = GpSiteKey {
            tgid: 7,
            _pad: 0,
            addr: 0x401000,
        };
        let mut o = Owners::default();
        assert_eq!(o.claim(&k), Claim::Free);
        o.take(k, 1);
        // Another spec's probe (or this one again) at a live probe's address: refused.
        assert_eq!(o.claim(&k), Claim::Held);
        // Retiring is by the holder only: another cookie's detach changes nothing.
        o.retire(&k, 2);
        assert_eq!(o.claim(&k), Claim::Held);
        o.retire(&k, 1);
        assert_eq!(o.claim(&k), Claim::Retiring);
        // Only the holder's release frees it (its map entry is then removed).
        assert!(!o.release(&k, 2));
        assert_eq!(o.claim(&k), Claim::Retiring);
        assert!(o.release(&k, 1));
        assert_eq!(o.claim(&k), Claim::Free);
        // Another process's same address is another key.
        o.take(k, 1);
        assert_eq!(o.claim(&GpSiteKey { tgid: 8, ..k }), Claim::Free);
    }

    /// The map as the program would see it.
    #[derive(Default, Clone)]
    struct Plain(Arc<Mutex<HashMap<GpSiteKey, u64>>>);

    impl SiteMap for Plain {
        fn put(&mut self, k: GpSiteKey, cookie: u64) -> Result<(), MapError> {
            self.0.lock().unwrap().insert(k, cookie);
            Ok(())
        }

        fn delete(&mut self, k: &GpSiteKey) {
            self.0.lock().unwrap().remove(k);
        }
    }

    #[test]
    fn a_probe_replacing_one_being_detached_waits_for_it_and_a_second_live_one_is_refused() {
        let map = Plain::default();
        let table = SiteTable::new(map.clone());
        let k = GpSiteKey {
            tgid: 7,
            _pad: 0,
            addr: 0x401000,
        };
        let wait = Duration::from_secs(10);
        let old = table.add_keys(7, vec![k], 1, wait).unwrap();
        assert_eq!(map.0.lock().unwrap().get(&k), Some(&1));
        // Another spec's probe while the first is live: refused at once.
        let t0 = Instant::now();
        assert!(matches!(
            table.add_keys(7, vec![k], 2, wait),
            Err(SiteError::Shared {
                pid: 7,
                addr: 0x401000
            })
        ));
        assert!(t0.elapsed() < wait);
        // A spec changed: the old probe is handed over to be detached, and dropped on
        // another thread once the new one waits for it.
        old.retire();
        // Not written while the old uprobe may still fire: the wait ends unanswered.
        assert!(matches!(
            table.add_keys(7, vec![k], 2, Duration::from_millis(20)),
            Err(SiteError::StillDetaching { .. })
        ));
        assert_eq!(map.0.lock().unwrap().get(&k), Some(&1));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let detacher = std::thread::spawn(move || {
            rx.recv().unwrap();
            drop(old);
        });
        let waiting = {
            let table = table.clone();
            std::thread::spawn(move || table.add_keys(7, vec![k], 2, wait))
        };
        tx.send(()).unwrap();
        detacher.join().unwrap();
        let new = waiting.join().unwrap().unwrap();
        assert_eq!(map.0.lock().unwrap().get(&k), Some(&2));
        drop(new);
        assert!(map.0.lock().unwrap().is_empty());
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
