//! Function tables: pclntab against .symtab and `go tool nm`, names, inlined functions,
//! and non-Go ELF files.

use std::collections::{BTreeMap, BTreeSet};

use gprobe_agent::resolve::ResolveError;

use crate::{go_nm, http_bin, http_noinline, main_funcs, open, sig_bin, sig_stripped, VERSIONS};

#[test]
fn go_builds_open_and_find_functions() {
    for v in VERSIONS {
        for (path, stripped) in [(sig_bin(v), false), (sig_stripped(v), true)] {
            let b = open(&path);
            assert!(b.is_go(), "{}", path.display());
            let ver = b
                .go_version()
                .unwrap_or_else(|| panic!("no go version in {}", path.display()));
            assert!(ver.starts_with(v.tag()), "{ver} in {}", path.display());
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
        let full = open(&sig_bin(v));
        let stripped = open(&sig_stripped(v));
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
            v.tag()
        );

        // go tool nm of the unstripped binary.
        let nm = go_nm(v, &sig_bin(v));
        let mut compared = 0;
        for (name, addr) in &nm {
            let plain = name.strip_suffix(".abi0").unwrap_or(name);
            if let Some(addrs) = by_name.get(plain) {
                assert!(
                    addrs.contains(addr),
                    "{}: {name} at {addr:#x}, pclntab has {addrs:x?}",
                    v.tag()
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
                    v.tag()
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
            v.tag()
        );

        // The stripped build has the same main.* functions.
        let s_main: BTreeSet<String> = main_funcs(&stripped.functions().unwrap())
            .into_keys()
            .collect();
        assert_eq!(
            s_main,
            nm_main.keys().cloned().collect(),
            "{}: stripped",
            v.tag()
        );
        assert!(stripped
            .elf_symbols()
            .iter()
            .all(|f| !f.name.starts_with("main.")));
    }
}

#[test]
fn inlined_net_http_get() {
    for v in VERSIONS {
        let b = open(&http_bin(v));
        match b.find_function("net/http.Get") {
            Err(e @ ResolveError::NotFound { .. }) => {
                let msg = e.to_string();
                let ResolveError::NotFound {
                    inlined, similar, ..
                } = e
                else {
                    unreachable!()
                };
                assert!(inlined, "{}: {msg}", v.tag());
                assert!(
                    similar.iter().any(|s| s == "net/http.(*Client).Get"),
                    "{similar:?}"
                );
                assert!(msg.contains("is inlined into its callers"), "{msg}");
                assert!(msg.contains("-gcflags='net/http=-l'"), "{msg}");
            }
            other => panic!("{}: net/http.Get: {other:?}", v.tag()),
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

        let b = open(&http_noinline(v));
        let f = b.find_function("net/http.Get").unwrap();
        assert_eq!(f.name, "net/http.Get");
    }
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

#[test]
fn inlined_call_sites_are_counted() {
    for v in VERSIONS {
        for path in [sig_bin(v), sig_stripped(v)] {
            let b = open(&path);
            // main.twice keeps an out-of-line copy (twiceFn) and is inlined into main.main
            // twice; main.mix is never inlined (//go:noinline).
            let twice = b.find_function("main.twice").unwrap();
            assert!(twice.size > 0);
            assert_eq!(
                b.inlined_call_sites("main.twice").unwrap(),
                2,
                "{}",
                v.tag()
            );
            assert_eq!(b.inlined_call_sites("main.mix").unwrap(), 0, "{}", v.tag());
            assert_eq!(b.inlined_call_sites("main.nope").unwrap(), 0);
        }
        // Functions inlined everywhere are counted too: net/http.Get has no copy of its
        // own, and the runtime inlines many small helpers.
        let b = open(&http_bin(v));
        assert!(
            b.inlined_call_sites("net/http.Get").unwrap() >= 1,
            "{}",
            v.tag()
        );
    }
    // A non-Go binary has no inline trees.
    let exe = std::env::current_exe().unwrap();
    assert_eq!(open(&exe).inlined_call_sites("main").unwrap(), 0);
}

#[test]
fn symtab_guard_accepts_every_function_of_a_sound_binary() {
    // Every name of the pclntab, found and checked against .symtab (assembly functions
    // are NAME.abi0 there, their ABIInternal wrappers NAME), linked internally and
    // externally.
    for v in VERSIONS {
        for path in [sig_bin(v), crate::sig_external(v)] {
            let b = open(&path);
            let funcs = b.functions().unwrap();
            for f in &funcs {
                if let Err(e) = b.find_function(&f.name) {
                    panic!("{}: {e}", v.tag());
                }
            }
        }
    }
}
