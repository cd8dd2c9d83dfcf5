//! The texts of resolution errors, word for word.

use super::*;
use crate::resolve::dwarf_error::DwarfError;
use crate::resolve::elf_error::NoteError;
use crate::resolve::go::types::error::{DescriptorError, TypeError as BinaryTypeError};
use crate::util::{causes, error_chain};

fn eof() -> gimli::Error {
    gimli::Error::UnexpectedEof(gimli::ReaderOffsetId(0))
}

/// The readers' errors are exposed as `source()`, and every message already holds its
/// cause: printed as a chain (main.rs does), an error reads as its message alone.
#[test]
fn wrapped_reader_errors_are_sources_held_in_the_message() {
    let dwarf = |source| UnreadableDwarf {
        path: "/x/bin".into(),
        symbol: Some("main.f".into()),
        source,
    };
    let section = object::File::parse(&[][..])
        .map(|_| ())
        .expect_err("an empty file is no object file");
    let errors: Vec<Box<dyn std::error::Error + Send + Sync>> = vec![
        Box::new(ResolveError::Dwarf(dwarf(DwarfError::Gimli(eof())))),
        Box::new(ResolveError::Dwarf(dwarf(DwarfError::Section {
            section: ".debug_info",
            source: section,
        }))),
        Box::new(ResolveError::BadPclntab {
            path: "/x/bin".into(),
            reason: PclntabError::NoGofunc,
        }),
        Box::new(ResolveError::MalformedStapsdt {
            path: "/x/bin".into(),
            source: StapsdtError::Notes(NoteError::ShortHeader {
                index: 0,
                offset: 0,
                left: 4,
            }),
        }),
        Box::new(BinaryTypeError::DwarfUnloadable(Box::new(dwarf(
            DwarfError::Gimli(eof()),
        )))),
        Box::new(BinaryTypeError::BadDescriptor {
            path: "/x/bin".into(),
            addr: 0x1000,
            reason: DescriptorError::NameNotUtf8,
        }),
        Box::new(PlanError::Path {
            symbol: "main.f".into(),
            capture: "p0.x".into(),
            source: Box::new(PathError::Type(BinaryTypeError::BadDwarf {
                path: "/x/bin".into(),
                offset: 0x10,
                reason: DwarfError::Gimli(eof()),
            })),
        }),
    ];
    for e in &errors {
        let e: &(dyn std::error::Error + 'static) = e.as_ref();
        assert!(causes(e).count() > 1, "no source: {e}");
        assert_eq!(error_chain(causes(e)), e.to_string());
    }
}

/// The DWARF of a file that cannot be read names the file (and what to do) once.
#[test]
fn unreadable_dwarf_says_its_file_once() {
    let e = ResolveError::from(UnreadableDwarf {
        path: "/x/bin".into(),
        symbol: None,
        source: DwarfError::Gimli(eof()),
    });
    assert_eq!(
        e.to_string(),
        "cannot read the DWARF debug information of /x/bin: Hit the end of input before \
         it was expected; give the probe an explicit `signature:` in the ProbeSpec, or \
         rebuild without -ldflags=-w"
    );
}
