//! The language of a probe's `when:` predicate: terms that compare one value of the call (a
//! capture, as `capture` spells it, or `duration`) with a literal, joined by `&&`, `||`,
//! `!` and parentheses. Parsed here, once, for the operator's validation and the agent's
//! planning; [`When::eval`] is the reference semantics that the in-kernel evaluator is
//! tested against. The parser is when_parse.rs.
//!
//! ```text
//! expr    = or
//! or      = and { "||" and }
//! and     = unary { "&&" unary }
//! unary   = "!" unary | "(" expr ")" | term
//! term    = "hasPrefix" "(" operand "," string ")"
//!         | operand cmp literal
//!         | operand                      (a bool: operand == true)
//! cmp     = "==" | "!=" | "<" | "<=" | ">" | ">="
//! literal = integer | duration | string | "true" | "false" | "nil"
//! ```
//!
//! Integers are decimal or `0x` hexadecimal, with an optional `-`; durations are a number
//! and a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`), as in `duration > 1.5ms`; strings are
//! double-quoted, with Go's escapes `\"`, `\\`, `\n`, `\t` and `\xHH`.

use std::fmt;

mod grammar;
pub use grammar::parse;

/// At most this many terms in one predicate (each is a comparison made per call).
pub const MAX_TERMS: usize = 16;

/// At most this many bytes in a string literal: the in-kernel comparison's buffer
/// (`GP_FILTER_STR`, filter.h).
pub const MAX_STRING_BYTES: usize = 64;

/// At most this many steps (terms and `&&`, `||`, `!`): the length of the in-kernel
/// evaluator's program (`GP_FILTER_OPS`, filter.h).
pub const MAX_STEPS: usize = 32;

/// At most this many characters in one predicate: the CRD schema's `maxLength` of `when`,
/// enforced by the parser too, for `gprobe run`, `gprobe check` and the agent's spec files.
pub const MAX_WHEN_CHARS: usize = 4096;

/// At most this many `(` and `!` open at once. The parser, the evaluator and the compiler
/// recurse once per level: a bound keeps them far from the end of any thread's stack, and
/// 16 terms never need more.
pub const MAX_DEPTH: usize = 32;

/// A parsed predicate: its terms, and the expression over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct When {
    pub terms: Vec<Term>,
    pub expr: Expr,
}

/// The boolean structure; `Term(i)` is `terms[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Term(usize),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// One comparison of a value of the call with a literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub operand: Operand,
    pub test: Test,
    /// The term as written, for messages.
    pub text: String,
}

/// What a term reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A capture entry, as `capture` accepts it (`r.URL.Path`, `len(o.Items)`, `err`, `r0`,
    /// a C `buf[:len]`): checked against the function's signature when the probe is planned.
    Capture(String),
    /// The call's duration (ns), measured at its return: needs `latency: true`.
    Duration,
}

/// How a term compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Test {
    /// An integer (or a duration, in ns) compared with `op`.
    Int(CmpOp, i128),
    /// A string: equal, not equal, or starting with.
    Str(StrOp, Vec<u8>),
    /// A pointer, interface, error, map, channel or function: `== nil` (true) or `!= nil`
    /// (a slice is compared by `len(x)`: planning refuses `nil` on one).
    Nil(bool),
    /// A bool equal to this.
    Bool(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrOp {
    Eq,
    Ne,
    HasPrefix,
}

/// Why a predicate does not parse: the message names the place and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("when: {message} ({})", self.place())]
pub struct WhenError {
    pub text: String,
    /// 1-based character position.
    pub at: usize,
    pub message: String,
}

/// A condition up to this many characters is quoted whole in a message; a longer one by
/// the characters around the place the message is about.
const QUOTE_CHARS: usize = 60;

impl WhenError {
    /// Where the error is, for a message: `at character 12 of "x == 1 y == 2"`; in a long
    /// condition, the characters around it: `at character 870 of 935: "…x16 == 1 || x17"`.
    pub fn place(&self) -> String {
        let n = self.text.chars().count();
        if n <= QUOTE_CHARS {
            return format!("at character {} of {:?}", self.at, self.text);
        }
        let half = QUOTE_CHARS / 2;
        let at = self.at.saturating_sub(1).min(n);
        let from = at.saturating_sub(half);
        let to = (at + half).min(n);
        let part: String = self.text.chars().skip(from).take(to - from).collect();
        let (pre, post) = (
            if from > 0 { "…" } else { "" },
            if to < n { "…" } else { "" },
        );
        format!(
            "at character {} of {n}: {:?}",
            self.at,
            format!("{pre}{part}{post}")
        )
    }
}

/// A value of the call, as a term reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Int(i128),
    /// The bytes read, and whether the string was longer than what was read.
    Str {
        bytes: Vec<u8>,
        truncated: bool,
    },
    /// Whether a pointer-like value is nil.
    IsNil(bool),
    Bool(bool),
    /// A path crossed a nil pointer (or the memory could not be read): every comparison
    /// of it is false, except `== nil` of the pointer that was nil, which the reader
    /// reports as [`Value::IsNil`].
    Unreadable,
}

/// A three-valued truth: at a call's entry, terms on results and `duration` are not known
/// yet, and the predicate is decided only where the known terms suffice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    False,
    True,
    Unknown,
}

impl Truth {
    fn not(self) -> Self {
        match self {
            Truth::False => Truth::True,
            Truth::True => Truth::False,
            Truth::Unknown => Truth::Unknown,
        }
    }

    fn and(self, o: Self) -> Self {
        match (self, o) {
            (Truth::False, _) | (_, Truth::False) => Truth::False,
            (Truth::True, Truth::True) => Truth::True,
            _ => Truth::Unknown,
        }
    }

    fn or(self, o: Self) -> Self {
        match (self, o) {
            (Truth::True, _) | (_, Truth::True) => Truth::True,
            (Truth::False, Truth::False) => Truth::False,
            _ => Truth::Unknown,
        }
    }
}

impl From<bool> for Truth {
    fn from(b: bool) -> Self {
        if b {
            Truth::True
        } else {
            Truth::False
        }
    }
}

impl Test {
    /// Whether `v` passes. A value of another kind than the test (which planning rules out)
    /// fails it.
    pub fn passes(&self, v: &Value) -> bool {
        match (self, v) {
            (Test::Int(op, lit), Value::Int(x)) => match op {
                CmpOp::Eq => x == lit,
                CmpOp::Ne => x != lit,
                CmpOp::Lt => x < lit,
                CmpOp::Le => x <= lit,
                CmpOp::Gt => x > lit,
                CmpOp::Ge => x >= lit,
            },
            (Test::Str(op, lit), Value::Str { bytes, truncated }) => match op {
                // A string cut short equals no literal: its end was not read.
                StrOp::Eq => !truncated && bytes == lit,
                StrOp::Ne => *truncated || bytes != lit,
                StrOp::HasPrefix => bytes.starts_with(lit),
            },
            (Test::Nil(want_nil), Value::IsNil(is_nil)) => want_nil == is_nil,
            (Test::Bool(want), Value::Bool(b)) => want == b,
            _ => false,
        }
    }
}

impl When {
    /// The steps of the predicate's program: one per term, `&&`, `||` and `!`.
    pub fn steps(&self) -> usize {
        fn count(e: &Expr) -> usize {
            match e {
                Expr::Term(_) => 1,
                Expr::Not(x) => 1 + count(x),
                Expr::And(a, b) | Expr::Or(a, b) => 1 + count(a) + count(b),
            }
        }
        count(&self.expr)
    }

    /// The predicate's truth, with `value(i)` the value of term `i` (`None`: not known yet).
    pub fn eval(&self, value: impl Fn(usize) -> Option<Value>) -> Truth {
        self.eval_expr(&self.expr, &value)
    }

    fn eval_expr(&self, e: &Expr, value: &impl Fn(usize) -> Option<Value>) -> Truth {
        match e {
            Expr::Term(i) => match value(*i) {
                Some(v) => self.terms[*i].test.passes(&v).into(),
                None => Truth::Unknown,
            },
            Expr::Not(x) => self.eval_expr(x, value).not(),
            Expr::And(a, b) => self.eval_expr(a, value).and(self.eval_expr(b, value)),
            Expr::Or(a, b) => self.eval_expr(a, value).or(self.eval_expr(b, value)),
        }
    }
}

impl fmt::Display for CmpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        })
    }
}

#[cfg(test)]
mod tests;
