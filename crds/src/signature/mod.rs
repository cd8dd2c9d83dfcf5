//! Parser for the Go function signatures written in `probes[].signature`.
//!
//! Accepts what a user copies from Go source or `go doc`:
//! `func(c *Client, url string) (resp *Response, err error)`, grouped names
//! (`func(a, b int)`), unnamed parameters (`func(int64) float64`), variadics, and the
//! method form `func (c *Client) Get(url string) (*Response, error)` whose receiver becomes
//! the first parameter (as the Go register ABI passes it).
//!
//! Named types may be package-qualified by name (`http.Request`) or by import path
//! (`net/http.Request`, `github.com/org/repo/pkg.T`), and instantiated (`main.List[int]`).
//! A generic function is written as its source declares it, `func Sum[T Number](xs []T) T`
//! (the name is optional): the agent binds `T` to the instantiation it probes.
//!
//! This file holds what a parsed signature is and the names captures use; the grammar is
//! signature_parse.rs, the tokens and printing signature_text.rs.

use thiserror::Error;

mod parse;
mod text;
use parse::Parser;
use text::tokenize;

/// A Go type as written in a signature. Named types are kept by name: only the agent, with
/// the binary at hand, can tell what an unknown named type is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeExpr {
    /// `int`, `string`, `error`, `http.Header`, `Client`, `main.List[int]`, ...
    Named {
        /// The qualifier as written: a package name (`http`) or an import path
        /// (`net/http`).
        package: Option<String>,
        name: String,
        /// Type arguments of an instantiated generic type (`[int]` of `List[int]`).
        args: Vec<TypeExpr>,
    },
    Pointer(Box<TypeExpr>),
    Slice(Box<TypeExpr>),
    Array(u64, Box<TypeExpr>),
    Map(Box<TypeExpr>, Box<TypeExpr>),
    Chan(Box<TypeExpr>),
    Func,
    /// `interface{...}` with methods or constraints; `interface{}` is `Named` `any`, and
    /// `any` and `error` stay `Named`.
    Interface,
    Struct(Vec<Param>),
}

/// One parameter or result. `name` is what `capture` uses: the declared name, or
/// `p<i>` / `r<i>` for an unnamed (or `_`) parameter / result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub ty: TypeExpr,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    pub params: Vec<Param>,
    pub results: Vec<Param>,
    /// Type parameters of a generic function (`T` of `func Sum[T Number](xs []T) T`), and
    /// those a method's receiver declares (`func (l *List[T]) Len() int`), in order.
    pub type_params: Vec<String>,
}

/// Where a capture name points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef {
    Param(usize),
    Result(usize),
}

/// The position a positional name stands for: `p<i>` parameter i, `r<i>` result i.
pub fn positional_index(name: &str) -> Option<ValueRef> {
    let idx = |prefix: char| -> Option<usize> {
        let digits = name.strip_prefix(prefix)?;
        // `p01` is not a positional name: only what the parser makes (`p1`).
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        digits.parse().ok()
    };
    idx('p')
        .map(ValueRef::Param)
        .or_else(|| idx('r').map(ValueRef::Result))
}

impl Signature {
    /// Resolves a `capture` entry: a parameter or result name. Unnamed parameters and
    /// results are named by position (`p<i>`, `r<i>`) when parsed; a positional name is
    /// not taken for a value the signature names (see [`Signature::positional`]).
    pub fn lookup(&self, name: &str) -> Option<ValueRef> {
        if let Some(i) = self.params.iter().position(|p| p.name == name) {
            return Some(ValueRef::Param(i));
        }
        if let Some(i) = self.results.iter().position(|p| p.name == name) {
            return Some(ValueRef::Result(i));
        }
        None
    }

    /// Where `name` is a positional name (`p0`, `r1`) of a value the signature names: that
    /// value and its name, for the message that refuses it.
    pub fn positional(&self, name: &str) -> Option<(ValueRef, &str)> {
        let r = positional_index(name)?;
        let p = match r {
            ValueRef::Param(i) => self.params.get(i)?,
            ValueRef::Result(i) => self.results.get(i)?,
        };
        (p.name != name).then_some((r, p.name.as_str()))
    }

    /// Every name `capture` accepts, for error messages.
    pub fn capture_names(&self) -> Vec<String> {
        self.params
            .iter()
            .chain(self.results.iter())
            .map(|p| p.name.clone())
            .collect()
    }
}

/// The message that refuses a positional name of a named value: `what` is the signature
/// as the message quotes it.
pub fn positional_message(entry: &str, name: &str, r: ValueRef, real: &str, what: &str) -> String {
    let (kind, i) = match r {
        ValueRef::Param(i) => ("parameter", i),
        ValueRef::Result(i) => ("result", i),
    };
    let entry = if entry == name {
        format!("{entry:?}")
    } else {
        format!("{entry:?} starts at {name:?}, which")
    };
    format!(
        "{entry} names {kind} {i} by its position, but {what} names it {real:?}: write {real} \
         (positional names p0, p1, ... and r0, r1, ... stand only for unnamed parameters and results)"
    )
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "invalid signature {signature:?} at column {column}: {message} (expected Go syntax such \
    as \"func(c *Client, url string) (*Response, error)\")"
)]
pub struct SignatureError {
    pub signature: String,
    pub column: usize,
    pub message: String,
}

/// At most this many characters in a signature (Go or C): a real one has a few hundred.
pub const MAX_SIGNATURE_CHARS: usize = 4096;
/// At most this many types nested in one another (`**[]map[K]*T` nests 5): the parsers
/// recurse once per level, and a bound keeps them far from the end of any thread's stack.
pub const MAX_TYPE_DEPTH: usize = 32;

/// The message of a signature longer than [`MAX_SIGNATURE_CHARS`], and the part of it an
/// error quotes; `None` when it is not too long.
pub(crate) fn too_long(src: &str) -> Option<(String, String)> {
    let n = src.chars().count();
    (n > MAX_SIGNATURE_CHARS).then(|| {
        let head: String = src.chars().take(60).collect();
        (
            format!("{head}…"),
            format!("is {n} characters long; a signature has at most {MAX_SIGNATURE_CHARS}"),
        )
    })
}

/// Parses a Go function signature.
pub fn parse_signature(src: &str) -> Result<Signature, SignatureError> {
    if let Some((signature, message)) = too_long(src) {
        return Err(SignatureError {
            signature,
            column: MAX_SIGNATURE_CHARS + 1,
            message,
        });
    }
    let toks = tokenize(src).map_err(|(column, message)| SignatureError {
        signature: src.to_string(),
        column,
        message,
    })?;
    Parser {
        src,
        toks,
        pos: 0,
        depth: 0,
    }
    .signature()
}

#[cfg(test)]
mod tests;
