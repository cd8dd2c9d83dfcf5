//! Runs filter.h's evaluator in the kernel (filter_test.bpf.c, through BPF_PROG_TEST_RUN) on
//! predicates compiled by crate::filter, and checks it against the reference semantics
//! (gprobe_crds::when::When::eval) on the same inputs. Needs root, like every test that
//! loads BPF programs.

use crate::abi::filter::{GpFilter, GpFvals, TRUTH_FALSE, TRUTH_TRUE, TRUTH_UNKNOWN};
use crate::filter::{compile, fval, TermType};
use aya::maps::Array;
use aya::programs::{RawTracePoint, RawTracePointRunOptions, TestRun, TestRunOptions, Xdp};
use aya::Ebpf;
use gprobe_crds::when::{CmpOp, Expr, Operand, StrOp, Term, Test, Truth, Value, When};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/filter_test.bpf.o"));

struct Evaluator {
    ebpf: Ebpf,
}

impl Evaluator {
    fn load() -> Self {
        let mut ebpf = Ebpf::load(OBJECT).expect(
            "loading filter_test.bpf.o (the filter evaluator's test program) needs root (CAP_BPF)",
        );
        let prog: &mut RawTracePoint = ebpf
            .program_mut("filter_test")
            .expect("the object has filter_test")
            .try_into()
            .expect("a raw tracepoint program");
        prog.load().expect("the verifier accepts filter_test");
        let bench: &mut Xdp = ebpf
            .program_mut("filter_bench")
            .expect("the object has filter_bench")
            .try_into()
            .expect("an XDP program");
        bench.load().expect("the verifier accepts filter_bench");
        Self { ebpf }
    }

    /// The kernel's truth for `f` over `vals`.
    fn eval(&mut self, f: &GpFilter, vals: &GpFvals) -> u32 {
        self.run(f, vals, 0).0
    }

    /// Runs the program `repeat` times (0: once) on `f` over `vals`: its truth, and the
    /// kernel's mean time per run (ns).
    fn run(&mut self, f: &GpFilter, vals: &GpFvals, repeat: u32) -> (u32, u32) {
        let mut filters: Array<_, GpFilter> =
            Array::try_from(self.ebpf.map_mut("test_filter").unwrap()).unwrap();
        filters.set(0, f, 0).unwrap();
        let mut values: Array<_, GpFvals> =
            Array::try_from(self.ebpf.map_mut("test_values").unwrap()).unwrap();
        values.set(0, vals, 0).unwrap();
        // The raw tracepoint runs once; the XDP copy can be repeated and timed.
        let ns = if repeat == 0 {
            let prog: &RawTracePoint = self
                .ebpf
                .program("filter_test")
                .unwrap()
                .try_into()
                .unwrap();
            prog.test_run(RawTracePointRunOptions::new())
                .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN: {e}"));
            0
        } else {
            let prog: &Xdp = self
                .ebpf
                .program("filter_bench")
                .unwrap()
                .try_into()
                .unwrap();
            // A packet for the XDP copy, which ignores it.
            let packet = [0u8; 64];
            let run = prog
                .test_run(TestRunOptions {
                    data_in: Some(&packet),
                    repeat,
                    ..TestRunOptions::new()
                })
                .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN: {e}"));
            // The mean run time.
            run.duration.as_nanos() as u32
        };
        let out: Array<_, u32> = Array::try_from(self.ebpf.map("test_result").unwrap()).unwrap();
        (out.get(&0, 0).unwrap(), ns)
    }
}

fn code(t: Truth) -> u32 {
    match t {
        Truth::False => TRUTH_FALSE,
        Truth::True => TRUTH_TRUE,
        Truth::Unknown => TRUTH_UNKNOWN,
    }
}

/// xorshift64*: reproducible cases without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const TYPES: &[TermType] = &[
    TermType::Int {
        signed: true,
        size: 8,
    },
    TermType::Int {
        signed: true,
        size: 1,
    },
    TermType::Int {
        signed: false,
        size: 4,
    },
    TermType::Int {
        signed: false,
        size: 8,
    },
    TermType::Bool,
    TermType::Str,
    TermType::Pointer,
    TermType::Duration,
];

const OPS: &[CmpOp] = &[
    CmpOp::Eq,
    CmpOp::Ne,
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
];

/// Integers near the edges of every type, where signedness and range matter.
const INTS: &[i128] = &[
    0,
    1,
    -1,
    2,
    -2,
    127,
    128,
    -128,
    -129,
    255,
    4_294_967_295,
    4_294_967_296,
    i64::MAX as i128,
    i64::MIN as i128,
    u64::MAX as i128,
    100_000_000,
];

const STRS: &[&[u8]] = &[
    b"",
    b"/",
    b"/api",
    b"/api/v1",
    b"/healthz",
    b"acme",
    b"acme-corp",
];

fn random_test(r: &mut Rng, ty: TermType) -> Test {
    match ty {
        TermType::Int { .. } | TermType::Duration => Test::Int(r.pick(OPS), r.pick(INTS)),
        TermType::Bool => Test::Bool(r.below(2) == 0),
        TermType::Pointer => Test::Nil(r.below(2) == 0),
        TermType::Str => Test::Str(
            r.pick(&[StrOp::Eq, StrOp::Ne, StrOp::HasPrefix]),
            r.pick(STRS).to_vec(),
        ),
    }
}

/// A value of `ty` as the program would read it (in range of the type), or not read yet,
/// or unreadable.
fn random_value(r: &mut Rng, ty: TermType) -> Option<Value> {
    match r.below(10) {
        0 => return None,
        1 => return Some(Value::Unreadable),
        _ => {}
    }
    Some(match ty {
        TermType::Int { signed, size } => {
            let bits = u32::from(size) * 8;
            let x = r.pick(INTS);
            let v = if signed {
                (x as i64 as i128) << (128 - bits) >> (128 - bits)
            } else {
                (x as u64 as i128) & ((1i128 << bits) - 1)
            };
            Value::Int(v)
        }
        TermType::Duration => Value::Int(r.pick(INTS) as u64 as i128),
        TermType::Bool => Value::Bool(r.below(2) == 0),
        TermType::Pointer => Value::IsNil(r.below(2) == 0),
        TermType::Str => {
            let mut bytes = r.pick(STRS).to_vec();
            if r.below(4) == 0 {
                bytes.extend(std::iter::repeat_n(b'x', 70));
            }
            let truncated = r.below(4) == 0;
            Value::Str { bytes, truncated }
        }
    })
}

fn random_expr(r: &mut Rng, terms: &[usize]) -> Expr {
    let e = if terms.len() == 1 {
        Expr::Term(terms[0])
    } else {
        let cut = 1 + r.below(terms.len() as u64 - 1) as usize;
        let (a, b) = (
            Box::new(random_expr(r, &terms[..cut])),
            Box::new(random_expr(r, &terms[cut..])),
        );
        if r.below(2) == 0 {
            Expr::And(a, b)
        } else {
            Expr::Or(a, b)
        }
    };
    if r.below(4) == 0 {
        Expr::Not(Box::new(e))
    } else {
        e
    }
}

#[test]
fn the_kernel_evaluates_predicates_as_the_reference_does() {
    let mut k = Evaluator::load();
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seen = [0u32; 3];
    for case in 0..20_000 {
        let n = 1 + r.below(16) as usize;
        let types: Vec<TermType> = (0..n).map(|_| r.pick(TYPES)).collect();
        let terms: Vec<Term> = types
            .iter()
            .map(|ty| Term {
                operand: Operand::Capture("v".into()),
                test: random_test(&mut r, *ty),
                text: "v".into(),
            })
            .collect();
        let order: Vec<usize> = (0..n).collect();
        let w = When {
            terms,
            expr: random_expr(&mut r, &order),
        };
        let Ok(f) = compile(&w, &types) else {
            continue; // more than 32 steps: refused, checked below
        };
        let values: Vec<Option<Value>> = types.iter().map(|ty| random_value(&mut r, *ty)).collect();
        let mut vals = GpFvals::default();
        for (i, (v, ty)) in values.iter().zip(&types).enumerate() {
            if let Some(v) = v {
                vals.v[i] = fval(v, *ty);
            }
        }
        let want = code(w.eval(|i| values[i].clone()));
        let got = k.eval(&f, &vals);
        assert_eq!(
            got, want,
            "case {case}: {w:?} over {values:?} (types {types:?}): kernel {got}, reference {want}"
        );
        seen[got as usize] += 1;
    }
    // Every outcome was exercised, each many times.
    assert!(seen.iter().all(|n| *n > 1_000), "{seen:?}");
}

/// A predicate, its terms' types and values, and its truth.
type Case = (&'static str, Vec<TermType>, Vec<Option<Value>>, Truth);

#[test]
fn the_documented_examples_decide_in_the_kernel() {
    let mut k = Evaluator::load();
    let s = |b: &[u8], truncated| Value::Str {
        bytes: b.to_vec(),
        truncated,
    };
    let cases: Vec<Case> = vec![
        (
            r#"r.URL.Path != "/healthz""#,
            vec![TermType::Str],
            vec![Some(s(b"/healthz", false))],
            Truth::False,
        ),
        (
            r#"r.URL.Path != "/healthz""#,
            vec![TermType::Str],
            vec![Some(s(b"/api", false))],
            Truth::True,
        ),
        (
            "err != nil",
            vec![TermType::Pointer],
            vec![Some(Value::IsNil(true))],
            Truth::False,
        ),
        (
            "duration > 100ms",
            vec![TermType::Duration],
            vec![None],
            Truth::Unknown,
        ),
        (
            "duration > 100ms",
            vec![TermType::Duration],
            vec![Some(Value::Int(100_000_001))],
            Truth::True,
        ),
        (
            r#"hasPrefix(o.Customer.Name, "acme") && len(o.Items) > 10"#,
            vec![
                TermType::Str,
                TermType::Int {
                    signed: true,
                    size: 8,
                },
            ],
            vec![Some(s(b"acme-corp", true)), Some(Value::Int(11))],
            Truth::True,
        ),
        (
            r#"hasPrefix(o.Customer.Name, "acme") && len(o.Items) > 10"#,
            vec![
                TermType::Str,
                TermType::Int {
                    signed: true,
                    size: 8,
                },
            ],
            vec![Some(Value::Unreadable), Some(Value::Int(11))],
            Truth::False,
        ),
        // An unsigned value against a negative literal: decided when compiled.
        (
            "n > -1",
            vec![TermType::Int {
                signed: false,
                size: 4,
            }],
            vec![Some(Value::Int(0))],
            Truth::True,
        ),
    ];
    for (text, types, values, want) in cases {
        let w = gprobe_crds::when::parse(text).unwrap();
        let f = compile(&w, &types).unwrap();
        let mut vals = GpFvals::default();
        for (i, (v, ty)) in values.iter().zip(&types).enumerate() {
            if let Some(v) = v {
                vals.v[i] = fval(v, *ty);
            }
        }
        assert_eq!(k.eval(&f, &vals), code(want), "{text} over {values:?}");
        assert_eq!(w.eval(|i| values[i].clone()), want, "{text}: the reference");
    }
}

/// What the evaluator costs per term: the program run 200,000 times by the kernel on
/// predicates of 0 to 16 terms (`x == 5 && ...`, every term read and true, so that each is
/// evaluated), and on strings compared with 64-byte literals. The peer is the same program
/// with no term (its map lookups and call): the figure is the time above it. Run with
/// `cargo test -p gprobe-agent --lib filter_run::bench -- --ignored --nocapture` (root).
#[test]
#[ignore = "a benchmark: prints figures, asserts only that they were measured"]
fn bench_evaluator_time_per_term() {
    let mut k = Evaluator::load();
    let int = TermType::Int {
        signed: true,
        size: 8,
    };
    let measure = |k: &mut Evaluator, text: &str, ty: TermType, value: Value| -> f64 {
        let w = gprobe_crds::when::parse(text).unwrap();
        let types = vec![ty; w.terms.len()];
        let f = compile(&w, &types).unwrap();
        let mut vals = GpFvals::default();
        for i in 0..w.terms.len() {
            vals.v[i] = fval(&value, ty);
        }
        let runs: Vec<u32> = (0..5).map(|_| k.run(&f, &vals, 200_000).1).collect();
        let mut sorted = runs.clone();
        sorted.sort_unstable();
        sorted[2] as f64
    };
    let empty = GpFilter::default();
    let peer: Vec<u32> = (0..5)
        .map(|_| k.run(&empty, &GpFvals::default(), 200_000).1)
        .collect();
    let mut peer_sorted = peer.clone();
    peer_sorted.sort_unstable();
    let peer = peer_sorted[2] as f64;
    println!("no term (the peer): {peer:.0} ns per run");
    for n in [1usize, 4, 8, 16] {
        let text = vec!["x == 5"; n].join(" && ");
        let t = measure(&mut k, &text, int, Value::Int(5));
        println!(
            "{n:2} integer terms: {t:.0} ns per run, {:.1} ns per term above the peer",
            (t - peer) / n as f64
        );
        assert!(t > 0.0);
    }
    let lit = "a".repeat(64);
    for n in [1usize, 16] {
        let text = vec![format!("s == \"{lit}\""); n].join(" && ");
        let v = Value::Str {
            bytes: lit.as_bytes().to_vec(),
            truncated: false,
        };
        let t = measure(&mut k, &text, TermType::Str, v);
        println!(
            "{n:2} 64-byte string terms: {t:.0} ns per run, {:.1} ns per term above the peer",
            (t - peer) / n as f64
        );
        assert!(t > 0.0);
    }
}
