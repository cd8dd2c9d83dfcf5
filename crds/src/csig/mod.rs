//! Parser for the C prototypes written in `probes[].signature` of C functions and USDT
//! probes.
//!
//! Accepts what a user copies from a header or a `.d` provider file:
//! `robj *createStringObject(const char *ptr, size_t len)`,
//! `int SSL_write(void *ssl, const void *buf, int num);`, and for USDT probes the argument
//! list alone: `(const char *query)`, `(char *file, char *func, int line)`. Unnamed
//! parameters are `p0`, `p1`, ...; a non-void result is `r0`. `(void)` takes nothing;
//! `...` (varargs) is accepted but cannot be captured.
//!
//! This file holds what a parsed prototype is and the names captures use; the tokens and
//! the grammar are csig_parse.rs.

use std::fmt;
use thiserror::Error;

use crate::ctype::CType;
use crate::signature::ValueRef;

mod parse;
use parse::{tokenize, Parser};

/// One parameter: its name (declared, or `p<i>`) and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CParam {
    pub name: String,
    pub ty: CType,
}

/// A parsed C prototype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CSignature {
    /// The function's name where the prototype names one.
    pub name: Option<String>,
    /// The result type; `None` for an argument list alone (the USDT form `(...)`).
    pub ret: Option<CType>,
    pub params: Vec<CParam>,
    /// Ends in `...`.
    pub variadic: bool,
}

/// A `capture` entry of a C probe: a value, or `NAME[:LEN]` (LEN bytes at pointer NAME).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureExpr<'a> {
    Name(&'a str),
    Slice { ptr: &'a str, len: &'a str },
}

impl<'a> CaptureExpr<'a> {
    /// `ptr[:len]` is a slice, anything else a name.
    pub fn parse(s: &'a str) -> CaptureExpr<'a> {
        let slice = s.strip_suffix(']').and_then(|r| r.split_once("[:"));
        match slice {
            Some((ptr, len)) if !ptr.trim().is_empty() && !len.trim().is_empty() => {
                CaptureExpr::Slice {
                    ptr: ptr.trim(),
                    len: len.trim(),
                }
            }
            _ => CaptureExpr::Name(s.trim()),
        }
    }
}

impl CSignature {
    /// True for the argument list alone, `(...)`: the form of a USDT probe's signature.
    pub fn is_arg_list(&self) -> bool {
        self.ret.is_none()
    }

    /// True when the function returns a value (`r0`).
    pub fn has_result(&self) -> bool {
        self.ret
            .as_ref()
            .is_some_and(|t| *t.resolved() != CType::Void)
    }

    /// A parameter by name (an unnamed one is `p<i>`), or `r0` for the result. A
    /// positional name is not taken for a parameter the prototype names (see
    /// [`CSignature::positional`]).
    pub fn lookup(&self, name: &str) -> Option<ValueRef> {
        if let Some(i) = self.params.iter().position(|p| p.name == name) {
            return Some(ValueRef::Param(i));
        }
        if name == "r0" && self.has_result() {
            return Some(ValueRef::Result(0));
        }
        None
    }

    /// Where `name` is `p<i>` of a parameter the prototype names: that parameter and its
    /// name, for the message that refuses it.
    pub fn positional(&self, name: &str) -> Option<(ValueRef, &str)> {
        match crate::signature::positional_index(name)? {
            ValueRef::Param(i) => {
                let p = self.params.get(i)?;
                (p.name != name).then_some((ValueRef::Param(i), p.name.as_str()))
            }
            ValueRef::Result(_) => None,
        }
    }

    /// The type of a value `lookup` found.
    pub fn type_of(&self, r: ValueRef) -> Option<&CType> {
        match r {
            ValueRef::Param(i) => self.params.get(i).map(|p| &p.ty),
            ValueRef::Result(0) => self.ret.as_ref(),
            ValueRef::Result(_) => None,
        }
    }

    /// Every name `capture` accepts, for error messages.
    pub fn capture_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.params.iter().map(|p| p.name.clone()).collect();
        if self.has_result() {
            v.push("r0".into());
        }
        v
    }
}

impl fmt::Display for CSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list: Vec<String> = self.params.iter().map(|p| p.ty.declare(&p.name)).collect();
        if self.variadic {
            list.push("...".into());
        } else if list.is_empty() && self.ret.is_some() {
            list.push("void".into());
        }
        let params = format!("({})", list.join(", "));
        match &self.ret {
            // The name and parameters are the declarator of the result type: a function
            // returning a function pointer is `void (*f(int x))()`.
            Some(ret) => {
                let name = self.name.as_deref().unwrap_or("");
                f.write_str(&ret.declare(&format!("{name}{params}")))
            }
            None => f.write_str(&params),
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid C prototype {signature:?} at column {column}: {message} (expected C syntax such \
    as \"int SSL_write(void *ssl, const void *buf, int num)\", or \"(const char *query)\" for a USDT probe)")]
pub struct CSignatureError {
    pub signature: String,
    pub column: usize,
    pub message: String,
}

/// Parses a C prototype, or (for USDT probes) an argument list `(type name, ...)`.
pub fn parse_c_signature(src: &str) -> Result<CSignature, CSignatureError> {
    if let Some((signature, message)) = crate::signature::too_long(src) {
        return Err(CSignatureError {
            signature,
            column: crate::signature::MAX_SIGNATURE_CHARS + 1,
            message,
        });
    }
    let toks = tokenize(src).map_err(|(column, message)| CSignatureError {
        signature: src.to_string(),
        column,
        message,
    })?;
    Parser { src, toks, pos: 0 }.signature()
}

/// True when a signature is written in Go syntax (`func(` or the method form `func (`):
/// anything else is a C prototype.
pub fn is_go_signature(src: &str) -> bool {
    src.trim_start()
        .strip_prefix("func")
        .is_some_and(|rest| rest.trim_start().starts_with('('))
}

#[cfg(test)]
mod tests;
