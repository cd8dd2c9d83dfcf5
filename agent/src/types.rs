//! `gprobe types`: the struct layouts a binary describes, so that users can write field
//! paths (`capture: [r.URL.Path]`).

use crate::resolve::go::types::{TypeError, TypeSource};
use crate::resolve::{Binary, ResolveError};
use std::io::Write;
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TypesError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error(transparent)]
    Types(#[from] TypeError),
    #[error("{} is not a Go binary: gprobe types lists Go struct layouts", .0.display())]
    NotGo(std::path::PathBuf),
    #[error("invalid --filter regular expression: {0}")]
    Filter(#[from] regex_lite::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Writes a header (where the layouts come from) and each named struct type whose name
/// matches `filter`: its size, then one line per field (offset, name, type). Returns how
/// many types were listed.
pub fn list(path: &Path, filter: Option<&str>, out: &mut dyn Write) -> Result<usize, TypesError> {
    let bin = Binary::open(path)?;
    if !bin.is_go() {
        return Err(TypesError::NotGo(path.to_path_buf()));
    }
    let re = filter.map(regex_lite::Regex::new).transpose()?;
    let listing = bin.struct_layouts()?;
    let source = match listing.source {
        TypeSource::Dwarf => "from DWARF".to_string(),
        TypeSource::Descriptors => format!(
            "from {} runtime type descriptors (no DWARF: only types the program uses through \
             interfaces or reflection are described; a build without -w describes all)",
            listing.descriptors
        ),
        TypeSource::None => "none found (no DWARF, no readable type descriptors)".to_string(),
    };
    let shown: Vec<_> = listing
        .structs
        .iter()
        // Anonymous struct types are not written in paths; named ones are.
        .filter(|s| !s.name.starts_with("struct"))
        .filter(|s| re.as_ref().is_none_or(|r| r.is_match(&s.name)))
        .collect();
    writeln!(
        out,
        "# {}: Go binary{}, {} struct types {source}",
        path.display(),
        bin.go_version()
            .map(|v| format!(" ({v})"))
            .unwrap_or_default(),
        shown.len(),
    )?;
    for s in &shown {
        writeln!(out, "{} ({} bytes)", s.name, s.size)?;
        let width = s.fields.iter().map(|f| f.0.len()).max().unwrap_or(0);
        for (name, offset, ty, embedded) in &s.fields {
            writeln!(
                out,
                "  {offset:>6}  {name:<width$}  {ty}{}",
                if *embedded { "  (embedded)" } else { "" }
            )?;
        }
    }
    Ok(shown.len())
}
