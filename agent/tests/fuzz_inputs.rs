//! The fuzz targets' inputs in every `cargo test`: each file of `fuzz/regressions/<target>/`
//! (inputs that once crashed a parser, kept when the bug was fixed) goes through its target
//! again; and the seeds the fuzzers start from (containers of sections of real binaries:
//! the forged-note C program, the C target of the e2e tests, Go 1.19 and 1.27 builds) are built
//! and shown to reach the parsers they are for. With `GPROBE_FUZZ_SEEDS=DIR` the seeds are
//! also written to `DIR/<target>/` (scripts/fuzz.sh starts the fuzzers from them).

use std::path::{Path, PathBuf};

use gprobe_agent::resolve::fuzzing::{self, container_from_elf};
use gprobe_e2e::cc;
use gprobe_e2e::go::{self, repo_root, GoVersion};

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 3] = [
    ("stapsdt", fuzzing::stapsdt),
    ("go_tables", fuzzing::go_tables),
    ("dwarf", fuzzing::dwarf),
];

#[test]
fn every_kept_crash_input_runs_through_its_target_again() {
    let mut replayed = 0;
    for (name, target) in TARGETS {
        let dir = repo_root().join("fuzz/regressions").join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                continue;
            }
            let data = std::fs::read(&p).unwrap();
            eprintln!("{name}: {}", p.display());
            target(&data);
            replayed += 1;
        }
    }
    eprintln!("{replayed} regression inputs replayed");
}

fn tmp() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-seeds");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn c_program(src: &str, name: &str) -> Vec<u8> {
    let out = tmp().join(format!("{name}.{}", std::process::id()));
    cc::build(&repo_root().join(src), &out, &["-g"], None);
    let data = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    data
}

fn go_program(v: GoVersion, variant: &str, flags: &[&str], cgo: bool) -> Vec<u8> {
    let dir = tmp().join(v.tag());
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("sig-{variant}.{}", std::process::id()));
    let src = repo_root().join("e2e/testdata/resolve/sig");
    go::build_with(v, &src, &out, flags, cgo);
    let data = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    data
}

const C_SECTIONS: &[&str] = &[
    ".text",
    ".note.stapsdt",
    ".stapsdt.base",
    ".probes",
    ".eh_frame",
    ".symtab",
    ".strtab",
    ".debug_info",
    ".debug_abbrev",
    ".debug_str",
    ".debug_line",
    ".debug_rnglists",
    ".debug_addr",
    ".debug_str_offsets",
    ".debug_line_str",
];
const GO_TABLES: &[&str] = &[
    ".text",
    ".gopclntab",
    ".go.buildinfo",
    ".noptrdata",
    ".data",
    ".data.rel.ro",
    ".go.module",
    ".note.go.buildid",
    ".dynamic",
    ".rela.dyn",
];

fn write_seed(target: &str, name: &str, data: &[u8]) {
    if let Some(root) = std::env::var_os("GPROBE_FUZZ_SEEDS") {
        let dir = PathBuf::from(root).join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    }
}

/// The seeds, each checked to reach what its target is for: a container that the parsers
/// refused at its first bytes would fuzz nothing.
#[test]
fn the_fuzz_seeds_reach_the_parsers_they_are_for() {
    // USDT: the forged notes are refused for their reasons, the real one planned.
    let forged = c_program("e2e/testdata/forged/forged.c", "forged");
    let seed = container_from_elf(&forged, C_SECTIONS, false);
    let b = fuzzing::binary(&seed).expect("the forged program's container opens");
    let probes = b.usdt_probes().unwrap();
    let problems: Vec<(String, bool)> = probes
        .iter()
        .map(|p| (p.name.clone(), p.sites[0].problem.is_some()))
        .collect();
    assert_eq!(
        problems,
        [
            ("inside".to_string(), true),
            ("notnop".to_string(), true),
            ("good".to_string(), false)
        ]
    );
    fuzzing::stapsdt(&seed);
    write_seed("stapsdt", "forged", &seed);

    // C DWARF: the prototype of compute.
    let f = b.find_c_function("compute").unwrap();
    let sig = b.c_signature(&f).unwrap().expect("compute's prototype");
    assert_eq!(sig.params.len(), 1, "{sig:?}");
    fuzzing::dwarf(&seed);
    write_seed("dwarf", "forged", &seed);

    // A semaphore-guarded probe with arguments, C functions with strings and lengths.
    let ctarget = c_program("e2e/testdata/ctarget/ctarget.c", "ctarget");
    let seed = container_from_elf(&ctarget, C_SECTIONS, false);
    let b = fuzzing::binary(&seed).expect("ctarget's container opens");
    let probes = b.usdt_probes().unwrap();
    assert_eq!(probes.len(), 1);
    assert!(probes[0].sites[0].semaphore != 0 && probes[0].sites[0].problem.is_none());
    let f = b.find_c_function("greet").unwrap();
    assert!(b.c_signature(&f).unwrap().is_some());
    write_seed("stapsdt", "ctarget", &seed);
    write_seed("dwarf", "ctarget", &seed);

    // Go's tables, by section and found by magic (no section headers; Go 1.19 PIE
    // linked externally), and Go's DWARF.
    for v in [GoVersion::Go119, GoVersion::Go127] {
        for (variant, flags, cgo) in [
            ("full", &[][..], false),
            (
                "pie-external",
                &["-buildmode=pie", "-ldflags=-linkmode=external"][..],
                true,
            ),
        ] {
            let elf = go_program(v, variant, flags, cgo);
            let seed = container_from_elf(&elf, GO_TABLES, true);
            let b = fuzzing::binary(&seed).expect("the Go container opens");
            assert!(b.is_go(), "{} {variant}", v.tag());
            assert!(
                b.go_version().is_some_and(|s| s.starts_with(v.tag())),
                "{} {variant}",
                v.tag()
            );
            let f = b.find_function("main.bigFrame").unwrap();
            b.probe_sites(&f).unwrap();
            fuzzing::go_tables(&seed);
            write_seed("go_tables", &format!("{}-{variant}", v.tag()), &seed);
            // The same without section headers: every table is found by its magic.
            let mut bare = seed.clone();
            bare[0] |= 1;
            let b = fuzzing::binary(&bare).expect("opens without section headers");
            assert!(b.is_go(), "{} {variant} without section headers", v.tag());
            write_seed("go_tables", &format!("{}-{variant}-bare", v.tag()), &bare);
        }
        let elf = go_program(v, "dwarf", &["-ldflags=-compressdwarf=false"], false);
        let mut names = GO_TABLES.to_vec();
        names.extend([".debug_info", ".debug_abbrev", ".debug_str", ".debug_line"]);
        names.extend([".debug_ranges", ".debug_rnglists", ".debug_addr"]);
        let seed = container_from_elf(&elf, &names, true);
        let b = fuzzing::binary(&seed).unwrap();
        let f = b.find_function("main.bigFrame").unwrap();
        let sig = b
            .dwarf_signature(&f)
            .unwrap()
            .expect("bigFrame's DWARF signature");
        assert_eq!(sig.params.len(), 1, "{sig:?}");
        write_seed("dwarf", &format!("{}-go", v.tag()), &seed);
    }
}
