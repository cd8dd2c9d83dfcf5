//! Where functions start in code that has no function symbol: the call frame information
//! of `.eh_frame` (one FDE per function, or per part of one: GCC's `.cold` parts have their
//! own), which compilers emit for every function on x86-64 Linux, stripped binaries
//! included. A probe site proven to start an instruction is one decoded from a function's
//! start; this says where those starts are when the symbol tables do not.

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};

use super::elf::ElfFile;

/// The code ranges `[start, end)` of every FDE of `.eh_frame`, sorted by start; empty when
/// there is no `.eh_frame`. An FDE that does not parse ends the walk (what was read before
/// it is kept: each range read is the compiler's own statement of a function's extent).
pub(crate) fn fde_ranges(elf: &ElfFile) -> Vec<(u64, u64)> {
    let Some(sec) = elf.section(b".eh_frame") else {
        return Vec::new();
    };
    let Some(data) = elf.section_data(sec) else {
        return Vec::new();
    };
    let mut bases = BaseAddresses::default().set_eh_frame(sec.addr);
    if let Some(text) = elf.section(b".text") {
        bases = bases.set_text(text.addr);
    }
    if let Some(hdr) = elf.section(b".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(hdr.addr);
    }
    if let Some(got) = elf.section(b".got") {
        bases = bases.set_got(got.addr);
    }
    let eh = EhFrame::new(data, LittleEndian);
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            break;
        };
        let (start, len) = (fde.initial_address(), fde.len());
        if len > 0 {
            if let Some(end) = start.checked_add(len) {
                out.push((start, end));
            }
        }
    }
    out.sort_unstable();
    out
}

/// Where a function holding some address starts and ends, and what said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Enclosing {
    pub start: u64,
    pub end: u64,
    /// The symbol's name, or "the unwind entry (.eh_frame)".
    pub what: String,
}

/// The function ranges of a binary: its sized function symbols, then its FDEs.
pub(crate) struct FunctionStarts {
    /// (start, end, name offset) of every sized STT_FUNC symbol, sorted.
    symbols: Vec<(u64, u64, usize)>,
    fdes: Vec<(u64, u64)>,
}

impl FunctionStarts {
    pub(crate) fn of(elf: &ElfFile) -> FunctionStarts {
        let mut symbols = Vec::new();
        elf.for_each_symbol(|s| {
            if s.is_func && s.size > 0 {
                if let Some(end) = s.addr.checked_add(s.size) {
                    symbols.push((s.addr, end, s.name_off));
                }
            }
        });
        symbols.sort_unstable();
        FunctionStarts {
            symbols,
            fdes: fde_ranges(elf),
        }
    }

    /// The innermost (latest-starting) range holding `addr` of `ranges` sorted by start.
    fn covering<T: Copy>(ranges: &[T], addr: u64, range: impl Fn(T) -> (u64, u64)) -> Option<T> {
        let n = ranges.partition_point(|&r| range(r).0 <= addr);
        // Ranges may nest (aliases, a symbol of a part): look back a few for one that holds it.
        ranges[..n]
            .iter()
            .rev()
            .take(16)
            .copied()
            .find(|&r| addr < range(r).1)
    }

    /// The function holding `addr`: a symbol's where one covers it, else an FDE's.
    pub(crate) fn enclosing(&self, elf: &ElfFile, addr: u64) -> Option<Enclosing> {
        if let Some((start, end, name)) = Self::covering(&self.symbols, addr, |(s, e, _)| (s, e)) {
            return Some(Enclosing {
                start,
                end,
                what: String::from_utf8_lossy(elf.name_bytes(name)).into_owned(),
            });
        }
        Self::covering(&self.fdes, addr, |r| r).map(|(start, end)| Enclosing {
            start,
            end,
            what: "the unwind entry (.eh_frame)".into(),
        })
    }
}
