//! The stripped kubectl builds of this machine (50-60 MB, several Go releases).

use std::time::Instant;

use crate::{kubectls, open};

#[test]
fn stripped_kubectl_builds() {
    let bins = kubectls("stripped_kubectl_builds");
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
        // The text base comes from the module data, found by a scan of the data segment.
        assert!(b.go_text_start().is_some(), "{}", path.display());
        // The inline trees of every function, read once; later questions are lookups.
        let t = Instant::now();
        let inlined = b.inlined_call_sites("net/http.(*Client).Do").unwrap();
        let indexed = t.elapsed();
        let t = Instant::now();
        let strings = b.inlined_call_sites("strings.HasPrefix").unwrap();
        let looked_up = t.elapsed();
        assert!(
            strings > 100,
            "{}: strings.HasPrefix inlined {strings} times",
            path.display()
        );
        if !cfg!(debug_assertions) {
            // Fast enough in a release build only (the debug run checks the largest one).
            b.check_fast_decoder()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        eprintln!(
            "{} ({ver}): {n} functions; open {opened:?}, function table {counted:?}; \
             inline trees {indexed:?} (then {looked_up:?} a name): (*Client).Do inlined at \
             {inlined}, strings.HasPrefix at {strings} call sites",
            path.display()
        );
    }
}

#[test]
fn kubectl_all_probe_sites_timing() {
    let bins = kubectls("kubectl_all_probe_sites_timing");
    // The largest one; a debug build is much slower than the release benchmark.
    let path = bins
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("kubectls() returns one at least");
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
