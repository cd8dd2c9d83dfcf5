//! C functions: symbols and entry offsets against binutils, DWARF prototypes (in the
//! binary and in a separate debug file), the System V places of captured values, the
//! uretprobe plan, and redis-server's createStringObject.

use gprobe_agent::abi::{self, reg, GpLoc};
use gprobe_agent::attach::encode::configs;
use gprobe_agent::plan::{Decode, Pairing, PlanWarning, ProbePlan, SignatureSource};
use gprobe_agent::resolve::planner::plan_probe;
use gprobe_agent::resolve::{Binary, PlanError};
use gprobe_crds::csig::CSignature;
use gprobe_crds::Probe;

use crate::native::{
    build_id, cprog, file_offset, libc_and_its_debug_file, nm, require_program, CBuild, REDIS,
};
use crate::open;

pub fn probe(symbol: &str, signature: Option<&str>, capture: &[&str], latency: bool) -> Probe {
    Probe {
        symbol: symbol.into(),
        signature: signature.map(Into::into),
        capture: capture.iter().map(|c| c.to_string()).collect(),
        latency,
        ..Probe::default()
    }
}

fn plan(b: &Binary, p: &Probe) -> ProbePlan {
    plan_probe(b, p, 64).unwrap_or_else(|e| panic!("{}: {e}", p.point()))
}

fn reg_at(r: u8) -> GpLoc {
    GpLoc {
        kind: abi::LOC_REG,
        reg: r,
        ..Default::default()
    }
}

fn stack_at(off: i32) -> GpLoc {
    GpLoc {
        kind: abi::LOC_MEM,
        reg: reg::RSP,
        off,
        ..Default::default()
    }
}

/// (name, kind, size, loc[0], decode) of every capture, entry then return.
fn caps(p: &ProbePlan) -> Vec<(String, u8, u8, GpLoc, Decode)> {
    p.entry_captures
        .iter()
        .chain(&p.return_captures)
        .map(|c| {
            (
                c.name.clone(),
                c.bpf.kind,
                c.bpf.size,
                c.bpf.loc[0],
                c.decode,
            )
        })
        .collect()
}

const INT: Decode = Decode::Int {
    size: 4,
    signed: true,
};

#[test]
fn symbols_and_entry_offsets_match_binutils() {
    let test = "symbols_and_entry_offsets_match_binutils";
    for build in [CBuild::Debug, CBuild::NoDebug] {
        let (path, _) = cprog(test, build);
        let b = open(&path);
        assert!(!b.is_go());
        assert!(b.has_symtab());
        let want = nm(test, &path, false);
        for name in [
            "add",
            "sub",
            "greet",
            "many",
            "hidden_helper",
            "main",
            "is_even",
        ] {
            let f = b.find_c_function(name).unwrap();
            assert_eq!(f.addr, want[name], "{name}");
            assert_eq!(
                b.c_entry_offset(&f).unwrap(),
                file_offset(&path, f.addr),
                "{name}"
            );
        }
        // The plan of a C function: entry at its first byte, the return a uretprobe there.
        let p = plan(
            &b,
            &probe(
                "add",
                Some("int add(int a, int b)"),
                &["a", "b", "r0"],
                true,
            ),
        );
        let entry = file_offset(&path, want["add"]);
        assert_eq!(p.entry_offset, entry);
        assert_eq!(p.ret_offsets(), vec![entry]);
        assert!(p.uretprobe() && p.pairing == Pairing::Thread);
        assert_eq!((p.ref_ctr_offset, p.extra_entry_sites.len()), (0, 0));
        let (e, r) = configs(&p, 5, 100);
        assert_eq!(
            (e.kind, r.unwrap().kind),
            (abi::PROBE_ENTRY, abi::PROBE_RETURN)
        );
        assert_eq!(e.flags & abi::CFG_PAIR_BY_THREAD, abi::CFG_PAIR_BY_THREAD);
        // Without latency or results: one CALL probe, no return site.
        let p = plan(&b, &probe("sub", None, &[], false));
        assert!(p.ret_offsets().is_empty() && !p.has_return());
        assert_eq!(configs(&p, 1, 0).0.kind, abi::PROBE_CALL);
    }
}

#[test]
fn dwarf_prototypes_of_c_functions() {
    let test = "dwarf_prototypes_of_c_functions";
    let (path, _) = cprog(test, CBuild::Debug);
    let b = open(&path);
    assert!(b.has_dwarf() && b.has_c_dwarf());
    assert_eq!(b.debug_file(), None);
    let proto = |name: &str| -> String {
        let f = b.find_c_function(name).unwrap();
        b.c_signature(&f).unwrap().unwrap().to_string()
    };
    assert_eq!(proto("add"), "int add(int a, int b)");
    assert_eq!(
        proto("greet"),
        "size_t greet(const char *name, char *out, size_t cap)"
    );
    assert_eq!(
        proto("many"),
        "long int many(int a1, long int a2, short int a3, unsigned char a4, uint64_t a5, int64_t \
        a6, int a7, const char *a8)"
    );
    assert_eq!(proto("is_even"), "_Bool is_even(unsigned int n)");
    assert_eq!(proto("sum_pair"), "int sum_pair(pair p, int c)");
    assert_eq!(proto("main"), "int main(int argc, char **argv)");
    let all = b.c_signatures(&b.functions().unwrap()).unwrap();
    let add = b.find_c_function("add").unwrap();
    assert_eq!(all[&add.addr].params.len(), 2);
    assert!(all.len() >= 12, "{}", all.len());
}

#[test]
fn captures_are_placed_by_the_system_v_abi() {
    let test = "captures_are_placed_by_the_system_v_abi";
    let (path, _) = cprog(test, CBuild::Debug);
    let b = open(&path);
    // From DWARF alone.
    let p = plan(&b, &probe("add", None, &["a", "b", "r0"], true));
    assert_eq!(p.signature_source, SignatureSource::Dwarf);
    assert_eq!(
        caps(&p),
        vec![
            ("a".into(), abi::CAP_WORD, 4, reg_at(reg::RDI), INT),
            ("b".into(), abi::CAP_WORD, 4, reg_at(reg::RSI), INT),
            ("r0".into(), abi::CAP_WORD, 4, reg_at(reg::RAX), INT),
        ]
    );
    assert_eq!(p.return_captures.len(), 1);
    // Strings, bytes at a pointer, and the result.
    let p = plan(
        &b,
        &probe("greet", None, &["name", "out[:cap]", "r0"], true),
    );
    let got = caps(&p);
    assert_eq!(
        got[0],
        (
            "name".into(),
            abi::CAP_CSTR,
            8,
            reg_at(reg::RDI),
            Decode::Str
        )
    );
    assert_eq!(
        got[1],
        (
            "out[:cap]".into(),
            abi::CAP_BYTES,
            8,
            reg_at(reg::RSI),
            Decode::Bytes
        )
    );
    assert_eq!(p.entry_captures[1].bpf.loc[1], reg_at(reg::RDX));
    // `size_t cap`: unsigned, any value is a length.
    assert_eq!(p.entry_captures[1].bpf.flags, 0);
    assert_eq!(p.entry_captures[0].bpf.max_len, 64);
    let u8 = Decode::Int {
        size: 8,
        signed: false,
    };
    assert_eq!(
        got[2],
        ("r0".into(), abi::CAP_WORD, 8, reg_at(reg::RAX), u8)
    );
    // Seven and eight arguments: the 7th and 8th are on the stack above the return address.
    let p = plan(
        &b,
        &probe("many", None, &["a1", "a4", "a6", "a7", "a8"], false),
    );
    let got = caps(&p);
    assert_eq!(got[0].3, reg_at(reg::RDI));
    assert_eq!(
        (got[1].2, got[1].3, got[1].4),
        (
            1,
            reg_at(reg::RCX),
            Decode::Int {
                size: 1,
                signed: false
            }
        )
    );
    assert_eq!(got[2].3, reg_at(reg::R9));
    assert_eq!((got[3].3, got[3].4), (stack_at(8), INT));
    assert_eq!((got[4].1, got[4].3), (abi::CAP_CSTR, stack_at(16)));
    // bool; a float does not move the integers after it.
    let p = plan(&b, &probe("is_even", None, &["n", "r0"], false));
    assert_eq!(caps(&p)[1].4, Decode::Bool);
    let p = plan(&b, &probe("scale", None, &["k"], false));
    assert_eq!(caps(&p)[0].3, reg_at(reg::RDI));
    // A struct of 32 bytes goes on the stack: the int after it is in RDI.
    let p = plan(&b, &probe("sum_big", None, &["c"], false));
    assert_eq!(caps(&p)[0].3, reg_at(reg::RDI));
}

#[test]
fn uncapturable_c_values_say_why() {
    let test = "uncapturable_c_values_say_why";
    let (path, _) = cprog(test, CBuild::Debug);
    let b = open(&path);
    let err = |p: Probe| plan_probe(&b, &p, 64).unwrap_err();
    let e = err(probe("scale", None, &["x"], false));
    assert!(
        matches!(e, PlanError::FloatInRegister { reg: 0, .. }),
        "{e:?}"
    );
    let e = err(probe("scale", None, &["r0"], false));
    assert!(matches!(e, PlanError::FloatInRegister { .. }), "{e:?}");
    let e = err(probe("sum_pair", None, &["p"], false));
    assert!(
        e.to_string().contains("structs and unions passed by value"),
        "{e}"
    );
    // An 8-byte struct goes in registers by its fields: what follows it is not placed.
    let e = err(probe("sum_pair", None, &["c"], false));
    assert!(e.to_string().contains("its place is unknown"), "{e}");
    let e = err(probe("add", None, &["nope"], false));
    match e {
        PlanError::UnknownCapture { known, .. } => assert_eq!(known, ["a", "b", "r0"]),
        e => panic!("{e:?}"),
    }
    let e = err(probe("add", None, &["a[:b]"], false));
    assert!(e.to_string().contains("its pointer has type int"), "{e}");
    let e = err(probe("greet", None, &["out[:name]"], false));
    assert!(
        e.to_string().contains("its length has type const char *"),
        "{e}"
    );
    let e = err(probe("add", Some("func(a int, b int) int"), &["a"], false));
    assert!(matches!(e, PlanError::GoSignatureForC { .. }), "{e:?}");
    let e = err(probe("add", Some("(int a, int b)"), &["a"], false));
    assert!(matches!(e, PlanError::CSignatureForm { .. }), "{e:?}");
    let e = err(probe("add", Some("int add(int a, int b"), &["a"], false));
    assert!(matches!(e, PlanError::CSignatureSyntax { .. }), "{e:?}");
}

#[test]
fn dwarf_wins_over_a_disagreeing_c_signature() {
    let test = "dwarf_wins_over_a_disagreeing_c_signature";
    let (path, _) = cprog(test, CBuild::Debug);
    let b = open(&path);
    // Same shapes under other names and signedness: the signature is used.
    let p = plan(
        &b,
        &probe("add", Some("int add(unsigned x, int y)"), &["x"], false),
    );
    assert_eq!(p.signature_source, SignatureSource::Signature);
    assert!(p.warnings.is_empty());
    assert_eq!(
        caps(&p)[0].4,
        Decode::Int {
            size: 4,
            signed: false
        }
    );
    // A long where DWARF has an int: DWARF, a warning, and the name bound by position.
    let p = plan(
        &b,
        &probe("add", Some("long add(long x, int b)"), &["x", "b"], false),
    );
    assert_eq!(p.signature_source, SignatureSource::Dwarf);
    assert!(
        matches!(
            &p.warnings[..],
            [PlanWarning::SignatureDisagreesWithDwarf { differences, .. }] if differences.len() == 2
        ),
        "{:?}",
        p.warnings
    );
    assert_eq!(
        caps(&p)[0],
        ("x".into(), abi::CAP_WORD, 4, reg_at(reg::RDI), INT)
    );
    assert!(p.warnings[0]
        .to_string()
        .contains("parameter 0 is long in the signature but int in DWARF"));
}

#[test]
fn without_dwarf_a_signature_is_needed_and_used() {
    let test = "without_dwarf_a_signature_is_needed_and_used";
    let (path, _) = cprog(test, CBuild::NoDebug);
    let b = open(&path);
    assert!(!b.has_dwarf());
    let e = plan_probe(&b, &probe("add", None, &["a"], false), 64).unwrap_err();
    assert!(matches!(e, PlanError::NoCSignature { .. }), "{e:?}");
    assert!(e.to_string().contains("/usr/lib/debug/.build-id/"), "{e}");
    // Entry and latency need no types.
    plan(&b, &probe("add", None, &[], true));
    let p = plan(
        &b,
        &probe(
            "greet",
            Some("size_t greet(const char *name, char *out, size_t cap)"),
            &["name", "cap"],
            false,
        ),
    );
    assert_eq!(p.signature_source, SignatureSource::Signature);
    assert_eq!(caps(&p)[0].1, abi::CAP_CSTR);
    assert_eq!(caps(&p)[1].3, reg_at(reg::RDX));
    // A typedef the signature cannot know, by value.
    let e = plan_probe(
        &b,
        &probe("add", Some("int add(myint a, int b)"), &["b"], false),
        64,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("parameter 0 has type myint, whose size is unknown"),
        "{e}"
    );
    let e = plan_probe(
        &b,
        &probe("add", Some("int add(myint a, int b)"), &["a"], false),
        64,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("its size is unknown: write its underlying type"),
        "{e}"
    );
}

#[test]
fn a_separate_debug_file_is_found_by_build_id() {
    let test = "a_separate_debug_file_is_found_by_build_id";
    let (path, root) = cprog(test, CBuild::SplitDebug);
    let b = open(&path);
    assert!(!b.has_dwarf(), "strip --strip-debug leaves no DWARF");
    assert!(
        !b.has_c_dwarf(),
        "nothing under /usr/lib/debug for a test build"
    );
    let b = Binary::open(&path)
        .unwrap()
        .with_debug_roots(vec![root.clone()]);
    let id = build_id(test, &path).unwrap();
    let want = root
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    assert_eq!(b.debug_file_candidates(), vec![want.clone()]);
    assert_eq!(b.debug_file(), Some(want));
    let f = b.find_c_function("greet").unwrap();
    let sig: CSignature = b.c_signature(&f).unwrap().unwrap();
    assert_eq!(
        sig.to_string(),
        "size_t greet(const char *name, char *out, size_t cap)"
    );
    let p = plan(&b, &probe("greet", None, &["name"], false));
    assert_eq!(p.signature_source, SignatureSource::Dwarf);
    // A debug file of another build is not used.
    let other = cprog(test, CBuild::NoDebug).0;
    let o = Binary::open(&other).unwrap().with_debug_roots(vec![root]);
    assert!(!o.has_c_dwarf());
}

#[test]
fn a_stripped_binary_has_its_exported_functions_only() {
    let test = "a_stripped_binary_has_its_exported_functions_only";
    let (path, _) = cprog(test, CBuild::Stripped);
    let b = open(&path);
    assert!(!b.has_symtab());
    let exported = nm(test, &path, true);
    let f = b.find_c_function("add").unwrap();
    assert_eq!(f.addr, exported["add"]);
    match plan_probe(&b, &probe("hidden_helper", None, &[], false), 64).unwrap_err() {
        PlanError::CFunctionNotFound {
            stripped: true,
            similar,
            ..
        } => assert!(similar.is_empty(), "{similar:?}"),
        e => panic!("{e:?}"),
    }
    let e = plan_probe(&b, &probe("greeet", None, &[], false), 64).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("similar: greet") && msg.contains("stripped"),
        "{msg}"
    );
}

#[test]
fn redis_create_string_object() {
    let test = "redis_create_string_object";
    let path = require_program(test, REDIS, "redis-server");
    let b = open(&path);
    assert!(!b.has_symtab(), "Debian's redis has no .symtab");
    let dynsym = nm(test, &path, true);
    let f = b.find_c_function("createStringObject").unwrap();
    assert_eq!(f.addr, dynsym["createStringObject"]);
    let sig = "robj *createStringObject(const char *ptr, size_t len)";
    let p = plan(
        &b,
        &probe(
            "createStringObject",
            Some(sig),
            &["ptr[:len]", "len", "r0"],
            true,
        ),
    );
    let entry = file_offset(&path, f.addr);
    assert_eq!(
        (p.entry_offset, p.ret_offsets().to_vec(), p.uretprobe()),
        (entry, vec![entry], true)
    );
    let c = &p.entry_captures[0];
    assert_eq!(
        (c.bpf.kind, c.bpf.size, c.decode),
        (abi::CAP_BYTES, 8, Decode::Bytes)
    );
    assert_eq!(c.bpf.loc, [reg_at(reg::RDI), reg_at(reg::RSI)]);
    assert_eq!(
        caps(&p)[2],
        (
            "r0".into(),
            abi::CAP_WORD,
            8,
            reg_at(reg::RAX),
            Decode::Pointer
        )
    );
    if !b.has_c_dwarf() {
        // Its debug symbols are a separate package: the error says where they would be.
        let e =
            plan_probe(&b, &probe("createStringObject", None, &["len"], false), 64).unwrap_err();
        let id = build_id(test, &path).unwrap();
        assert!(
            e.to_string()
                .contains(&format!("/usr/lib/debug/.build-id/{}/", &id[..2])),
            "{e}"
        );
    }
}

#[test]
fn cgo_c_functions_of_a_go_binary_are_planned_as_c() {
    // An externally linked Go binary holds runtime/cgo's C functions (in .symtab only).
    let b = open(&crate::sig_external(crate::go::GoVersion::Go127));
    assert!(b.is_go());
    assert!(b.find_function("x_cgo_init").is_err(), "not a Go function");
    let sig = "void x_cgo_init(void *g, void (*setg)(void *), void **tlsg, void **tlsbase)";
    let p = plan(&b, &probe("x_cgo_init", Some(sig), &["g", "tlsg"], true));
    assert!(p.uretprobe() && p.pairing == Pairing::Thread);
    assert_eq!(p.ret_offsets(), vec![p.entry_offset]);
    assert_eq!(caps(&p)[1].3, reg_at(reg::RDX));
    // Its Go functions keep Go's planning: RET uprobes, pairing by goroutine.
    let g = plan(&b, &probe("main.leaf", None, &[], true));
    assert!(!g.uretprobe() && g.pairing == Pairing::Goroutine);
    assert!(!g.ret_offsets().is_empty() && !g.ret_offsets().contains(&g.entry_offset));
}

#[test]
fn libc_ifuncs_are_refused_and_its_debug_file_gives_prototypes() {
    let test = "libc_ifuncs_are_refused_and_its_debug_file_gives_prototypes";
    let (path, debug) = libc_and_its_debug_file(test);
    let b = open(&path);
    match plan_probe(&b, &probe("strlen", None, &[], false), 64).unwrap_err() {
        PlanError::IndirectFunction { symbol, .. } => assert_eq!(symbol, "strlen"),
        e => panic!("{e:?}"),
    }
    assert_eq!(b.debug_file(), Some(debug));
    let f = b.find_c_function("open").unwrap();
    let sig = b.c_signature(&f).unwrap().unwrap();
    assert_eq!(
        sig.to_string(),
        "int open(const char *file, int oflag, ...)"
    );
    let p = plan(&b, &probe("open", None, &["file", "oflag", "r0"], true));
    assert_eq!(p.signature_source, SignatureSource::Dwarf);
    assert_eq!(caps(&p)[0].1, abi::CAP_CSTR);
    assert_eq!(caps(&p)[1].3, reg_at(reg::RSI));
}
