//! Resolution cost of one binary, in a process of its own so that the peak RSS (VmHWM)
//! belongs to that binary alone. Prints one JSON object:
//!
//!     cargo bench -p gprobe-agent --bench resolve -- /path/to/binary
//!
//! Phases, timed separately: `Binary::open`, `functions()` (every function with its name),
//! `all_probe_sites()` (entry, body and every RET offset of every function), and, where the
//! binary has DWARF, `dwarf_signatures()`. `resolve_ms` is their sum, `hwm_kib` the peak
//! RSS right after them. Then, as a second figure, `probe_sites()` called per function on
//! one thread.
//!
//!     cargo bench -p gprobe-agent --bench resolve -- --symbol main.main /path/to/binary
//!
//! instead resolves one symbol as the agent does when it attaches a probe (`open`,
//! `find_function`, `probe_sites`, and `dwarf_signature` where there is DWARF), and prints
//! its time and the RSS it leaves (the agent keeps the opened binary while attached).

use gprobe_agent::resolve::Binary;
use std::path::Path;
use std::time::Instant;

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim_start_matches(':')
                .trim()
                .trim_end_matches(" kB")
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn one_symbol(path: &str, symbol: &str) {
    let t = Instant::now();
    let bin = Binary::open(Path::new(path)).expect("open");
    let f = bin.find_function(symbol).expect("find_function");
    let sites = bin.probe_sites(&f).expect("probe_sites");
    let sig = if bin.has_dwarf() {
        bin.dwarf_signature(&f).expect("dwarf_signature").is_some()
    } else {
        false
    };
    let one_ms = ms(t);
    println!(
        "{{\"path\":{path:?},\"symbol\":{symbol:?},\"one_ms\":{one_ms:.3},\"rets\":{},\"signature\":{sig},\
         \"rss_kib\":{},\"rss_file_kib\":{},\"hwm_kib\":{}}}",
        sites.ret_offsets.len(),
        status_kib("VmRSS"),
        status_kib("RssFile"),
        status_kib("VmHWM"),
    );
    drop(bin);
}

fn main() {
    // `cargo bench` passes --bench; everything that is not a flag is a binary to resolve.
    let mut symbol = None;
    let mut paths = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--symbol" {
            symbol = args.next();
        } else if !a.starts_with("--") {
            paths.push(a);
        }
    }
    if let Some(sym) = symbol {
        for path in &paths {
            one_symbol(path, &sym);
        }
        return;
    }
    if paths.is_empty() {
        eprintln!("usage: resolve BINARY (one per process, for a per-binary peak RSS)");
        return;
    }
    for path in paths {
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let hwm_before = status_kib("VmHWM");
        let t_all = Instant::now();

        let t = Instant::now();
        let bin = match Binary::open(Path::new(&path)) {
            Ok(b) => b,
            Err(e) => {
                println!("{{\"path\":{path:?},\"error\":{:?}}}", e.to_string());
                continue;
            }
        };
        let open_ms = ms(t);

        let t = Instant::now();
        let funcs = bin.functions().expect("functions");
        let functions_ms = ms(t);

        let t = Instant::now();
        let rets = bin.all_probe_sites().expect("all_probe_sites");
        let sites_ms = ms(t);

        let (mut dwarf_ms, mut signatures) = (0.0, 0usize);
        if bin.has_dwarf() {
            let t = Instant::now();
            signatures = bin.dwarf_signatures().expect("dwarf_signatures").len();
            dwarf_ms = ms(t);
        }
        let resolve_ms = ms(t_all);
        let hwm_kib = status_kib("VmHWM");
        let rss_kib = status_kib("VmRSS");

        // The per-function API, one thread.
        let t = Instant::now();
        let mut seq_rets = 0usize;
        for f in &funcs {
            if let Ok(s) = bin.probe_sites(f) {
                seq_rets += s.ret_offsets.len();
            }
        }
        let sites_seq_ms = ms(t);

        println!(
            "{{\"path\":{path:?},\"size\":{size},\"go_version\":{:?},\"symtab\":{},\"dwarf\":{},\
             \"functions\":{},\"rets\":{rets},\"seq_rets\":{seq_rets},\"signatures\":{signatures},\
             \"open_ms\":{open_ms:.3},\"functions_ms\":{functions_ms:.3},\"sites_ms\":{sites_ms:.3},\
             \"dwarf_ms\":{dwarf_ms:.3},\"resolve_ms\":{resolve_ms:.3},\"sites_seq_ms\":{sites_seq_ms:.3},\
             \"hwm_kib\":{hwm_kib},\"rss_kib\":{rss_kib},\"hwm_before_kib\":{hwm_before}}}",
            bin.go_version().unwrap_or(""),
            bin.has_symtab(),
            bin.has_dwarf(),
            funcs.len(),
        );
    }
}
