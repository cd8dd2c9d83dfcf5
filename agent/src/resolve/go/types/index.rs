//! Every runtime type descriptor of a binary, found once: from the module's typelinks (Go
//! 1.18-1.26) or its contiguous descriptors (Go 1.27), the itabs, and everything those
//! refer to (element, key and field types, pointers to them). A stripped binary's named
//! types are reached this way: `*main.order` is typelinked, `main.order` is its element.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use super::model::short_name;
use super::rtype::DescReader;
use crate::plan::errtable::ErrTable;
use crate::resolve::elf::{u32_at, ElfFile};
use crate::resolve::go::moduledata::{TypeLinks, TypeSection};

/// Descriptors read at most (a large Kubernetes binary has about 60,000).
const MAX_TYPES: usize = 1 << 21;

/// What the descriptors of a binary describe, by address (link-time) and by name.
#[derive(Debug, Default)]
pub(crate) struct DescIndex {
    pub(super) sec: Option<TypeSection>,
    pub(super) relocs: Vec<(u64, u64)>,
    pub(super) offset_embed: bool,
    /// Go's reflect string of every descriptor (`*os.PathError`), by address.
    pub(super) strings: HashMap<u64, Box<str>>,
    /// Named types by their DWARF-style name (`net/http.Request`).
    pub(super) by_name: HashMap<String, u64>,
    /// Full names by their package-name form (`http.Request` -> `net/http.Request`).
    pub(super) short: HashMap<String, Vec<String>>,
    /// The dynamic type of every itab of the binary, by the itab's address.
    pub(super) itabs: HashMap<u64, u64>,
    /// Descriptors that could not be read (skipped), for diagnostics.
    pub(super) unreadable: usize,
    /// How many descriptors have each `hash` (errtable.rs keeps only unique ones).
    pub(super) hash_counts: HashMap<u32, u32>,
    /// The pointer type `*T` of each type `T` that has one, by address.
    pub(super) ptr_to: HashMap<u64, u64>,
    /// The error types whose text gprobe builds (errtable.rs), made on first use.
    pub(super) errors: ErrTableCell,
}

impl DescIndex {
    /// Reads every descriptor of the module whose types are `sec`. `go118` selects Go
    /// 1.18's struct field offsets.
    pub(crate) fn build(elf: &ElfFile, sec: Option<TypeSection>, go118: bool) -> DescIndex {
        let mut relocs = Vec::new();
        elf.for_each_relative_reloc(|at, addend| relocs.push((at, addend)));
        relocs.sort_unstable();
        let mut idx = DescIndex {
            sec,
            relocs,
            offset_embed: go118,
            ..Default::default()
        };
        let Some(sec) = sec else {
            return idx;
        };
        let r = DescReader {
            elf,
            sec,
            relocs: &idx.relocs,
            offset_embed: go118,
        };
        let (mut roots, itabs) = roots(&r);
        let mut itab_types = HashMap::new();
        for itab in itabs {
            if let Some(t) = r.itab_type(itab) {
                itab_types.insert(itab, t);
                roots.push(t);
            }
        }
        let mut seen: HashSet<u64> = HashSet::new();
        let mut strings = HashMap::new();
        let (mut by_name, mut short) = (HashMap::new(), HashMap::<String, Vec<String>>::new());
        let mut unreadable = 0;
        let (mut hash_counts, mut ptr_to) = (HashMap::new(), HashMap::new());
        let mut kids = Vec::new();
        while let Some(addr) = roots.pop() {
            if seen.len() >= MAX_TYPES || !seen.insert(addr) {
                continue;
            }
            let (Ok(h), Ok(s)) = (r.header(addr), r.string(addr)) else {
                unreadable += 1;
                continue;
            };
            strings.insert(addr, Box::from(s));
            count_hash(&mut hash_counts, h.hash);
            if h.kind == super::rtype::kind::PTR {
                if let Some(elem) = r.word(addr + 48) {
                    ptr_to.insert(elem, addr);
                }
            }
            if h.tflag & 4 != 0 {
                if let Ok(full) = r.full_name(addr, 0) {
                    let key = short_name(&full).to_string();
                    if by_name.insert(full.clone(), addr).is_none() && key != full {
                        short.entry(key).or_default().push(full);
                    }
                }
            }
            kids.clear();
            r.children(addr, &h, &mut kids);
            roots.extend(kids.iter().copied().filter(|k| !seen.contains(k)));
        }
        idx.strings = strings;
        idx.by_name = by_name;
        idx.short = short;
        idx.itabs = itab_types;
        idx.unreadable = unreadable;
        idx.hash_counts = hash_counts;
        idx.ptr_to = ptr_to;
        idx
    }

    pub(super) fn reader<'a>(&'a self, elf: &'a ElfFile) -> Option<DescReader<'a>> {
        Some(DescReader {
            elf,
            sec: self.sec?,
            relocs: &self.relocs,
            offset_embed: self.offset_embed,
        })
    }

    /// Number of descriptors found.
    pub(crate) fn len(&self) -> usize {
        self.strings.len()
    }
}

/// The descriptors and itabs the module lists.
fn roots(r: &DescReader<'_>) -> (Vec<u64>, Vec<u64>) {
    let sec = r.sec;
    let (mut types, mut itabs) = (Vec::new(), Vec::new());
    match sec.links {
        TypeLinks::Tables {
            typelinks,
            itablinks,
        } => {
            let (addr, n) = typelinks;
            if let Some(b) = r.elf.read_vaddr(addr, (n as usize).saturating_mul(4)) {
                for i in 0..n as usize {
                    if let Some(off) = u32_at(b, i * 4) {
                        types.push(sec.types + off as u64);
                    }
                }
            }
            let (addr, n) = itablinks;
            for i in 0..n {
                if let Some(p) = r.word(addr + i * 8).filter(|&p| p != 0) {
                    itabs.push(p);
                }
            }
        }
        TypeLinks::Contiguous {
            itaboffset,
            itabsize,
            ..
        } => {
            // moduleTypelinks' walk, continued past the typelinked ones to every
            // descriptor. Padding between descriptors aligned more than 8 is zeros (kind 0,
            // which no descriptor has): skip it a word at a time.
            let end = sec.types + itaboffset;
            let mut td = sec.types + 8;
            while td < end && types.len() < MAX_TYPES {
                td = td.next_multiple_of(8);
                match r.header(td) {
                    Ok(h) => match r.descriptor_size(td, &h) {
                        Some(n) => {
                            types.push(td);
                            td += n.max(8);
                        }
                        None => break,
                    },
                    Err(_) => td += 8,
                }
            }
            let (mut p, end) = (sec.types + itaboffset, sec.types + itaboffset + itabsize);
            while p < end {
                let Some(n) = r.itab_size(p) else { break };
                itabs.push(p);
                p += n;
            }
        }
    }
    (types, itabs)
}

/// Where a descriptor index keeps its table.
pub(super) type ErrTableCell = OnceLock<ErrTable>;

/// Hash counts of every descriptor, for the uniqueness check of errtable.rs's `build`.
fn count_hash(counts: &mut HashMap<u32, u32>, hash: u32) {
    *counts.entry(hash).or_default() += 1;
}
