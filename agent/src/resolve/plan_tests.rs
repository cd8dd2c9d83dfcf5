//! Configurations as the BPF program reads them.

use super::*;

fn capture(name: &str, kind: u8) -> CapturePlan {
    CapturePlan {
        name: name.to_string(),
        decode: if kind == abi::CAP_WORD {
            Decode::Int {
                size: 8,
                signed: true,
            }
        } else {
            Decode::Str
        },
        bpf: GpCapture {
            kind,
            size: 8,
            max_len: if kind == abi::CAP_WORD { 0 } else { 64 },
            ..Default::default()
        },
    }
}

fn plan(entry: Vec<CapturePlan>, ret: Vec<CapturePlan>, latency: bool) -> ProbePlan {
    ProbePlan {
        symbol: "main.f".into(),
        entry_offset: 0x1000,
        ret_offsets: if latency { vec![0x1010] } else { vec![] },
        entry_captures: entry,
        return_captures: ret,
        signature_source: SignatureSource::Signature,
        warnings: vec![],
        extra_entry_sites: vec![],
        uretprobe: false,
        ref_ctr_offset: 0,
        pair_by_thread: false,
        type_names: None,
        propagate: false,
        newproc: false,
        ..Default::default()
    }
}

#[test]
fn configurations_are_flagged_by_the_shape_of_their_records() {
    // Words only (and no capture at all): one record size per configuration.
    let (e, r) = plan(vec![capture("n", abi::CAP_WORD)], vec![], true).configs(7, 100);
    let r = r.expect("a return configuration");
    assert_eq!((e.kind, e.func_id, e.n_captures), (abi::PROBE_ENTRY, 7, 1));
    assert_eq!(e.flags, abi::CFG_WORDS);
    assert_eq!(
        (r.kind, r.n_captures, r.rate_limit),
        (abi::PROBE_RETURN, 0, 0)
    );
    assert_eq!(r.flags, abi::CFG_WORDS);
    // One string alone.
    let (e, _) = plan(vec![capture("s", abi::CAP_BYTES)], vec![], false).configs(1, 0);
    assert_eq!((e.n_captures, e.flags), (1, abi::CFG_ONE_BYTES));
    // A C string is read up to its NUL: not a one-bytes record.
    let (e, _) = plan(vec![capture("s", abi::CAP_CSTR)], vec![], false).configs(1, 0);
    assert_eq!((e.n_captures, e.flags), (1, 0));
    // A string with other values: records are assembled by size.
    let (e, r) = plan(
        vec![capture("n", abi::CAP_WORD), capture("s", abi::CAP_BYTES)],
        vec![],
        false,
    )
    .configs(3, 0);
    assert!(r.is_none());
    assert_eq!((e.kind, e.n_captures, e.flags), (abi::PROBE_CALL, 2, 0));
    assert_eq!(e.caps[1].kind, abi::CAP_BYTES);
}

#[test]
fn c_and_usdt_configurations_pair_by_thread() {
    let mut p = plan(vec![capture("n", abi::CAP_WORD)], vec![], true);
    p.pair_by_thread = true;
    let (e, r) = p.configs(1, 0);
    assert_eq!(e.flags, abi::CFG_WORDS | abi::CFG_PAIR_BY_THREAD);
    assert_eq!(
        r.expect("a return configuration").flags,
        abi::CFG_WORDS | abi::CFG_PAIR_BY_THREAD
    );
    // Distinct bits: pairing never reads as a record shape.
    assert_eq!(
        abi::CFG_PAIR_BY_THREAD & (abi::CFG_WORDS | abi::CFG_ONE_BYTES),
        0
    );
}

#[test]
fn only_the_entry_configuration_skips_a_taken_stack_check_jump() {
    let mut p = plan(vec![capture("n", abi::CAP_WORD)], vec![], true);
    p.entry_jcc = Some(6);
    let (e, r) = p.configs(7, 0);
    assert_eq!(e.jcc, 7, "1 + the JBE's condition");
    assert_eq!(r.expect("a return configuration").jcc, 0);
    p.entry_jcc = None;
    assert_eq!(p.configs(7, 0).0.jcc, 0);
}
