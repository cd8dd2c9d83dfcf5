//! Go binaries: the function table (pclntab) and the module data that places it, the Go
//! version, DWARF signatures, inline trees, the stack-growth check, the register ABI and
//! the planning of captures under it; `types/`: Go types from DWARF or the runtime type
//! descriptors, field paths, generic instantiations, and the names of dynamic types.

pub mod abi;
pub mod gotype;
pub mod types;

pub(crate) mod buildinfo;
pub(crate) mod dwarf;
pub(crate) mod error;
pub(crate) mod inline;
pub(crate) mod moduledata;
mod params;
pub(crate) mod pclntab;
pub(crate) mod plan;
pub(crate) mod prologue;

use std::sync::OnceLock;

use dwarf::{DwarfParam, DwarfSignature};
use error::PclntabError;
use moduledata::ModuleData;
use pclntab::{PclnState, Pclntab};

use super::dwarf_error::DwarfError;
use super::elf::ElfFile;
use super::error::ResolveError;
use super::funcs::RawFunc;

/// What makes a binary a Go binary, read when it is opened; the tables built from it are
/// kept by [`crate::resolve::Binary`].
#[derive(Debug)]
pub(crate) struct GoInfo {
    pcln: PclnState,
    /// Link-time address of the pclntab header.
    pcln_vaddr: Option<u64>,
    version: Option<String>,
    /// The marks of the Go toolchain found in the binary, as said in messages.
    marks: Vec<String>,
    module: OnceLock<Option<ModuleData>>,
}

/// The entry function of an internally linked Go executable on linux/amd64.
const RT0: &[u8] = b"_rt0_amd64_linux";

impl GoInfo {
    /// Reads every mark the Go toolchain leaves: the pclntab (`.gopclntab`; else found by
    /// its magic, in `.data.rel.ro` where external linkers of position-independent builds
    /// put it with Go 1.19, or in any non-executable segment), the `.go.buildinfo` section
    /// (the version), the `.note.go.buildid` note, the `.go.module` section (Go 1.26+), and
    /// the runtime's symbols. A binary with any of them is Go; one whose pclntab is then
    /// nowhere to be found is refused (its functions are Go code whatever the symbols say).
    pub(crate) fn open(elf: &ElfFile) -> Result<GoInfo, ResolveError> {
        let data = elf.data();
        let mut marks = Vec::new();
        let section = elf
            .section(b".gopclntab")
            .or_else(|| elf.section(b".data.rel.ro.gopclntab"));
        let (mut pcln, mut pcln_vaddr) = match section {
            Some(s) => match s.offset {
                Some(off) => {
                    marks.push(format!("its {} section", String::from_utf8_lossy(&s.name)));
                    (Pclntab::parse(data, off, s.size), Some(s.addr))
                }
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
            None => (PclnState::Absent, None),
        };
        let blob = match elf.section(b".go.buildinfo") {
            Some(s) => {
                marks.push("its .go.buildinfo section".into());
                s.offset.map(|off| (off, off + s.size))
            }
            None => buildinfo::scan_segments(elf).map(|off| {
                marks.push(format!(
                    "Go build information at file offset {off:#x} (found by its magic)"
                ));
                (off, data.len())
            }),
        };
        let version = blob.and_then(|(off, end)| {
            let blob = &data[off..end.min(off + 64 * 1024).min(data.len())];
            buildinfo::parse(blob, |addr, n| elf.read_vaddr(addr, n))
        });
        if elf.note_section(b".note.go.buildid").is_some() {
            marks.push("its .note.go.buildid note".into());
        }
        if elf.section(b".go.module").is_some() {
            marks.push("its .go.module section".into());
        }
        if matches!(pcln, PclnState::Absent) {
            let (found, vaddr) = Self::scan_pclntab(elf, !marks.is_empty());
            if let (PclnState::Ok(p), Some(v)) = (&found, vaddr) {
                marks.push(format!(
                    "a Go function table (pclntab, magic {:#010x}) at {v:#x}, found by its magic",
                    p.magic
                ));
            }
            (pcln, pcln_vaddr) = (found, vaddr);
        }
        if marks.is_empty() {
            for sym in [&b"runtime.buildVersion"[..], b"runtime.firstmoduledata"] {
                if !elf.symbol_addrs(sym).is_empty() {
                    marks.push(format!("its symbol {}", String::from_utf8_lossy(sym)));
                }
            }
        }
        if matches!(pcln, PclnState::Absent) && !marks.is_empty() {
            pcln = PclnState::Bad(PclntabError::NotFound {
                marks: marks.clone(),
            });
        }
        Ok(GoInfo {
            pcln,
            pcln_vaddr,
            version,
            marks,
            module: OnceLock::new(),
        })
    }

    /// Finds a pclntab by its header in `.data.rel.ro` (external linkers put it there in
    /// position-independent Go 1.19 builds, with no section of its own), then in every
    /// non-executable segment. A pre-1.18 magic is reported only when the binary has other
    /// marks of Go (`is_go`): without a consistency check it could be any eight bytes.
    fn scan_pclntab(elf: &ElfFile, is_go: bool) -> (PclnState, Option<u64>) {
        let data = elf.data();
        let mut ranges = Vec::new();
        if let Some(s) = elf.section(b".data.rel.ro") {
            if let Some(off) = s.offset {
                ranges.push((off, off.saturating_add(s.size)));
            }
        }
        for l in elf.loads().iter().filter(|l| !l.executable) {
            ranges.push((l.offset as usize, (l.offset + l.filesz) as usize));
        }
        for (start, end) in ranges {
            match Pclntab::scan(data, start, end) {
                PclnState::Absent => {}
                PclnState::Unsupported { .. } if !is_go => {}
                PclnState::Ok(p) => {
                    let vaddr = elf.vaddr_of(p.off as u64);
                    return (PclnState::Ok(p), vaddr);
                }
                other => return (other, None),
            }
        }
        (PclnState::Absent, None)
    }

    /// True when the binary bears any mark of the Go toolchain (see [`GoInfo::open`]).
    pub(crate) fn is_go(&self) -> bool {
        !matches!(self.pcln, PclnState::Absent) || !self.marks.is_empty()
    }

    /// The marks of Go found, for messages.
    pub(crate) fn marks(&self) -> &[String] {
        &self.marks
    }

    /// The Go function at or around `addr`, for the check that no uretprobe goes into Go
    /// code: `Ok(Some((name offset, entry)))` when `addr` is inside a function of the
    /// pclntab or inside the Go code's range, `Ok(None)` when the binary has no Go code
    /// there (or none at all), `Err` when it has a Go function table that cannot be read
    /// (where its code is cannot be told).
    pub(crate) fn code_at(
        &self,
        elf: &ElfFile,
        addr: u64,
    ) -> Result<Option<(usize, u64)>, ResolveError> {
        if matches!(self.pcln, PclnState::Absent) {
            return Ok(None);
        }
        let funcs = self.functions(elf)?.unwrap_or_default();
        let (Some(first), Some(last)) = (funcs.first(), funcs.last()) else {
            return Ok(None);
        };
        if addr < first.addr || addr >= last.addr.saturating_add(last.size) {
            return Ok(None);
        }
        let i = funcs.partition_point(|f| f.addr <= addr).saturating_sub(1);
        Ok(Some((funcs[i].name_off, funcs[i].addr)))
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

    fn bad(&self, elf: &ElfFile, reason: PclntabError) -> ResolveError {
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
    ) -> Result<inline::InlineIndex, PclntabError> {
        let Some(p) = self.pclntab() else {
            return Ok(Default::default());
        };
        let gofunc = self
            .module(elf)
            .and_then(|m| m.gofunc)
            .ok_or(PclntabError::NoGofunc)?;
        inline::InlineIndex::build(elf, p, gofunc, funcs)
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
    ) -> Result<DwarfSignature, DwarfError> {
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
            return Err(DwarfError::MissingParams {
                listed: sig.params.len(),
                max,
                args,
            });
        }
        Ok(sig)
    }

    /// The `args` size of `f` (bytes of arguments), if known.
    fn args_size(&self, elf: &ElfFile, f: &RawFunc) -> Option<u64> {
        self.pclntab()?.args_size(elf.data(), f.func_off)
    }
}
