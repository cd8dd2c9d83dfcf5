//! Go's module data (`runtime.firstmoduledata`, a `runtime.moduledata` in Go's
//! runtime/symtab.go): the runtime's own description of the binary. Its `text` field is
//! the base of every function entry offset of the pclntab; its `gofunc` field the base of
//! every funcdata offset (inline trees).
//!
//! Layout (amd64, Go 1.18 to 1.27): `pcHeader *pcHeader` at 0, then the slices
//! funcnametab (8), cutab (32), filetab (56), pctab (80), pclntable (104), ftab (128),
//! then findfunctab (152), minpc (160), maxpc (168), text (176), etext (184). Later fields
//! moved between releases (see [`GOFUNC_OFFSETS`]; Go 1.26 adds `epclntab` after `gofunc`),
//! among them where the runtime type descriptors are (`types`, `etypes`) and how they are
//! listed: `typelinks` (offsets of the types from `types`) and `itablinks` (pointers to the
//! itabs) up to Go 1.26, a contiguous run of descriptors and itabs in Go 1.27
//! (`typedesclen`, `itaboffset`, `itabsize`).

use super::pclntab::Pclntab;
use crate::resolve::elf::{u64_at, ElfFile};

/// What gprobe uses of the module data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModuleData {
    /// Link-time address of the module data.
    pub addr: u64,
    /// Where function entry offsets count from (`runtime.text`).
    pub text: u64,
    /// Where funcdata offsets count from (`go:func.*`), when recognized.
    pub gofunc: Option<u64>,
    /// Where the runtime type descriptors are, when recognized.
    pub types: Option<TypeSection>,
}

/// The runtime type descriptors of a module (link-time addresses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TypeSection {
    /// `runtime.types`: the base of every nameOff and typeOff.
    pub types: u64,
    pub etypes: u64,
    pub links: TypeLinks,
}

/// How a module lists its descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TypeLinks {
    /// Go 1.18 to 1.26: `typelinks []int32` (offsets from `types` of the types reflect
    /// can look up) and `itablinks []*itab`, each as (address of the array, length).
    Tables {
        typelinks: (u64, u64),
        itablinks: (u64, u64),
    },
    /// Go 1.27: descriptors from `types + 8` on, the typelinked ones in the first
    /// `typedesclen` bytes, then the others; the itabs in `[types + itaboffset,
    /// types + itaboffset + itabsize)`.
    Contiguous {
        typedesclen: u64,
        itaboffset: u64,
        itabsize: u64,
    },
}

const OFF_FUNCNAMETAB: u64 = 8;
const OFF_FTAB: u64 = 128;
const OFF_MINPC: u64 = 160;
const OFF_MAXPC: u64 = 168;
const OFF_TEXT: u64 = 176;
const OFF_ETEXT: u64 = 184;

/// Offsets of `gofunc` (preceded by `rodata`): Go 1.27 (after types, typedesclen, etypes,
/// itaboffset, itabsize, rodata), Go 1.20-1.24 (covctrs/ecovctrs added), Go 1.18/1.19.
/// Tried in this order: at a wrong offset of another layout the pair of words is a
/// length or a slice capacity, which is not an address of the file.
const GOFUNC_OFFSETS: [u64; 3] = [344, 320, 304];

/// The bytes read of a candidate: up to the end of `itablinks` in Go 1.26.
const WINDOW: u64 = 408;

/// Where `types` is, by the gofunc offset that matched (the same order).
const TYPES_OFFSETS: [u64; 3] = [296, 296, 280];

/// Words of the module data as the loaded program sees them: a word with an
/// R_X86_64_RELATIVE relocation holds its addend (the link-time address) once loaded,
/// whatever the file holds there (0 in some position-independent builds).
struct Window {
    words: Vec<u64>,
}

impl Window {
    fn read(elf: &ElfFile, addr: u64) -> Option<Window> {
        let bytes = elf.read_vaddr(addr, WINDOW as usize)?;
        let mut words: Vec<u64> = bytes.chunks_exact(8).filter_map(|w| u64_at(w, 0)).collect();
        elf.for_each_relative_reloc(|at, addend| {
            if at >= addr && at < addr + WINDOW && (at - addr) % 8 == 0 {
                words[((at - addr) / 8) as usize] = addend;
            }
        });
        Some(Window { words })
    }

    fn at(&self, off: u64) -> u64 {
        self.words.get((off / 8) as usize).copied().unwrap_or(0)
    }
}

/// Finds and validates the module data of the binary whose pclntab `p` is at virtual
/// address `pcln_vaddr`. Candidates, in order: the `runtime.firstmoduledata` symbol, the
/// `.go.module` section (Go 1.26+), then every word of the writable segments (and every
/// relocation addend) equal to `pcln_vaddr`, since the module data starts with a pointer
/// to the pclntab's header.
pub(crate) fn find(elf: &ElfFile, p: &Pclntab, pcln_vaddr: u64) -> Option<ModuleData> {
    let data = elf.data();
    let try_at = |addr: u64| validate(elf, p, pcln_vaddr, addr);
    for addr in elf.symbol_addrs(b"runtime.firstmoduledata") {
        if let Some(m) = try_at(addr) {
            return Some(m);
        }
    }
    if let Some(s) = elf.section(b".go.module") {
        if let Some(m) = try_at(s.addr) {
            return Some(m);
        }
    }
    let want = pcln_vaddr.to_le_bytes();
    for l in elf.loads().iter().filter(|l| l.writable) {
        let (start, end) = (l.offset as usize, (l.offset + l.filesz) as usize);
        let Some(seg) = data.get(start..end) else {
            continue;
        };
        // Segments start page-aligned in the file and the module data is 8-aligned.
        for (i, w) in seg.chunks_exact(8).enumerate() {
            if w == want {
                if let Some(m) = try_at(l.vaddr + i as u64 * 8) {
                    return Some(m);
                }
            }
        }
    }
    let mut relocated = Vec::new();
    elf.for_each_relative_reloc(|at, addend| {
        if addend == pcln_vaddr {
            relocated.push(at);
        }
    });
    relocated.into_iter().find_map(try_at)
}

/// The module data at `addr`, if its fields describe the pclntab `p` (the table pointers,
/// the function count, and minpc/maxpc against the first and last function entries).
fn validate(elf: &ElfFile, p: &Pclntab, pcln_vaddr: u64, addr: u64) -> Option<ModuleData> {
    let w = Window::read(elf, addr)?;
    let data = elf.data();
    let names = pcln_vaddr + p.funcname_off as u64;
    let names_len = (p.funcname_end - p.funcname_off) as u64;
    let ftab = pcln_vaddr + p.pcln_off as u64;
    let ok = w.at(0) == pcln_vaddr
        && w.at(OFF_FUNCNAMETAB) == names
        // The table's end in the header may include alignment padding before cutab.
        && (1..=names_len).contains(&w.at(OFF_FUNCNAMETAB + 8))
        && w.at(OFF_FTAB) == ftab
        && w.at(OFF_FTAB + 8) == p.nfunc as u64 + 1;
    if !ok {
        return None;
    }
    let text = w.at(OFF_TEXT);
    let first = p.entry_off(data, 0)? as u64;
    let last = p.entry_off(data, p.nfunc)? as u64;
    if w.at(OFF_MINPC) != text.checked_add(first)?
        || w.at(OFF_MAXPC) != text.checked_add(last)?
        || w.at(OFF_ETEXT) < w.at(OFF_MAXPC)
        || elf.file_offset(text + first).is_none()
    {
        return None;
    }
    // go:func.* lies inside .rodata, past its start, in the same segment. Strictly past:
    // at another layout's offset the pair may be a slice's length and capacity (Go
    // 1.20-1.24's textsectmap at Go 1.27's offsets), equal small numbers, which a
    // position-independent file's first segment (at address 0) holds.
    let segment = |addr: u64| {
        elf.loads()
            .iter()
            .position(|l| addr >= l.vaddr && addr - l.vaddr < l.filesz)
    };
    let layout = GOFUNC_OFFSETS.iter().position(|&off| {
        let (rodata, gofunc) = (w.at(off - 8), w.at(off));
        rodata != 0
            && rodata < gofunc
            && segment(rodata).is_some()
            && segment(rodata) == segment(gofunc)
    });
    let gofunc = layout.map(|i| w.at(GOFUNC_OFFSETS[i]));
    let types = layout.and_then(|i| type_section(elf, &w, i));
    Some(ModuleData {
        addr,
        text,
        gofunc,
        types,
    })
}

/// The type descriptors' place under the layout `i` of [`GOFUNC_OFFSETS`], if its fields
/// are consistent (inside the file, lengths equal to capacities).
fn type_section(elf: &ElfFile, w: &Window, i: usize) -> Option<TypeSection> {
    let t = TYPES_OFFSETS[i];
    let types = w.at(t);
    elf.file_offset(types)?;
    let links = if i == 0 {
        let etypes = w.at(t + 16);
        let (ioff, isize) = (w.at(t + 24), w.at(t + 32));
        if ioff > etypes.checked_sub(types)? || isize > etypes - types - ioff {
            return None;
        }
        let typedesclen = w.at(t + 8);
        (typedesclen <= ioff).then_some(TypeLinks::Contiguous {
            typedesclen,
            itaboffset: ioff,
            itabsize: isize,
        })?
    } else {
        // textsectmap (a slice) follows gofunc, in Go 1.26 after `epclntab` (the end of the
        // pclntab, past gofunc); typelinks and itablinks follow it. At the other release's
        // offsets the words are not two slices (a length where a pointer goes, a pointer
        // where a capacity goes), so at most one reading passes.
        let slice = |off: u64| -> Option<(u64, u64)> {
            let (ptr, len, cap) = (w.at(off), w.at(off + 8), w.at(off + 16));
            (len == cap && (len == 0 || elf.file_offset(ptr).is_some())).then_some((ptr, len))
        };
        let gofunc_at = GOFUNC_OFFSETS[i];
        let gofunc = w.at(gofunc_at);
        let epclntab = w.at(gofunc_at + 8);
        let go126 = epclntab > gofunc && elf.file_offset(epclntab - 1).is_some();
        let tables = |extra: u64| {
            Some(TypeLinks::Tables {
                typelinks: slice(gofunc_at + extra + 32)?,
                itablinks: slice(gofunc_at + extra + 56)?,
            })
        };
        tables(0).or_else(|| go126.then(|| tables(8)).flatten())?
    };
    let etypes = w.at(if i == 0 { t + 16 } else { t + 8 });
    (etypes >= types && elf.file_offset(etypes.saturating_sub(1)).is_some()).then_some(
        TypeSection {
            types,
            etypes,
            links,
        },
    )
}

/// The word at `addr` as the loaded program sees it (relocation addend first).
pub(crate) fn relocated_word(elf: &ElfFile, addr: u64) -> Option<u64> {
    let mut relocated = None;
    elf.for_each_relative_reloc(|at, addend| {
        if at == addr {
            relocated = Some(addend);
        }
    });
    relocated.or_else(|| u64_at(elf.read_vaddr(addr, 8)?, 0))
}
