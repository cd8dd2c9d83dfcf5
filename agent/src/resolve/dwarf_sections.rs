//! The DWARF sections of an ELF file, loaded once for gimli: in the mapped file where
//! they are stored as is, decompressed otherwise (Go's `.zdebug_*` and SHF_COMPRESSED
//! sections; object's `uncompressed_data` handles both). Read through `dwarf_units.rs`.

use std::borrow::Cow;

use gimli::{EndianSlice, RunTimeEndian, SectionId};
use object::{Object, ObjectSection};

use super::dwarf_error::DwarfError;
use super::elf::ElfFile;

pub(crate) type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// A DWARF section's bytes: in the mapped file, or decompressed.
enum SecData {
    Mapped(usize, usize),
    Owned(Vec<u8>),
}

/// The DWARF sections of one file; their bytes are read through that file's map.
pub(crate) struct DwarfSections {
    sections: Vec<(SectionId, SecData)>,
}

impl DwarfSections {
    pub(crate) fn load(elf: &ElfFile) -> Result<DwarfSections, DwarfError> {
        let data = elf.data();
        let file = object::File::parse(data)?;
        let base = data.as_ptr() as usize;
        let mut sections = Vec::new();
        for id in [
            SectionId::DebugAbbrev,
            SectionId::DebugAddr,
            SectionId::DebugInfo,
            SectionId::DebugLine,
            SectionId::DebugLineStr,
            SectionId::DebugRanges,
            SectionId::DebugRngLists,
            SectionId::DebugStr,
            SectionId::DebugStrOffsets,
            SectionId::DebugTypes,
        ] {
            let Some(sec) = file.section_by_name(id.name()) else {
                continue;
            };
            let bytes = sec
                .uncompressed_data()
                .map_err(|source| DwarfError::Section {
                    section: id.name(),
                    source,
                })?;
            let d = match bytes {
                Cow::Borrowed(b) => SecData::Mapped(b.as_ptr() as usize - base, b.len()),
                Cow::Owned(v) => SecData::Owned(v),
            };
            sections.push((id, d));
        }
        Ok(DwarfSections { sections })
    }

    fn bytes<'a>(&'a self, elf: &'a ElfFile, id: SectionId) -> &'a [u8] {
        match self.sections.iter().find(|(i, _)| *i == id) {
            Some((_, SecData::Mapped(off, len))) => {
                elf.data().get(*off..off + len).unwrap_or_default()
            }
            Some((_, SecData::Owned(v))) => v,
            None => &[],
        }
    }

    /// gimli's view of the sections; `elf` must be the file they were loaded from.
    pub(crate) fn dwarf<'a>(&'a self, elf: &'a ElfFile) -> gimli::Dwarf<R<'a>> {
        let loaded: Result<_, ()> = gimli::Dwarf::load(|id| {
            Ok(EndianSlice::new(self.bytes(elf, id), RunTimeEndian::Little))
        });
        loaded.unwrap_or_default()
    }
}
