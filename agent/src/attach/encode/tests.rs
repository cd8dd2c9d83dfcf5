//! Configurations as the BPF program reads them.

use super::*;
use crate::abi::GpCapture;
use crate::plan::{Decode, EntrySite, OutsideGoCode, Pairing, Returns, Role, SignatureSource};

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
        returns: if latency {
            Returns::RetSites(vec![0x1010])
        } else {
            Returns::None
        },
        entry_captures: entry,
        return_captures: ret,
        signature_source: SignatureSource::Signature,
        warnings: vec![],
        extra_entry_sites: vec![],
        ref_ctr_offset: 0,
        pairing: Pairing::Goroutine,
        type_names: None,
        role: Role::Traced,
        ..Default::default()
    }
}

#[test]
fn configurations_are_flagged_by_the_shape_of_their_records() {
    // Words only (and no capture at all): one record size per configuration.
    let (e, r) = configs(
        &plan(vec![capture("n", abi::CAP_WORD)], vec![], true),
        7,
        100,
    );
    let r = r.expect("a return configuration");
    assert_eq!((e.kind, e.func_id, e.n_captures), (abi::PROBE_ENTRY, 7, 1));
    assert_eq!(e.flags, abi::CFG_WORDS);
    assert_eq!(
        (r.kind, r.n_captures, r.rate_limit),
        (abi::PROBE_RETURN, 0, 0)
    );
    assert_eq!(r.flags, abi::CFG_WORDS);
    // One string alone.
    let (e, _) = configs(
        &plan(vec![capture("s", abi::CAP_BYTES)], vec![], false),
        1,
        0,
    );
    assert_eq!((e.n_captures, e.flags), (1, abi::CFG_ONE_BYTES));
    // A C string is read up to its NUL: not a one-bytes record.
    let (e, _) = configs(
        &plan(vec![capture("s", abi::CAP_CSTR)], vec![], false),
        1,
        0,
    );
    assert_eq!((e.n_captures, e.flags), (1, 0));
    // A string with other values: records are assembled by size.
    let p = plan(
        vec![capture("n", abi::CAP_WORD), capture("s", abi::CAP_BYTES)],
        vec![],
        false,
    );
    let (e, r) = configs(&p, 3, 0);
    assert!(r.is_none());
    assert_eq!((e.kind, e.n_captures, e.flags), (abi::PROBE_CALL, 2, 0));
    assert_eq!(e.caps[1].kind, abi::CAP_BYTES);
}

#[test]
fn c_and_usdt_configurations_pair_by_thread() {
    let mut p = plan(vec![capture("n", abi::CAP_WORD)], vec![], true);
    p.pairing = Pairing::Thread;
    let (e, r) = configs(&p, 1, 0);
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
    let (e, r) = configs(&p, 7, 0);
    assert_eq!(e.jcc, 7, "1 + the JBE's condition");
    assert_eq!(r.expect("a return configuration").jcc, 0);
    p.entry_jcc = None;
    assert_eq!(configs(&p, 7, 0).0.jcc, 0);
}

/// A capture of `kind` read from register `reg` (and, for bytes, the length from `reg + 1`).
fn at_reg(name: &str, kind: u8, reg: u8) -> CapturePlan {
    let mut c = capture(name, kind);
    c.bpf.loc[0] = abi::GpLoc {
        kind: abi::LOC_REG,
        reg,
        ..Default::default()
    };
    if kind == abi::CAP_BYTES {
        c.bpf.loc[1] = abi::GpLoc {
            kind: abi::LOC_REG,
            reg: reg + 1,
            ..Default::default()
        };
    }
    c
}

/// The configuration every field of which the pins below spell out.
fn pinned(
    kind: u8,
    flags: u8,
    jcc: u8,
    rate_limit: u32,
    aux: u64,
    caps: &[CapturePlan],
) -> GpProbeCfg {
    let mut cfg = GpProbeCfg {
        func_id: 9,
        kind,
        n_captures: caps.len() as u8,
        flags,
        jcc,
        rate_limit,
        cost_ns: 0,
        aux,
        ..Default::default()
    };
    for (slot, c) in cfg.caps.iter_mut().zip(caps) {
        *slot = c.bpf;
    }
    cfg
}

/// The configurations of five kinds of plan, field by field: what the BPF program reads must
/// not change when the plan's model or its encoding is reorganised. (No kernel measurement
/// runs in unit tests, so every cost is 0.)
#[test]
fn encoded_configurations_are_pinned() {
    // A Go latency probe: entry on the stack check's jump (JBE), uprobes on two RETs.
    let mut go = plan(
        vec![at_reg("n", abi::CAP_WORD, 0)],
        vec![at_reg("r", abi::CAP_WORD, 0)],
        true,
    );
    go.returns = Returns::RetSites(vec![0x1010, 0x1020]);
    go.entry_jcc = Some(6);
    let (e, r) = configs(&go, 9, 100);
    assert_eq!(
        e,
        pinned(
            abi::PROBE_ENTRY,
            abi::CFG_WORDS,
            7,
            100,
            0,
            &go.entry_captures
        )
    );
    assert_eq!(
        r,
        Some(pinned(
            abi::PROBE_RETURN,
            abi::CFG_WORDS,
            0,
            0,
            0,
            &go.return_captures
        ))
    );
    assert_eq!(
        go.entry_groups(),
        vec![(vec![0x1000], go.entry_captures.as_slice())]
    );

    // A C function with a uretprobe: paired by thread.
    let mut c = plan(
        vec![at_reg("buf", abi::CAP_BYTES, 5)],
        vec![at_reg("ret", abi::CAP_WORD, 0)],
        true,
    );
    c.returns = Returns::Uretprobe(OutsideGoCode::assumed());
    c.pairing = Pairing::Thread;
    let (e, r) = configs(&c, 9, 50);
    let flags = abi::CFG_ONE_BYTES | abi::CFG_PAIR_BY_THREAD;
    assert_eq!(
        e,
        pinned(abi::PROBE_ENTRY, flags, 0, 50, 0, &c.entry_captures)
    );
    let flags = abi::CFG_WORDS | abi::CFG_PAIR_BY_THREAD;
    assert_eq!(
        r,
        Some(pinned(
            abi::PROBE_RETURN,
            flags,
            0,
            0,
            0,
            &c.return_captures
        ))
    );

    // A USDT probe with a semaphore and three sites, two of which read the same way.
    let mut usdt = plan(vec![at_reg("a", abi::CAP_WORD, 1)], vec![], false);
    usdt.ref_ctr_offset = 0x3000;
    usdt.pairing = Pairing::Thread;
    let other = vec![at_reg("a", abi::CAP_WORD, 2)];
    usdt.extra_entry_sites = vec![
        EntrySite {
            offset: 0x1100,
            captures: other.clone(),
        },
        EntrySite {
            offset: 0x1200,
            captures: usdt.entry_captures.clone(),
        },
    ];
    let groups = usdt.entry_groups();
    assert_eq!(
        groups.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>(),
        vec![vec![0x1000, 0x1200], vec![0x1100]]
    );
    let (e, r) = configs(&usdt, 9, 10);
    assert!(r.is_none());
    let flags = abi::CFG_WORDS | abi::CFG_PAIR_BY_THREAD;
    assert_eq!(
        e,
        pinned(abi::PROBE_CALL, flags, 0, 10, 0, &usdt.entry_captures)
    );
    assert_eq!(entry_config(&usdt, groups[0].1, 9, 10), e);
    assert_eq!(
        entry_config(&usdt, groups[1].1, 9, 10),
        pinned(abi::PROBE_CALL, flags, 0, 10, 0, &other)
    );

    // A propagating Go handler: the header's position + 1 in aux, the span last.
    let header = GpCapture {
        kind: abi::CAP_HEADER,
        max_len: 55,
        ..Default::default()
    };
    let span = GpCapture {
        kind: abi::CAP_SPAN,
        ..Default::default()
    };
    let mut prop = plan(vec![at_reg("n", abi::CAP_WORD, 0)], vec![], true);
    for (name, bpf) in [("traceparent", header), ("span", span)] {
        prop.entry_captures.push(CapturePlan {
            name: name.into(),
            decode: Decode::Span,
            bpf,
        });
    }
    prop.role = Role::Propagating;
    let (e, r) = configs(&prop, 9, 0);
    assert_eq!(
        e,
        pinned(
            abi::PROBE_ENTRY,
            abi::CFG_PROPAGATE,
            0,
            0,
            2,
            &prop.entry_captures
        )
    );
    assert_eq!(
        r,
        Some(pinned(
            abi::PROBE_RETURN,
            abi::CFG_PROPAGATE | abi::CFG_WORDS,
            0,
            0,
            0,
            &[]
        ))
    );

    // gprobe's own runtime.newproc1 probe: a latency probe with CFG_NEWPROC on both.
    let mut newproc = plan(vec![at_reg("fn", abi::CAP_WORD, 0)], vec![], true);
    newproc.role = Role::Newproc;
    let (e, r) = configs(&newproc, 9, 0);
    let flags = abi::CFG_WORDS | abi::CFG_NEWPROC;
    assert_eq!(
        e,
        pinned(abi::PROBE_ENTRY, flags, 0, 0, 0, &newproc.entry_captures)
    );
    assert_eq!(r, Some(pinned(abi::PROBE_RETURN, flags, 0, 0, 0, &[])));
}
