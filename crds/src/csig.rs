//! Parser for the C prototypes written in `probes[].signature` of C functions and USDT
//! probes.
//!
//! Accepts what a user copies from a header or a `.d` provider file:
//! `robj *createStringObject(const char *ptr, size_t len)`,
//! `int SSL_write(void *ssl, const void *buf, int num);`, and for USDT probes the argument
//! list alone: `(const char *query)`, `(char *file, char *func, int line)`. Unnamed
//! parameters are `p0`, `p1`, ...; a non-void result is `r0`. `(void)` takes nothing;
//! `...` (varargs) is accepted but cannot be captured.

use std::fmt;
use thiserror::Error;

use crate::ctype::{typedef, CType, TagKind};
use crate::signature::ValueRef;

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
#[error("invalid C prototype {signature:?} at column {column}: {message} (expected C syntax such as \"int SSL_write(void *ssl, const void *buf, int num)\", or \"(const char *query)\" for a USDT probe)")]
pub struct CSignatureError {
    pub signature: String,
    pub column: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Num(u64),
    Punct(&'static str),
}

fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, (usize, String)> {
    const PUNCTS: [&str; 8] = ["...", "(", ")", "[", "]", "*", ",", ";"];
    let mut out = Vec::new();
    let mut i = 0;
    'outer: while i < src.len() {
        let c = src[i..].chars().next().unwrap_or(' ');
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while src[i..]
                .chars()
                .next()
                .is_some_and(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            {
                i += 1;
            }
            out.push((Tok::Ident(src[start..i].to_string()), start + 1));
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while src[i..].starts_with(|ch: char| ch.is_ascii_alphanumeric()) {
                i += 1;
            }
            let text = src[start..i].trim_end_matches(['u', 'U', 'l', 'L']);
            let n = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            let n = n.map_err(|_| (start + 1, format!("bad number {:?}", &src[start..i])))?;
            out.push((Tok::Num(n), start + 1));
            continue;
        }
        for p in PUNCTS {
            if src[i..].starts_with(p) {
                out.push((Tok::Punct(p), i + 1));
                i += p.len();
                continue 'outer;
            }
        }
        return Err((i + 1, format!("unexpected character {c:?}")));
    }
    Ok(out)
}

const QUALIFIERS: &[&str] = &[
    "const",
    "volatile",
    "restrict",
    "__restrict",
    "__restrict__",
    "__const",
    "_Atomic",
];
const STORAGE: &[&str] = &[
    "static",
    "extern",
    "inline",
    "__inline",
    "__inline__",
    "register",
    "auto",
];
const BASE_WORDS: &[&str] = &[
    "void",
    "char",
    "short",
    "int",
    "long",
    "signed",
    "unsigned",
    "float",
    "double",
    "_Bool",
    "bool",
    "__signed__",
    "__int128",
];

struct Parser<'a> {
    src: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

impl Parser<'_> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, CSignatureError> {
        let column = self.toks.get(self.pos).map_or(self.src.len() + 1, |t| t.1);
        Err(CSignatureError {
            signature: self.src.to_string(),
            column,
            message: message.into(),
        })
    }
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn eat(&mut self, p: &str) -> bool {
        let yes = self.is_punct(p);
        self.pos += yes as usize;
        yes
    }
    fn expect(&mut self, p: &str) -> Result<(), CSignatureError> {
        if self.eat(p) {
            Ok(())
        } else {
            self.err(format!("expected {p:?}"))
        }
    }
    fn ident(&self) -> Option<&str> {
        match self.peek() {
            Some(Tok::Ident(s)) => Some(s),
            _ => None,
        }
    }

    /// Skips `__attribute__((...))` and `__asm__(...)`: they change nothing a probe reads.
    fn skip_attributes(&mut self) -> Result<(), CSignatureError> {
        while matches!(
            self.ident(),
            Some("__attribute__" | "__attribute" | "__asm__" | "asm" | "__asm")
        ) {
            self.pos += 1;
            self.skip_parens()?;
        }
        Ok(())
    }

    /// Skips a balanced `( ... )`.
    fn skip_parens(&mut self) -> Result<(), CSignatureError> {
        self.expect("(")?;
        let mut depth = 1;
        while depth > 0 {
            match self.peek() {
                None => return self.err("unclosed '('"),
                Some(Tok::Punct("(")) => depth += 1,
                Some(Tok::Punct(")")) => depth -= 1,
                _ => {}
            }
            self.pos += 1;
        }
        Ok(())
    }

    /// The declaration specifiers: qualifiers, storage classes, and one base type (integer
    /// keywords, `struct X`, or a typedef name).
    fn specifiers(&mut self) -> Result<CType, CSignatureError> {
        let start = self.pos;
        let mut quals: Vec<&'static str> = Vec::new();
        let mut words: Vec<String> = Vec::new();
        let mut named: Option<CType> = None;
        loop {
            self.skip_attributes()?;
            let Some(id) = self.ident().map(str::to_string) else {
                break;
            };
            if let Some(q) = QUALIFIERS.iter().find(|q| **q == id) {
                if q.contains("const") && !quals.contains(&"const") {
                    quals.push("const");
                } else if *q == "volatile" && !quals.contains(&"volatile") {
                    quals.push("volatile");
                }
            } else if STORAGE.contains(&id.as_str()) {
                // `static inline int f(...)`: how it is stored changes nothing a probe reads.
            } else if BASE_WORDS.contains(&id.as_str()) && named.is_none() {
                words.push(id);
            } else if matches!(id.as_str(), "struct" | "union" | "enum") && named.is_none() {
                if !words.is_empty() {
                    return self.err(format!("{id} after {}", words.join(" ")));
                }
                self.pos += 1;
                let kind = match id.as_str() {
                    "struct" => TagKind::Struct,
                    "union" => TagKind::Union,
                    _ => TagKind::Enum,
                };
                let Some(name) = self.ident().map(str::to_string) else {
                    return self.err(format!("expected the name of the {id}"));
                };
                named = Some(CType::Tagged {
                    kind,
                    name,
                    size: None,
                });
            } else if words.is_empty() && named.is_none() {
                named = Some(typedef(&id));
            } else {
                break;
            }
            self.pos += 1;
        }
        let base = match named {
            Some(t) => t,
            None if words.is_empty() => {
                self.pos = start;
                return self.err("expected a type");
            }
            None => match base_type(&words) {
                Ok(t) => t,
                Err(m) => {
                    self.pos = start;
                    return self.err(m);
                }
            },
        };
        Ok(qualify(base, &quals))
    }

    /// Pointer stars with their qualifiers: `* const *`.
    fn pointers(&mut self, mut ty: CType) -> CType {
        while self.eat("*") {
            ty = CType::pointer_to(ty);
            let mut quals = Vec::new();
            while let Some(q) = self
                .ident()
                .and_then(|id| QUALIFIERS.iter().find(|q| **q == id))
            {
                if q.contains("const") && !quals.contains(&"const") {
                    quals.push("const");
                } else if *q == "volatile" {
                    quals.push("volatile");
                }
                self.pos += 1;
            }
            ty = qualify(ty, &quals);
        }
        ty
    }

    /// `[N]` suffixes.
    fn arrays(&mut self, mut ty: CType) -> Result<CType, CSignatureError> {
        let mut dims = Vec::new();
        while self.eat("[") {
            let len = match self.peek() {
                Some(Tok::Num(n)) => {
                    let n = *n;
                    self.pos += 1;
                    Some(n)
                }
                _ => None,
            };
            // `[static 4]`, `[const]`: qualifiers of a parameter array.
            while self.ident().is_some() {
                self.pos += 1;
            }
            self.expect("]")?;
            dims.push(len);
        }
        for len in dims.into_iter().rev() {
            ty = CType::Array {
                ty: Box::new(ty),
                len,
            };
        }
        Ok(ty)
    }

    /// One parameter: its type and name, if any.
    fn param(&mut self) -> Result<(CType, Option<String>), CSignatureError> {
        let base = self.specifiers()?;
        let ty = self.pointers(base);
        self.skip_attributes()?;
        // A function pointer: `ret (*name)(args)`.
        if self.is_punct("(") {
            self.pos += 1;
            if !self.eat("*") {
                return self.err("expected '*' of a function pointer");
            }
            let name = self.ident().map(str::to_string);
            self.pos += name.is_some() as usize;
            self.expect(")")?;
            self.skip_parens()?;
            return Ok((CType::pointer_to(CType::Function), name));
        }
        let name = self.ident().map(str::to_string);
        self.pos += name.is_some() as usize;
        let ty = self.arrays(ty)?;
        self.skip_attributes()?;
        Ok((ty, name))
    }

    /// `( params )` after the opening parenthesis was seen.
    fn params(&mut self) -> Result<(Vec<CParam>, bool), CSignatureError> {
        self.expect("(")?;
        let mut params = Vec::new();
        let mut variadic = false;
        if self.eat(")") {
            return Ok((params, false));
        }
        // `(void)`: no parameters.
        if self.ident() == Some("void")
            && matches!(self.toks.get(self.pos + 1), Some((Tok::Punct(")"), _)))
        {
            self.pos += 2;
            return Ok((params, false));
        }
        loop {
            if self.eat("...") {
                variadic = true;
                if !self.is_punct(")") {
                    return self.err("'...' must be the last parameter");
                }
                break;
            }
            let (ty, name) = self.param()?;
            if *ty.resolved() == CType::Void {
                return self.err("a parameter cannot be void (write (void) for none)");
            }
            let name = match name {
                Some(n) => n,
                None => format!("p{}", params.len()),
            };
            if params.iter().any(|p: &CParam| p.name == name) {
                return self.err(format!("parameter {name:?} is declared twice"));
            }
            params.push(CParam { name, ty });
            if !self.eat(",") {
                break;
            }
        }
        self.expect(")")?;
        Ok((params, variadic))
    }

    fn signature(&mut self) -> Result<CSignature, CSignatureError> {
        if self.toks.is_empty() {
            return self.err("empty");
        }
        let (name, ret) = if self.is_punct("(") {
            (None, None)
        } else {
            let base = self.specifiers()?;
            let ret = self.pointers(base);
            self.skip_attributes()?;
            if self.is_punct("(") {
                return self.err(
                    "expected the function's name (functions returning function pointers are not supported: write void *)",
                );
            }
            let Some(name) = self.ident().map(str::to_string) else {
                return self.err("expected the function's name");
            };
            self.pos += 1;
            (Some(name), Some(ret))
        };
        let (params, variadic) = self.params()?;
        self.skip_attributes()?;
        self.eat(";");
        if self.pos < self.toks.len() {
            return self.err("unexpected text after the parameter list");
        }
        Ok(CSignature {
            name,
            ret,
            params,
            variadic,
        })
    }
}

fn qualify(ty: CType, quals: &[&str]) -> CType {
    if quals.is_empty() {
        ty
    } else {
        CType::Qualified {
            quals: quals.join(" "),
            ty: Box::new(ty),
        }
    }
}

/// The type a list of base keywords names (`unsigned long long int`).
fn base_type(words: &[String]) -> Result<CType, String> {
    let count = |w: &str| words.iter().filter(|x| *x == w).count();
    let (signed, unsigned) = (count("signed") + count("__signed__"), count("unsigned"));
    let (longs, shorts) = (count("long"), count("short"));
    let others: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| !matches!(*w, "signed" | "__signed__" | "unsigned" | "long" | "short"))
        .collect();
    let bad = || format!("{:?} is not a C type", words.join(" "));
    if signed + unsigned > 1 || longs > 2 || shorts > 1 || (longs > 0 && shorts > 0) {
        return Err(bad());
    }
    let sign = unsigned == 0;
    let int = |size: u8, name: &str| {
        let name = if unsigned > 0 {
            format!("unsigned {name}")
        } else {
            name.to_string()
        };
        Ok(CType::int(&name, size, sign))
    };
    match others.as_slice() {
        ["void"] if words.len() == 1 => Ok(CType::Void),
        ["_Bool" | "bool"] if words.len() == 1 => Ok(CType::Bool),
        ["char"] if longs + shorts == 0 => match (signed, unsigned) {
            (0, 0) => Ok(CType::Char),
            (_, 0) => Ok(CType::int("signed char", 1, true)),
            _ => Ok(CType::int("unsigned char", 1, false)),
        },
        ["float"] if words.len() == 1 => Ok(CType::Float {
            name: "float".into(),
            size: 4,
        }),
        ["double"] if signed + unsigned + shorts == 0 && longs <= 1 => Ok(match longs {
            0 => CType::Float {
                name: "double".into(),
                size: 8,
            },
            _ => CType::Float {
                name: "long double".into(),
                size: 16,
            },
        }),
        ["__int128"] => Err("__int128 values (two registers) cannot be captured".into()),
        [] | ["int"] => match (shorts, longs) {
            (1, _) => int(2, "short"),
            (_, 2) => int(8, "long long"),
            (_, 1) => int(8, "long"),
            _ => int(4, "int"),
        },
        _ => Err(bad()),
    }
}

/// Parses a C prototype, or (for USDT probes) an argument list `(type name, ...)`.
pub fn parse_c_signature(src: &str) -> Result<CSignature, CSignatureError> {
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
#[path = "csig_tests.rs"]
mod tests;
