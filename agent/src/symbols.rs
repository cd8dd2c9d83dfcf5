//! `gprobe symbols`: what can be probed in a binary, or in a running process and the
//! shared libraries it has mapped: functions (Go signatures, or C prototypes where DWARF
//! has them) and USDT probes (provider:name, argument specs, semaphore, sites).

use crate::resolve::sites::{self, SiteClass};
use crate::resolve::usdt::args::parse_args;
use crate::resolve::{Binary, ResolveError, UsdtProbe};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SymbolsError {
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("invalid --filter regular expression: {0}")]
    Filter(#[from] regex_lite::Error),
    #[error(
        "cannot read the memory map of process {pid} ({path}): {source}; check that the \
        process exists and that this user may trace it"
    )]
    Maps {
        pid: u32,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Writes a header (binary facts), one line per function and the USDT probes; returns
/// how many functions and probes were listed.
pub fn list(
    path: &Path,
    filter: Option<&str>,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<usize, SymbolsError> {
    let bin = Binary::open(path)?;
    let re = filter.map(regex_lite::Regex::new).transpose()?;
    list_binary(&bin, re.as_ref(), true, verbose, out)
}

/// `--pid N`: the process's executable, then every shared library it has mapped (each
/// with its functions matching `filter`, and its USDT probes). Files are read through
/// `/proc/N/root`, so a container's files are the container's.
pub fn list_pid(
    pid: u32,
    filter: Option<&str>,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<usize, SymbolsError> {
    let re = filter.map(regex_lite::Regex::new).transpose()?;
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let shown = std::fs::read_link(&exe).unwrap_or_else(|_| exe.clone());
    let bin = Binary::open_as(&exe, &shown)?;
    let mut n = list_binary(&bin, re.as_ref(), true, verbose, out)?;
    let maps = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&maps).map_err(|source| SymbolsError::Maps {
        pid,
        path: maps,
        source,
    })?;
    let mut quiet = 0;
    for lib in mapped_libraries(&text, &shown) {
        let open = PathBuf::from(format!("/proc/{pid}/root{}", lib.display()));
        // A library is listed only when it has something to list: most have no USDT
        // probes, and with --filter most have no match.
        let mut section = Vec::new();
        match Binary::open_as(&open, &lib) {
            // Functions of a library are many (libc: thousands): listed on request only.
            Ok(b) => match list_binary(&b, re.as_ref(), re.is_some(), verbose, &mut section)? {
                0 => {
                    quiet += 1;
                    continue;
                }
                k => n += k,
            },
            Err(e) => writeln!(section, "# {}: {e}", lib.display())?,
        }
        writeln!(out)?;
        out.write_all(&section)?;
    }
    if quiet > 0 {
        writeln!(
            out,
            "\n# {quiet} more mapped {} nothing to list{}",
            if quiet == 1 {
                "library has"
            } else {
                "libraries have"
            },
            if re.is_some() {
                " that matches --filter"
            } else {
                " (no USDT probes; list their functions with --filter RE)"
            }
        )?;
    }
    Ok(n)
}

/// The files a process maps executable (its shared libraries), in address order, without
/// the executable itself.
fn mapped_libraries(maps: &str, exe: &Path) -> Vec<PathBuf> {
    let mut seen = BTreeSet::new();
    let mut libs = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let mut f = line.splitn(6, ' ');
        let perms = f.nth(1).unwrap_or("");
        let path = f.nth(3).unwrap_or("").trim();
        if !perms.contains('x') || !path.starts_with('/') || path.ends_with(" (deleted)") {
            continue;
        }
        let p = PathBuf::from(path);
        if p != exe && seen.insert(p.clone()) {
            libs.push(p);
        }
    }
    libs
}

fn list_binary(
    bin: &Binary,
    re: Option<&regex_lite::Regex>,
    functions: bool,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<usize, SymbolsError> {
    let funcs = bin.functions().or_else(|e| match e {
        // A library with no symbols at all still has its USDT probes to list.
        ResolveError::NoFunctions { .. } => Ok(Vec::new()),
        e => Err(e),
    })?;
    let usdt = bin.usdt_probes()?;
    header(bin, funcs.len(), usdt.len(), functions, out)?;
    let mut n = 0;
    if functions {
        n += list_functions(bin, &funcs, re, verbose, out)?;
    }
    n += list_usdt(usdt, re, verbose, out)?;
    Ok(n)
}

fn header(
    bin: &Binary,
    nfuncs: usize,
    nusdt: usize,
    functions: bool,
    out: &mut dyn Write,
) -> Result<(), SymbolsError> {
    let types = if bin.is_go() {
        if bin.has_dwarf() {
            ", DWARF: signatures shown".to_string()
        } else {
            ", no DWARF: probes need a signature".to_string()
        }
    } else if let Some(d) = bin.debug_file() {
        format!(", DWARF from {}: prototypes shown", d.display())
    } else if bin.has_c_dwarf() {
        ", DWARF: prototypes shown".to_string()
    } else {
        ", no DWARF: captures need a signature".to_string()
    };
    writeln!(
        out,
        "# {}: {}{}, {nfuncs} functions{}, {}{types}{}",
        bin.path().display(),
        if bin.is_go() {
            "Go binary"
        } else {
            "ELF binary"
        },
        bin.go_version()
            .map(|v| format!(" ({v})"))
            .unwrap_or_default(),
        if functions {
            ""
        } else {
            " (list them with --filter RE)"
        },
        if bin.has_symtab() {
            "symbol table"
        } else if bin.is_go() {
            "stripped (no symbol table)"
        } else {
            "stripped (no symbol table: exported functions only)"
        },
        if nusdt > 0 {
            format!(", {nusdt} USDT probes")
        } else {
            String::new()
        }
    )?;
    Ok(())
}

fn list_functions(
    bin: &Binary,
    funcs: &[crate::resolve::FuncInfo],
    re: Option<&regex_lite::Regex>,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<usize, SymbolsError> {
    let go_sigs = if bin.is_go() && bin.has_dwarf() {
        bin.dwarf_signatures().unwrap_or_default()
    } else {
        Default::default()
    };
    let c_sigs = if bin.is_go() {
        Default::default()
    } else {
        let shown: Vec<_> = funcs
            .iter()
            .filter(|f| re.is_none_or(|r| r.is_match(&f.name)))
            .cloned()
            .collect();
        bin.c_signatures(&shown).unwrap_or_default()
    };
    let ifuncs = bin.indirect_functions();
    let mut n = 0;
    for f in funcs {
        if re.is_some_and(|r| !r.is_match(&f.name)) {
            continue;
        }
        n += 1;
        let sig = match (go_sigs.get(&f.addr), c_sigs.get(&f.addr)) {
            // DWARF describes the resolver (it returns the implementation's address).
            _ if ifuncs.contains(&f.addr) => Some(
                "(indirect function: a resolver that picks the implementation at load time)".into(),
            ),
            (Some(s), _) => {
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
                Some(format!("func({}){res}", list(&s.params)))
            }
            // The prototype under the symbol's name (`foo.constprop.0` is foo's copy).
            (None, Some(s)) => {
                let mut s = s.clone();
                s.name = Some(f.name.clone());
                Some(s.to_string())
            }
            (None, None) => None,
        };
        if verbose {
            // A C function's return is a uretprobe at its entry: its RETs do not matter.
            let extra = if bin.is_go() {
                match bin.probe_sites(f) {
                    Ok(s) => format!(
                        "entry={:#x} body={:#x} probe={:#x}{} ({}) rets={} ({})",
                        s.entry_offset,
                        s.body_offset,
                        s.entry.offset,
                        if s.entry.jcc.is_some() { " jcc" } else { "" },
                        cost(s.entry.class),
                        s.ret_offsets.len(),
                        cost(s.ret_class),
                    ),
                    Err(e) => format!("sites: {e}"),
                }
            } else {
                match bin.c_entry_site(f) {
                    Ok(e) => format!(
                        "entry={:#x} probe={:#x} ({})",
                        e.first,
                        e.probe,
                        cost(e.class)
                    ),
                    Err(e) => format!("sites: {e}"),
                }
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

/// "emulated ~900 ns": a site's class and, when measured, its cost per call.
fn cost(class: SiteClass) -> String {
    match class.cost_ns(sites::kernel()) {
        0 => class.as_str().to_string(),
        ns => format!("{} ~{ns} ns", class.as_str()),
    }
}

/// One line per USDT probe: `usdt provider:name  [args]  semaphore ...  N sites`, the
/// argument specs of each distinct site shape, and what cannot be read; `--verbose` adds
/// a line per site (pc, file offset).
fn list_usdt(
    probes: &[UsdtProbe],
    re: Option<&regex_lite::Regex>,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<usize, SymbolsError> {
    let mut n = 0;
    for p in probes {
        let point = p.point();
        if re.is_some_and(|r| !r.is_match(&point)) {
            continue;
        }
        n += 1;
        let mut shapes: Vec<&str> = Vec::new();
        for s in &p.sites {
            if !shapes.contains(&s.args.as_str()) {
                shapes.push(&s.args);
            }
        }
        let args: Vec<String> = shapes.iter().map(|a| format!("[{a}]")).collect();
        let semaphore = match p.sites.iter().map(|s| s.semaphore).find(|&s| s != 0) {
            Some(s) => format!("semaphore {s:#x}"),
            None => "no semaphore".into(),
        };
        let mut notes: Vec<String> = Vec::new();
        for a in &shapes {
            for (i, r) in parse_args(a).into_iter().enumerate() {
                if let Err(e) = r {
                    notes.push(format!("arg{i} unsupported: {}", e.reason));
                }
            }
        }
        notes.extend(
            p.sites
                .iter()
                .filter_map(|s| s.problem.as_ref().map(ToString::to_string)),
        );
        notes.dedup();
        writeln!(
            out,
            "usdt {point}  {}  {semaphore}  {} site{}{}",
            args.join(" "),
            p.sites.len(),
            if p.sites.len() == 1 { "" } else { "s" },
            if notes.is_empty() {
                String::new()
            } else {
                format!("  ({})", notes.join("; "))
            }
        )?;
        if verbose {
            for s in &p.sites {
                writeln!(
                    out,
                    "    pc={:#x} offset={:#x}{}  [{}]",
                    s.pc,
                    s.offset,
                    if s.semaphore != 0 {
                        format!(" semaphore_offset={:#x}", s.semaphore_offset)
                    } else {
                        String::new()
                    },
                    s.args
                )?;
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libraries_from_maps() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/python3.11
55d0c0001000-55d0c0002000 r-xp 00001000 08:01 123 /usr/bin/python3.11
7f0000000000-7f0000001000 r-xp 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000001000-7f0000002000 r--p 00001000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000002000-7f0000003000 r-xp 00000000 08:01 789 /usr/lib/x86_64-linux-gnu/libm.so.6
7f0000003000-7f0000004000 r-xp 00000000 08:01 790 /tmp/gone.so (deleted)
7f0000004000-7f0000005000 rw-p 00000000 00:00 0 
7ffc00000000-7ffc00001000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(
            mapped_libraries(maps, Path::new("/usr/bin/python3.11")),
            vec![
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libm.so.6"),
            ]
        );
    }
}
