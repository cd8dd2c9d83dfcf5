//! C functions (and any other code that follows the System V AMD64 C ABI): functions from
//! the ELF symbol tables, prototypes from C DWARF (the binary's or its separate debug
//! file's), the places of parameters and results, and the planning of captures.
//!
//! A C function's entry probe is its first byte (C has no stack-growth check to skip), and
//! its return is a uretprobe at that same entry: the kernel swaps the return address when
//! the call enters and fires the probe when it returns, which is safe for C (its stacks do
//! not move, unlike Go's) and sees every return, tail calls included, without decoding
//! any RET instruction.

pub(crate) mod abi;
pub(crate) mod capture;
pub(crate) mod dwarf;
pub(crate) mod plan;

use std::collections::HashMap;
use std::path::PathBuf;

use gprobe_crds::csig::CSignature;

use super::binary::Binary;
use super::dwarf_error::UnreadableDwarf;
use super::error::{PlanError, ResolveError};
use super::func::FuncInfo;
use super::sites::SiteClass;
use dwarf::CDwarf;

/// The folder where Debian (and most distributions) install separate debug files.
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The proof that a function lies outside Go code, so that a uretprobe may go on it
/// ([`crate::plan::Returns::Uretprobe`]): only [`Binary::check_uretprobe`] makes one
/// (its field is private to `resolve/`), after the binary's pclntab said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutsideGoCode(pub(in crate::resolve) ());

#[cfg(test)]
impl OutsideGoCode {
    /// For unit tests of what is made of a plan (no binary is read).
    pub(crate) fn assumed() -> OutsideGoCode {
        OutsideGoCode(())
    }
}

impl Binary {
    /// Refuses a uretprobe on `f` when it lies in Go code: a uretprobe rewrites the return
    /// address on the stack, which Go's stack growth and unwinder do not expect ("unexpected
    /// return pc", the program dies). Decided from the pclntab, which is looked for by its
    /// magic in every binary, whatever the detection of Go said.
    pub(crate) fn check_uretprobe(&self, f: &FuncInfo) -> Result<OutsideGoCode, PlanError> {
        let refuse = |reason: String| PlanError::UretprobeInGo {
            symbol: f.name.clone(),
            path: self.path().to_path_buf(),
            reason,
        };
        match self.go.code_at(&self.elf, f.addr) {
            Ok(None) => Ok(OutsideGoCode(())),
            Ok(Some((name_off, entry))) => Err(refuse(format!(
                "its address {:#x} is inside the Go function {} (at {entry:#x}) of the pclntab",
                f.addr,
                String::from_utf8_lossy(self.elf.name_bytes(name_off))
            ))),
            Err(e) => Err(refuse(format!(
                "the binary has a Go function table, but where its Go code lies cannot be told ({e})"
            ))),
        }
    }
}

/// A C function's entry: its first byte, where the probe goes, and how the kernel runs
/// it (file offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CEntry {
    pub first: u64,
    pub probe: u64,
    pub class: SiteClass,
}

impl Binary {
    /// The C function named `symbol`, from `.symtab` and `.dynsym` (in a Go binary: the C
    /// functions that cgo linked in). An IFUNC symbol is refused: it names the resolver
    /// that picks an implementation when the library is loaded, which runs once.
    pub fn find_c_function(&self, symbol: &str) -> Result<FuncInfo, PlanError> {
        let mut found: Option<(FuncInfo, bool)> = None;
        self.elf.for_each_symbol(|s| {
            if s.is_func && self.elf.name_bytes(s.name_off) == symbol.as_bytes() {
                let better = match &found {
                    None => true,
                    // Prefer a sized, non-IFUNC definition (a symbol may be in both tables).
                    Some((f, ifunc)) => (*ifunc && !s.is_ifunc) || (f.size == 0 && s.size > 0),
                };
                if better {
                    found = Some((
                        FuncInfo {
                            name: symbol.to_string(),
                            addr: s.addr,
                            size: s.size,
                        },
                        s.is_ifunc,
                    ));
                }
            }
        });
        match found {
            Some((f, false)) => Ok(f),
            Some((_, true)) => Err(PlanError::IndirectFunction {
                symbol: symbol.to_string(),
                path: self.path().to_path_buf(),
                similar: self.similar_c_functions(symbol),
            }),
            None => Err(PlanError::CFunctionNotFound {
                symbol: symbol.to_string(),
                path: self.path().to_path_buf(),
                stripped: !self.has_symtab(),
                similar: self.similar_c_functions(symbol),
            }),
        }
    }

    /// The addresses of the IFUNC symbols: resolvers, not the functions their names say.
    pub fn indirect_functions(&self) -> std::collections::HashSet<u64> {
        let mut v = std::collections::HashSet::new();
        self.elf.for_each_symbol(|s| {
            if s.is_ifunc {
                v.insert(s.addr);
            }
        });
        v
    }

    /// Up to 5 function names like `symbol`: containing it (or contained in it), or a
    /// few edits away; closest first.
    pub fn similar_c_functions(&self, symbol: &str) -> Vec<String> {
        let want = symbol.to_ascii_lowercase();
        let mut scored: Vec<(usize, String)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        self.elf.for_each_symbol(|s| {
            if !s.is_func {
                return;
            }
            let Ok(name) = std::str::from_utf8(self.elf.name_bytes(s.name_off)) else {
                return;
            };
            if name == symbol || !seen.insert(name.to_string()) {
                return;
            }
            let lower = name.to_ascii_lowercase();
            let score = if lower.contains(&want) || (lower.len() >= 4 && want.contains(&lower)) {
                lower.len().abs_diff(want.len()) / 4
            } else {
                let d = edit_distance(&lower, &want);
                if d > (want.len() / 4).max(2) {
                    return;
                }
                d + 1
            };
            scored.push((score, name.to_string()));
        });
        scored.sort();
        scored.into_iter().take(5).map(|(_, n)| n).collect()
    }

    /// The file offset of a C function's first byte: its entry probe, and where its
    /// uretprobe is attached. It must be code, and a valid instruction must start there
    /// (the same check as every other probe site: `x86::check_sites`).
    /// Where a C function's entry probe goes on this kernel ([`super::sites::c_entry`]):
    /// its file offset and how the kernel runs it, with the function's first byte's.
    pub fn c_entry_site(&self, f: &FuncInfo) -> Result<CEntry, ResolveError> {
        let first = self.c_entry_offset(f)?;
        let kernel = super::sites::kernel();
        // A symbol without a size: its branches cannot be seen, so the entry stays.
        let len = match f.size {
            0 => self.elf.bytes_in_segment(f.addr).clamp(1, 15),
            n => n,
        };
        let (_, code) = self.code(&f.name, f.addr, len)?;
        let at = if f.size == 0 {
            0
        } else {
            super::sites::c_entry(code, kernel)
        };
        if at != 0 {
            super::x86::check_sites(code, &[at], false).map_err(|e| self.site_error(f, e))?;
        }
        Ok(CEntry {
            first,
            probe: first + at,
            class: super::sites::class_at(code, at, kernel),
        })
    }

    pub fn c_entry_offset(&self, f: &FuncInfo) -> Result<u64, ResolveError> {
        self.elf.check_x86_64()?;
        // A symbol without a size (some assembly) is read as one instruction's worth.
        let len = match f.size {
            0 => self.elf.bytes_in_segment(f.addr).clamp(1, 15),
            n => n,
        };
        let (off, code) = self.code(&f.name, f.addr, len)?;
        super::x86::check_sites(code, &[0], false).map_err(|e| self.site_error(f, e))?;
        Ok(off)
    }

    /// Folders searched for a separate debug file: the debug folder inside the process's
    /// root when the binary was opened through `/proc/PID/root/` (a container's), then
    /// the host's.
    fn debug_roots(&self) -> Vec<PathBuf> {
        if let Some(r) = &self.debug_roots {
            return r.clone();
        }
        let mut roots = Vec::new();
        let opened = self.opened.to_string_lossy();
        if let Some(rest) = opened.strip_prefix("/proc/") {
            if let Some((pid, tail)) = rest.split_once('/') {
                if tail.starts_with("root/") && pid.bytes().all(|b| b.is_ascii_digit()) {
                    roots.push(PathBuf::from(format!("/proc/{pid}/root{DEBUG_ROOT}")));
                }
            }
        }
        roots.push(PathBuf::from(DEBUG_ROOT));
        roots
    }

    /// Uses `roots` instead of the usual debug folders for separate debug files (tests,
    /// and debug files kept elsewhere). Call before the first prototype is asked for.
    pub fn with_debug_roots(mut self, roots: Vec<PathBuf>) -> Binary {
        self.debug_roots = Some(roots);
        self
    }

    /// Where the separate debug file of this binary would be (by its build ID), if it has
    /// a build ID.
    pub fn debug_file_candidates(&self) -> Vec<PathBuf> {
        match self.elf.build_id() {
            Some(id) => dwarf::debug_file_candidates(&self.debug_roots(), id),
            None => Vec::new(),
        }
    }

    fn c_dwarf(&self) -> Result<Option<&CDwarf>, ResolveError> {
        let loaded = self
            .c_dwarf
            .get_or_init(|| CDwarf::load(&self.elf, || self.own_dwarf(), &self.debug_roots()));
        match loaded {
            Ok(d) => Ok(d.as_ref()),
            Err(e) => Err(ResolveError::Dwarf(e.clone())),
        }
    }

    /// The separate debug file whose DWARF describes this binary, when one was found.
    pub fn debug_file(&self) -> Option<PathBuf> {
        let d = self.c_dwarf().ok()??;
        d.separate_path().map(|p| p.to_path_buf())
    }

    /// True when C prototypes are available from DWARF (the binary's or a debug file's).
    pub fn has_c_dwarf(&self) -> bool {
        matches!(self.c_dwarf(), Ok(Some(_)))
    }

    /// The C prototype of `f` from DWARF; `None` when there is no DWARF for it.
    pub fn c_signature(&self, f: &FuncInfo) -> Result<Option<CSignature>, ResolveError> {
        let Some(d) = self.c_dwarf()? else {
            return Ok(None);
        };
        match d.signature(&self.elf, f.addr, &f.name) {
            None => Ok(None),
            Some(Ok(mut s)) => {
                // DWARF names the function by its source name; the probe names the symbol.
                s.name = Some(f.name.clone());
                Ok(Some(s))
            }
            Some(Err(source)) => Err(ResolveError::Dwarf(UnreadableDwarf {
                path: d.file(&self.elf).path().to_path_buf(),
                symbol: Some(f.name.clone()),
                source,
            })),
        }
    }

    /// The C prototypes DWARF has of `funcs`, by entry address (for listings).
    pub fn c_signatures(
        &self,
        funcs: &[FuncInfo],
    ) -> Result<HashMap<u64, CSignature>, ResolveError> {
        Ok(match self.c_dwarf()? {
            Some(d) => d.signatures(&self.elf, funcs.iter().map(|f| (f.addr, f.name.as_str()))),
            None => HashMap::new(),
        })
    }
}

/// Levenshtein distance, for similar names in error messages.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let sub = prev[j - 1] + (a[i - 1] != b[j - 1]) as usize;
            cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    #[test]
    fn edit_distance() {
        assert_eq!(super::edit_distance("add", "sub"), 3);
        assert_eq!(
            super::edit_distance("createstringobject", "createstrinobject"),
            1
        );
        assert_eq!(super::edit_distance("", "abc"), 3);
    }

    /// A binary's own DWARF is loaded once for its Go and C readers (a cgo binary has
    /// both): the C reader holds the very units the Go reader's cache holds.
    #[test]
    fn the_c_reader_shares_the_binarys_own_dwarf() {
        let bin = crate::resolve::Binary::open(&std::env::current_exe().unwrap()).unwrap();
        let own = bin.own_dwarf().unwrap();
        let c = bin.c_dwarf().unwrap().expect("this test binary has DWARF");
        assert!(std::sync::Arc::ptr_eq(&own, &c.units));
        assert!(std::sync::Arc::ptr_eq(&own, &bin.own_dwarf().unwrap()));
    }
}
