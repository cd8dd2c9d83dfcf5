//! Why the notes of an ELF NOTE section cannot be read (`elf::notes_checked`). Apart from
//! `elf.rs` so that the errors wrapping it (`usdt/error.rs`) do not import the ELF reader.

/// The first note of a NOTE section that does not fit the section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error(
        "note {index} at offset {offset:#x}: {left} byte(s) left, less than a note header (12)"
    )]
    ShortHeader {
        index: usize,
        offset: usize,
        left: usize,
    },
    #[error("note {index} at offset {offset:#x}: its sizes (name {namesz}, descriptor {descsz}) overflow")]
    SizesOverflow {
        index: usize,
        offset: usize,
        namesz: usize,
        descsz: usize,
    },
    #[error(
        "note {index} at offset {offset:#x}: its name ({namesz} bytes) and descriptor \
        ({descsz} bytes) run past the end of the section ({section} bytes)"
    )]
    PastSection {
        index: usize,
        offset: usize,
        namesz: usize,
        descsz: usize,
        section: usize,
    },
}
