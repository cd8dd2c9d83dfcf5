//! USDT probes: every note of the test program, python3.11, postgres 15 and libjvm.so
//! against `readelf -n`, their file offsets and semaphores, and the plans of the probes the
//! environment notes describe (python:function__entry, postgresql:query__start,
//! hotspot:class__loaded), inlined probes with several sites, and bad inputs.

use std::path::Path;

use gprobe_agent::abi::{self, reg, GpLoc};
use gprobe_agent::attach::encode::entry_config;
use gprobe_agent::plan::{Decode, Pairing, PlanWarning, ProbePlan, SignatureSource};
use gprobe_agent::resolve::planner::plan_probe;
use gprobe_agent::resolve::{Binary, PlanError};
use gprobe_crds::Probe;

use crate::native::{
    cprog, file_offset, readelf_notes, require_file, require_program, CBuild, LIBJVM, POSTGRES,
    PYTHON, REDIS,
};
use crate::open;

fn usdt(point: &str, signature: Option<&str>, capture: &[&str]) -> Probe {
    Probe {
        usdt: Some(point.into()),
        signature: signature.map(Into::into),
        capture: capture.iter().map(|c| c.to_string()).collect(),
        ..Probe::default()
    }
}

fn plan(b: &Binary, p: &Probe) -> ProbePlan {
    plan_probe(b, p, 128).unwrap_or_else(|e| panic!("{}: {e}", p.point()))
}

fn loc(kind: u8, r: u8, off: i32) -> GpLoc {
    GpLoc {
        kind,
        reg: r,
        off,
        ..Default::default()
    }
}

/// Every note readelf prints is a site of ours, in the same order per probe, with the same
/// pc, semaphore and arguments; file offsets follow the PT_LOAD segments.
fn notes_match_readelf(test: &str, path: &Path) -> usize {
    let b = open(path);
    let probes = b.usdt_probes().unwrap();
    let want = readelf_notes(test, path);
    let mut i = 0;
    let mut by_point: std::collections::HashMap<String, usize> = Default::default();
    for n in &want {
        let point = format!("{}:{}", n.provider, n.name);
        let k = by_point.entry(point.clone()).or_insert(0);
        let p = probes
            .iter()
            .find(|p| p.point() == point)
            .unwrap_or_else(|| panic!("{point} missing"));
        let s = &p.sites[*k];
        *k += 1;
        assert_eq!(s.pc, n.location, "{point}");
        assert_eq!(s.semaphore, n.semaphore, "{point}");
        assert_eq!(s.args, n.args, "{point}");
        assert_eq!(s.problem, None, "{point}");
        assert_eq!(s.offset, file_offset(path, n.location), "{point}");
        if n.semaphore != 0 {
            assert_eq!(
                s.semaphore_offset,
                file_offset(path, n.semaphore),
                "{point}"
            );
        } else {
            assert_eq!(s.semaphore_offset, 0);
        }
        i += 1;
    }
    assert_eq!(probes.iter().map(|p| p.sites.len()).sum::<usize>(), i);
    i
}

#[test]
fn the_test_programs_notes() {
    let test = "the_test_programs_notes";
    let (path, _) = cprog(test, CBuild::Debug);
    assert_eq!(notes_match_readelf(test, &path), 5);
    let b = open(&path);
    let names: Vec<String> = b.usdt_probes().unwrap().iter().map(|p| p.point()).collect();
    for want in [
        "cprog:twice",
        "cprog:constant",
        "cprog:sib",
        "cprog:request",
    ] {
        assert!(names.contains(&want.to_string()), "{names:?}");
    }

    // An inlined probe: two sites, each with the argument where that copy keeps it.
    let p = plan(
        &b,
        &usdt("cprog:twice", Some("(int x, long y)"), &["x", "y"]),
    );
    assert_eq!(p.symbol, "usdt:cprog:twice");
    assert_eq!(p.extra_entry_sites.len(), 1);
    assert!(p.ret_offsets().is_empty() && !p.uretprobe() && p.pairing == Pairing::Thread);
    assert_eq!(p.ref_ctr_offset, 0);
    assert_eq!(p.signature_source, SignatureSource::Signature);
    let groups = p.entry_groups();
    assert_eq!(groups.len(), 2, "different registers: two configurations");
    let offsets: Vec<u64> = p.entry_sites().map(|(o, _)| o).collect();
    let twice = b
        .usdt_probes()
        .unwrap()
        .iter()
        .find(|p| p.name == "twice")
        .unwrap();
    assert_eq!(
        offsets,
        twice.sites.iter().map(|s| s.offset).collect::<Vec<_>>()
    );
    for (_, caps) in p.entry_sites() {
        assert_eq!(
            caps[0].decode,
            Decode::Int {
                size: 4,
                signed: true
            }
        );
        assert_eq!(
            caps[1].decode,
            Decode::Int {
                size: 8,
                signed: true
            }
        );
    }
    assert_eq!(entry_config(&p, groups[1].1, 3, 0).kind, abi::PROBE_CALL);

    // A constant argument, without a signature.
    let p = plan(&b, &usdt("cprog:constant", None, &["arg0"]));
    assert_eq!(p.signature_source, SignatureSource::UsdtNote);
    let c = &p.entry_captures[0];
    assert_eq!(
        (c.bpf.kind, c.bpf.size, c.bpf.loc[0]),
        (abi::CAP_WORD, 4, loc(abi::LOC_CONST, 0, 42))
    );

    // The semaphore: its file offset is the reference counter's.
    let p = plan(
        &b,
        &usdt(
            "cprog:request",
            Some("(const char *path, int status)"),
            &["path", "status"],
        ),
    );
    let sema = b
        .usdt_probes()
        .unwrap()
        .iter()
        .find(|p| p.name == "request")
        .unwrap()
        .sites[0]
        .semaphore;
    assert_ne!(sema, 0);
    assert_eq!(p.ref_ctr_offset, file_offset(&path, sema));
    assert_eq!(p.entry_captures[0].bpf.kind, abi::CAP_CSTR);
    assert_eq!(
        p.entry_captures[0].bpf.loc[0],
        loc(abi::LOC_REG, reg::RDI, 0)
    );
    assert_eq!(
        p.entry_captures[1].bpf.loc[0],
        loc(abi::LOC_REG, reg::RSI, 0)
    );
}

#[test]
fn bad_usdt_inputs_are_typed_errors() {
    let test = "bad_usdt_inputs_are_typed_errors";
    let (path, _) = cprog(test, CBuild::Debug);
    let b = open(&path);
    let err = |p: Probe| plan_probe(&b, &p, 64).unwrap_err();
    // The scaled-index argument cannot be read; the others of the same probe can.
    match err(usdt("cprog:sib", None, &["arg0"])) {
        PlanError::UsdtUnsupportedArg(a) => {
            assert_eq!((a.spec.as_str(), a.index), ("-4@-8(%rsp,%rax,8)", 0));
            assert!(a.reason.contains("scaled-index"), "{}", a.reason);
            assert!(a.to_string().contains("gprobe reads N@%reg"), "{a}");
        }
        e => panic!("{e:?}"),
    }
    let p = plan(&b, &usdt("cprog:sib", None, &["arg1", "arg2"]));
    assert_eq!(
        p.entry_captures[0].bpf.loc[0],
        loc(abi::LOC_REG, reg::RDI, 0)
    );
    assert_eq!(p.entry_captures[1].bpf.loc[0], loc(abi::LOC_CONST, 0, -5));
    assert_eq!(
        p.entry_captures[1].decode,
        Decode::Int {
            size: 2,
            signed: false
        }
    );
    // Attaching without captures is fine: nothing reads the unsupported argument.
    plan(&b, &usdt("cprog:sib", None, &[]));
    match err(usdt("cprog:twise", None, &[])) {
        PlanError::UsdtNotFound {
            probes: 4, similar, ..
        } => {
            assert_eq!(similar[0], "cprog:twice", "{similar:?}")
        }
        e => panic!("{e:?}"),
    }
    match err(usdt("cprog:twice", Some("(int x)"), &["x"])) {
        PlanError::UsdtArgCount {
            given: 1,
            note: 2,
            args,
            ..
        } => assert_eq!(args, "-4@%edi -8@$7"),
        e => panic!("{e:?}"),
    }
    let e = err(usdt("cprog:twice", None, &["arg2"]));
    assert!(
        matches!(&e, PlanError::UnknownCapture { known, .. } if known == &["arg0", "arg1"]),
        "{e:?}"
    );
    let mut lat = usdt("cprog:twice", None, &[]);
    lat.latency = true;
    assert!(matches!(err(lat), PlanError::UsdtNoReturn { .. }));
    assert!(matches!(
        err(usdt("cprog:twice", Some("int f(int x, long y)"), &[])),
        PlanError::CSignatureForm { .. }
    ));
    assert!(matches!(
        err(usdt("cprog:twice", Some("func(x int)"), &[])),
        PlanError::CSignatureForm { .. }
    ));
    // A string read through a constant address would not be relocated.
    let e = err(usdt("cprog:constant", Some("(char *s)"), &["s"]));
    assert!(e.to_string().contains("constant address"), "{e}");
    // A size the signature disagrees with: the note's size is read, with a warning.
    let p = plan(&b, &usdt("cprog:constant", Some("(long n)"), &["n"]));
    assert!(matches!(
        &p.warnings[..],
        [PlanWarning::UsdtArgSize {
            type_size: 8,
            note_size: 4,
            ..
        }]
    ));
    assert_eq!(
        p.entry_captures[0].decode,
        Decode::Int {
            size: 4,
            signed: true
        }
    );
    // A binary without USDT notes.
    let redis = require_program(test, REDIS, "redis-server");
    let e = plan_probe(&open(&redis), &usdt("redis:command", None, &[]), 64).unwrap_err();
    assert!(matches!(e, PlanError::UsdtNotFound { probes: 0, .. }));
    assert!(e.to_string().contains("no .note.stapsdt"), "{e}");
}

#[test]
fn python_function_entry() {
    let test = "python_function_entry";
    let path = require_program(test, PYTHON, "python3.11");
    // 8 notes, one site each (readelf -n counts them so on Debian 12's python3.11).
    let n = notes_match_readelf(test, &path);
    let b = open(&path);
    assert_eq!(b.usdt_probes().unwrap().len(), n);
    let sig = "(char *file, char *func, int line)";
    let p = plan(
        &b,
        &usdt(
            "python:function__entry",
            Some(sig),
            &["file", "func", "line"],
        ),
    );
    let site = &b
        .usdt_probes()
        .unwrap()
        .iter()
        .find(|p| p.name == "function__entry")
        .unwrap()
        .sites[0];
    assert_eq!(site.args, "8@%rbp 8@%r12 -4@%eax");
    assert_eq!(p.entry_offset, site.offset);
    assert_ne!(
        p.ref_ctr_offset, 0,
        "function__entry is guarded by a semaphore"
    );
    assert_eq!(p.ref_ctr_offset, file_offset(&path, site.semaphore));
    let c: Vec<_> = p
        .entry_captures
        .iter()
        .map(|c| (c.bpf.kind, c.bpf.size, c.bpf.loc[0], c.decode))
        .collect();
    assert_eq!(
        c,
        vec![
            (
                abi::CAP_CSTR,
                8,
                loc(abi::LOC_REG, reg::RBP, 0),
                Decode::Str
            ),
            (
                abi::CAP_CSTR,
                8,
                loc(abi::LOC_REG, reg::R12, 0),
                Decode::Str
            ),
            (
                abi::CAP_WORD,
                4,
                loc(abi::LOC_REG, reg::RAX, 0),
                Decode::Int {
                    size: 4,
                    signed: true
                }
            ),
        ]
    );
    // Without a signature: integers of the note's sizes.
    let p = plan(&b, &usdt("python:function__entry", None, &["arg0", "arg2"]));
    assert_eq!(
        p.entry_captures[0].decode,
        Decode::Int {
            size: 8,
            signed: false
        }
    );
    assert_eq!(
        p.entry_captures[1].decode,
        Decode::Int {
            size: 4,
            signed: true
        }
    );
    let e = plan_probe(&b, &usdt("python:function_entry", None, &[]), 64).unwrap_err();
    assert!(
        e.to_string().contains("similar: python:function__entry"),
        "{e}"
    );
}

#[test]
fn postgres_query_start_and_inlined_probes() {
    let test = "postgres_query_start_and_inlined_probes";
    let path = require_program(test, POSTGRES, "postgresql-15");
    let n = notes_match_readelf(test, &path);
    assert!(n >= 71, "{n}");
    let b = open(&path);
    let p = plan(
        &b,
        &usdt(
            "postgresql:query__start",
            Some("(const char *query)"),
            &["query"],
        ),
    );
    assert_eq!(p.entry_captures[0].bpf.kind, abi::CAP_CSTR);
    assert_eq!(
        p.entry_captures[0].bpf.loc[0],
        loc(abi::LOC_REG, reg::RBX, 0)
    );
    assert_ne!(p.ref_ctr_offset, 0);
    // sort__start has several sites whose arguments are in different places.
    let probes = b.usdt_probes().unwrap();
    let sort = probes.iter().find(|p| p.name == "sort__start").unwrap();
    assert!(sort.sites.len() >= 2);
    let p = plan(&b, &usdt("postgresql:sort__start", None, &["arg0", "arg3"]));
    assert_eq!(1 + p.extra_entry_sites.len(), sort.sites.len());
    assert!(p.entry_groups().len() >= 2);
    // Memory operands: buffer__read__done reads -136(%rbp).
    let p = plan(&b, &usdt("postgresql:buffer__read__done", None, &["arg0"]));
    for (_, caps) in p.entry_sites() {
        assert_eq!(caps[0].bpf.loc[0], loc(abi::LOC_MEM, reg::RBP, -136));
        assert_eq!(caps[0].bpf.size, 4);
    }
}

#[test]
fn libjvm_class_loaded() {
    let test = "libjvm_class_loaded";
    let path = require_file(test, LIBJVM, "openjdk-17-jre-headless");
    let n = notes_match_readelf(test, &path);
    assert!(n >= 531, "{n}");
    let b = open(&path);
    let sig = "(char *name, int len, void *loader, bool shared)";
    let p = plan(
        &b,
        &usdt(
            "hotspot:class__loaded",
            Some(sig),
            &["name[:len]", "len", "loader", "shared"],
        ),
    );
    assert_eq!(p.ref_ctr_offset, 0, "class__loaded has no semaphore");
    // The note's `-4@%eax` length is signed: a negative one reads nothing.
    assert_eq!(p.entry_captures[0].bpf.flags, abi::CAPF_LEN_SIGNED);
    let c: Vec<_> = p
        .entry_captures
        .iter()
        .map(|c| (c.bpf.kind, c.bpf.size, c.bpf.loc[0], c.decode))
        .collect();
    assert_eq!(
        c,
        vec![
            (
                abi::CAP_BYTES,
                4,
                loc(abi::LOC_REG, reg::RDX, 0),
                Decode::Bytes
            ),
            (
                abi::CAP_WORD,
                4,
                loc(abi::LOC_REG, reg::RAX, 0),
                Decode::Int {
                    size: 4,
                    signed: true
                }
            ),
            (
                abi::CAP_WORD,
                8,
                loc(abi::LOC_MEM, reg::RDI, 152),
                Decode::Pointer
            ),
            (
                abi::CAP_WORD,
                1,
                loc(abi::LOC_REG, reg::RCX, 0),
                Decode::Bool
            ),
        ]
    );
    assert_eq!(
        p.entry_captures[0].bpf.loc[1],
        loc(abi::LOC_REG, reg::RAX, 0)
    );
}

#[test]
fn prelinked_sites_move_with_the_base_section() {
    use object::{Object, ObjectSection};
    let test = "prelinked_sites_move_with_the_base_section";
    let (path, _) = cprog(test, CBuild::NoDebug);
    // Move .stapsdt.base by 0x20 in the section headers, as prelink does when it moves
    // sections: every pc and semaphore of the notes moves by as much.
    let mut data = std::fs::read(&path).unwrap();
    let (index, addr) = {
        let f = object::File::parse(&*data).unwrap();
        let s = f.section_by_name(".stapsdt.base").unwrap();
        (s.index().0, s.address())
    };
    let shoff = u64::from_le_bytes(data[0x28..0x30].try_into().unwrap()) as usize;
    let shentsize = u16::from_le_bytes(data[0x3a..0x3c].try_into().unwrap()) as usize;
    let at = shoff + index * shentsize + 0x10; // sh_addr
    data[at..at + 8].copy_from_slice(&(addr + 0x20).to_le_bytes());
    let tmp = path.with_file_name("cprog-prelinked");
    std::fs::write(&tmp, &data).unwrap();
    let orig = open(&path);
    let moved = open(&tmp);
    for (a, b) in orig
        .usdt_probes()
        .unwrap()
        .iter()
        .zip(moved.usdt_probes().unwrap())
    {
        for (s, t) in a.sites.iter().zip(&b.sites) {
            assert_eq!(t.pc, s.pc + 0x20, "{}", a.point());
            if s.semaphore != 0 {
                assert_eq!(t.semaphore, s.semaphore + 0x20);
            }
        }
    }
}
