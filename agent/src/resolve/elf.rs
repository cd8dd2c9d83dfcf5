//! One ELF file, memory-mapped: its loadable segments, sections, symbol tables and dynamic
//! relocations, and the translation between virtual addresses and file offsets. Nothing
//! here knows about Go; the Go tables are read on top of it (`go/`).

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::Endianness;

use super::elf_error::NoteError;
use super::error::ResolveError;

/// A PT_LOAD segment: its file bytes map to [vaddr, vaddr + filesz); it takes
/// [vaddr, vaddr + memsz) in memory (the rest is zero-filled: .bss).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub writable: bool,
    pub executable: bool,
}

/// A PROGBITS or NOTE section.
#[derive(Debug, Clone)]
pub(crate) struct Section {
    /// SHT_NOTE (`.note.stapsdt`, `.note.gnu.build-id`); else SHT_PROGBITS.
    pub is_note: bool,
    /// SHF_EXECINSTR: the section holds code.
    pub executable: bool,
    pub name: Vec<u8>,
    pub addr: u64,
    /// File offset; `None` when the section runs past the end of the file.
    pub offset: Option<usize>,
    pub size: usize,
}

/// An ELF symbol table (.symtab or .dynsym): file ranges of its entries and strings.
#[derive(Debug, Clone, Copy)]
struct SymTab {
    off: usize,
    count: usize,
    str_off: usize,
    str_len: usize,
}

/// A symbol of a symbol table; its name stays in the file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sym {
    pub addr: u64,
    pub size: u64,
    /// File offset of the NUL-terminated name.
    pub name_off: usize,
    /// STT_FUNC or STT_GNU_IFUNC.
    pub is_func: bool,
    /// STT_GNU_IFUNC: the symbol is a resolver that returns the implementation to use.
    pub is_ifunc: bool,
}

/// Longest name read from a table (Go generic instantiations can be long).
const MAX_NAME: usize = 1 << 16;
const SYM_SIZE: usize = 24;
const RELA_SIZE: usize = 24;

/// The file's bytes: mapped, or (fuzzing, tests) held in memory.
enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// The mapped file and what its headers say. `Send + Sync`.
pub(crate) struct ElfFile {
    path: PathBuf,
    map: Bytes,
    machine: u16,
    entry: u64,
    loads: Vec<Load>,
    sections: Vec<Section>,
    has_section_headers: bool,
    symtabs: Vec<SymTab>,
    has_symtab: bool,
    has_dwarf: bool,
    /// File range of the dynamic RELA relocations (DT_RELA, DT_RELASZ).
    rela: Option<(usize, usize)>,
}

impl std::fmt::Debug for ElfFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfFile")
            .field("path", &self.path)
            .field("size", &self.map.len())
            .field("has_symtab", &self.has_symtab)
            .field("has_dwarf", &self.has_dwarf)
            .finish()
    }
}

impl ElfFile {
    /// Maps the file at `open` (e.g. /proc/PID/exe) and reads its ELF headers, calling it
    /// `path` in errors and reports (the path its process knows it by); no per-symbol work
    /// happens here.
    pub(crate) fn open_as(open: &Path, path: &Path) -> Result<ElfFile, ResolveError> {
        let io = |source| ResolveError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(open).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(ResolveError::NotElf {
                path: path.to_path_buf(),
                reason: "it is not a regular file".into(),
            });
        }
        if meta.len() < 4 {
            return Err(ResolveError::NotElf {
                path: path.to_path_buf(),
                reason: format!("the file has only {} bytes", meta.len()),
            });
        }
        // SAFETY: the map is read-only. Another process may truncate or rewrite the file
        // while it is mapped; every read of the map below is bounds-checked against the
        // length taken here, and executables in use are not rewritten in place in practice
        // (the kernel refuses writes to running executables: ETXTBSY).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(Bytes::Mapped(map), path)
    }

    /// An ELF file held in memory (fuzzing and tests: no file to map), named `path`.
    pub(crate) fn from_bytes(bytes: Vec<u8>, path: &Path) -> Result<ElfFile, ResolveError> {
        Self::parse(Bytes::Owned(bytes), path)
    }

    fn parse(map: Bytes, path: &Path) -> Result<ElfFile, ResolveError> {
        let len = map.len() as u64;
        let not_elf = |reason: String| ResolveError::NotElf {
            path: path.to_path_buf(),
            reason,
        };
        if len < 4 {
            return Err(not_elf(format!("the file has only {len} bytes")));
        }
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
        let mut dynamic = None;
        for (i, ph) in phdrs.iter().enumerate() {
            let (offset, filesz) = (ph.p_offset(endian), ph.p_filesz(endian));
            let in_file = offset.checked_add(filesz).is_some_and(|e| e <= len);
            match ph.p_type(endian) {
                elf::PT_LOAD if !in_file => {
                    return Err(malformed(format!(
                        "loadable segment {i} covers file bytes [{offset:#x}, {:#x}) but the file ends at {len:#x}",
                        offset.saturating_add(filesz)
                    )));
                }
                elf::PT_LOAD => loads.push(Load {
                    vaddr: ph.p_vaddr(endian),
                    offset,
                    filesz,
                    memsz: ph.p_memsz(endian),
                    writable: ph.p_flags(endian) & elf::PF_W != 0,
                    executable: ph.p_flags(endian) & elf::PF_X != 0,
                }),
                elf::PT_DYNAMIC if in_file => dynamic = Some((offset as usize, filesz as usize)),
                _ => {}
            }
        }
        let sections = header
            .sections(endian, data)
            .map_err(|e| malformed(format!("section headers: {e}")))?;

        let mut kept = Vec::new();
        let mut symtabs = Vec::new();
        let mut has_symtab = false;
        let mut has_dwarf = false;
        for shdr in sections.iter() {
            let name = sections.section_name(endian, shdr).unwrap_or_default();
            let (off, size) = (shdr.sh_offset(endian), shdr.sh_size(endian));
            let sh_type = shdr.sh_type(endian);
            let in_file =
                sh_type != elf::SHT_NOBITS && off.checked_add(size).is_some_and(|e| e <= len);
            if matches!(name, b".debug_info" | b".zdebug_info") {
                has_dwarf = size > 0;
            }
            if sh_type == elf::SHT_PROGBITS || sh_type == elf::SHT_NOTE {
                // Sections past the end of the file are reported by whoever needs them.
                kept.push(Section {
                    is_note: sh_type == elf::SHT_NOTE,
                    executable: shdr.sh_flags(endian) & elf::SHF_EXECINSTR as u64 != 0,
                    name: name.to_vec(),
                    addr: shdr.sh_addr(endian),
                    offset: in_file.then_some(off as usize),
                    size: size as usize,
                });
            }
            if (sh_type == elf::SHT_SYMTAB || sh_type == elf::SHT_DYNSYM) && in_file {
                let link = shdr.sh_link(endian) as usize;
                let strtab = sections.section(object::SectionIndex(link)).ok();
                if let Some(st) = strtab {
                    let (so, ss) = (st.sh_offset(endian), st.sh_size(endian));
                    if so.checked_add(ss).is_some_and(|e| e <= len) {
                        let count = size as usize / SYM_SIZE;
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

        let entry = header.e_entry(endian);
        let has_section_headers = !sections.is_empty();
        let mut f = ElfFile {
            path: path.to_path_buf(),
            map,
            machine,
            entry,
            loads,
            sections: kept,
            has_section_headers,
            symtabs,
            has_symtab,
            has_dwarf,
            rela: None,
        };
        f.rela = dynamic.and_then(|(off, size)| f.dynamic_rela(off, size));
        Ok(f)
    }

    /// The RELA table named by the dynamic section (PT_DYNAMIC, so that it is found in a
    /// file without section headers too).
    fn dynamic_rela(&self, off: usize, size: usize) -> Option<(usize, usize)> {
        let dynamic = self.map.get(off..off.checked_add(size)?)?;
        let (mut rela, mut relasz) = (None, None);
        for d in dynamic.chunks_exact(16) {
            let tag = u64_at(d, 0)?;
            let val = u64_at(d, 8)?;
            match tag as u32 {
                _ if tag == elf::DT_NULL as u64 => break,
                elf::DT_RELA => rela = Some(val),
                elf::DT_RELASZ => relasz = Some(val),
                _ => {}
            }
        }
        let start = self.file_offset(rela?)? as usize;
        let len = relasz? as usize;
        self.map.get(start..start.checked_add(len)?)?;
        Some((start, len))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file.
    pub(crate) fn data(&self) -> &[u8] {
        &self.map
    }

    /// The entry point (e_entry).
    pub(crate) fn entry(&self) -> u64 {
        self.entry
    }

    pub(crate) fn loads(&self) -> &[Load] {
        &self.loads
    }

    pub(crate) fn has_symtab(&self) -> bool {
        self.has_symtab
    }

    pub(crate) fn has_dwarf(&self) -> bool {
        self.has_dwarf
    }

    /// The first PROGBITS section named `name`.
    pub(crate) fn section(&self, name: &[u8]) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name && !s.is_note)
    }

    /// The first NOTE section named `name`.
    pub(crate) fn note_section(&self, name: &[u8]) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name && s.is_note)
    }

    /// The bytes of a section, `None` when it is past the end of the file.
    pub(crate) fn section_data(&self, s: &Section) -> Option<&[u8]> {
        let off = s.offset?;
        self.map.get(off..off.checked_add(s.size)?)
    }

    /// The GNU build ID (`.note.gnu.build-id`), which names the separate debug file.
    pub(crate) fn build_id(&self) -> Option<&[u8]> {
        let data = self.section_data(self.note_section(b".note.gnu.build-id")?)?;
        notes(data)
            .find(|n| n.owner == b"GNU" && n.kind == elf::NT_GNU_BUILD_ID)
            .map(|n| n.desc)
            .filter(|d| !d.is_empty())
    }

    /// The file offset of virtual address `addr` of a segment's memory image, .bss
    /// included (a USDT semaphore may be there), and whether that segment is executable.
    pub(crate) fn mem_file_offset(&self, addr: u64) -> Option<(u64, bool)> {
        self.loads
            .iter()
            .find(|l| addr >= l.vaddr && addr - l.vaddr < l.memsz.max(l.filesz))
            .map(|l| (addr - l.vaddr + l.offset, l.executable))
    }

    /// The file offset of virtual address `addr`, through the PT_LOAD segment holding it.
    pub(crate) fn file_offset(&self, addr: u64) -> Option<u64> {
        self.load_of(addr, 1).map(|l| addr - l.vaddr + l.offset)
    }

    /// The virtual address of file offset `off`, through the PT_LOAD segment holding it.
    pub(crate) fn vaddr_of(&self, off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| off >= l.offset && off < l.offset + l.filesz)
            .map(|l| off - l.offset + l.vaddr)
    }

    fn load_of(&self, addr: u64, len: u64) -> Option<&Load> {
        self.loads.iter().find(|l| {
            addr >= l.vaddr
                && addr
                    .checked_add(len)
                    .is_some_and(|e| e <= l.vaddr + l.filesz)
        })
    }

    /// Whether virtual address `addr` is code: inside an executable segment's file bytes
    /// and, where the file has section headers, inside an executable section.
    pub(crate) fn is_code(&self, addr: u64) -> bool {
        self.load_of(addr, 1).is_some_and(|l| l.executable)
            && (!self.has_section_headers
                || self
                    .sections
                    .iter()
                    .any(|s| s.executable && addr >= s.addr && addr - s.addr < s.size as u64))
    }

    /// How many bytes of the file's segment holding `addr` follow it (0: none holds it).
    pub(crate) fn bytes_in_segment(&self, addr: u64) -> u64 {
        self.load_of(addr, 1)
            .map_or(0, |l| l.vaddr + l.filesz - addr)
    }

    /// `len` bytes of the file at virtual address `addr`.
    pub(crate) fn read_vaddr(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let l = self.load_of(addr, len as u64)?;
        let off = (addr - l.vaddr + l.offset) as usize;
        self.map.get(off..off + len)
    }

    /// The file offset and bytes of [addr, addr + size), or `None` when not in the file.
    pub(crate) fn code(&self, addr: u64, size: u64) -> Option<(u64, &[u8])> {
        let l = self.load_of(addr, size.max(1))?;
        let off = addr - l.vaddr + l.offset;
        let code = self
            .map
            .get(off as usize..off.checked_add(size)? as usize)?;
        Some((off, code))
    }

    /// The NUL-terminated name at file offset `off`.
    pub(crate) fn name_bytes(&self, off: usize) -> &[u8] {
        let rest = self.map.get(off..).unwrap_or_default();
        let rest = &rest[..rest.len().min(MAX_NAME)];
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    pub(crate) fn check_x86_64(&self) -> Result<(), ResolveError> {
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

    /// Calls `f` for every defined, named, non-zero symbol of `.symtab` and `.dynsym`.
    pub(crate) fn for_each_symbol(&self, mut f: impl FnMut(Sym)) {
        for t in &self.symtabs {
            let Some(syms) = self.map.get(t.off..t.off + t.count * SYM_SIZE) else {
                continue;
            };
            for s in syms.chunks_exact(SYM_SIZE) {
                let st_name = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize;
                let ty = s[4] & 0xf;
                let st_shndx = u16::from_le_bytes([s[6], s[7]]);
                let value = u64_at(s, 8).unwrap_or(0);
                let size = u64_at(s, 16).unwrap_or(0);
                if st_shndx == elf::SHN_UNDEF
                    || st_shndx >= elf::SHN_LORESERVE
                    || value == 0
                    || st_name == 0
                    || st_name >= t.str_len
                {
                    continue;
                }
                f(Sym {
                    addr: value,
                    size,
                    name_off: t.str_off + st_name,
                    is_func: ty == elf::STT_FUNC || ty == elf::STT_GNU_IFUNC,
                    is_ifunc: ty == elf::STT_GNU_IFUNC,
                });
            }
        }
    }

    /// The addresses of the symbols named `name` (any type), in table order.
    pub(crate) fn symbol_addrs(&self, name: &[u8]) -> Vec<u64> {
        let mut v = Vec::new();
        let data: &[u8] = &self.map;
        self.for_each_symbol(|s| {
            // Compare in place: building every name first costs a scan for its NUL.
            let at = data.get(s.name_off..).unwrap_or_default();
            if at.starts_with(name) && at.get(name.len()) == Some(&0) {
                v.push(s.addr);
            }
        });
        v
    }

    /// Calls `f(address, addend)` for every R_X86_64_RELATIVE dynamic relocation: the
    /// word at `address` is filled with load base + addend when the file is loaded
    /// (position-independent builds).
    pub(crate) fn for_each_relative_reloc(&self, mut f: impl FnMut(u64, u64)) {
        let Some((off, len)) = self.rela else {
            return;
        };
        let Some(table) = self.map.get(off..off + len) else {
            return;
        };
        for r in table.chunks_exact(RELA_SIZE) {
            let (Some(at), Some(info), Some(addend)) = (u64_at(r, 0), u64_at(r, 8), u64_at(r, 16))
            else {
                continue;
            };
            if info & 0xffff_ffff == elf::R_X86_64_RELATIVE as u64 {
                f(at, addend);
            }
        }
    }
}

/// One ELF note: owner name, type, descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Note<'a> {
    pub owner: &'a [u8],
    pub kind: u32,
    pub desc: &'a [u8],
}

/// The notes of a NOTE section with the offset of each in it, or what is wrong with the
/// first note that does not fit the section (a malformed section is not read past it).
pub(crate) fn notes_checked(data: &[u8]) -> Result<Vec<(usize, Note<'_>)>, NoteError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < data.len() {
        let i = out.len();
        let left = data.len() - off;
        if left < 12 {
            return Err(NoteError::ShortHeader {
                index: i,
                offset: off,
                left,
            });
        }
        let (namesz, descsz, kind) = (
            u32_at(data, off).unwrap_or(0) as usize,
            u32_at(data, off + 4).unwrap_or(0) as usize,
            u32_at(data, off + 8).unwrap_or(0),
        );
        let name_start = off + 12;
        let desc_start = namesz
            .checked_next_multiple_of(4)
            .and_then(|n| name_start.checked_add(n));
        let end = desc_start.and_then(|d| d.checked_add(descsz.checked_next_multiple_of(4)?));
        let (Some(desc_start), Some(end)) = (desc_start, end) else {
            return Err(NoteError::SizesOverflow {
                index: i,
                offset: off,
                namesz,
                descsz,
            });
        };
        // The last note's descriptor padding may be left out.
        if desc_start + descsz > data.len() {
            return Err(NoteError::PastSection {
                index: i,
                offset: off,
                namesz,
                descsz,
                section: data.len(),
            });
        }
        let name = &data[name_start..name_start + namesz];
        let desc = &data[desc_start..desc_start + descsz];
        let owner = name.strip_suffix(b"\0").unwrap_or(name);
        out.push((off, Note { owner, kind, desc }));
        off = end;
    }
    Ok(out)
}

/// The notes of a NOTE section (4-byte aligned name and descriptor, as on x86-64 Linux);
/// stops at the first malformed one.
pub(crate) fn notes(data: &[u8]) -> impl Iterator<Item = Note<'_>> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let namesz = u32_at(data, off)? as usize;
        let descsz = u32_at(data, off + 4)? as usize;
        let kind = u32_at(data, off + 8)?;
        let name_start = off + 12;
        let desc_start = name_start.checked_add(namesz.checked_next_multiple_of(4)?)?;
        let end = desc_start.checked_add(descsz.checked_next_multiple_of(4)?)?;
        let name = data.get(name_start..name_start + namesz)?;
        let desc = data.get(desc_start..desc_start + descsz)?;
        off = end;
        let owner = name.strip_suffix(b"\0").unwrap_or(name);
        Some(Note { owner, kind, desc })
    })
}

pub(crate) fn u32_at(d: &[u8], off: usize) -> Option<u32> {
    let b = d.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

pub(crate) fn u64_at(d: &[u8], off: usize) -> Option<u64> {
    let b = d.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}
