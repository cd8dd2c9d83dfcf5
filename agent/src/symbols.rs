//! `gprobe symbols`: what can be probed in a binary.

use crate::resolve::{Binary, ResolveError};
use std::io::Write;
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SymbolsError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("invalid --filter regular expression: {0}")]
    Filter(#[from] regex_lite::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Writes a header (binary facts) and one line per function.
pub fn list(
    path: &Path,
    filter: Option<&str>,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<usize, SymbolsError> {
    let bin = Binary::open(path)?;
    let re = filter.map(regex_lite::Regex::new).transpose()?;
    let funcs = bin.functions()?;
    let sigs = if bin.has_dwarf() {
        bin.dwarf_signatures().unwrap_or_default()
    } else {
        Default::default()
    };
    writeln!(
        out,
        "# {}: {}{}, {} functions, {}{}",
        path.display(),
        if bin.is_go() {
            "Go binary"
        } else {
            "ELF binary"
        },
        bin.go_version()
            .map(|v| format!(" ({v})"))
            .unwrap_or_default(),
        funcs.len(),
        if bin.has_symtab() {
            "symbol table"
        } else {
            "stripped (no symbol table)"
        },
        if bin.has_dwarf() {
            ", DWARF: signatures shown"
        } else {
            ", no DWARF: probes need a signature"
        }
    )?;
    let mut n = 0;
    for f in &funcs {
        if re.as_ref().is_some_and(|r| !r.is_match(&f.name)) {
            continue;
        }
        n += 1;
        let sig = sigs.get(&f.addr).map(|s| {
            let list = |ps: &[crate::resolve::DwarfParam]| {
                ps.iter()
                    .map(|p| format!("{} {}", p.name, p.type_name))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let res = if s.results.is_empty() {
                String::new()
            } else {
                format!(" ({})", list(&s.results))
            };
            format!("func({}){res}", list(&s.params))
        });
        if verbose {
            let sites = bin.probe_sites(f);
            let extra = match sites {
                Ok(s) => format!(
                    "entry={:#x} body={:#x} rets={}",
                    s.entry_offset,
                    s.body_offset,
                    s.ret_offsets.len()
                ),
                Err(e) => format!("sites: {e}"),
            };
            writeln!(
                out,
                "{:#014x} {:>7} {}  {}  {}",
                f.addr,
                f.size,
                f.name,
                sig.unwrap_or_default(),
                extra
            )?;
        } else {
            match sig {
                Some(s) => writeln!(out, "{}  {}", f.name, s)?,
                None => writeln!(out, "{}", f.name)?,
            }
        }
    }
    Ok(n)
}
