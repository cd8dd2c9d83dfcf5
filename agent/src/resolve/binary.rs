//! One ELF binary, memory-mapped: its function table (Go pclntab or ELF symbols), the Go
//! version, and the probe sites of its functions.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memmap2::Mmap;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::Endianness;

use super::buildinfo;
use super::dwarf::DwarfCache;
use super::error::{go_package, last_component, ResolveError};
use super::pclntab::{PclnState, Pclntab};
use super::sites;

/// A function of the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncInfo {
    pub name: String,
    /// ELF virtual address of the first instruction.
    pub addr: u64,
    pub size: u64,
}

/// Where uprobes go in one function. All offsets are file offsets (what a uprobe takes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSites {
    /// The first instruction.
    pub entry_offset: u64,
    /// The first instruction after Go's stack-growth check (`CMP ..., [R14+0x10]; Jcc`);
    /// equal to `entry_offset` when the function has none. A probe here fires once per
    /// call, where the entry fires again after the stack grows.
    pub body_offset: u64,
    /// Every RET (C3 / C2 iw) of the function.
    pub ret_offsets: Vec<u64>,
}

/// A function as the tables store it: its name stays in the file until asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawFunc {
    pub addr: u64,
    pub size: u64,
    /// File offset of the NUL-terminated name.
    pub name_off: usize,
    /// Go's _func.funcID (0 for ordinary functions and for ELF symbols).
    pub func_id: u8,
    /// Offset of Go's _func record from the functab (0 for ELF symbols).
    pub func_off: u32,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Load {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
}

/// An ELF symbol table (.symtab or .dynsym): file ranges of its entries and strings.
#[derive(Debug, Clone, Copy)]
struct SymTab {
    off: usize,
    count: usize,
    str_off: usize,
    str_len: usize,
}

/// Longest name read from a table (Go generic instantiations can be long).
const MAX_NAME: usize = 1 << 16;

/// A memory-mapped ELF binary. Cheap to open; tables are parsed when first asked for and
/// kept. `Send + Sync`: share it with `Arc`.
pub struct Binary {
    pub(super) path: PathBuf,
    pub(super) map: Mmap,
    machine: u16,
    loads: Vec<Load>,
    pcln: PclnState,
    go_version: Option<String>,
    symtabs: Vec<SymTab>,
    has_symtab: bool,
    pub(super) has_dwarf: bool,
    funcs: OnceLock<Vec<RawFunc>>,
    by_name: OnceLock<Vec<u32>>,
    pub(super) dwarf: OnceLock<DwarfCache>,
}

impl std::fmt::Debug for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binary")
            .field("path", &self.path)
            .field("size", &self.map.len())
            .field("go_version", &self.go_version)
            .field("is_go", &self.is_go())
            .field("has_symtab", &self.has_symtab)
            .field("has_dwarf", &self.has_dwarf)
            .finish()
    }
}

impl Binary {
    /// Maps `path` and reads its ELF headers; no per-function work happens here.
    pub fn open(path: &Path) -> Result<Binary, ResolveError> {
        let io = |source| ResolveError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        let len = meta.len();
        let not_elf = |reason: String| ResolveError::NotElf {
            path: path.to_path_buf(),
            reason,
        };
        if !meta.is_file() {
            return Err(not_elf("it is not a regular file".into()));
        }
        if len < 4 {
            return Err(not_elf(format!("the file has only {len} bytes")));
        }
        // SAFETY: the map is read-only. Another process may truncate or rewrite the file
        // while it is mapped; every read of the map below is bounds-checked against the
        // length taken here, and executables in use are not rewritten in place in practice
        // (the kernel refuses writes to running executables: ETXTBSY).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let data: &[u8] = &map;
        if data[..4] != elf::ELFMAG[..] {
            return Err(not_elf(format!(
                "it starts with {:02x} {:02x} {:02x} {:02x}, not 7f 45 4c 46 (\\x7fELF)",
                data[0], data[1], data[2], data[3]
            )));
        }
        let malformed = |reason: String| ResolveError::Malformed {
            path: path.to_path_buf(),
            reason,
        };
        if data.len() < 64 {
            return Err(malformed(format!(
                "the file has only {} bytes, less than an ELF header",
                data.len()
            )));
        }
        let (class, endian_byte, machine) =
            (data[4], data[5], u16::from_le_bytes([data[18], data[19]]));
        if class != elf::ELFCLASS64 || endian_byte != elf::ELFDATA2LSB {
            return Err(ResolveError::UnsupportedArch {
                path: path.to_path_buf(),
                class: match (class, endian_byte) {
                    (elf::ELFCLASS32, _) => "32-bit",
                    (_, elf::ELFDATA2MSB) => "big-endian",
                    _ => "unknown-class",
                },
                machine,
            });
        }
        let header = elf::FileHeader64::<Endianness>::parse(data)
            .map_err(|e| malformed(format!("ELF header: {e}")))?;
        let endian = header
            .endian()
            .map_err(|e| malformed(format!("ELF header: {e}")))?;
        let phdrs = header
            .program_headers(endian, data)
            .map_err(|e| malformed(format!("program headers: {e}")))?;
        let mut loads = Vec::new();
        for (i, ph) in phdrs.iter().enumerate() {
            if ph.p_type(endian) != elf::PT_LOAD {
                continue;
            }
            let (offset, filesz) = (ph.p_offset(endian), ph.p_filesz(endian));
            if offset.checked_add(filesz).is_none_or(|e| e > len) {
                return Err(malformed(format!(
                    "loadable segment {i} covers file bytes [{offset:#x}, {:#x}) but the file ends at {len:#x}",
                    offset.saturating_add(filesz)
                )));
            }
            loads.push(Load {
                vaddr: ph.p_vaddr(endian),
                offset,
                filesz,
            });
        }
        let sections = header
            .sections(endian, data)
            .map_err(|e| malformed(format!("section headers: {e}")))?;

        let mut text_addr = None;
        let mut pcln_range = None;
        let mut buildinfo_range = None;
        let mut symtabs = Vec::new();
        let mut has_symtab = false;
        let mut has_dwarf = false;
        for shdr in sections.iter() {
            let name = sections.section_name(endian, shdr).unwrap_or_default();
            let (off, size) = (shdr.sh_offset(endian), shdr.sh_size(endian));
            let in_file = shdr.sh_type(endian) != elf::SHT_NOBITS
                && off.checked_add(size).is_some_and(|e| e <= len);
            match name {
                b".text" => text_addr = Some(shdr.sh_addr(endian)),
                b".gopclntab" | b".data.rel.ro.gopclntab" => {
                    if !in_file {
                        return Err(malformed(format!(
                            "section {} [{off:#x}, +{size:#x}) is past the end of the file ({len} bytes)",
                            String::from_utf8_lossy(name)
                        )));
                    }
                    pcln_range = Some((off as usize, size as usize));
                }
                b".go.buildinfo" if in_file => {
                    buildinfo_range = Some((off as usize, size as usize))
                }
                b".debug_info" | b".zdebug_info" => has_dwarf = size > 0,
                _ => {}
            }
            let sh_type = shdr.sh_type(endian);
            if (sh_type == elf::SHT_SYMTAB || sh_type == elf::SHT_DYNSYM) && in_file {
                let link = shdr.sh_link(endian) as usize;
                let strtab = sections.section(object::SectionIndex(link)).ok();
                if let Some(st) = strtab {
                    let (so, ss) = (st.sh_offset(endian), st.sh_size(endian));
                    if so.checked_add(ss).is_some_and(|e| e <= len) {
                        let count = size as usize / 24;
                        if sh_type == elf::SHT_SYMTAB && count > 1 {
                            has_symtab = true;
                        }
                        symtabs.push(SymTab {
                            off: off as usize,
                            count,
                            str_off: so as usize,
                            str_len: ss as usize,
                        });
                    }
                }
            }
        }

        let pcln = match pcln_range {
            Some((off, size)) => Pclntab::parse(data, off, size, text_addr),
            None if sections.is_empty() => {
                // No section headers (removed by a tool such as sstrip): scan the
                // non-executable segments for a pclntab header.
                let mut state = PclnState::Absent;
                for ph in phdrs.iter() {
                    if ph.p_type(endian) != elf::PT_LOAD || ph.p_flags(endian) & elf::PF_X != 0 {
                        continue;
                    }
                    let l = loads.iter().find(|l| l.offset == ph.p_offset(endian));
                    let Some(l) = l else { continue };
                    let s = Pclntab::scan(
                        data,
                        l.offset as usize,
                        (l.offset + l.filesz) as usize,
                        text_addr,
                    );
                    if !matches!(s, PclnState::Absent) {
                        state = s;
                        break;
                    }
                }
                state
            }
            None => PclnState::Absent,
        };

        let no_sections = sections.is_empty();
        let mut bin = Binary {
            path: path.to_path_buf(),
            map,
            machine,
            loads,
            pcln,
            go_version: None,
            symtabs,
            has_symtab,
            has_dwarf,
            funcs: OnceLock::new(),
            by_name: OnceLock::new(),
            dwarf: OnceLock::new(),
        };
        let blob_off = match buildinfo_range {
            Some((off, _)) => Some(off),
            None if no_sections => buildinfo::scan(&bin.map),
            None => None,
        };
        if let Some(off) = blob_off {
            let end = buildinfo_range.map_or(bin.map.len(), |(o, s)| o + s);
            let blob = &bin.map[off..end.min(off + 64 * 1024)];
            bin.go_version = buildinfo::parse(blob, |addr, n| bin.read_vaddr(addr, n));
        }
        Ok(bin)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Go release that built the binary, e.g. "go1.27.3", from `.go.buildinfo`.
    pub fn go_version(&self) -> Option<&str> {
        self.go_version.as_deref()
    }

    /// True when the binary has a Go function table (pclntab), of any Go release.
    pub fn is_go(&self) -> bool {
        !matches!(self.pcln, PclnState::Absent)
    }

    /// True when the binary has a non-empty `.symtab` (it was not stripped).
    pub fn has_symtab(&self) -> bool {
        self.has_symtab
    }

    /// True when the binary has DWARF debug information (`.debug_info` or `.zdebug_info`).
    pub fn has_dwarf(&self) -> bool {
        self.has_dwarf
    }

    /// The file offset of virtual address `addr`, through the PT_LOAD segment holding it.
    pub fn file_offset(&self, addr: u64) -> Option<u64> {
        self.load_of(addr, 1).map(|l| addr - l.vaddr + l.offset)
    }

    fn load_of(&self, addr: u64, len: u64) -> Option<&Load> {
        self.loads.iter().find(|l| {
            addr >= l.vaddr
                && addr
                    .checked_add(len)
                    .is_some_and(|e| e <= l.vaddr + l.filesz)
        })
    }

    /// `len` bytes of the file at virtual address `addr`.
    pub(super) fn read_vaddr(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let l = self.load_of(addr, len as u64)?;
        let off = (addr - l.vaddr + l.offset) as usize;
        self.map.get(off..off + len)
    }

    /// The NUL-terminated name at file offset `off`.
    pub(super) fn name_bytes(&self, off: usize) -> &[u8] {
        let rest = self.map.get(off..).unwrap_or_default();
        let rest = &rest[..rest.len().min(MAX_NAME)];
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    fn info(&self, f: &RawFunc) -> FuncInfo {
        FuncInfo {
            name: String::from_utf8_lossy(self.name_bytes(f.name_off)).into_owned(),
            addr: f.addr,
            size: f.size,
        }
    }

    /// The function table, built once: pclntab for Go binaries, ELF symbols otherwise.
    pub(super) fn raw_funcs(&self) -> Result<&[RawFunc], ResolveError> {
        if let Some(v) = self.funcs.get() {
            return Ok(v);
        }
        let v = self.build_funcs()?;
        Ok(self.funcs.get_or_init(|| v))
    }

    fn build_funcs(&self) -> Result<Vec<RawFunc>, ResolveError> {
        match &self.pcln {
            PclnState::Ok(p) => {
                let mut v = Vec::with_capacity(p.nfunc);
                p.for_each_func(&self.map, |addr, size, name_off, func_id, func_off| {
                    v.push(RawFunc {
                        addr,
                        size,
                        name_off,
                        func_id,
                        func_off,
                    })
                })
                .map_err(|reason| ResolveError::BadPclntab {
                    path: self.path.clone(),
                    reason,
                })?;
                Ok(v)
            }
            PclnState::Unsupported { magic } => Err(ResolveError::UnsupportedGoVersion {
                path: self.path.clone(),
                go_version: self.go_version.clone(),
                magic: *magic,
            }),
            PclnState::Bad(reason) => Err(ResolveError::BadPclntab {
                path: self.path.clone(),
                reason: reason.clone(),
            }),
            PclnState::Absent => {
                let mut v = self.elf_raw_symbols();
                if v.is_empty() {
                    return Err(ResolveError::NoFunctions {
                        path: self.path.clone(),
                    });
                }
                v.sort_by(|a, b| {
                    (a.addr, self.name_bytes(a.name_off))
                        .cmp(&(b.addr, self.name_bytes(b.name_off)))
                });
                v.dedup_by(|b, a| {
                    a.addr == b.addr && self.name_bytes(a.name_off) == self.name_bytes(b.name_off)
                });
                Ok(v)
            }
        }
    }

    /// STT_FUNC symbols of `.symtab` and `.dynsym` that are defined in the binary.
    fn elf_raw_symbols(&self) -> Vec<RawFunc> {
        let mut v = Vec::new();
        for t in &self.symtabs {
            let Some(syms) = self.map.get(t.off..t.off + t.count * 24) else {
                continue;
            };
            for s in syms.chunks_exact(24) {
                let st_name = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize;
                let st_info = s[4];
                let st_shndx = u16::from_le_bytes([s[6], s[7]]);
                let value = u64::from_le_bytes(s[8..16].try_into().unwrap_or_default());
                let size = u64::from_le_bytes(s[16..24].try_into().unwrap_or_default());
                let ty = st_info & 0xf;
                if (ty != elf::STT_FUNC && ty != elf::STT_GNU_IFUNC)
                    || st_shndx == elf::SHN_UNDEF
                    || st_shndx >= elf::SHN_LORESERVE
                    || value == 0
                    || st_name == 0
                    || st_name >= t.str_len
                {
                    continue;
                }
                v.push(RawFunc {
                    addr: value,
                    size,
                    name_off: t.str_off + st_name,
                    func_id: 0,
                    func_off: 0,
                });
            }
        }
        v
    }

    /// The STT_FUNC symbols of the ELF symbol tables (`.symtab`, `.dynsym`), sorted by
    /// address: what a non-Go binary's function table is made of, and for a Go binary a
    /// cross-check of its pclntab.
    pub fn elf_symbols(&self) -> Vec<FuncInfo> {
        let mut v: Vec<FuncInfo> = self
            .elf_raw_symbols()
            .iter()
            .map(|f| self.info(f))
            .collect();
        v.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
        v.dedup();
        v
    }

    /// For a Go function starting at `addr`: its `args` size from the pclntab (spill
    /// space of register arguments plus stack arguments and results), if known.
    pub(super) fn go_args_size(&self, addr: u64) -> Option<u64> {
        let PclnState::Ok(p) = &self.pcln else {
            return None;
        };
        let funcs = self.raw_funcs().ok()?;
        let i = funcs.partition_point(|f| f.addr < addr);
        let f = funcs.get(i).filter(|f| f.addr == addr)?;
        p.args_size(&self.map, f.func_off)
    }

    /// Every function, sorted by address.
    pub fn functions(&self) -> Result<Vec<FuncInfo>, ResolveError> {
        Ok(self.raw_funcs()?.iter().map(|f| self.info(f)).collect())
    }

    /// Number of functions, without building their names.
    pub fn function_count(&self) -> Result<usize, ResolveError> {
        Ok(self.raw_funcs()?.len())
    }

    fn name_index(&self) -> Result<&[u32], ResolveError> {
        if let Some(v) = self.by_name.get() {
            return Ok(v);
        }
        let funcs = self.raw_funcs()?;
        // Go names an ABI0 wrapper (an autogenerated function) like the function it
        // wraps; the wrapper funcID is the last one of Go's list, so the largest present.
        let wrapper_id = funcs.iter().map(|f| f.func_id).max().unwrap_or(0);
        let is_wrapper = |f: &RawFunc| wrapper_id > 0 && f.func_id == wrapper_id;
        let mut keyed: Vec<(&[u8], bool, u32)> = funcs
            .iter()
            .enumerate()
            .map(|(i, f)| (self.name_bytes(f.name_off), is_wrapper(f), i as u32))
            .collect();
        keyed.sort_unstable();
        let v: Vec<u32> = keyed.into_iter().map(|(_, _, i)| i).collect();
        Ok(self.by_name.get_or_init(|| v))
    }

    /// The function named `symbol` (exactly as the binary spells it, e.g.
    /// `net/http.(*Client).Get`). Where several share the name (a Go function and its
    /// ABI0 wrapper), the function that is not a wrapper wins, then the lowest address.
    pub fn find_function(&self, symbol: &str) -> Result<FuncInfo, ResolveError> {
        let funcs = self.raw_funcs()?;
        let idx = self.name_index()?;
        let want = symbol.as_bytes();
        let pos = idx.partition_point(|&i| self.name_bytes(funcs[i as usize].name_off) < want);
        if let Some(&i) = idx.get(pos) {
            if self.name_bytes(funcs[i as usize].name_off) == want {
                return Ok(self.info(&funcs[i as usize]));
            }
        }
        Err(ResolveError::NotFound {
            path: self.path.clone(),
            symbol: symbol.to_string(),
            inlined: self.name_in_funcnametab(want),
            similar: self.similar(symbol, funcs),
        })
    }

    /// True when `name` is one of the pclntab's function names (inlined functions keep
    /// their names there for the inline trees of their callers).
    fn name_in_funcnametab(&self, name: &[u8]) -> bool {
        match &self.pcln {
            PclnState::Ok(p) if !name.is_empty() => {
                p.funcnames(&self.map).split(|&b| b == 0).any(|n| n == name)
            }
            _ => false,
        }
    }

    /// Up to 5 functions with the same last name component, in the same package if any.
    fn similar(&self, symbol: &str, funcs: &[RawFunc]) -> Vec<String> {
        let last = last_component(symbol);
        let pkg = go_package(symbol);
        let mut same_pkg = Vec::new();
        let mut anywhere = Vec::new();
        let mut seen = HashSet::new();
        for f in funcs {
            let Ok(name) = std::str::from_utf8(self.name_bytes(f.name_off)) else {
                continue;
            };
            if last_component(name) != last || !seen.insert(name) {
                continue;
            }
            if go_package(name) == pkg {
                if same_pkg.len() < 5 {
                    same_pkg.push(name.to_string());
                }
            } else if anywhere.len() < 5 {
                anywhere.push(name.to_string());
            }
        }
        if same_pkg.is_empty() {
            anywhere
        } else {
            same_pkg
        }
    }

    fn check_x86_64(&self) -> Result<(), ResolveError> {
        if self.machine == elf::EM_X86_64 {
            Ok(())
        } else {
            Err(ResolveError::UnsupportedArch {
                path: self.path.clone(),
                class: "64-bit",
                machine: self.machine,
            })
        }
    }

    /// The file offset and bytes of a function.
    fn code(
        &self,
        name: impl FnOnce() -> String,
        addr: u64,
        size: u64,
    ) -> Result<(u64, &[u8]), ResolveError> {
        let not_mapped = || ResolveError::AddressNotMapped {
            path: self.path.clone(),
            symbol: name(),
            addr,
        };
        let Some(l) = self.load_of(addr, size.max(1)) else {
            return Err(not_mapped());
        };
        let off = addr - l.vaddr + l.offset;
        match self.map.get(off as usize..(off + size) as usize) {
            Some(code) => Ok((off, code)),
            None => Err(not_mapped()),
        }
    }

    /// The probe sites of `f`: entry, body (after the stack-growth check) and every RET.
    pub fn probe_sites(&self, f: &FuncInfo) -> Result<ProbeSites, ResolveError> {
        self.check_x86_64()?;
        let (entry, code) = self.code(|| f.name.clone(), f.addr, f.size)?;
        let mut ret_offsets = Vec::new();
        let body = sites::scan(code, |o| ret_offsets.push(entry + o));
        Ok(ProbeSites {
            entry_offset: entry,
            body_offset: entry + body,
            ret_offsets,
        })
    }

    /// Computes the probe sites of every function (on all cores) and returns how many
    /// RETs there are in total. For benchmarks and warm-up: nothing is kept.
    pub fn all_probe_sites(&self) -> Result<usize, ResolveError> {
        self.check_x86_64()?;
        let funcs = self.raw_funcs()?;
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 16);
        let total: u64 = funcs.iter().map(|f| f.size).sum();
        // Cut the table into runs of about the same number of bytes.
        let mut chunks = Vec::with_capacity(threads);
        let (mut start, mut acc) = (0usize, 0u64);
        let per = total / threads as u64 + 1;
        for (i, f) in funcs.iter().enumerate() {
            acc += f.size;
            if acc >= per {
                chunks.push(&funcs[start..=i]);
                start = i + 1;
                acc = 0;
            }
        }
        chunks.push(&funcs[start..]);
        let work = |chunk: &[RawFunc]| -> Result<usize, ResolveError> {
            let mut rets = 0usize;
            for f in chunk {
                let (_, code) = self.code(
                    || String::from_utf8_lossy(self.name_bytes(f.name_off)).into_owned(),
                    f.addr,
                    f.size,
                )?;
                let body = sites::scan(code, |_| rets += 1);
                std::hint::black_box(body);
            }
            Ok(rets)
        };
        if chunks.len() == 1 {
            return work(chunks[0]);
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = chunks.iter().map(|&c| s.spawn(move || work(c))).collect();
            let mut sum = 0;
            for h in handles {
                sum += h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
            }
            Ok(sum)
        })
    }

    /// Checks the fast RET scan against a full iced-x86 decode of every function.
    /// Returns how many functions were compared, or the first difference.
    #[doc(hidden)]
    pub fn check_fast_decoder(&self) -> Result<usize, String> {
        let funcs = self.raw_funcs().map_err(|e| e.to_string())?;
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        for f in funcs {
            let name = || String::from_utf8_lossy(self.name_bytes(f.name_off)).into_owned();
            let (_, code) = self.code(name, f.addr, f.size).map_err(|e| e.to_string())?;
            fast.clear();
            slow.clear();
            let b1 = sites::scan(code, |o| fast.push(o));
            let b2 = sites::scan_iced(code, |o| slow.push(o));
            if b1 != b2 || fast != slow {
                return Err(format!(
                    "{} at {:#x}: fast scan body {b1:#x} RETs {fast:x?}, iced body {b2:#x} RETs {slow:x?}",
                    name(),
                    f.addr
                ));
            }
        }
        Ok(funcs.len())
    }
}
