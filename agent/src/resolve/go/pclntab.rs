//! Go's function table, `.gopclntab`, in the Go 1.18+ layout (magic 0xfffffff0 for Go
//! 1.18/1.19, 0xfffffff1 for Go 1.20+). See Go's runtime/symtab.go (`pcHeader`, `functab`,
//! `_func`) and debug/gosym/pclntab.go.

use super::error::PclntabError;
use crate::resolve::elf::{u32_at, u64_at};

/// pclntab magics, by the Go release that introduced them.
pub(crate) const MAGIC_GO12: u32 = 0xffff_fffb;
pub(crate) const MAGIC_GO116: u32 = 0xffff_fffa;
pub(crate) const MAGIC_GO118: u32 = 0xffff_fff0;
pub(crate) const MAGIC_GO120: u32 = 0xffff_fff1;

/// What was found where a pclntab should be.
#[derive(Debug, Clone)]
pub(crate) enum PclnState {
    /// No pclntab: not a Go binary.
    Absent,
    /// A pclntab of a Go release older than 1.18.
    Unsupported {
        magic: u32,
    },
    /// A pclntab whose header is inconsistent.
    Bad(PclntabError),
    Ok(Pclntab),
}

/// The located header of a Go 1.18+ pclntab. Offsets are relative to `data` (the file).
#[derive(Debug, Clone)]
pub(crate) struct Pclntab {
    /// File offset of the pcHeader.
    pub off: usize,
    /// Bytes of the table (section size, or the rest of the segment when found by a scan).
    pub len: usize,
    pub magic: u32,
    pub min_lc: u8,
    pub nfunc: usize,
    /// funcnametab, relative to `off`: [funcname_off, funcname_end).
    pub funcname_off: usize,
    pub funcname_end: usize,
    /// pctab (the pc-value tables), relative to `off`.
    pub pctab_off: usize,
    /// functab (pclntab proper), relative to `off`.
    pub pcln_off: usize,
}

/// Offset of textStart in the pcHeader: Go 1.18 to 1.26 write `runtime.text` there (a
/// dynamic relocation fills it in position-independent builds); Go 1.27 leaves it 0.
pub(crate) const HEADER_TEXT_START: u64 = 24;

/// One function of the table: its entry offset from the text start, and where its
/// records are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PclnFunc {
    pub entry_off: u32,
    pub size: u64,
    /// File offset of the NUL-terminated name.
    pub name_off: usize,
    pub func_id: u8,
    /// Offset of the _func record from the functab.
    pub func_off: u32,
}

impl Pclntab {
    /// Parses the pcHeader at `data[off..off+len]`.
    pub(crate) fn parse(data: &[u8], off: usize, len: usize) -> PclnState {
        let Some(end) = off.checked_add(len).filter(|&e| e <= data.len()) else {
            return PclnState::Bad(PclntabError::PastEnd { off, len });
        };
        let t = &data[off..end];
        let Some(magic) = u32_at(t, 0) else {
            return PclnState::Bad(PclntabError::TooShort { len });
        };
        match magic {
            MAGIC_GO118 | MAGIC_GO120 => {}
            MAGIC_GO12 | MAGIC_GO116 => return PclnState::Unsupported { magic },
            _ => return PclnState::Bad(PclntabError::UnknownMagic { magic }),
        }
        if t.len() < 8 {
            return PclnState::Bad(PclntabError::HeaderTruncated);
        }
        let (min_lc, ptr_size) = (t[6], t[7]);
        if t[4] != 0 || t[5] != 0 || !matches!(min_lc, 1 | 2 | 4) || ptr_size != 8 {
            return PclnState::Bad(PclntabError::UnexpectedHeader {
                pad: [t[4], t[5]],
                min_lc,
                ptr_size,
            });
        }
        let word = |i: usize| u64_at(t, 8 + i * 8);
        let fields: Option<Vec<u64>> = (0..8).map(word).collect();
        let Some(f) = fields else {
            return PclnState::Bad(PclntabError::HeaderTruncated);
        };
        // f[2] is textStart; see HEADER_TEXT_START.
        let (nfunc, funcname_off, cu_off, pctab_off, pcln_off) = (f[0], f[3], f[4], f[6], f[7]);
        let len64 = len as u64;
        if nfunc == 0 || nfunc > len64 / 8 {
            return PclnState::Bad(PclntabError::FunctionCount { nfunc });
        }
        if funcname_off > cu_off || cu_off > len64 || funcname_off < 72 {
            return PclnState::Bad(PclntabError::NameTableOutside {
                start: funcname_off,
                end: cu_off,
                len,
            });
        }
        let functab_end = (nfunc + 1)
            .checked_mul(8)
            .and_then(|n| n.checked_add(pcln_off));
        if functab_end.is_none_or(|e| e > len64) {
            return PclnState::Bad(PclntabError::FunctionTableOutside {
                at: pcln_off,
                nfunc,
                len,
            });
        }
        if pctab_off > pcln_off {
            return PclnState::Bad(PclntabError::PcTablesAfterFunctions {
                pctab: pctab_off,
                functab: pcln_off,
            });
        }
        PclnState::Ok(Pclntab {
            off,
            len,
            magic,
            min_lc,
            nfunc: nfunc as usize,
            funcname_off: funcname_off as usize,
            funcname_end: cu_off as usize,
            pctab_off: pctab_off as usize,
            pcln_off: pcln_off as usize,
        })
    }

    /// The table's bytes.
    pub(crate) fn bytes<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        &data[self.off..self.off + self.len]
    }

    /// The funcnametab's bytes.
    pub(crate) fn funcnames<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        &self.bytes(data)[self.funcname_off..self.funcname_end]
    }

    /// Scans `data[start..end]` for a Go 1.18+ pclntab header (for binaries whose section
    /// headers were removed). Returns the state of the first plausible one.
    pub(crate) fn scan(data: &[u8], start: usize, end: usize) -> PclnState {
        let end = end.min(data.len());
        let mut off = start.next_multiple_of(8);
        let mut old = None;
        while off + 16 <= end {
            let b = &data[off..off + 8];
            if b[1] == 0xff
                && b[2] == 0xff
                && b[3] == 0xff
                && b[4] == 0
                && b[5] == 0
                && matches!(b[6], 1 | 2 | 4)
                && b[7] == 8
            {
                let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                match magic {
                    MAGIC_GO118 | MAGIC_GO120 => {
                        if let PclnState::Ok(p) = Self::parse(data, off, end - off) {
                            if p.first_entry_consistent(data) {
                                return PclnState::Ok(p);
                            }
                        }
                    }
                    MAGIC_GO12 | MAGIC_GO116 if old.is_none() => old = Some(magic),
                    _ => {}
                }
            }
            off += 8;
        }
        match old {
            Some(magic) => PclnState::Unsupported { magic },
            None => PclnState::Absent,
        }
    }

    /// Checks that the first functab entry points to a _func with the same entry offset.
    fn first_entry_consistent(&self, data: &[u8]) -> bool {
        let t = self.bytes(data);
        let (Some(entry), Some(funcoff)) = (u32_at(t, self.pcln_off), u32_at(t, self.pcln_off + 4))
        else {
            return false;
        };
        u32_at(t, self.pcln_off + funcoff as usize) == Some(entry)
    }

    /// The `args` field (bytes of arguments: spill space of register arguments, stack
    /// arguments and stack results) of the _func at `func_off` (relative to the functab);
    /// `None` when unknown (assembly functions).
    pub(crate) fn args_size(&self, data: &[u8], func_off: u32) -> Option<u64> {
        let at = self
            .pcln_off
            .checked_add(func_off as usize)?
            .checked_add(8)?;
        let args = u32_at(self.bytes(data), at)? as i32;
        (args >= 0).then_some(args as u64)
    }

    /// Calls `f` for each function, in table (= address) order.
    pub(crate) fn for_each_func(
        &self,
        data: &[u8],
        mut f: impl FnMut(PclnFunc),
    ) -> Result<(), PclntabError> {
        let t = self.bytes(data);
        // _func.funcID follows cuOffset (Go 1.18/1.19) or startLine (Go 1.20+).
        let func_id_at = if self.magic == MAGIC_GO118 { 36 } else { 40 };
        let tab = &t[self.pcln_off..self.pcln_off + (self.nfunc + 1) * 8];
        let names_len = self.funcname_end - self.funcname_off;
        let mut prev_entry = u32::from_le_bytes(tab[0..4].try_into().unwrap_or_default());
        for i in 0..self.nfunc {
            let e = &tab[i * 8..i * 8 + 16];
            let entry = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            let funcoff = u32::from_le_bytes([e[4], e[5], e[6], e[7]]) as usize;
            let next = u32::from_le_bytes([e[8], e[9], e[10], e[11]]);
            if entry < prev_entry || next < entry {
                return Err(PclntabError::Unsorted {
                    index: i,
                    entry,
                    prev: prev_entry,
                    next,
                });
            }
            prev_entry = entry;
            let fo = self.pcln_off.saturating_add(funcoff);
            let (Some(fentry), Some(name_off)) = (u32_at(t, fo), u32_at(t, fo.saturating_add(4)))
            else {
                return Err(PclntabError::RecordOutside {
                    index: i,
                    at: fo,
                    len: self.len,
                });
            };
            if fentry != entry {
                return Err(PclntabError::EntryMismatch {
                    index: i,
                    record: fentry,
                    table: entry,
                });
            }
            let name_off = name_off as i32;
            if name_off < 0 || name_off as usize >= names_len {
                return Err(PclntabError::NameOutside {
                    index: i,
                    name_off,
                    names_len,
                });
            }
            f(PclnFunc {
                entry_off: entry,
                size: (next - entry) as u64,
                name_off: self.off + self.funcname_off + name_off as usize,
                func_id: t.get(fo.saturating_add(func_id_at)).copied().unwrap_or(0),
                func_off: funcoff as u32,
            });
        }
        Ok(())
    }

    /// The entry offset of functab entry `i` (`i == nfunc` is the end of the last function).
    pub(crate) fn entry_off(&self, data: &[u8], i: usize) -> Option<u32> {
        u32_at(
            self.bytes(data),
            self.pcln_off.checked_add(i.checked_mul(8)?)?,
        )
    }
}
