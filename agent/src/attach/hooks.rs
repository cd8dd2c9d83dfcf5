//! The process hooks (agent-ebpf/src/procs.bpf.c): BTF tracepoints on exec, fork and exit
//! that report processes and hold the ones the agent may trace, in the build for this
//! kernel: with kfuncs (6.13+), or without them and with a guardian process. They are loaded here, not
//! by aya, because they call kernel functions (kfuncs: `bpf_task_from_pid`,
//! `bpf_send_signal_task`, ...), which aya 0.14 cannot link: each such call is pointed at
//! the kernel's function of that name (its id in the kernel's BTF), and the extern
//! declarations in the object's BTF, which the kernel refuses, are made static first. The
//! maps are the ones aya created for the uprobe object (procmaps.h defines them in both).

use super::guardian::Guardian;
use super::multi::{btf_fd, map_fd};
use super::sys::{self, Cmd, ProgLoad};
use aya::Ebpf;
use aya_obj::btf::{Btf, BtfKind};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use std::os::fd::{AsRawFd, OwnedFd};

const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_RAW_TP: u32 = 23;
const BPF_PSEUDO_KFUNC_CALL: u8 = 2;
const BTF_KIND_FUNC: u32 = 12;
const BTF_FUNC_EXTERN: u32 = 2;

/// The process hooks' object (exec, fork, exit), with kfuncs.
static PROCS_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/procs.bpf.o"));
/// The same hooks built without kfuncs, for kernels before 6.13.
static PROCS_COMPAT_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/procs_compat.bpf.o"));

/// The programs and the tracepoints they attach to.
const HOOKS: [(&str, &str); 3] = [
    ("gprobe_exec", "sched_process_exec"),
    ("gprobe_fork", "sched_process_fork"),
    ("gprobe_exit", "sched_process_exit"),
];

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("the process hooks' BPF object does not parse: {0}")]
    Parse(String),
    #[error("this kernel has no kernel function {0} for BPF programs")]
    NoKfunc(String),
    #[error("starting the guardian process of held processes: {0}")]
    Guardian(#[source] std::io::Error),
    #[error("this kernel's BTF has no tracepoint {0}")]
    NoTracepoint(String),
    #[error("map {0} was not created")]
    NoMap(String),
    #[error("the process hooks' BPF object does not parse: {0}")]
    Btf(#[source] BtfError),
    #[error("relocating the process hooks: {0}")]
    Relocate(String),
    #[error("loading BPF program {program} failed: {source}")]
    Load {
        program: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("attaching BPF program {program} to tracepoint {tracepoint} failed: {source}")]
    Attach {
        program: &'static str,
        tracepoint: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// How the hooks hold processes on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookMode {
    /// With the task kfuncs (procs.bpf.o): exec and fork holds, and the exit hook resumes
    /// what a dying agent held.
    Kernel,
    /// Without them (procs_compat.bpf.o): exec holds only, resumed by the guardian process
    /// when the agent dies; why the kfunc build was not used.
    Guardian(String),
}

/// The loaded and attached hooks: closing these fds detaches them (and the kernel does so
/// when the agent dies, after the exit hook has released its holds).
#[derive(Debug)]
pub struct Hooks {
    _links: Vec<OwnedFd>,
    _progs: Vec<OwnedFd>,
    pub mode: HookMode,
    /// Where the hooks cannot resume held processes themselves.
    guardian: Option<Guardian>,
}

impl Hooks {
    /// Loads the hooks against the maps of `ebpf` (call before maps are taken out of it)
    /// and attaches them: the kfunc build where this kernel has the kfuncs, the build
    /// without them otherwise (then with a guardian process); `kernel` is the running
    /// kernel's BTF.
    pub fn load(ebpf: &Ebpf, kernel: &Btf, kfuncs: bool) -> Result<Hooks, HookError> {
        let why = if kfuncs {
            match Self::load_object(PROCS_OBJECT, ebpf, kernel) {
                Ok((progs, links)) => {
                    return Ok(Hooks {
                        _links: links,
                        _progs: progs,
                        mode: HookMode::Kernel,
                        guardian: None,
                    })
                }
                Err(e) => e.to_string(),
            }
        } else {
            format!(
                "this kernel has no kfuncs {} for BPF programs",
                super::features::TASK_KFUNCS.join(", ")
            )
        };
        let (progs, links) = Self::load_object(PROCS_COMPAT_OBJECT, ebpf, kernel)?;
        let fd = |name: &'static str| {
            ebpf.map(name)
                .and_then(map_fd)
                .ok_or_else(|| HookError::NoMap(name.into()))
        };
        let guardian = Guardian::start(fd("control")?, fd("held")?).map_err(HookError::Guardian)?;
        Ok(Hooks {
            _links: links,
            _progs: progs,
            mode: HookMode::Guardian(why),
            guardian: Some(guardian),
        })
    }

    /// Whether a hold made now would be undone if this agent died: always with the
    /// kernel's hooks, while the guardian runs otherwise.
    pub fn holds_are_guarded(&mut self) -> bool {
        self.guardian.as_mut().is_none_or(Guardian::alive)
    }

    pub fn guardian_pid(&self) -> Option<u32> {
        self.guardian.as_ref().map(Guardian::pid)
    }

    fn load_object(
        object: &[u8],
        ebpf: &Ebpf,
        kernel: &Btf,
    ) -> Result<(Vec<OwnedFd>, Vec<OwnedFd>), HookError> {
        let mut bytes = object.to_vec();
        link_kfuncs(&mut bytes, kernel)?;
        let mut obj =
            aya_obj::Object::parse(&bytes).map_err(|e| HookError::Parse(e.to_string()))?;
        obj.relocate_btf(kernel)
            .map_err(|e| HookError::Relocate(e.to_string()))?;
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
                .ok_or_else(|| HookError::NoMap(n.clone()))?;
            maps.push((n.as_str(), fd, def));
        }
        let text_sections = obj.functions.keys().map(|(s, _)| *s).collect();
        obj.relocate_maps(maps.into_iter(), &text_sections)
            .map_err(|e| HookError::Relocate(e.to_string()))?;
        obj.relocate_calls(&text_sections)
            .map_err(|e| HookError::Relocate(e.to_string()))?;
        // The program's BTF: the exit hook's callback (bpf_for_each_map_elem) needs its
        // function information.
        let btf = btf_fd(&mut obj);
        let mut progs = Vec::new();
        let mut links = Vec::new();
        for (name, tracepoint) in HOOKS {
            let target = kernel
                .id_by_type_name_kind(&format!("btf_trace_{tracepoint}"), BtfKind::Typedef)
                .map_err(|_| HookError::NoTracepoint(tracepoint.into()))?;
            let prog = obj
                .programs
                .get(name)
                .ok_or_else(|| HookError::Parse(format!("no program {name}")))?;
            let fun = &obj.functions[&prog.function_key()];
            let fd =
                load_tracing(fun, &obj.license, name, target, btf.as_ref()).map_err(|source| {
                    HookError::Load {
                        program: name,
                        source,
                    }
                })?;
            let link = attach_raw_tp(&fd).map_err(|source| HookError::Attach {
                program: name,
                tracepoint,
                source,
            })?;
            progs.push(fd);
            links.push(link);
        }
        Ok((progs, links))
    }
}

/// Points every call of an extern function (a kfunc) at the kernel's function of that
/// name, and makes the extern FUNCs of the object's BTF static (the kernel refuses extern
/// ones; nothing reads them). Works on the ELF bytes, before the object is parsed.
fn link_kfuncs(bytes: &mut [u8], kernel: &Btf) -> Result<(), HookError> {
    let mut patches = Vec::new();
    let mut btf_range = None;
    {
        let file = object::File::parse(&*bytes).map_err(|e| HookError::Parse(e.to_string()))?;
        for section in file.sections() {
            if section.name() == Ok(".BTF") {
                btf_range = section.file_range();
            }
            let Some((start, _)) = section.file_range() else {
                continue;
            };
            for (offset, rel) in section.relocations() {
                let object::RelocationTarget::Symbol(idx) = rel.target() else {
                    continue;
                };
                let sym = file
                    .symbol_by_index(idx)
                    .map_err(|e| HookError::Parse(e.to_string()))?;
                if !sym.is_undefined() {
                    continue;
                }
                let name = sym.name().map_err(|e| HookError::Parse(e.to_string()))?;
                let id = kernel
                    .id_by_type_name_kind(name, BtfKind::Func)
                    .map_err(|_| HookError::NoKfunc(name.to_string()))?;
                patches.push(((start + offset) as usize, id));
            }
        }
    }
    for (at, id) in patches {
        let insn = bytes
            .get_mut(at..at + 8)
            .ok_or_else(|| HookError::Parse(format!("relocation at {at:#x} out of range")))?;
        // bpf_insn: code, dst_reg:4 | src_reg:4, off (i16), imm (i32).
        insn[1] = (insn[1] & 0x0f) | (BPF_PSEUDO_KFUNC_CALL << 4);
        insn[2..4].copy_from_slice(&0i16.to_le_bytes());
        insn[4..8].copy_from_slice(&id.to_le_bytes());
    }
    if let Some((start, size)) = btf_range {
        let btf = &mut bytes[start as usize..(start + size) as usize];
        static_externs(btf).map_err(HookError::Btf)?;
    }
    Ok(())
}

/// Why the BTF of the process hooks' object could not be walked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BtfError {
    #[error("not little-endian BTF")]
    NotLittleEndian,
    /// `offset`: of the 4-byte word that is missing.
    #[error("BTF truncated at {offset}")]
    Truncated { offset: usize },
    #[error("unknown BTF kind {kind}")]
    UnknownKind { kind: u32 },
}

/// Makes every FUNC of extern linkage in a raw BTF blob static, in place.
fn static_externs(btf: &mut [u8]) -> Result<(), BtfError> {
    let u32_at = |b: &[u8], offset: usize| -> Result<u32, BtfError> {
        b.get(offset..offset + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
            .ok_or(BtfError::Truncated { offset })
    };
    // struct btf_header: magic u16, version u8, flags u8, hdr_len, type_off, type_len, ...
    if btf.get(0..2) != Some(&0xeb9fu16.to_le_bytes()[..]) {
        return Err(BtfError::NotLittleEndian);
    }
    let hdr_len = u32_at(btf, 4)? as usize;
    let type_off = u32_at(btf, 8)? as usize;
    let type_len = u32_at(btf, 12)? as usize;
    let (mut at, end) = (hdr_len + type_off, hdr_len + type_off + type_len);
    while at < end {
        // struct btf_type: name_off, info (vlen: bits 0-15, kind: bits 24-28), size/type.
        let info = u32_at(btf, at + 4)?;
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        if kind == BTF_KIND_FUNC && vlen as u32 == BTF_FUNC_EXTERN {
            let info = info & !0xffff; // BTF_FUNC_STATIC
            btf[at + 4..at + 8].copy_from_slice(&info.to_le_bytes());
        }
        let extra = match kind {
            1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG
            3 => 12,                      // ARRAY
            4 | 5 | 15 | 19 => vlen * 12, // STRUCT, UNION, DATASEC, ENUM64
            6 | 13 => vlen * 8,           // ENUM, FUNC_PROTO
            2 | 7..=12 | 16 | 18 => 0,
            kind => return Err(BtfError::UnknownKind { kind }),
        };
        at += 12 + extra;
    }
    Ok(())
}

/// Loads one BTF tracepoint program (`target`: the id of its `btf_trace_*` typedef).
fn load_tracing(
    fun: &aya_obj::Function,
    license: &std::ffi::CStr,
    name: &str,
    target: u32,
    btf: Option<&OwnedFd>,
) -> std::io::Result<OwnedFd> {
    let func_info = fun.func_info.func_info_bytes();
    let line_info = fun.line_info.line_info_bytes();
    let head = ProgLoad {
        prog_type: BPF_PROG_TYPE_TRACING,
        attach_type: BPF_TRACE_RAW_TP,
        fun,
        license,
        name,
    };
    let load = |log: Option<&mut Vec<u8>>| {
        // union bpf_attr, prog_load, up to attach_btf_id (offset 108).
        let mut attr = [0u8; 144];
        head.write(&mut attr, log);
        if let Some(fd) = btf {
            // prog_btf_fd, func_info_rec_size, func_info, func_info_cnt, line_info_rec_size,
            // line_info, line_info_cnt.
            attr[72..76].copy_from_slice(&(fd.as_raw_fd() as u32).to_ne_bytes());
            if fun.func_info.num_info > 0 {
                attr[76..80].copy_from_slice(&(fun.func_info_rec_size as u32).to_ne_bytes());
                attr[80..88].copy_from_slice(&(func_info.as_ptr() as u64).to_ne_bytes());
                attr[88..92].copy_from_slice(&fun.func_info.num_info.to_ne_bytes());
            }
            if fun.line_info.num_info > 0 {
                attr[92..96].copy_from_slice(&(fun.line_info_rec_size as u32).to_ne_bytes());
                attr[96..104].copy_from_slice(&(line_info.as_ptr() as u64).to_ne_bytes());
                attr[104..108].copy_from_slice(&fun.line_info.num_info.to_ne_bytes());
            }
        }
        attr[108..112].copy_from_slice(&target.to_ne_bytes());
        // SAFETY: a zero-initialized bpf_attr of the size passed; the instructions, license,
        // BTF records and log buffer it points to outlive the call.
        unsafe { sys::bpf_fd(Cmd::ProgLoad, &mut attr) }
    };
    load(None).map_err(|err| {
        sys::with_verifier_log(err, |log| {
            let _ = load(Some(log));
        })
    })
}

/// Attaches a BTF tracepoint program; the returned link detaches it when closed.
fn attach_raw_tp(prog: &OwnedFd) -> std::io::Result<OwnedFd> {
    // union bpf_attr, raw_tracepoint: name (NULL: the program's BTF target), prog_fd.
    let mut attr = [0u8; 16];
    attr[8..12].copy_from_slice(&(prog.as_raw_fd() as u32).to_ne_bytes());
    // SAFETY: a zero-initialized bpf_attr of the size passed, naming a program we own.
    unsafe { sys::bpf_fd(Cmd::RawTracepointOpen, &mut attr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob with an INT, an extern FUNC and a FUNC_PROTO with one parameter.
    fn blob() -> Vec<u8> {
        let mut types = Vec::new();
        let mut ty = |name: u32, kind: u32, vlen: u32, size: u32, extra: &[u32]| {
            for w in [name, (kind << 24) | vlen, size].iter().chain(extra) {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        ty(1, 1, 0, 4, &[32]); // [1] INT
        ty(0, 13, 1, 1, &[0, 1]); // [2] FUNC_PROTO (int)
        ty(3, BTF_KIND_FUNC, BTF_FUNC_EXTERN, 2, &[]); // [3] FUNC extern
        ty(5, BTF_KIND_FUNC, 1, 2, &[]); // [4] FUNC global
        let strings = b"\0int\0f\0g\0";
        let mut b = Vec::new();
        b.extend_from_slice(&0xeb9fu16.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&types);
        b.extend_from_slice(strings);
        b
    }

    fn linkages(b: &[u8]) -> Vec<u32> {
        // The two FUNCs are the third and fourth types: after 16 + 20 bytes of types.
        [24 + 16 + 20, 24 + 16 + 20 + 12]
            .iter()
            .map(|o| u32::from_le_bytes(b[o + 4..o + 8].try_into().unwrap()) & 0xffff)
            .collect()
    }

    #[test]
    fn extern_funcs_become_static_and_nothing_else_changes() {
        let mut b = blob();
        assert_eq!(linkages(&b), [BTF_FUNC_EXTERN, 1]);
        let before = b.clone();
        static_externs(&mut b).unwrap();
        assert_eq!(linkages(&b), [0, 1]);
        let changed = b.iter().zip(&before).filter(|(x, y)| x != y).count();
        assert_eq!(changed, 1, "only the extern's linkage byte");
    }

    #[test]
    fn a_blob_that_is_not_btf_is_refused() {
        assert_eq!(
            static_externs(&mut [0u8; 24]),
            Err(BtfError::NotLittleEndian)
        );
        let mut truncated = blob();
        truncated.truncate(40);
        let e = static_externs(&mut truncated).unwrap_err();
        assert_eq!(e, BtfError::Truncated { offset: 44 });
        assert_eq!(
            HookError::Btf(e).to_string(),
            "the process hooks' BPF object does not parse: BTF truncated at 44"
        );
        // A kind this walk does not know (31) stops it: its size is not known.
        let mut unknown = blob();
        unknown[24 + 4..24 + 8].copy_from_slice(&(31u32 << 24).to_le_bytes());
        assert_eq!(
            static_externs(&mut unknown),
            Err(BtfError::UnknownKind { kind: 31 })
        );
    }

    #[test]
    fn the_process_hooks_object_calls_only_kfuncs_this_loader_links() {
        let compat = object::File::parse(PROCS_COMPAT_OBJECT).unwrap();
        assert_eq!(
            compat
                .symbols()
                .filter(|s| s.is_undefined() && !s.name().unwrap_or("").is_empty())
                .count(),
            0,
            "the build without kfuncs calls none"
        );
        let obj = object::File::parse(PROCS_OBJECT).unwrap();
        let externs: std::collections::BTreeSet<&str> = obj
            .symbols()
            .filter(|s| s.is_undefined() && !s.name().unwrap_or("").is_empty())
            .map(|s| s.name().unwrap())
            .collect();
        assert_eq!(
            externs,
            [
                "bpf_send_signal_task",
                "bpf_task_from_pid",
                "bpf_task_release"
            ]
            .into()
        );
        let progs: Vec<&str> = HOOKS.iter().map(|h| h.0).collect();
        for p in progs {
            assert!(obj.symbol_by_name(p).is_some(), "{p}");
        }
    }
}
