//! The resolve stage on real binaries: Go 1.19 and Go 1.27 builds (stripped and not),
//! the stripped kubectl builds of this machine, a Rust (non-Go) ELF, and bad inputs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use gprobe_agent::resolve::gotype::GoType;
use gprobe_agent::resolve::{Binary, DwarfParam, FuncInfo, ResolveError};
use gprobe_e2e::go::{self, GoVersion};

const VERSIONS: [GoVersion; 2] = [GoVersion::Go119, GoVersion::Go127];

fn tag(v: GoVersion) -> &'static str {
    match v {
        GoVersion::Go119 => "go1.19",
        GoVersion::Go127 => "go1.27",
    }
}

/// Where builds go: a folder under Cargo's per-target temp dir, so that the Go build
/// cache stays warm between runs.
fn build_dir(v: GoVersion) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("resolve-{}", tag(v)));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds `e2e/testdata/resolve/<prog>` once per process, into a file renamed into place
/// (Go builds are reproducible, so a concurrent run of these tests writes the same bytes).
fn build(v: GoVersion, prog: &str, variant: &str, stripped: bool, extra: &[&str]) -> PathBuf {
    let dir = build_dir(v);
    let src = go::repo_root().join("e2e/testdata/resolve").join(prog);
    let tmp = dir.join(format!("{prog}-{variant}.{}.tmp", std::process::id()));
    go::build(v, &src, &tmp, stripped, extra);
    let out = dir.join(format!("{prog}-{variant}"));
    std::fs::rename(&tmp, &out).unwrap();
    out
}

macro_rules! once_per_version {
    ($name:ident, $prog:expr, $variant:expr, $stripped:expr, $extra:expr) => {
        fn $name(v: GoVersion) -> &'static Path {
            static CELLS: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
            let i = match v {
                GoVersion::Go119 => 0,
                GoVersion::Go127 => 1,
            };
            CELLS[i].get_or_init(|| build(v, $prog, $variant, $stripped, $extra))
        }
    };
}

once_per_version!(sig_bin, "sig", "full", false, &[]);
once_per_version!(sig_stripped, "sig", "stripped", true, &[]);
once_per_version!(http_bin, "httpget", "full", false, &[]);
once_per_version!(
    http_noinline,
    "httpget",
    "noinline",
    false,
    &["-gcflags=net/http=-l"]
);

fn open(p: &Path) -> Binary {
    Binary::open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
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
        let mut it = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if kind.eq_ignore_ascii_case("t") {
            // A name may contain spaces (e.g. "go:buildid" is fine, generics are not).
            let rest: Vec<&str> = it.collect();
            let name = if rest.is_empty() {
                name.to_string()
            } else {
                format!("{name} {}", rest.join(" "))
            };
            m.insert(name, u64::from_str_radix(addr, 16).unwrap());
        }
    }
    m
}

fn main_funcs(funcs: &[FuncInfo]) -> BTreeMap<String, u64> {
    funcs
        .iter()
        .filter(|f| f.name.starts_with("main."))
        .map(|f| (f.name.clone(), f.addr))
        .collect()
}

#[test]
fn go_builds_open_and_find_functions() {
    for v in VERSIONS {
        for (path, stripped) in [(sig_bin(v), false), (sig_stripped(v), true)] {
            let b = open(path);
            assert!(b.is_go(), "{}", path.display());
            let ver = b
                .go_version()
                .unwrap_or_else(|| panic!("no go version in {}", path.display()));
            assert!(ver.starts_with(tag(v)), "{ver} in {}", path.display());
            assert_eq!(b.has_symtab(), !stripped, "{}", path.display());
            assert_eq!(b.has_dwarf(), !stripped, "{}", path.display());
            let funcs = b.functions().unwrap();
            assert!(funcs.len() > 1000, "{} functions", funcs.len());
            assert!(funcs.windows(2).all(|w| w[0].addr + w[0].size <= w[1].addr));
            for name in [
                "main.main",
                "main.mix",
                "main.leaf",
                "main.bigFrame",
                "main.(*Counter).Add",
                "runtime.morestack",
            ] {
                let f = b.find_function(name).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(f.name, name);
                assert!(f.size > 0);
                assert!(funcs.contains(&f), "{name} not in functions()");
            }
            match b.find_function("main.nope") {
                Err(ResolveError::NotFound {
                    inlined,
                    similar,
                    ref symbol,
                    ..
                }) => {
                    assert_eq!(symbol, "main.nope");
                    assert!(!inlined);
                    assert!(similar.is_empty(), "{similar:?}");
                }
                other => panic!("main.nope: {other:?}"),
            }
            let e = b.find_function("main.nope").unwrap_err().to_string();
            assert!(
                e.contains("symbol main.nope not found in") && e.contains("--filter nope"),
                "{e}"
            );
        }
    }
}

#[test]
fn pclntab_agrees_with_symtab_and_go_tool_nm() {
    for v in VERSIONS {
        let full = open(sig_bin(v));
        let stripped = open(sig_stripped(v));
        let funcs = full.functions().unwrap();
        // A Go function and its ABI0 wrapper share a name in the pclntab; .symtab and
        // `go tool nm` call the wrapper NAME.abi0.
        let mut by_name: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for f in &funcs {
            by_name.entry(f.name.as_str()).or_default().push(f.addr);
        }

        // .symtab of the same (unstripped) binary.
        let syms = full.elf_symbols();
        let sym_main: BTreeMap<String, u64> = main_funcs(&syms);
        assert!(sym_main.len() >= 7, "{sym_main:?}");
        assert_eq!(
            main_funcs(&funcs),
            sym_main,
            "{}: pclntab vs .symtab",
            tag(v)
        );

        // go tool nm of the unstripped binary.
        let nm = go_nm(v, sig_bin(v));
        let mut compared = 0;
        for (name, addr) in &nm {
            let plain = name.strip_suffix(".abi0").unwrap_or(name);
            if let Some(addrs) = by_name.get(plain) {
                assert!(
                    addrs.contains(addr),
                    "{}: {name} at {addr:#x}, pclntab has {addrs:x?}",
                    tag(v)
                );
                compared += 1;
            }
        }
        // find_function picks the function, not its ABI0 wrapper, in both builds.
        for name in ["reflect.callMethod", "runtime.morestack", "main.main"] {
            if nm.contains_key(name) {
                assert_eq!(
                    full.find_function(name).unwrap().addr,
                    nm[name],
                    "{}: {name}",
                    tag(v)
                );
                assert_eq!(stripped.find_function(name).unwrap().name, name);
            }
        }
        assert!(
            nm.contains_key("reflect.callMethod.abi0"),
            "the test needs an ABI0 wrapper"
        );
        assert!(
            compared > 1000,
            "only {compared} functions compared with go tool nm"
        );
        let nm_main: BTreeMap<String, u64> = nm
            .iter()
            .filter(|(n, _)| n.starts_with("main."))
            .map(|(n, a)| (n.clone(), *a))
            .collect();
        assert_eq!(
            main_funcs(&funcs),
            nm_main,
            "{}: pclntab vs go tool nm",
            tag(v)
        );

        // The stripped build has the same main.* functions.
        let s_main: BTreeSet<String> = main_funcs(&stripped.functions().unwrap())
            .into_keys()
            .collect();
        assert_eq!(
            s_main,
            nm_main.keys().cloned().collect(),
            "{}: stripped",
            tag(v)
        );
        assert!(stripped
            .elf_symbols()
            .iter()
            .all(|f| !f.name.starts_with("main.")));
    }
}

fn is_jcc_end(code: &[u8], body: usize) -> bool {
    (body >= 2 && (0x70..=0x7f).contains(&code[body - 2]))
        || (body >= 6 && code[body - 6] == 0x0f && (0x80..=0x8f).contains(&code[body - 5]))
}

#[test]
fn probe_sites_of_go_functions() {
    for v in VERSIONS {
        for path in [sig_bin(v), sig_stripped(v)] {
            let b = open(path);
            let data = std::fs::read(path).unwrap();
            for name in [
                "main.bigFrame",
                "main.main",
                "main.mix",
                "main.(*Counter).Add",
            ] {
                let f = b.find_function(name).unwrap();
                let s = b.probe_sites(&f).unwrap();
                assert_eq!(s.entry_offset, b.file_offset(f.addr).unwrap());
                if name != "main.(*Counter).Add" && name != "main.mix" {
                    assert!(s.body_offset > s.entry_offset, "{name}: {s:?}");
                }
                if s.body_offset > s.entry_offset {
                    assert!(s.body_offset - s.entry_offset <= 32, "{name}: {s:?}");
                    assert!(
                        is_jcc_end(&data, s.body_offset as usize),
                        "{name}: no Jcc before body {s:?}"
                    );
                }
                assert!(!s.ret_offsets.is_empty(), "{name}: no RET");
                for &r in &s.ret_offsets {
                    assert!(r >= s.entry_offset && r < s.entry_offset + f.size);
                    assert!(
                        matches!(data[r as usize], 0xc3 | 0xc2),
                        "{name}: {:#x} at {r:#x}",
                        data[r as usize]
                    );
                }
            }
            let leaf = b.find_function("main.leaf").unwrap();
            let s = b.probe_sites(&leaf).unwrap();
            assert_eq!(s.body_offset, s.entry_offset, "leaf: {s:?}");
            assert_eq!(s.ret_offsets.len(), 1, "leaf: {s:?}");
            // Every function of the binary decodes, and the fast RET scan agrees with
            // a full decode.
            assert!(b.all_probe_sites().unwrap() > 1000);
            assert!(b.check_fast_decoder().unwrap() > 1000);
        }
    }
}

fn p(name: &str, type_name: &str, ty: GoType) -> DwarfParam {
    DwarfParam {
        name: name.into(),
        type_name: type_name.into(),
        ty,
    }
}

#[test]
fn dwarf_signatures_of_go_functions() {
    let int = GoType::Int {
        size: 8,
        signed: true,
    };
    for v in VERSIONS {
        let b = open(sig_bin(v));
        let mix = b.find_function("main.mix").unwrap();
        let sig = b
            .dwarf_signature(&mix)
            .unwrap()
            .expect("main.mix has DWARF");
        let g = GoType::Struct {
            fields: vec![
                (
                    "x".into(),
                    GoType::Int {
                        size: 4,
                        signed: true,
                    },
                ),
                ("y".into(), GoType::Bool),
            ],
            size: 8,
            align: 4,
        };
        assert_eq!(
            sig.params[..6],
            vec![
                p(
                    "a",
                    "int64",
                    GoType::Int {
                        size: 8,
                        signed: true
                    }
                ),
                p("b", "string", GoType::String),
                p("c", "[]uint8", GoType::Slice { bytes: true }),
                p("d", "error", GoType::Interface),
                p("e", "*int", GoType::Pointer),
                p("f", "float64", GoType::Float { size: 8 }),
            ],
            "{}",
            tag(v)
        );
        // Go names anonymous struct types with package-qualified field names.
        assert_eq!(
            sig.params[6].type_name,
            "struct { main.x int32; main.y bool }"
        );
        assert_eq!(sig.params[6].ty, g);
        assert_eq!(
            sig.results,
            vec![
                p("n", "int", int.clone()),
                p("err", "error", GoType::Interface)
            ]
        );

        let unnamed = b.find_function("main.unnamed").unwrap();
        match v {
            // Go 1.19 leaves unnamed parameters out of DWARF: the signature would put the
            // results' registers wrong, so it is refused with a reason.
            GoVersion::Go119 => {
                let e = b.dwarf_signature(&unnamed).unwrap_err();
                assert!(matches!(e, ResolveError::Dwarf { .. }), "{e:?}");
                let msg = e.to_string();
                assert!(
                    msg.contains("main.unnamed") && msg.contains("signature:"),
                    "{msg}"
                );
                assert!(!b.dwarf_signatures().unwrap().contains_key(&unnamed.addr));
            }
            GoVersion::Go127 => {
                let sig = b.dwarf_signature(&unnamed).unwrap().unwrap();
                assert_eq!(
                    sig.params,
                    vec![
                        p("p0", "int", int.clone()),
                        p("p1", "string", GoType::String)
                    ]
                );
                assert_eq!(
                    sig.results,
                    vec![
                        p("r0", "int", int.clone()),
                        p("r1", "error", GoType::Interface)
                    ]
                );
            }
        }

        let add = b.find_function("main.(*Counter).Add").unwrap();
        let sig = b.dwarf_signature(&add).unwrap().unwrap();
        assert_eq!(
            sig.params,
            vec![
                p("c", "*main.Counter", GoType::Pointer),
                p("delta", "int", int.clone())
            ]
        );
        assert_eq!(sig.results, vec![p("r0", "int", int.clone())]);

        let kinds = b.find_function("main.kinds").unwrap();
        let sig = b.dwarf_signature(&kinds).unwrap().unwrap();
        let got: Vec<(&str, &str, &GoType)> = sig
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.type_name.as_str(), &p.ty))
            .collect();
        let u16t = GoType::Int {
            size: 2,
            signed: false,
        };
        let arr = GoType::Array {
            len: 3,
            elem: Box::new(u16t),
            size: 6,
            align: 2,
        };
        let pair = GoType::Struct {
            fields: vec![
                (
                    "x".into(),
                    GoType::Int {
                        size: 4,
                        signed: true,
                    },
                ),
                ("y".into(), GoType::Bool),
            ],
            size: 8,
            align: 4,
        };
        assert_eq!(
            got,
            vec![
                ("m", "map[string]int", &GoType::Pointer),
                ("ch", "chan int", &GoType::Pointer),
                ("fn", "func() int", &GoType::Pointer),
                ("arr", "[3]uint16", &arr),
                ("p", "main.pair", &pair),
                ("u", "uintptr", &GoType::Uintptr),
                ("c", "complex128", &GoType::Complex { size: 16 }),
                ("f32", "float32", &GoType::Float { size: 4 }),
                ("b", "bool", &GoType::Bool),
                (
                    "i8",
                    "int8",
                    &GoType::Int {
                        size: 1,
                        signed: true
                    }
                ),
                (
                    "u32",
                    "uint32",
                    &GoType::Int {
                        size: 4,
                        signed: false
                    }
                ),
                ("any", "interface {}", &GoType::Interface),
                ("names", "[]string", &GoType::Slice { bytes: false }),
            ],
            "{}",
            tag(v)
        );
        assert_eq!(sig.results, vec![p("r0", "bool", GoType::Bool)]);

        let all = b.dwarf_signatures().unwrap();
        assert!(all.len() > 500, "{} signatures", all.len());
        assert_eq!(
            all.get(&mix.addr),
            b.dwarf_signature(&mix).unwrap().as_ref()
        );

        let s = open(sig_stripped(v));
        assert!(!s.has_dwarf());
        let smix = s.find_function("main.mix").unwrap();
        assert_eq!(s.dwarf_signature(&smix).unwrap(), None);
        assert!(s.dwarf_signatures().unwrap().is_empty());
    }
}

#[test]
fn inlined_net_http_get() {
    for v in VERSIONS {
        let b = open(http_bin(v));
        match b.find_function("net/http.Get") {
            Err(e @ ResolveError::NotFound { .. }) => {
                let msg = e.to_string();
                let ResolveError::NotFound {
                    inlined, similar, ..
                } = e
                else {
                    unreachable!()
                };
                assert!(inlined, "{}: {msg}", tag(v));
                assert!(
                    similar.iter().any(|s| s == "net/http.(*Client).Get"),
                    "{similar:?}"
                );
                assert!(msg.contains("is inlined into its callers"), "{msg}");
                assert!(msg.contains("-gcflags='net/http=-l'"), "{msg}");
            }
            other => panic!("{}: net/http.Get: {other:?}", tag(v)),
        }
        let get = b.find_function("net/http.(*Client).Get").unwrap();
        let sites = b.probe_sites(&get).unwrap();
        assert!(sites.body_offset > sites.entry_offset);
        assert!(!sites.ret_offsets.is_empty());
        let sig = b.dwarf_signature(&get).unwrap().unwrap();
        let names: Vec<(&str, &str)> = sig
            .params
            .iter()
            .chain(&sig.results)
            .map(|p| (p.name.as_str(), p.type_name.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("c", "*net/http.Client"),
                ("url", "string"),
                ("resp", "*net/http.Response"),
                ("err", "error")
            ]
        );

        let b = open(http_noinline(v));
        let f = b.find_function("net/http.Get").unwrap();
        assert_eq!(f.name, "net/http.Get");
    }
}

/// The stripped kubectl builds this machine ships, if any.
fn kubectls() -> Option<Vec<PathBuf>> {
    let o = Command::new("sh")
        .args(["-c", "command -v kubectl"])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if p.is_empty() {
        return None;
    }
    let real = std::fs::canonicalize(p).ok()?;
    let dir = real.parent()?;
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "kubectl" || n.starts_with("kubectl.1."))
        })
        .collect();
    v.sort();
    Some(v)
}

#[test]
fn stripped_kubectl_builds() {
    let Some(bins) = kubectls() else {
        eprintln!("SKIPPED stripped_kubectl_builds: no kubectl on PATH");
        return;
    };
    assert!(!bins.is_empty());
    for path in &bins {
        let t = Instant::now();
        let b = open(path);
        let opened = t.elapsed();
        assert!(b.is_go(), "{}", path.display());
        let ver = b
            .go_version()
            .unwrap_or_else(|| panic!("{}: no go version", path.display()));
        assert!(ver.starts_with("go1."), "{ver}");
        assert!(!b.has_symtab() && !b.has_dwarf());
        let t = Instant::now();
        let n = b.function_count().unwrap();
        let counted = t.elapsed();
        assert!(n > 10000, "{}: {n} functions", path.display());
        let main = b.find_function("main.main").unwrap();
        let s = b.probe_sites(&main).unwrap();
        assert!(
            !s.ret_offsets.is_empty(),
            "{}: main.main {s:?}",
            path.display()
        );
        let get = b.find_function("net/http.(*Client).Get").unwrap();
        assert!(b.probe_sites(&get).unwrap().body_offset > b.file_offset(get.addr).unwrap());
        assert_eq!(b.dwarf_signature(&main).unwrap(), None);
        let funcs = b.functions().unwrap();
        assert_eq!(funcs.len(), n);
        if !cfg!(debug_assertions) {
            // Fast enough in a release build only (the debug run checks the largest one).
            b.check_fast_decoder()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        eprintln!(
            "{} ({ver}): {n} functions; open {opened:?}, function table {counted:?}",
            path.display()
        );
    }
}

#[test]
fn kubectl_all_probe_sites_timing() {
    let Some(bins) = kubectls() else {
        eprintln!("SKIPPED kubectl_all_probe_sites_timing: no kubectl on PATH");
        return;
    };
    // The largest one; a debug build is much slower than the release benchmark.
    let Some(path) = bins
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
    else {
        return;
    };
    let t = Instant::now();
    let b = open(path);
    let opened = t.elapsed();
    let n = b.function_count().unwrap();
    let table = t.elapsed() - opened;
    let rets = b.all_probe_sites().unwrap();
    let first = t.elapsed();
    let mut best = std::time::Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(b.all_probe_sites().unwrap(), rets);
        best = best.min(t.elapsed());
    }
    assert!(rets > 10000, "{rets} RETs");
    eprintln!(
        "all_probe_sites {} ({} MB, {n} functions, {rets} RETs, {} build): open {opened:?}, \
         function table {table:?}, open+table+first scan {first:?}, best later scan {best:?}",
        path.display(),
        std::fs::metadata(path).unwrap().len() >> 20,
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    // Peak resident memory of this test process so far (file pages of the map included).
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(hwm) = status.lines().find(|l| l.starts_with("VmHWM:")) {
        eprintln!(
            "peak memory of the test process: {}",
            hwm.trim_start_matches("VmHWM:").trim()
        );
    }
    // The fast length decoder against iced-x86 on every function of a large binary.
    let t = Instant::now();
    let checked = b
        .check_fast_decoder()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    eprintln!(
        "fast RET scan == iced-x86 decode on all {checked} functions ({:?})",
        t.elapsed()
    );
}

#[test]
fn non_go_elf_uses_symtab() {
    // This test executable: a Rust ELF with a .symtab.
    let exe = std::env::current_exe().unwrap();
    let b = open(&exe);
    assert!(!b.is_go());
    assert_eq!(b.go_version(), None);
    assert!(b.has_symtab());
    let funcs = b.functions().unwrap();
    assert!(funcs.len() > 1000);
    assert!(funcs.windows(2).all(|w| w[0].addr <= w[1].addr));
    let main = b.find_function("main").unwrap();
    let s = b.probe_sites(&main).unwrap();
    assert_eq!(s.entry_offset, b.file_offset(main.addr).unwrap());
    assert_eq!(s.body_offset, s.entry_offset);
    assert!(!s.ret_offsets.is_empty());
    assert!(b.all_probe_sites().unwrap() > 1000);
    assert!(b.check_fast_decoder().unwrap() > 1000);
    match b.find_function("main.nope") {
        Err(ResolveError::NotFound { inlined: false, .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// The file range of a section, found with `object`.
fn section_range(path: &Path, name: &str) -> (usize, usize) {
    use object::{Object, ObjectSection};
    let data = std::fs::read(path).unwrap();
    let f = object::File::parse(&*data).unwrap();
    let s = f.section_by_name(name).unwrap();
    let (o, l) = s.file_range().unwrap();
    (o as usize, l as usize)
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn bad_inputs_are_errors() {
    let tmp = go::TempDir::new("resolve-bad");
    let dir = tmp.path();
    let src = sig_stripped(GoVersion::Go127);
    let good = std::fs::read(src).unwrap();

    // Missing file.
    let e = Binary::open(&dir.join("missing")).unwrap_err();
    assert!(matches!(e, ResolveError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("missing"), "{e}");

    // Not ELF: a script, and an empty file.
    let p = write_tmp(dir, "script.sh", b"#!/bin/sh\necho hi\n");
    let e = Binary::open(&p).unwrap_err();
    assert!(matches!(e, ResolveError::NotElf { .. }), "{e:?}");
    assert!(e.to_string().contains("not an ELF file"), "{e}");
    let e = Binary::open(dir).unwrap_err();
    assert!(matches!(e, ResolveError::NotElf { .. }), "{e:?}");
    let p = write_tmp(dir, "empty", b"");
    assert!(matches!(Binary::open(&p), Err(ResolveError::NotElf { .. })));
    let p = write_tmp(dir, "tiny-elf", b"\x7fELF\x02\x01\x01");
    assert!(matches!(
        Binary::open(&p),
        Err(ResolveError::Malformed { .. })
    ));

    // Truncated: the first 4096 bytes of a real Go binary.
    let p = write_tmp(dir, "truncated", &good[..4096]);
    let e = Binary::open(&p).unwrap_err();
    assert!(matches!(e, ResolveError::Malformed { .. }), "{e:?}");
    assert!(e.to_string().contains("truncated"), "{e}");
    // Cut inside the pclntab.
    let (pc_off, pc_len) = section_range(src, ".gopclntab");
    let p = write_tmp(dir, "cut", &good[..pc_off + pc_len / 2]);
    assert!(matches!(
        Binary::open(&p),
        Err(ResolveError::Malformed { .. })
    ));

    // pclntab with out-of-range offsets: pclnOffset (8th word after the 8-byte header).
    let mut bad = good.clone();
    let at = pc_off + 8 + 7 * 8;
    bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let p = write_tmp(dir, "bad-pclnoffset", &bad);
    let b = open(&p);
    assert!(b.is_go());
    let e = b.functions().unwrap_err();
    assert!(matches!(e, ResolveError::BadPclntab { .. }), "{e:?}");
    assert!(matches!(
        b.find_function("main.main"),
        Err(ResolveError::BadPclntab { .. })
    ));
    assert!(matches!(
        b.all_probe_sites(),
        Err(ResolveError::BadPclntab { .. })
    ));

    // A functab entry whose _func offset points past the table.
    let pcln_offset = u64::from_le_bytes(good[at..at + 8].try_into().unwrap()) as usize;
    let mut bad = good.clone();
    let entry = pc_off + pcln_offset + 10 * 8 + 4;
    bad[entry..entry + 4].copy_from_slice(&0xfff0_0000u32.to_le_bytes());
    let p = write_tmp(dir, "bad-funcoff", &bad);
    let e = open(&p).functions().unwrap_err();
    assert!(matches!(e, ResolveError::BadPclntab { .. }), "{e:?}");
    assert!(e.to_string().contains("outside"), "{e}");

    // A name offset past the name table.
    let funcoff = u32::from_le_bytes(good[entry..entry + 4].try_into().unwrap()) as usize;
    let mut bad = good.clone();
    let name = pc_off + pcln_offset + funcoff + 4;
    bad[name..name + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let p = write_tmp(dir, "bad-nameoff", &bad);
    assert!(matches!(
        open(&p).functions(),
        Err(ResolveError::BadPclntab { .. })
    ));

    // An old pclntab magic (Go 1.16) is reported as an unsupported Go version.
    let mut old = good.clone();
    old[pc_off..pc_off + 4].copy_from_slice(&0xffff_fffau32.to_le_bytes());
    let p = write_tmp(dir, "go116", &old);
    let b = open(&p);
    assert!(b.is_go());
    let e = b.functions().unwrap_err();
    assert!(
        matches!(e, ResolveError::UnsupportedGoVersion { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("Go 1.18 or newer"), "{e}");

    // A function that is not in the file.
    let b = open(src);
    let ghost = FuncInfo {
        name: "ghost".into(),
        addr: 0x10,
        size: 16,
    };
    assert!(matches!(
        b.probe_sites(&ghost),
        Err(ResolveError::AddressNotMapped { .. })
    ));
    let huge = FuncInfo {
        name: "huge".into(),
        addr: b.find_function("main.main").unwrap().addr,
        size: u64::MAX / 2,
    };
    assert!(matches!(
        b.probe_sites(&huge),
        Err(ResolveError::AddressNotMapped { .. })
    ));
}

#[test]
fn binary_without_section_headers_is_still_resolved() {
    let tmp = go::TempDir::new("resolve-noshdr");
    let src = sig_stripped(GoVersion::Go119);
    let mut data = std::fs::read(src).unwrap();
    // e_shoff = 0, e_shnum = 0, e_shstrndx = 0.
    data[0x28..0x30].fill(0);
    data[0x3c..0x40].fill(0);
    let p = write_tmp(tmp.path(), "noshdr", &data);
    let b = open(&p);
    assert!(b.is_go());
    assert!(b.go_version().unwrap().starts_with("go1.19"));
    let want = open(src).find_function("main.mix").unwrap();
    assert_eq!(b.find_function("main.mix").unwrap(), want);
}
