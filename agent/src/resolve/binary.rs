//! [`Binary`]: one mapped ELF file and what is read of it, each table parsed when first
//! asked for and kept. The readers of each target kind add their methods in their own
//! folders (`go/types/listing.rs`, `c/mod.rs`); they import `Binary` from here, not
//! through `resolve/mod.rs`, which keeps import cycles out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::c::dwarf::CDwarf;
use super::dwarf_error::{DwarfError, UnreadableDwarf};
use super::dwarf_units::DwarfUnits;
use super::elf::ElfFile;
use super::error::{DecoderCheckError, ResolveError};
use super::func::{FuncInfo, TargetKind};
use super::funcs::{self, RawFunc};
use super::go::dwarf::{DwarfCache, DwarfSignature};
use super::go::error::PclntabError;
use super::go::inline::InlineIndex;
use super::go::types::dwarf::DwarfIndex;
use super::go::types::index::DescIndex;
use super::go::{prologue, GoInfo};
use super::sites::{self, EntryProbe, ProbeSites};
use super::usdt::{self, UsdtProbe};
use super::x86;

/// A memory-mapped ELF binary. Cheap to open; tables are parsed when first asked for and
/// kept. `Send + Sync`: share it with `Arc`.
pub struct Binary {
    pub(super) elf: ElfFile,
    /// The path the file was opened at (e.g. /proc/PID/root/...), where `elf.path()` is
    /// what reports call it.
    pub(super) opened: PathBuf,
    pub(super) go: GoInfo,
    /// Plans as if the Go marks were not there (tests of the checks that hold whatever
    /// the detection says).
    pub(super) go_detection_off: bool,
    pub(super) funcs: OnceLock<Vec<RawFunc>>,
    pub(super) by_name: OnceLock<Vec<u32>>,
    pub(super) dwarf: OnceLock<DwarfCache>,
    pub(super) inlined: OnceLock<Result<InlineIndex, PclntabError>>,
    /// Go types: DWARF's by name, and every runtime type descriptor (`go/types/`).
    pub(super) dwarf_types: OnceLock<Result<DwarfIndex, DwarfError>>,
    pub(super) descs: OnceLock<DescIndex>,
    /// Folders for separate debug files, when not the usual ones (`c/mod.rs`).
    pub(super) debug_roots: Option<Vec<PathBuf>>,
    /// The binary's own DWARF sections and units, shared by `dwarf` and `c_dwarf`.
    own_dwarf: OnceLock<Result<Arc<DwarfUnits>, DwarfError>>,
    pub(super) c_dwarf: OnceLock<Result<Option<CDwarf>, UnreadableDwarf>>,
    pub(super) usdt: OnceLock<Result<Vec<UsdtProbe>, usdt::StapsdtError>>,
}

impl std::fmt::Debug for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binary")
            .field("elf", &self.elf)
            .field("go_version", &self.go.version())
            .field("is_go", &self.is_go())
            .finish()
    }
}

impl Binary {
    /// Maps `path` and reads its ELF headers; no per-function work happens here.
    pub fn open(path: &Path) -> Result<Binary, ResolveError> {
        Self::open_as(path, path)
    }

    /// Maps the file at `open` (e.g. /proc/PID/exe) and names it `path` in errors.
    pub fn open_as(open: &Path, path: &Path) -> Result<Binary, ResolveError> {
        Self::with_elf(ElfFile::open_as(open, path)?, open)
    }

    /// A binary held in memory (fuzzing, tests), named `path` in messages.
    pub fn from_bytes(bytes: Vec<u8>, path: &Path) -> Result<Binary, ResolveError> {
        Self::with_elf(ElfFile::from_bytes(bytes, path)?, path)
    }

    fn with_elf(elf: ElfFile, open: &Path) -> Result<Binary, ResolveError> {
        let go = GoInfo::open(&elf)?;
        Ok(Binary {
            elf,
            opened: open.to_path_buf(),
            go,
            go_detection_off: false,
            funcs: OnceLock::new(),
            by_name: OnceLock::new(),
            dwarf: OnceLock::new(),
            inlined: OnceLock::new(),
            dwarf_types: OnceLock::new(),
            descs: OnceLock::new(),
            debug_roots: None,
            own_dwarf: OnceLock::new(),
            c_dwarf: OnceLock::new(),
            usdt: OnceLock::new(),
        })
    }

    pub fn path(&self) -> &Path {
        self.elf.path()
    }

    /// The Go release that built the binary, e.g. "go1.27.3", from `.go.buildinfo`.
    pub fn go_version(&self) -> Option<&str> {
        self.go.version()
    }

    /// True when the binary bears a mark of the Go toolchain: a pclntab (a `.gopclntab`
    /// section, or found by its magic), `.go.buildinfo`, `.note.go.buildid`, `.go.module`,
    /// or the runtime's symbols.
    pub fn is_go(&self) -> bool {
        self.go.is_go() && !self.go_detection_off
    }

    /// The marks of the Go toolchain found in the binary, as messages say them.
    pub fn go_marks(&self) -> &[String] {
        self.go.marks()
    }

    /// Plans probes as if the binary were not Go (C functions from the ELF symbols): for
    /// tests of the checks that hold whatever the detection says, such as that no
    /// uretprobe goes into Go code.
    #[doc(hidden)]
    pub fn with_go_detection_off(mut self) -> Binary {
        self.go_detection_off = true;
        self
    }

    pub fn kind(&self) -> TargetKind {
        if self.is_go() {
            TargetKind::Go
        } else {
            TargetKind::Elf
        }
    }

    /// True when the binary has a non-empty `.symtab` (it was not stripped).
    pub fn has_symtab(&self) -> bool {
        self.elf.has_symtab()
    }

    /// True when the binary has DWARF debug information (`.debug_info` or `.zdebug_info`).
    pub fn has_dwarf(&self) -> bool {
        self.elf.has_dwarf()
    }

    /// The file offset of virtual address `addr`, through the PT_LOAD segment holding it.
    pub fn file_offset(&self, addr: u64) -> Option<u64> {
        self.elf.file_offset(addr)
    }

    /// The GNU build ID, hex, if the binary has one.
    pub fn build_id(&self) -> Option<String> {
        let id = self.elf.build_id()?;
        Some(id.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The USDT probes of `.note.stapsdt`, read once; empty when there are none.
    pub fn usdt_probes(&self) -> Result<&[UsdtProbe], ResolveError> {
        match self.usdt.get_or_init(|| usdt::read_probes(&self.elf)) {
            Ok(v) => Ok(v),
            Err(e) => Err(ResolveError::MalformedStapsdt {
                path: self.path().to_path_buf(),
                source: e.clone(),
            }),
        }
    }

    /// Where a Go binary's function entry offsets count from (`runtime.text`), as read
    /// from its module data; `None` when the module data was not found (or not Go).
    pub fn go_text_start(&self) -> Option<u64> {
        self.go.module(&self.elf).map(|m| m.text)
    }

    fn info(&self, f: &RawFunc) -> FuncInfo {
        FuncInfo {
            name: String::from_utf8_lossy(self.elf.name_bytes(f.name_off)).into_owned(),
            addr: f.addr,
            size: f.size,
        }
    }

    /// The function table, built once: pclntab for Go binaries, ELF symbols otherwise.
    pub(crate) fn raw_funcs(&self) -> Result<&[RawFunc], ResolveError> {
        if let Some(v) = self.funcs.get() {
            return Ok(v);
        }
        let v = match self.go.functions(&self.elf)? {
            Some(v) => v,
            None => funcs::from_symbols(&self.elf)?,
        };
        Ok(self.funcs.get_or_init(|| v))
    }

    /// The STT_FUNC symbols of the ELF symbol tables (`.symtab`, `.dynsym`), sorted by
    /// address: what a non-Go binary's function table is made of, and for a Go binary a
    /// cross-check of its pclntab.
    pub fn elf_symbols(&self) -> Vec<FuncInfo> {
        let mut v: Vec<FuncInfo> = Vec::new();
        self.elf.for_each_symbol(|s| {
            if s.is_func {
                v.push(FuncInfo {
                    name: String::from_utf8_lossy(self.elf.name_bytes(s.name_off)).into_owned(),
                    addr: s.addr,
                    size: s.size,
                });
            }
        });
        v.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
        v.dedup();
        v
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
        let v = funcs::name_index(&self.elf, self.raw_funcs()?);
        Ok(self.by_name.get_or_init(|| v))
    }

    /// The function named `symbol` (exactly as the binary spells it, e.g.
    /// `net/http.(*Client).Get`). Where several share the name (a Go function and its
    /// ABI0 wrapper), the function that is not a wrapper wins, then the lowest address.
    ///
    /// A Go binary that still has its symbol table must agree with it: the pclntab
    /// address of the function is refused when `.symtab` puts the same name elsewhere.
    pub fn find_function(&self, symbol: &str) -> Result<FuncInfo, ResolveError> {
        let funcs = self.raw_funcs()?;
        let idx = self.name_index()?;
        let want = symbol.as_bytes();
        let name = |i: u32| self.elf.name_bytes(funcs[i as usize].name_off);
        let pos = idx.partition_point(|&i| name(i) < want);
        let Some(&i) = idx.get(pos).filter(|&&i| name(i) == want) else {
            // Go 1.18-1.20 name every instantiation of a generic function `F[...]` in the
            // pclntab; the symbol table (when kept) has `F[go.shape.int64_0]`.
            if self.is_go() && symbol.contains('[') {
                if let Some(raw) = self
                    .elf
                    .symbol_addrs(want)
                    .into_iter()
                    .find_map(|a| self.raw_at(a))
                {
                    return Ok(FuncInfo {
                        name: symbol.to_string(),
                        addr: raw.addr,
                        size: raw.size,
                    });
                }
            }
            return Err(ResolveError::NotFound {
                path: self.path().to_path_buf(),
                symbol: symbol.to_string(),
                inlined: self.go.name_in_funcnametab(&self.elf, want),
                similar: funcs::similar(&self.elf, symbol, funcs),
            });
        };
        let f = self.info(&funcs[i as usize]);
        if self.is_go() && self.has_symtab() {
            // .symtab calls an assembly function X.abi0 where its ABIInternal wrapper is
            // X; the pclntab calls both X (and find_function picks the body).
            let mut addrs = self.elf.symbol_addrs(want);
            addrs.extend(self.elf.symbol_addrs(format!("{symbol}.abi0").as_bytes()));
            if !addrs.is_empty() && !addrs.contains(&f.addr) {
                return Err(ResolveError::AddressMismatch {
                    path: self.path().to_path_buf(),
                    symbol: symbol.to_string(),
                    pclntab: f.addr,
                    symtab: addrs[0],
                });
            }
        }
        Ok(f)
    }

    /// The probe sites of `f`: entry, body (after the stack-growth check) and every RET,
    /// each checked to be an instruction boundary of the function.
    pub fn probe_sites(&self, f: &FuncInfo) -> Result<ProbeSites, ResolveError> {
        self.elf.check_x86_64()?;
        let (entry, code) = self.code(&f.name, f.addr, f.size)?;
        let mut rets = Vec::new();
        x86::rets(code, |o| rets.push(o));
        let check = if self.is_go() {
            prologue::stack_check(code)
        } else {
            None
        };
        let body = check.map_or(0, |c| c.body);
        let mut all = rets.clone();
        all.push(body);
        all.extend(check.map(|c| c.jcc));
        // Go pads functions with INT3 up to the next one: the decode of a Go function ends
        // exactly at its end (checked on every function of the kubectl builds), and half
        // the functions of a table shifted by a few bytes do not.
        x86::check_sites(code, &all, self.is_go()).map_err(|e| self.site_error(f, e))?;
        let kernel = sites::kernel();
        let at = |o: u64, jcc: Option<u8>| EntryProbe {
            offset: entry + o,
            jcc,
            class: sites::class_at(code, o, kernel),
        };
        let jump = check.and_then(|c| Some((c.jcc, sites::jcc_condition(code, c.jcc)?)));
        let probe = match jump {
            Some((o, cc)) if kernel.is_some_and(|k| k.jcc) => at(o, Some(cc)),
            _ => at(body, None),
        };
        let ret_class = rets.first().map_or(sites::SiteClass::SingleStepped, |&o| {
            sites::class_at(code, o, kernel)
        });
        Ok(ProbeSites {
            entry_offset: entry,
            body_offset: entry + body,
            ret_offsets: rets.into_iter().map(|o| entry + o).collect(),
            entry: probe,
            ret_class,
        })
    }

    /// The error for a site of `f` that [`x86::check_sites`] refused.
    pub(crate) fn site_error(&self, f: &FuncInfo, e: x86::SiteError) -> ResolveError {
        let (path, symbol, addr) = (self.path().to_path_buf(), f.name.clone(), f.addr);
        match e {
            x86::SiteError::NotBoundary(offset) => ResolveError::NotInstructionBoundary {
                path,
                symbol,
                addr,
                offset,
            },
            x86::SiteError::Invalid(offset) => ResolveError::InvalidInstruction {
                path,
                symbol,
                addr,
                offset,
            },
            x86::SiteError::PastEnd(end) => ResolveError::CodePastEnd {
                path,
                symbol,
                addr,
                size: f.size,
                end,
            },
        }
    }

    /// The file offset and bytes of a function, which must be code (an executable
    /// section of an executable segment): a breakpoint anywhere else never fires or
    /// corrupts data.
    pub(super) fn code(
        &self,
        name: &str,
        addr: u64,
        size: u64,
    ) -> Result<(u64, &[u8]), ResolveError> {
        let found = self
            .elf
            .code(addr, size)
            .ok_or_else(|| ResolveError::AddressNotMapped {
                path: self.path().to_path_buf(),
                symbol: name.to_string(),
                addr,
            })?;
        if !self.elf.is_code(addr) {
            return Err(ResolveError::NotCode {
                path: self.path().to_path_buf(),
                symbol: name.to_string(),
                addr,
            });
        }
        Ok(found)
    }

    /// Computes the probe sites of every function (on all cores) and returns how many
    /// RETs there are in total. For benchmarks and warm-up: nothing is kept.
    pub fn all_probe_sites(&self) -> Result<usize, ResolveError> {
        self.elf.check_x86_64()?;
        let is_go = self.is_go();
        funcs::parallel_sum(self.raw_funcs()?, |f| {
            let name = String::from_utf8_lossy(self.elf.name_bytes(f.name_off));
            let (_, code) = self.code(&name, f.addr, f.size)?;
            let mut rets = 0;
            x86::rets(code, |_| rets += 1);
            if is_go {
                std::hint::black_box(prologue::body_offset(code));
            }
            Ok(rets)
        })
    }

    /// Checks the fast RET scan against a full iced-x86 decode of every function.
    /// Returns how many functions were compared, or the first difference.
    #[doc(hidden)]
    pub fn check_fast_decoder(&self) -> Result<usize, DecoderCheckError> {
        let funcs = self.raw_funcs()?;
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        for f in funcs {
            let name = String::from_utf8_lossy(self.elf.name_bytes(f.name_off));
            let (_, code) = self.code(&name, f.addr, f.size)?;
            fast.clear();
            slow.clear();
            x86::rets(code, |o| fast.push(o));
            x86::rets_iced(code, |o| slow.push(o));
            if fast != slow {
                return Err(DecoderCheckError::Differs {
                    symbol: name.into_owned(),
                    addr: f.addr,
                    fast,
                    iced: slow,
                });
            }
        }
        Ok(funcs.len())
    }

    /// How many call sites the compiler inlined the Go function `name` into (calls that
    /// a probe on the function does not see). The inline trees of all functions are read
    /// once, on the first call.
    pub fn inlined_call_sites(&self, name: &str) -> Result<usize, ResolveError> {
        if !self.is_go() {
            return Ok(0);
        }
        let funcs = self.raw_funcs()?;
        let index = self
            .inlined
            .get_or_init(|| self.go.inline_index(&self.elf, funcs));
        match index {
            Ok(index) => Ok(self.go.inlined_count(&self.elf, index, name.as_bytes())),
            Err(reason) => Err(ResolveError::BadPclntab {
                path: self.path().to_path_buf(),
                reason: reason.clone(),
            }),
        }
    }

    /// The binary's own DWARF, its sections loaded (decompressed) once for both readers:
    /// Go's (go/dwarf.rs) and C's (c/dwarf.rs, where a cgo binary's C code is probed).
    pub(super) fn own_dwarf(&self) -> Result<Arc<DwarfUnits>, DwarfError> {
        self.own_dwarf
            .get_or_init(|| DwarfUnits::load(&self.elf).map(Arc::new))
            .clone()
    }

    pub(super) fn dwarf_cache(&self) -> Result<&DwarfCache, UnreadableDwarf> {
        if let Some(c) = self.dwarf.get() {
            return Ok(c);
        }
        let c = self
            .own_dwarf()
            .and_then(|units| DwarfCache::load(&self.elf, units));
        let c = c.map_err(|source| UnreadableDwarf {
            path: self.path().to_path_buf(),
            symbol: None,
            source,
        })?;
        Ok(self.dwarf.get_or_init(|| c))
    }

    /// The raw function at `addr`, for the pclntab's per-function records.
    fn raw_at(&self, addr: u64) -> Option<RawFunc> {
        let funcs = self.raw_funcs().ok()?;
        let i = funcs.partition_point(|f| f.addr < addr);
        funcs.get(i).filter(|f| f.addr == addr).copied()
    }

    /// The Go signature of `f` from DWARF; `None` when the binary is not Go, has no DWARF
    /// or no entry for the function.
    pub fn dwarf_signature(&self, f: &FuncInfo) -> Result<Option<DwarfSignature>, ResolveError> {
        if !self.is_go() || !self.has_dwarf() {
            return Ok(None);
        }
        let cache = self.dwarf_cache()?;
        let Some(sig) = cache.signature(&self.elf, f.addr) else {
            return Ok(None);
        };
        let checked = sig.and_then(|sig| match self.raw_at(f.addr) {
            Some(raw) => self.go.check_complete(&self.elf, &raw, sig),
            None => Ok(sig),
        });
        checked.map(Some).map_err(|source| {
            ResolveError::Dwarf(UnreadableDwarf {
                path: self.path().to_path_buf(),
                symbol: Some(f.name.clone()),
                source,
            })
        })
    }

    /// The DWARF signatures of every function, by entry address (for listings). Functions
    /// whose types cannot be decoded are left out; empty when there is no DWARF.
    pub fn dwarf_signatures(&self) -> Result<HashMap<u64, DwarfSignature>, ResolveError> {
        let mut out = HashMap::new();
        if !self.is_go() || !self.has_dwarf() {
            return Ok(out);
        }
        let cache = self.dwarf_cache()?;
        for (addr, sig) in cache.signatures(&self.elf) {
            let checked = sig.and_then(|sig| match self.raw_at(addr) {
                Some(raw) => self.go.check_complete(&self.elf, &raw, sig),
                None => Ok(sig),
            });
            if let Ok(sig) = checked {
                out.insert(addr, sig);
            }
        }
        Ok(out)
    }
}
