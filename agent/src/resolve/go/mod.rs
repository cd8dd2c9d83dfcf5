//! Go binaries: the function table (pclntab) and the module data that places it, the Go
//! version, DWARF signatures, inline trees, the stack-growth check, the register ABI and
//! the planning of captures under it; `types/`: Go types from DWARF or the runtime type
//! descriptors, field paths, generic instantiations, and the names of dynamic types.

pub mod abi;
pub mod gotype;
pub mod types;

pub(crate) mod buildinfo;
pub(crate) mod dwarf;
mod dwarf_types;
pub(crate) mod inline;
pub(crate) mod moduledata;
pub(crate) mod pclntab;
pub(crate) mod plan;
pub(crate) mod prologue;

use std::sync::OnceLock;

use dwarf::{DwarfParam, DwarfSignature};
use moduledata::ModuleData;
use pclntab::{PclnState, Pclntab};

use super::elf::ElfFile;
use super::error::ResolveError;
use super::RawFunc;

/// What makes a binary a Go binary, read when it is opened; the tables built from it are
/// kept by [`crate::resolve::Binary`].
#[derive(Debug)]
pub(crate) struct GoInfo {
    pcln: PclnState,
    /// Link-time address of the pclntab header.
    pcln_vaddr: Option<u64>,
    version: Option<String>,
    module: OnceLock<Option<ModuleData>>,
}

/// The entry function of an internally linked Go executable on linux/amd64.
const RT0: &[u8] = b"_rt0_amd64_linux";

impl GoInfo {
    pub(crate) fn open(elf: &ElfFile) -> Result<GoInfo, ResolveError> {
        let data = elf.data();
        let section = elf
            .section(b".gopclntab")
            .or_else(|| elf.section(b".data.rel.ro.gopclntab"));
        let (pcln, pcln_vaddr) = match section {
            Some(s) => match s.offset {
                Some(off) => (Pclntab::parse(data, off, s.size), Some(s.addr)),
                None => {
                    return Err(ResolveError::Malformed {
                        path: elf.path().to_path_buf(),
                        reason: format!(
                            "section {} (+{:#x} bytes) is past the end of the file ({} bytes)",
                            String::from_utf8_lossy(&s.name),
                            s.size,
                            data.len()
                        ),
                    })
                }
            },
            // No section headers (removed by a tool such as sstrip): scan the
            // non-executable segments for a pclntab header.
            None if !elf.has_section_headers() => {
                let mut found = (PclnState::Absent, None);
                for l in elf.loads().iter().filter(|l| !l.executable) {
                    let (start, end) = (l.offset as usize, (l.offset + l.filesz) as usize);
                    let s = Pclntab::scan(data, start, end);
                    if !matches!(s, PclnState::Absent) {
                        let vaddr = match &s {
                            PclnState::Ok(p) => elf.vaddr_of(p.off as u64),
                            _ => None,
                        };
                        found = (s, vaddr);
                        break;
                    }
                }
                found
            }
            None => (PclnState::Absent, None),
        };
        let blob = match elf.section(b".go.buildinfo") {
            Some(s) => s.offset.map(|off| (off, off + s.size)),
            None if !elf.has_section_headers() => {
                buildinfo::scan(data).map(|off| (off, data.len()))
            }
            None => None,
        };
        let version = blob.and_then(|(off, end)| {
            let blob = &data[off..end.min(off + 64 * 1024).min(data.len())];
            buildinfo::parse(blob, |addr, n| elf.read_vaddr(addr, n))
        });
        Ok(GoInfo {
            pcln,
            pcln_vaddr,
            version,
            module: OnceLock::new(),
        })
    }

    /// True when the binary has a pclntab, of any Go release.
    pub(crate) fn is_go(&self) -> bool {
        !matches!(self.pcln, PclnState::Absent)
    }

    pub(crate) fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    pub(crate) fn pclntab(&self) -> Option<&Pclntab> {
        match &self.pcln {
            PclnState::Ok(p) => Some(p),
            _ => None,
        }
    }

    /// The validated module data, found once.
    pub(crate) fn module(&self, elf: &ElfFile) -> Option<ModuleData> {
        *self.module.get_or_init(|| {
            let (p, vaddr) = (self.pclntab()?, self.pcln_vaddr?);
            moduledata::find(elf, p, vaddr)
        })
    }

    /// Where the pclntab's entry offsets count from. The module data's `text` is what the
    /// Go runtime itself uses. Without it: the pcHeader's textStart (Go 1.18 to 1.26;
    /// relocated in position-independent builds), else, only where provably right, the
    /// `.text` section: an internally linked binary's `.text` starts with `runtime.text`,
    /// and it is internally linked when the ELF entry point is `_rt0_amd64_linux` at that
    /// base. Externally linked binaries put the C runtime's code first in `.text` (0x100
    /// bytes with GCC on Debian 12), so `.text` alone would shift every function.
    fn text_base(&self, elf: &ElfFile, p: &Pclntab) -> Result<u64, ResolveError> {
        if let Some(m) = self.module(elf) {
            return Ok(m.text);
        }
        if let Some(v) = self.pcln_vaddr {
            let header = moduledata::relocated_word(elf, v + pclntab::HEADER_TEXT_START);
            if let Some(t) = header.filter(|&t| t != 0) {
                return Ok(t);
            }
        }
        if let Some(text) = elf.section(b".text") {
            let mut rt0 = None;
            p.for_each_func(elf.data(), |f| {
                if rt0.is_none() && elf.name_bytes(f.name_off) == RT0 {
                    rt0 = Some(f.entry_off);
                }
            })
            .map_err(|reason| self.bad(elf, reason))?;
            if rt0.is_some_and(|off| text.addr + off as u64 == elf.entry()) {
                return Ok(text.addr);
            }
        }
        Err(ResolveError::NoTextStart {
            path: elf.path().to_path_buf(),
        })
    }

    fn bad(&self, elf: &ElfFile, reason: String) -> ResolveError {
        ResolveError::BadPclntab {
            path: elf.path().to_path_buf(),
            reason,
        }
    }

    /// The functions of the pclntab, by address; `None` when the binary is not Go.
    pub(crate) fn functions(&self, elf: &ElfFile) -> Result<Option<Vec<RawFunc>>, ResolveError> {
        let p = match &self.pcln {
            PclnState::Absent => return Ok(None),
            PclnState::Ok(p) => p,
            PclnState::Unsupported { magic } => {
                return Err(ResolveError::UnsupportedGoVersion {
                    path: elf.path().to_path_buf(),
                    go_version: self.version.clone(),
                    magic: *magic,
                })
            }
            PclnState::Bad(reason) => return Err(self.bad(elf, reason.clone())),
        };
        let text = self.text_base(elf, p)?;
        let mut v = Vec::with_capacity(p.nfunc);
        p.for_each_func(elf.data(), |f| {
            v.push(RawFunc {
                addr: text + f.entry_off as u64,
                size: f.size,
                name_off: f.name_off,
                func_id: f.func_id,
                func_off: f.func_off,
            })
        })
        .map_err(|reason| self.bad(elf, reason))?;
        Ok(Some(v))
    }

    /// True when `name` is one of the pclntab's function names (inlined functions keep
    /// their names there for the inline trees of their callers).
    pub(crate) fn name_in_funcnametab(&self, elf: &ElfFile, name: &[u8]) -> bool {
        match self.pclntab() {
            Some(p) if !name.is_empty() => p
                .funcnames(elf.data())
                .split(|&b| b == 0)
                .any(|n| n == name),
            _ => false,
        }
    }

    /// The inline trees of every function, indexed by callee.
    pub(crate) fn inline_index(
        &self,
        elf: &ElfFile,
        funcs: &[RawFunc],
    ) -> Result<inline::InlineIndex, ResolveError> {
        let Some(p) = self.pclntab() else {
            return Ok(Default::default());
        };
        let gofunc = self.module(elf).and_then(|m| m.gofunc).ok_or_else(|| {
            self.bad(
                elf,
                "the module data's gofunc (base of the inline trees) was not found".into(),
            )
        })?;
        inline::InlineIndex::build(elf, p, gofunc, funcs).map_err(|reason| self.bad(elf, reason))
    }

    /// The number of inlined call sites of the function named `name`.
    pub(crate) fn inlined_count(
        &self,
        elf: &ElfFile,
        index: &inline::InlineIndex,
        name: &[u8],
    ) -> usize {
        self.pclntab().map_or(0, |p| index.count(elf, p, name))
    }

    /// Checks a DWARF signature against the function's `args` size in the pclntab (spill
    /// space of register arguments, stack arguments and stack results). Go 1.19 and older
    /// leave unnamed and `_` parameters out of DWARF, which would shift every later
    /// parameter's register: when `args` exceeds what the DWARF parameters (and
    /// stack-assigned results) can take, parameters are missing.
    pub(crate) fn check_complete(
        &self,
        elf: &ElfFile,
        f: &RawFunc,
        sig: DwarfSignature,
    ) -> Result<DwarfSignature, String> {
        let Some(args) = self.args_size(elf, f) else {
            return Ok(sig);
        };
        let types = |ps: &[DwarfParam]| ps.iter().map(|p| p.ty.clone()).collect::<Vec<_>>();
        let lay = abi::layout(&types(&sig.params), &types(&sig.results));
        let words = |t: &gotype::GoType| t.size().next_multiple_of(8);
        let mut max: u64 = lay.params.iter().map(|p| words(&p.ty)).sum();
        // A shape instantiation's dictionary pointer, which DWARF does not list as a
        // parameter (go/types/generic.rs).
        if types::generic::takes_dictionary(&String::from_utf8_lossy(elf.name_bytes(f.name_off))) {
            max += 8;
        }
        max += lay
            .results
            .iter()
            .filter(|r| r.on_stack())
            .map(|r| words(&r.ty))
            .sum::<u64>();
        if args > max {
            return Err(format!(
                "DWARF lists {} parameter(s) taking at most {max} bytes, but the function takes {args} \
                 bytes of arguments: parameters are missing from DWARF (Go 1.19 and older leave \
                 out unnamed and `_` parameters; functions written in assembly have none)",
                sig.params.len()
            ));
        }
        Ok(sig)
    }

    /// The `args` size of `f` (bytes of arguments), if known.
    fn args_size(&self, elf: &ElfFile, f: &RawFunc) -> Option<u64> {
        self.pclntab()?.args_size(elf.data(), f.func_off)
    }
}
