//! Compiling a probe's `when:` predicate (gprobe_crds::when) into the fixed-size program the
//! BPF side evaluates (`GpFilter`, filter.h), once the type of each term's value is known
//! from planning; and the BPF form of a value ([`fval`]). A term that cannot hold (a
//! literal outside its value's type) is decided here, so the kernel compares 64-bit words
//! only.

use crate::abi::filter::{
    GpFilter, GpFilterTerm, GpFval, FILTER_OPS, FILTER_STR, FOP_AND, FOP_NOT, FOP_OR, FTF_SIGNED,
    FTF_STR, FT_EQ, FT_FALSE, FT_GE, FT_GT, FT_LE, FT_LT, FT_NE, FT_NIL, FT_NOT_NIL, FT_PREFIX,
    FT_STR_EQ, FT_STR_NE, FT_TRUE, FV_KNOWN, FV_UNREADABLE,
};
use gprobe_crds::when::{CmpOp, Expr, StrOp, Term, Test, Value, When};

/// The type of the value a term reads, as planning found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermType {
    /// An integer of `size` bytes (1, 2, 4, 8).
    Int {
        signed: bool,
        size: u8,
    },
    Bool,
    /// A string or bytes (Go string, []byte, a C `char *` or `buf[:len]`).
    Str,
    /// A pointer, interface, error, map, slice, channel or function: compared with nil.
    Pointer,
    /// The call's duration (ns).
    Duration,
}

impl TermType {
    fn name(self) -> &'static str {
        match self {
            TermType::Int { signed: true, .. } => "a signed integer",
            TermType::Int { signed: false, .. } => "an unsigned integer",
            TermType::Bool => "a bool",
            TermType::Str => "a string",
            TermType::Pointer => "a pointer-like value (compared with nil)",
            TermType::Duration => "a duration",
        }
    }
}

/// Why a predicate cannot run on this probe: names the term and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("when: `{term}`: {what} is {ty}; {fix}")]
    Mismatch {
        term: String,
        what: String,
        ty: &'static str,
        fix: &'static str,
    },
    #[error("when: `{term}`: the string is {len} bytes; at most {FILTER_STR} can be compared")]
    LongString { term: String, len: usize },
    #[error("when: the condition has {steps} steps (terms and operators); at most {FILTER_OPS}: simplify it")]
    TooComplex { steps: usize },
}

/// Compiles `w` for values of `types` (`types[i]`: the type of term `i`'s value).
pub fn compile(w: &When, types: &[TermType]) -> Result<GpFilter, FilterError> {
    assert_eq!(w.terms.len(), types.len(), "one type per term");
    let mut f = GpFilter {
        n_terms: w.terms.len() as u8,
        ..Default::default()
    };
    for (i, (t, ty)) in w.terms.iter().zip(types).enumerate() {
        f.terms[i] = term(t, *ty)?;
    }
    let mut ops = Vec::new();
    postfix(&w.expr, &mut ops);
    if ops.len() > FILTER_OPS {
        return Err(FilterError::TooComplex { steps: ops.len() });
    }
    f.n_ops = ops.len() as u8;
    f.ops[..ops.len()].copy_from_slice(&ops);
    Ok(f)
}

fn postfix(e: &Expr, out: &mut Vec<u8>) {
    match e {
        Expr::Term(i) => out.push(*i as u8),
        Expr::Not(x) => {
            postfix(x, out);
            out.push(FOP_NOT);
        }
        Expr::And(a, b) | Expr::Or(a, b) => {
            postfix(a, out);
            postfix(b, out);
            out.push(if matches!(e, Expr::And(..)) {
                FOP_AND
            } else {
                FOP_OR
            });
        }
    }
}

fn constant(holds: bool) -> GpFilterTerm {
    GpFilterTerm {
        test: if holds { FT_TRUE } else { FT_FALSE },
        ..Default::default()
    }
}

fn term(t: &Term, ty: TermType) -> Result<GpFilterTerm, FilterError> {
    let mismatch = |fix: &'static str| FilterError::Mismatch {
        term: t.text.clone(),
        what: match &t.operand {
            gprobe_crds::when::Operand::Capture(c) => format!("`{c}`"),
            gprobe_crds::when::Operand::Duration => "`duration`".into(),
        },
        ty: ty.name(),
        fix,
    };
    match (&t.test, ty) {
        (Test::Int(op, lit), TermType::Int { signed, size }) => {
            Ok(int_term(*op, *lit, signed, size))
        }
        (Test::Int(op, lit), TermType::Duration) => Ok(int_term(*op, *lit, false, 8)),
        (Test::Bool(b), TermType::Bool) => Ok(GpFilterTerm {
            test: FT_EQ,
            lit: u64::from(*b),
            vsize: 1,
            ..Default::default()
        }),
        (Test::Nil(is_nil), TermType::Pointer) => Ok(GpFilterTerm {
            test: if *is_nil { FT_NIL } else { FT_NOT_NIL },
            ..Default::default()
        }),
        (Test::Str(op, lit), TermType::Str) => {
            if lit.len() > FILTER_STR {
                return Err(FilterError::LongString {
                    term: t.text.clone(),
                    len: lit.len(),
                });
            }
            let mut out = GpFilterTerm {
                test: match op {
                    StrOp::Eq => FT_STR_EQ,
                    StrOp::Ne => FT_STR_NE,
                    StrOp::HasPrefix => FT_PREFIX,
                },
                len: lit.len() as u8,
                flags: FTF_STR,
                ..Default::default()
            };
            out.str[..lit.len()].copy_from_slice(lit);
            Ok(out)
        }
        (_, TermType::Str) => Err(mismatch(
            "compare it with a \"string\" (==, !=) or hasPrefix",
        )),
        (_, TermType::Pointer) => Err(mismatch("compare it with nil (== nil, != nil)")),
        (_, TermType::Bool) => Err(mismatch(
            "write it alone, negated (!ok), or compare with true or false",
        )),
        (_, TermType::Duration) => Err(mismatch("compare it with a duration such as 100ms")),
        (_, TermType::Int { .. }) => Err(mismatch("compare it with an integer")),
    }
}

/// An integer comparison; a literal outside the value's range decides the term.
fn int_term(op: CmpOp, lit: i128, signed: bool, size: u8) -> GpFilterTerm {
    let bits = u32::from(size.clamp(1, 8)) * 8;
    let (min, max) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    if lit < min || lit > max {
        let below = lit < min;
        return constant(match op {
            CmpOp::Eq => false,
            CmpOp::Ne => true,
            CmpOp::Lt | CmpOp::Le => !below,
            CmpOp::Gt | CmpOp::Ge => below,
        });
    }
    GpFilterTerm {
        test: match op {
            CmpOp::Eq => FT_EQ,
            CmpOp::Ne => FT_NE,
            CmpOp::Lt => FT_LT,
            CmpOp::Le => FT_LE,
            CmpOp::Gt => FT_GT,
            CmpOp::Ge => FT_GE,
        },
        flags: if signed { FTF_SIGNED } else { 0 },
        // BPF sign- or zero-extends the value's low `size` bytes (a register's upper bytes
        // are whatever the caller left there).
        vsize: size.clamp(1, 8),
        // Two's complement bits: the value's word is sign-extended the same way.
        lit: lit as i64 as u64,
        ..Default::default()
    }
}

/// The BPF form of `v`, a value of type `ty` (what the kernel side writes for a term).
/// Integers are sign- or zero-extended from their size, as the program reads them.
pub fn fval(v: &Value, ty: TermType) -> GpFval {
    let mut out = GpFval {
        state: FV_KNOWN,
        ..Default::default()
    };
    match v {
        Value::Int(x) => {
            out.word = match ty {
                TermType::Int { signed: true, .. } => *x as i64 as u64,
                _ => *x as u64,
            }
        }
        Value::Bool(b) => out.word = u64::from(*b),
        Value::IsNil(nil) => out.word = u64::from(!nil),
        Value::Str { bytes, truncated } => {
            let n = bytes.len().min(FILTER_STR);
            out.bytes[..n].copy_from_slice(&bytes[..n]);
            out.n = n as u8;
            // A value cut short is longer than what was read.
            out.len = bytes.len() as u32 + u32::from(*truncated);
        }
        Value::Unreadable => out.state = FV_UNREADABLE,
    }
    out
}

#[cfg(test)]
mod tests;
