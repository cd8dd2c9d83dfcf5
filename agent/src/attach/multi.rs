//! Uprobes through the kernel's `uprobe_multi` links (Linux 6.6+): every site of a probe in
//! one process with one syscall, a cookie per site, semaphores per site, and a detach that
//! waits for one RCU grace period per link, outside the global mutex that perf-event uprobes
//! take to unregister (measured: 150 perf-event uprobes took 17 s to close, one after
//! another). aya 0.14 cannot load a program for these links, so the uprobe program is
//! loaded a second time here, from the same object, against the maps aya created.

use super::sys::{self, Cmd, ProgLoad};
use aya::maps::Map;
use aya::Ebpf;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;
const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum MultiError {
    #[error("the BPF object does not parse: {0}")]
    Parse(String),
    #[error("relocating the uprobe program: {0}")]
    Relocate(String),
    #[error("program {0} is not in the BPF object")]
    NoProgram(String),
    #[error("map {0} was not created")]
    NoMap(String),
    #[error("loading the uprobe_multi program failed: {0}")]
    Load(#[source] std::io::Error),
}

/// The uprobe program loaded for `uprobe_multi` links.
#[derive(Debug)]
pub struct MultiProgram {
    fd: OwnedFd,
}

pub(super) fn map_fd(map: &Map) -> Option<BorrowedFd<'_>> {
    let data = match map {
        Map::Array(d)
        | Map::HashMap(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::RingBuf(d) => d,
        _ => return None,
    };
    Some(data.fd().as_fd())
}

/// Fixes up the object's BTF as aya does and loads it into the kernel; `None` where there
/// is none or the kernel refuses it (the program then loads without it).
pub(super) fn btf_fd(obj: &mut aya_obj::Object) -> Option<OwnedFd> {
    // Every BTF feature: this loader is only used where uprobe_multi exists (Linux 6.6+),
    // which has them all.
    let features = aya_obj::btf::BtfFeatures::new(true, true, true, true, true, true, true, true);
    let bytes = obj.fixup_and_sanitize_btf(&features).ok()??.to_bytes();
    // union bpf_attr, BTF_LOAD: btf, btf_log_buf, btf_size, btf_log_size, btf_log_level.
    let mut attr = [0u8; 32];
    attr[0..8].copy_from_slice(&(bytes.as_ptr() as u64).to_ne_bytes());
    attr[16..20].copy_from_slice(&(bytes.len() as u32).to_ne_bytes());
    // SAFETY: a zero-initialized bpf_attr of the size passed; `bytes` outlives the call.
    unsafe { sys::bpf_fd(Cmd::BtfLoad, &mut attr) }.ok()
}

impl MultiProgram {
    /// Loads program `name` of `object` with the uprobe_multi attach type, its map
    /// references resolved to the maps `ebpf` created (call before taking maps out of it).
    pub fn load(object: &[u8], ebpf: &Ebpf, name: &str) -> Result<MultiProgram, MultiError> {
        let mut obj =
            aya_obj::Object::parse(object).map_err(|e| MultiError::Parse(e.to_string()))?;
        let fds: Vec<(String, i32)> = ebpf
            .maps()
            .filter_map(|(n, m)| map_fd(m).map(|fd| (n.to_string(), fd.as_raw_fd())))
            .collect();
        let defs = obj.maps.clone();
        let mut maps = Vec::new();
        for (n, def) in &defs {
            let fd = fds
                .iter()
                .find(|(m, _)| m == n)
                .map(|(_, fd)| *fd)
                .ok_or_else(|| MultiError::NoMap(n.clone()))?;
            maps.push((n.as_str(), fd, def));
        }
        // The program's BTF, as aya gives the kernel for the perf-event program: with it,
        // the verifier checks each global function once instead of at every call.
        let btf = btf_fd(&mut obj);
        let text_sections = obj.functions.keys().map(|(s, _)| *s).collect();
        obj.relocate_maps(maps.into_iter(), &text_sections)
            .map_err(|e| MultiError::Relocate(e.to_string()))?;
        obj.relocate_calls(&text_sections)
            .map_err(|e| MultiError::Relocate(e.to_string()))?;
        let prog = obj
            .programs
            .get(name)
            .ok_or_else(|| MultiError::NoProgram(name.into()))?;
        let fun = &obj.functions[&prog.function_key()];
        let func_info = fun.func_info.func_info_bytes();
        let func_info_cnt = fun.func_info.num_info;
        let func_info_rec_size = fun.func_info_rec_size as u32;
        let head = ProgLoad {
            prog_type: BPF_PROG_TYPE_KPROBE,
            attach_type: BPF_TRACE_UPROBE_MULTI,
            fun,
            license: &obj.license,
            name,
        };
        let load = |log: Option<&mut Vec<u8>>, btf: Option<BorrowedFd<'_>>| {
            // union bpf_attr, prog_load: the head, then prog_btf_fd, func_info_rec_size,
            // func_info, func_info_cnt.
            let mut attr = [0u8; 128];
            head.write(&mut attr, log);
            if let (Some(fd), true) = (btf, func_info_cnt > 0) {
                attr[72..76].copy_from_slice(&(fd.as_raw_fd() as u32).to_ne_bytes());
                attr[76..80].copy_from_slice(&func_info_rec_size.to_ne_bytes());
                attr[80..88].copy_from_slice(&(func_info.as_ptr() as u64).to_ne_bytes());
                attr[88..92].copy_from_slice(&func_info_cnt.to_ne_bytes());
            }
            // SAFETY: a zero-initialized bpf_attr of the size passed; the instructions,
            // license and log buffer it points to outlive the call.
            unsafe { sys::bpf_fd(Cmd::ProgLoad, &mut attr) }
        };
        let btf = btf.as_ref().map(|f| f.as_fd());
        let mut loaded = load(None, btf);
        if loaded.is_err() && btf.is_some() {
            // Without BTF the same program verifies too, only more slowly.
            loaded = load(None, None);
        }
        match loaded {
            Ok(fd) => Ok(MultiProgram { fd }),
            Err(err) => Err(MultiError::Load(sys::with_verifier_log(err, |log| {
                let _ = load(Some(log), None);
            }))),
        }
    }

    /// Attaches the program to `sites` (file offset, cookie, semaphore offset or 0) of
    /// `target`, firing only in process `pid`; uretprobes when `ret`. One link: dropping it
    /// detaches every site.
    pub fn attach(
        &self,
        target: &Path,
        sites: &[(u64, u64, u64)],
        pid: u32,
        ret: bool,
    ) -> std::io::Result<OwnedFd> {
        let path = CString::new(target.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let offsets: Vec<u64> = sites.iter().map(|s| s.0).collect();
        let cookies: Vec<u64> = sites.iter().map(|s| s.1).collect();
        let ref_ctrs: Vec<u64> = sites.iter().map(|s| s.2).collect();
        let any_ref = ref_ctrs.iter().any(|r| *r != 0);
        // union bpf_attr, link_create: prog_fd, target_fd, attach_type, flags, then
        // uprobe_multi { path, offsets, ref_ctr_offsets, cookies, cnt, flags, pid }.
        let mut attr = [0u8; 64];
        attr[0..4].copy_from_slice(&(self.fd.as_raw_fd() as u32).to_ne_bytes());
        attr[8..12].copy_from_slice(&BPF_TRACE_UPROBE_MULTI.to_ne_bytes());
        attr[16..24].copy_from_slice(&(path.as_ptr() as u64).to_ne_bytes());
        attr[24..32].copy_from_slice(&(offsets.as_ptr() as u64).to_ne_bytes());
        if any_ref {
            attr[32..40].copy_from_slice(&(ref_ctrs.as_ptr() as u64).to_ne_bytes());
        }
        attr[40..48].copy_from_slice(&(cookies.as_ptr() as u64).to_ne_bytes());
        attr[48..52].copy_from_slice(&(sites.len() as u32).to_ne_bytes());
        let flags = if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 };
        attr[52..56].copy_from_slice(&flags.to_ne_bytes());
        attr[56..60].copy_from_slice(&pid.to_ne_bytes());
        // SAFETY: a zero-initialized bpf_attr of the size passed; the arrays and path it
        // points to outlive the call.
        unsafe { sys::bpf_fd(Cmd::LinkCreate, &mut attr) }
    }
}
