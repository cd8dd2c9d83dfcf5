//! Inlined call sites, from the inline trees of the pclntab (Go's runtime/symtab.go:
//! `inlinedCall`, FUNCDATA_InlTree, PCDATA_InlTreeIndex).
//!
//! A function's inline tree is an array of `inlinedCall` records in `go:func.*` (its
//! funcdata 3 is an offset from the module data's `gofunc`), one per call that the
//! compiler inlined into the function, each naming the callee by its offset in the
//! funcnametab. The array's length is not stored: the pc-value table PCDATA_InlTreeIndex
//! maps each instruction to the record it came from, so the largest index in it bounds the
//! records that still have code (a record's parent always has a smaller index).

use std::collections::HashMap;

use super::error::PclntabError;
use super::pclntab::{Pclntab, MAGIC_GO118};
use crate::resolve::elf::{u32_at, ElfFile};
use crate::resolve::funcs::RawFunc;

const PCDATA_INL_TREE_INDEX: usize = 2;
const FUNCDATA_INL_TREE: usize = 3;

/// How many times each callee (by funcnametab offset) was inlined, over all functions.
#[derive(Debug, Default)]
pub(crate) struct InlineIndex {
    by_name_off: HashMap<u32, u32>,
}

/// Where the fields of `_func` and `inlinedCall` are in one pclntab format.
struct Layout {
    /// Offset of nfuncdata in _func; the pcdata array follows it.
    nfuncdata: usize,
    /// Size of an inlinedCall record and the offset of its callee name offset.
    call_size: usize,
    call_name: usize,
}

impl Layout {
    fn of(p: &Pclntab) -> Layout {
        if p.magic == MAGIC_GO118 {
            // Go 1.18/1.19: parent int16, funcID, _, file, line, func_ (name), parentPc.
            Layout {
                nfuncdata: 39,
                call_size: 20,
                call_name: 12,
            }
        } else {
            // Go 1.20+: funcID, _ [3], nameOff, parentPc, startLine.
            Layout {
                nfuncdata: 43,
                call_size: 16,
                call_name: 4,
            }
        }
    }
}

impl InlineIndex {
    /// Reads the inline tree of every function. `gofunc` is the module data's `gofunc`.
    pub(crate) fn build(
        elf: &ElfFile,
        p: &Pclntab,
        gofunc: u64,
        funcs: &[RawFunc],
    ) -> Result<InlineIndex, PclntabError> {
        let data = elf.data();
        let table = p.bytes(data);
        let lay = Layout::of(p);
        let names_len = (p.funcname_end - p.funcname_off) as u32;
        let mut by_name_off = HashMap::new();
        for f in funcs {
            let rec = p.pcln_off + f.func_off as usize;
            let npcdata = u32_at(table, rec + 28).ok_or(PclntabError::FuncRecordCut)? as usize;
            let nfuncdata = *table
                .get(rec + lay.nfuncdata)
                .ok_or(PclntabError::FuncRecordCut)?;
            if npcdata <= PCDATA_INL_TREE_INDEX || (nfuncdata as usize) <= FUNCDATA_INL_TREE {
                continue;
            }
            let pcdata = rec + lay.nfuncdata + 1;
            let tree_at = pcdata + 4 * (npcdata + FUNCDATA_INL_TREE);
            let tree = u32_at(table, tree_at).ok_or(PclntabError::FuncRecordCut)?;
            let index = u32_at(table, pcdata + 4 * PCDATA_INL_TREE_INDEX).unwrap_or(0);
            if tree == u32::MAX || index == 0 {
                continue;
            }
            let Some(max) = max_value(table, p, index as usize, f.size) else {
                continue;
            };
            let count = (max + 1) as usize;
            let tree_addr = gofunc + tree as u64;
            let bytes = elf
                .read_vaddr(tree_addr, count * lay.call_size)
                .ok_or(PclntabError::InlineTreeOutside { addr: tree_addr })?;
            for call in bytes.chunks_exact(lay.call_size) {
                let name = u32_at(call, lay.call_name).unwrap_or(u32::MAX);
                if name >= names_len {
                    return Err(PclntabError::InlineNameOutside {
                        addr: tree_addr,
                        name_off: name,
                        names_len,
                    });
                }
                *by_name_off.entry(name).or_insert(0) += 1;
            }
        }
        Ok(InlineIndex { by_name_off })
    }

    /// How many call sites inline the function named `name`.
    pub(crate) fn count(&self, elf: &ElfFile, p: &Pclntab, name: &[u8]) -> usize {
        let base = p.off + p.funcname_off;
        self.by_name_off
            .iter()
            .filter(|(&off, _)| elf.name_bytes(base + off as usize) == name)
            .map(|(_, &n)| n as usize)
            .sum()
    }
}

/// The largest value of the pc-value table at `off` in the pctab (Go's runtime `step`:
/// pairs of zigzag value delta and pc delta, values starting at -1, ended by a zero value
/// delta), over the function's `size` bytes; `None` when it never reaches 0.
fn max_value(table: &[u8], p: &Pclntab, off: usize, size: u64) -> Option<i32> {
    let mut b = table.get(p.pctab_off.checked_add(off)?..p.pcln_off)?;
    let (mut val, mut pc, mut max) = (-1i32, 0u64, -1i32);
    let mut first = true;
    while pc < size {
        let (uvdelta, n) = uvarint(b)?;
        if uvdelta == 0 && !first {
            break;
        }
        first = false;
        b = &b[n..];
        val = val.wrapping_add((-((uvdelta & 1) as i32)) ^ ((uvdelta >> 1) as i32));
        let (pcdelta, n) = uvarint(b)?;
        b = &b[n..];
        pc += pcdelta as u64 * p.min_lc as u64;
        max = max.max(val);
    }
    (max >= 0).then_some(max)
}

fn uvarint(b: &[u8]) -> Option<(u32, usize)> {
    let mut x = 0u32;
    for (i, &byte) in b.iter().enumerate().take(5) {
        x |= ((byte & 0x7f) as u32) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((x, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pctab: &[u8]) -> Pclntab {
        Pclntab {
            off: 0,
            len: pctab.len(),
            magic: super::super::pclntab::MAGIC_GO120,
            min_lc: 1,
            nfunc: 0,
            funcname_off: 0,
            funcname_end: 0,
            pctab_off: 0,
            pcln_off: pctab.len(),
        }
    }

    #[test]
    fn largest_inline_index_of_a_pc_value_table() {
        // -1 -> 0 for 4 bytes, -> -1 for 4, -> 2 for 4 (zigzag deltas +1, -1, +3), end.
        let t = [2, 4, 1, 4, 6, 4, 0];
        assert_eq!(max_value(&t, &table(&t), 0, 12), Some(2));
        // Only the first 8 bytes belong to the function: index 2 is not reached.
        assert_eq!(max_value(&t, &table(&t), 0, 8), Some(0));
        // Never inlined: -1 throughout.
        let t = [0, 12, 0];
        assert_eq!(max_value(&t, &table(&t), 0, 12), None);
        // Cut off in the middle of a pair.
        let t = [2, 0x80];
        assert_eq!(max_value(&t, &table(&t), 0, 12), None);
    }

    #[test]
    fn uvarints() {
        assert_eq!(uvarint(&[0x05]), Some((5, 1)));
        assert_eq!(uvarint(&[0x80, 0x01]), Some((128, 2)));
        assert_eq!(uvarint(&[0x80]), None);
    }
}
