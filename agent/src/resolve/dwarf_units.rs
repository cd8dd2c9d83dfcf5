//! The one DWARF reader of a file, shared by Go's readers (`go/dwarf.rs`, `go/types/`) and
//! C's (`c/dwarf.rs`): its sections (`dwarf_sections.rs`), where each unit starts, and the
//! units parsed so far, kept by the file's owner (the [`super::Binary`], or the separate
//! debug file a C binary's DWARF is in) and dropped with it.
//!
//! A unit's parse (its abbreviations, then its root's bases) is the costly part of reading
//! one DIE of it; every lookup after the first rebuilds gimli's [`Unit`] view from the kept
//! parse, which reads only the unit's header. The view has no name, compilation folder or
//! line program: nothing here reads them. The cache holds at most one entry per unit of the
//! file and no borrowed bytes, so it costs what the parsed abbreviations cost, whatever the
//! number of lookups, and lives no longer than the mapped file.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};

use gimli::{
    Abbreviations, AttributeValue, DebugAddrBase, DebugInfoOffset, DebugLocListsBase,
    DebugRngListsBase, DebugStrOffsetsBase, DwoId, Unit, UnitOffset,
};

use super::dwarf_error::DwarfError;
use super::dwarf_sections::{DwarfSections, R};
use super::elf::ElfFile;

/// What parsing a unit found, without the file's bytes.
struct Parsed {
    abbreviations: Arc<Abbreviations>,
    low_pc: u64,
    str_offsets_base: DebugStrOffsetsBase<usize>,
    addr_base: DebugAddrBase<usize>,
    loclists_base: DebugLocListsBase<usize>,
    rnglists_base: DebugRngListsBase<usize>,
    dwo_id: Option<DwoId>,
}

/// The DWARF of one file: its sections, the start of each unit, and the units parsed.
/// `Send + Sync`; its bytes are read through the [`ElfFile`] it was loaded from.
pub(crate) struct DwarfUnits {
    sections: DwarfSections,
    /// Start offsets of the units in .debug_info, ascending; found on the first lookup.
    starts: OnceLock<Result<Vec<usize>, DwarfError>>,
    /// The units parsed so far, by start offset.
    parsed: Mutex<HashMap<usize, Arc<Parsed>>>,
}

impl DwarfUnits {
    /// Loads the sections of `elf`; its units are read when first looked into.
    pub(crate) fn load(elf: &ElfFile) -> Result<DwarfUnits, DwarfError> {
        Ok(DwarfUnits {
            sections: DwarfSections::load(elf)?,
            starts: OnceLock::new(),
            parsed: Mutex::new(HashMap::new()),
        })
    }

    /// A reader over these units; `elf` must be the file they were loaded from.
    pub(crate) fn reader<'a>(&'a self, elf: &'a ElfFile) -> DwarfReader<'a> {
        DwarfReader {
            dwarf: self.sections.dwarf(elf),
            units: self,
        }
    }

    /// How many units are parsed and kept.
    #[cfg(test)]
    pub(crate) fn parsed_units(&self) -> usize {
        self.lock().len()
    }

    /// Where each unit starts (a pass over the unit headers, once).
    fn starts(&self, dwarf: &gimli::Dwarf<R<'_>>) -> Result<&[usize], DwarfError> {
        let found = self.starts.get_or_init(|| {
            let mut starts = Vec::new();
            let mut iter = dwarf.units();
            while let Some(header) = iter.next()? {
                if let Some(off) = header.offset().as_debug_info_offset() {
                    starts.push(off.0);
                }
            }
            Ok(starts)
        });
        found.as_deref().map_err(Clone::clone)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Arc<Parsed>>> {
        // A panic while the map was held leaves it consistent (inserts are whole).
        self.parsed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads DIEs through gimli, with the units its [`DwarfUnits`] keeps.
pub(crate) struct DwarfReader<'a> {
    dwarf: gimli::Dwarf<R<'a>>,
    units: &'a DwarfUnits,
}

impl<'a> DwarfReader<'a> {
    /// The loaded DWARF, for walks over every unit.
    pub(crate) fn gimli(&self) -> &gimli::Dwarf<R<'a>> {
        &self.dwarf
    }

    /// The unit holding .debug_info offset `off`, and the entry's offset in it.
    pub(crate) fn locate(&self, off: usize) -> Result<(Rc<Unit<R<'a>>>, UnitOffset), DwarfError> {
        let starts = self.units.starts(&self.dwarf)?;
        let i = starts.partition_point(|&s| s <= off);
        if i == 0 {
            return Err(DwarfError::BeforeFirstUnit { offset: off });
        }
        let unit = self.unit_at(starts[i - 1])?;
        let uoff = DebugInfoOffset(off)
            .to_unit_offset(&unit.header)
            .ok_or(DwarfError::OutsideUnit { offset: off })?;
        Ok((Rc::new(unit), uoff))
    }

    /// The unit starting at .debug_info offset `start`, parsed once for the file.
    fn unit_at(&self, start: usize) -> Result<Unit<R<'a>>, DwarfError> {
        let header = self
            .dwarf
            .debug_info
            .header_from_offset(DebugInfoOffset(start))?;
        let kept = self.units.lock().get(&start).cloned();
        let p = match kept {
            Some(p) => p,
            None => {
                let u = self.dwarf.unit(header)?;
                let p = Arc::new(Parsed {
                    abbreviations: u.abbreviations.clone(),
                    low_pc: u.low_pc,
                    str_offsets_base: u.str_offsets_base,
                    addr_base: u.addr_base,
                    loclists_base: u.loclists_base,
                    rnglists_base: u.rnglists_base,
                    dwo_id: u.dwo_id,
                });
                self.units.lock().entry(start).or_insert(p).clone()
            }
        };
        Ok(Unit {
            header,
            abbreviations: p.abbreviations.clone(),
            name: None,
            comp_dir: None,
            low_pc: p.low_pc,
            str_offsets_base: p.str_offsets_base,
            addr_base: p.addr_base,
            loclists_base: p.loclists_base,
            rnglists_base: p.rnglists_base,
            line_program: None,
            dwo_id: p.dwo_id,
        })
    }

    /// A string attribute's value (lossily UTF-8).
    pub(crate) fn string(&self, unit: &Unit<R<'a>>, v: AttributeValue<R<'a>>) -> Option<String> {
        let s = self.dwarf.attr_string(unit, v).ok()?;
        Some(String::from_utf8_lossy(s.slice()).into_owned())
    }

    /// A reference attribute as a .debug_info offset.
    pub(crate) fn reference(unit: &Unit<R<'a>>, v: AttributeValue<R<'a>>) -> Option<usize> {
        match v {
            AttributeValue::UnitRef(u) => u.to_debug_info_offset(&unit.header).map(|o| o.0),
            AttributeValue::DebugInfoRef(o) => Some(o.0),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// This test program, built with DWARF.
    fn me() -> ElfFile {
        let p = Path::new("/proc/self/exe");
        ElfFile::open_as(p, p).unwrap()
    }

    #[test]
    fn a_unit_is_parsed_once_for_the_file_whatever_the_lookups_and_readers() {
        let elf = me();
        let units = DwarfUnits::load(&elf).unwrap();
        let starts = units.starts(units.reader(&elf).gimli()).unwrap().to_vec();
        let n = starts.len();
        assert!(n > 3, "{n} units");
        let picked: Vec<usize> = starts.iter().step_by(n / 3).copied().collect();
        for round in 0..50 {
            // A new reader each round, as each signature or planning pass makes one.
            let r = units.reader(&elf);
            for &s in &picked {
                let header = r.gimli().debug_info.header_from_offset(DebugInfoOffset(s));
                let root = s + header.unwrap().header_size();
                let (u, uoff) = r.locate(root).unwrap();
                assert_eq!(
                    u.header.offset().as_debug_info_offset(),
                    Some(DebugInfoOffset(s))
                );
                assert!(u.entry(uoff).unwrap().tag() == gimli::constants::DW_TAG_compile_unit);
            }
            assert_eq!(units.parsed_units(), picked.len(), "round {round}");
        }
        // The view rebuilt from the kept parse reads what a fresh parse reads.
        let r = units.reader(&elf);
        let s = picked[1];
        let header = r.gimli().debug_info.header_from_offset(DebugInfoOffset(s));
        let header = header.unwrap();
        let (kept, _) = r.locate(s + header.header_size()).unwrap();
        let fresh = r.gimli().unit(header).unwrap();
        assert_eq!(kept.str_offsets_base, fresh.str_offsets_base);
        assert_eq!(kept.addr_base, fresh.addr_base);
        assert_eq!(kept.rnglists_base, fresh.rnglists_base);
        assert_eq!(kept.low_pc, fresh.low_pc);
        let names = |u: &Unit<R<'_>>| {
            let mut out = Vec::new();
            let mut c = u.entries();
            while let Some((_, e)) = c.next_dfs().unwrap() {
                if let Some(v) = e.attr_value(gimli::constants::DW_AT_name).unwrap() {
                    out.push(r.string(u, v));
                }
                if out.len() > 200 {
                    break;
                }
            }
            out
        };
        assert!(!names(&fresh).is_empty());
        assert_eq!(names(&kept), names(&fresh));
    }
}
