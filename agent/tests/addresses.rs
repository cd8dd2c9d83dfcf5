//! Function addresses on every kind of Go build: Go 1.19, 1.21, 1.24, 1.26 and 1.27, linked
//! internally, externally (cgo, GCC), as PIE, and as PIE by the external linker (cgo, as
//! Debian builds its Go packages; Go 1.19 then puts the pclntab inside `.data.rel.ro`
//! with no section of its own), stripped and not. Every address gprobe
//! reads from the pclntab must agree with the ELF symbol table, with `go tool nm` of the
//! unstripped twin and with DWARF's low_pc; a wrong text base shifts them all (Go 1.27's
//! externally linked binaries did, by the 0x100 bytes of C runtime code before
//! `runtime.text`).
//!
//! The builds stay under Cargo's per-target temp dir with one Go build cache per
//! toolchain, and are rebuilt only when the source or the toolchain is newer: a warm run
//! links nothing.

use gprobe_e2e::go;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

use go::GoVersion;
use gprobe_agent::resolve::Binary;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Internal,
    External,
    Pie,
    PieExternal,
}

impl Link {
    const ALL: [Link; 4] = [Link::Internal, Link::External, Link::Pie, Link::PieExternal];

    fn external(self) -> bool {
        matches!(self, Link::External | Link::PieExternal)
    }

    fn name(self) -> &'static str {
        match self {
            Link::Internal => "internal",
            Link::External => "external",
            Link::Pie => "pie",
            Link::PieExternal => "pie-external",
        }
    }
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Builds e2e/testdata/resolve/sig with `v` and `link` into a lasting folder, unless an
/// up-to-date build is there.
fn build(v: GoVersion, link: Link, stripped: bool) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("addresses-{}", v.tag()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!(
        "sig-{}-{}",
        link.name(),
        if stripped { "stripped" } else { "full" }
    ));
    let src = go::repo_root().join("e2e/testdata/resolve/sig");
    let newest_input = [src.join("main.go"), go::go_binary(v)]
        .iter()
        .filter_map(|p| mtime(p))
        .max();
    if mtime(&out).is_some_and(|t| newest_input.is_some_and(|i| t > i)) {
        return out;
    }
    let mut ldflags = Vec::new();
    if stripped {
        ldflags.push("-s -w");
    }
    if link.external() {
        ldflags.push("-linkmode=external");
    }
    let ldflags = format!("-ldflags={}", ldflags.join(" "));
    let mut flags = vec![ldflags.as_str()];
    if matches!(link, Link::Pie | Link::PieExternal) {
        flags.push("-buildmode=pie");
    }
    // Written under a name of this process, renamed into place: a concurrent run of the
    // test builds the same bytes.
    let tmp = PathBuf::from(format!("{}.{}.tmp", out.display(), std::process::id()));
    go::build_with(v, &src, &tmp, &flags, link.external());
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// `go tool nm` of the same toolchain: name -> address of every text (T/t) symbol.
fn go_nm(v: GoVersion, bin: &Path) -> BTreeMap<String, u64> {
    let o = Command::new(go::go_binary(v))
        .args(["tool", "nm"])
        .arg(bin)
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("run go tool nm");
    assert!(
        o.status.success(),
        "go tool nm: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 3 && f[1].eq_ignore_ascii_case("t") {
            m.insert(f[2..].join(" "), u64::from_str_radix(f[0], 16).unwrap());
        }
    }
    m
}

/// name -> low_pc of every DWARF subprogram that has both, read with gimli directly.
fn dwarf_low_pcs(path: &Path) -> HashMap<String, u64> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<[u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or_default())
    })
    .unwrap();
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, gimli::LittleEndian));
    let mut out = HashMap::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().unwrap() {
        let unit = dwarf.unit(header).unwrap();
        let mut entries = unit.entries();
        while let Some((_, e)) = entries.next_dfs().unwrap() {
            if e.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let (Some(name), Some(low)) = (
                e.attr_value(gimli::DW_AT_name).unwrap(),
                e.attr_value(gimli::DW_AT_low_pc).unwrap(),
            ) else {
                continue;
            };
            let (Ok(name), Ok(Some(addr))) = (
                dwarf.attr_string(&unit, name),
                dwarf.attr_address(&unit, low),
            ) else {
                continue;
            };
            out.insert(String::from_utf8_lossy(&name).into_owned(), addr);
        }
    }
    out
}

/// Checks one build kind; returns how many addresses were compared.
fn check(v: GoVersion, link: Link) -> usize {
    let what = format!("{} {}", v.tag(), link.name());
    let (full_path, stripped_path) = (build(v, link, false), build(v, link, true));
    let full = Binary::open(&full_path).unwrap_or_else(|e| panic!("{what}: {e}"));
    let stripped = Binary::open(&stripped_path).unwrap_or_else(|e| panic!("{what}: {e}"));
    for b in [&full, &stripped] {
        let ver = b.go_version().unwrap_or_default();
        assert!(ver.starts_with(v.tag()), "{what}: version {ver}");
    }
    assert!(
        full.has_symtab() && full.has_dwarf() && !stripped.has_symtab(),
        "{what}"
    );

    let nm = go_nm(v, &full_path);
    // The module data was found in both builds (no fallback), and says runtime.text.
    let text = nm["runtime.text"];
    assert_eq!(full.go_text_start(), Some(text), "{what}: text start");
    assert_eq!(
        stripped.go_text_start(),
        Some(text),
        "{what}: stripped text start"
    );

    let mut compared = 0;
    for (label, b) in [("full", &full), ("stripped", &stripped)] {
        let funcs = b
            .functions()
            .unwrap_or_else(|e| panic!("{what} {label}: {e}"));
        // A Go function and its ABI0 wrapper share a name in the pclntab; .symtab and
        // `go tool nm` call the wrapper NAME.abi0.
        let mut by_name: HashMap<&str, Vec<u64>> = HashMap::new();
        for f in &funcs {
            by_name.entry(f.name.as_str()).or_default().push(f.addr);
        }
        let agrees = |source: &str, name: &str, addr: u64| -> bool {
            let plain = name.strip_suffix(".abi0").unwrap_or(name);
            match by_name.get(plain) {
                Some(addrs) => {
                    assert!(
                        addrs.contains(&addr),
                        "{what} {label}: {source} puts {name} at {addr:#x}, the pclntab at {addrs:x?}"
                    );
                    true
                }
                None => false,
            }
        };
        let n = nm
            .iter()
            .filter(|(n, &a)| agrees("go tool nm", n, a))
            .count();
        assert!(
            n > 1000,
            "{what} {label}: only {n} functions compared with go tool nm"
        );
        compared += n;
        // Every function of the main package, both ways.
        for (name, addr) in nm.iter().filter(|(n, _)| n.starts_with("main.")) {
            assert!(
                agrees("go tool nm", name, *addr),
                "{what} {label}: no {name}"
            );
        }
        if label == "full" {
            let syms = b.elf_symbols();
            let n = syms
                .iter()
                .filter(|s| agrees(".symtab", &s.name, s.addr))
                .count();
            assert!(n > 1000, "{what}: only {n} functions compared with .symtab");
            let dwarf = dwarf_low_pcs(&full_path);
            let n = dwarf.iter().filter(|(n, &a)| agrees("DWARF", n, a)).count();
            assert!(n > 500, "{what}: only {n} functions compared with DWARF");
            compared += n;
        }
        // The inline trees are read from the module data's gofunc, whose place in the
        // module data changed between releases: main.twice is inlined at two call sites.
        let inlined = b.inlined_call_sites("main.twice");
        assert_eq!(
            inlined.unwrap_or_else(|e| panic!("{what} {label}: {e}")),
            2,
            "{what} {label}"
        );
        // The probe sites of the main package are instruction boundaries, found by the
        // same names in both builds.
        for f in funcs.iter().filter(|f| f.name.starts_with("main.")) {
            let found = b
                .find_function(&f.name)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            b.probe_sites(&found)
                .unwrap_or_else(|e| panic!("{what} {label}: {e}"));
        }
    }
    compared
}

#[test]
fn pclntab_addresses_agree_on_every_build_kind() {
    let t = Instant::now();
    let (mut total, mut builds) = (0, 0);
    for v in GoVersion::ALL {
        for link in Link::ALL {
            let t = Instant::now();
            let n = check(v, link);
            eprintln!(
                "{} {}: {n} addresses agree ({:?})",
                v.tag(),
                link.name(),
                t.elapsed()
            );
            total += n;
            builds += 2;
        }
    }
    eprintln!(
        "{total} addresses compared on {builds} builds in {:?}",
        t.elapsed()
    );
}
