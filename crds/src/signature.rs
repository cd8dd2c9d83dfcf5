//! Parser for the Go function signatures written in `probes[].signature`.
//!
//! Accepts what a user copies from Go source or `go doc`:
//! `func(c *Client, url string) (resp *Response, err error)`, grouped names
//! (`func(a, b int)`), unnamed parameters (`func(int64) float64`), variadics, and the
//! method form `func (c *Client) Get(url string) (*Response, error)` whose receiver becomes
//! the first parameter (as the Go register ABI passes it).

use std::fmt;
use thiserror::Error;

/// A Go type as written in a signature. Named types are kept by name: only the agent, with
/// the binary at hand, can tell what an unknown named type is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeExpr {
    /// `int`, `string`, `error`, `http.Header`, `Client`, ...
    Named {
        package: Option<String>,
        name: String,
    },
    Pointer(Box<TypeExpr>),
    Slice(Box<TypeExpr>),
    Array(u64, Box<TypeExpr>),
    Map(Box<TypeExpr>, Box<TypeExpr>),
    Chan(Box<TypeExpr>),
    Func,
    /// `interface{...}`; `any` and `error` stay `Named`.
    Interface,
    Struct(Vec<Param>),
}

impl fmt::Display for TypeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeExpr::Named {
                package: Some(p),
                name,
            } => write!(f, "{p}.{name}"),
            TypeExpr::Named {
                package: None,
                name,
            } => write!(f, "{name}"),
            TypeExpr::Pointer(t) => write!(f, "*{t}"),
            TypeExpr::Slice(t) => write!(f, "[]{t}"),
            TypeExpr::Array(n, t) => write!(f, "[{n}]{t}"),
            TypeExpr::Map(k, v) => write!(f, "map[{k}]{v}"),
            TypeExpr::Chan(t) => write!(f, "chan {t}"),
            TypeExpr::Func => write!(f, "func(...)"),
            TypeExpr::Interface => write!(f, "interface{{...}}"),
            TypeExpr::Struct(fields) => {
                write!(f, "struct{{")?;
                for (i, p) in fields.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{} {}", p.name, p.ty)?;
                }
                write!(f, "}}")
            }
        }
    }
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
}

/// Where a capture name points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef {
    Param(usize),
    Result(usize),
}

impl Signature {
    /// Resolves a `capture` entry: a parameter or result name, or `r<i>` for result i.
    pub fn lookup(&self, name: &str) -> Option<ValueRef> {
        if let Some(i) = self.params.iter().position(|p| p.name == name) {
            return Some(ValueRef::Param(i));
        }
        if let Some(i) = self.results.iter().position(|p| p.name == name) {
            return Some(ValueRef::Result(i));
        }
        let idx = |prefix: char| -> Option<usize> { name.strip_prefix(prefix)?.parse().ok() };
        match idx('r') {
            Some(i) if i < self.results.len() => Some(ValueRef::Result(i)),
            _ => match idx('p') {
                Some(i) if i < self.params.len() => Some(ValueRef::Param(i)),
                _ => None,
            },
        }
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

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |ps: &[Param]| {
            ps.iter()
                .map(|p| format!("{} {}", p.name, p.ty))
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(f, "func({})", list(&self.params))?;
        match self.results.len() {
            0 => Ok(()),
            _ => write!(f, " ({})", list(&self.results)),
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid signature {signature:?} at column {column}: {message} (expected Go syntax such as \"func(c *Client, url string) (*Response, error)\")")]
pub struct SignatureError {
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
    const PUNCTS: [&str; 13] = [
        "...", "<-", "(", ")", "[", "]", "{", "}", "*", ",", ".", ";", "\n",
    ];
    let mut out = Vec::new();
    let bytes = src.as_bytes();
    let mut i = 0;
    'outer: while i < bytes.len() {
        let c = src[i..].chars().next().unwrap_or(' ');
        if c == '\n' {
            out.push((Tok::Punct(";"), i + 1));
            i += 1;
            continue;
        }
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while let Some(ch) = src[i..].chars().next() {
                if ch.is_alphanumeric() || ch == '_' {
                    i += ch.len_utf8();
                } else {
                    break;
                }
            }
            out.push((Tok::Ident(src[start..i].to_string()), start + 1));
            continue;
        }
        if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let n = src[start..i]
                .parse()
                .map_err(|_| (start + 1, "number too large".to_string()))?;
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

struct Parser<'a> {
    src: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

// A parameter entry before grouping is resolved: `a`, `a int`, `int`, `*T`.
enum Entry {
    NameOrType(String, Option<String>), // bare (maybe qualified) identifier
    Named(String, TypeExpr),
    Type(TypeExpr),
}

impl<'a> Parser<'a> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, SignatureError> {
        let column = self
            .toks
            .get(self.pos)
            .map(|t| t.1)
            .unwrap_or(self.src.len() + 1);
        Err(SignatureError {
            signature: self.src.to_string(),
            column,
            message: message.into(),
        })
    }
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }
    fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.toks.get(self.pos + n).map(|t| &t.0)
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn eat(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, p: &str) -> Result<(), SignatureError> {
        if self.eat(p) {
            Ok(())
        } else {
            self.err(format!("expected {p:?}"))
        }
    }
    fn skip_semis(&mut self) {
        while self.eat(";") {}
    }
    fn ident(&mut self) -> Option<String> {
        if let Some(Tok::Ident(s)) = self.peek() {
            let s = s.clone();
            self.pos += 1;
            Some(s)
        } else {
            None
        }
    }

    fn signature(&mut self) -> Result<Signature, SignatureError> {
        self.skip_semis();
        match self.ident() {
            Some(k) if k == "func" => {}
            _ => return self.err("a signature starts with \"func\""),
        }
        let mut params = self.param_list()?;
        // Method form: func (recv T) Name(params) results
        if let Some(Tok::Ident(_)) = self.peek() {
            if matches!(self.peek_at(1), Some(Tok::Punct("("))) {
                if params.len() != 1 {
                    return self.err("a method has exactly one receiver");
                }
                self.pos += 1;
                let mut rest = self.param_list()?;
                params.append(&mut rest);
            }
        }
        let results = if self.is_punct("(") {
            self.param_list()?
        } else if self.peek().is_some() && !self.is_punct(";") {
            vec![Param {
                name: String::new(),
                ty: self.type_expr()?,
            }]
        } else {
            Vec::new()
        };
        self.skip_semis();
        if self.peek().is_some() {
            return self.err("unexpected text after the signature");
        }
        let name_all = |ps: Vec<Param>, prefix: &str| -> Vec<Param> {
            ps.into_iter()
                .enumerate()
                .map(|(i, p)| Param {
                    name: if p.name.is_empty() || p.name == "_" {
                        format!("{prefix}{i}")
                    } else {
                        p.name
                    },
                    ty: p.ty,
                })
                .collect()
        };
        let sig = Signature {
            params: name_all(params, "p"),
            results: name_all(results, "r"),
        };
        let mut seen = std::collections::HashSet::new();
        for p in sig.params.iter().chain(sig.results.iter()) {
            if !seen.insert(p.name.as_str()) {
                return Err(SignatureError {
                    signature: self.src.to_string(),
                    column: 1,
                    message: format!("the name {:?} is declared twice", p.name),
                });
            }
        }
        Ok(sig)
    }

    /// `( entries )` with Go's grouping rule: either every entry is named or none is.
    fn param_list(&mut self) -> Result<Vec<Param>, SignatureError> {
        self.expect("(")?;
        let mut entries = Vec::new();
        loop {
            self.skip_semis();
            if self.eat(")") {
                break;
            }
            entries.push(self.entry()?);
            self.skip_semis();
            if !self.eat(",") {
                self.skip_semis();
                self.expect(")")?;
                break;
            }
        }
        let any_named = entries.iter().any(|e| matches!(e, Entry::Named(..)));
        let mut out = Vec::new();
        if any_named {
            let mut pending: Vec<String> = Vec::new();
            for e in entries {
                match e {
                    Entry::NameOrType(name, None) => pending.push(name),
                    Entry::Named(name, ty) => {
                        for n in pending.drain(..) {
                            out.push(Param {
                                name: n,
                                ty: ty.clone(),
                            });
                        }
                        out.push(Param { name, ty });
                    }
                    _ => return self.err("mixed named and unnamed parameters"),
                }
            }
            if !pending.is_empty() {
                return self.err(format!("parameter {:?} has no type", pending[0]));
            }
        } else {
            for e in entries {
                let ty = match e {
                    Entry::NameOrType(name, pkg) => match pkg {
                        Some(p) => TypeExpr::Named {
                            package: Some(p),
                            name,
                        },
                        None => TypeExpr::Named {
                            package: None,
                            name,
                        },
                    },
                    Entry::Type(t) => t,
                    Entry::Named(..) => unreachable!("checked by any_named"),
                };
                out.push(Param {
                    name: String::new(),
                    ty,
                });
            }
        }
        Ok(out)
    }

    fn entry(&mut self) -> Result<Entry, SignatureError> {
        if let Some(Tok::Ident(first)) = self.peek().cloned() {
            if !is_type_keyword(&first) {
                self.pos += 1;
                // `pkg.Type` alone
                if self.is_punct(".") {
                    self.pos += 1;
                    let Some(name) = self.ident() else {
                        return self.err("expected a type name after '.'");
                    };
                    return Ok(Entry::NameOrType(name, Some(first)));
                }
                if self.is_punct(",") || self.is_punct(")") || self.is_punct(";") {
                    return Ok(Entry::NameOrType(first, None));
                }
                if self.eat("...") {
                    let t = self.type_expr()?;
                    return Ok(Entry::Named(first, TypeExpr::Slice(Box::new(t))));
                }
                let ty = self.type_expr()?;
                return Ok(Entry::Named(first, ty));
            }
        }
        if self.eat("...") {
            return Ok(Entry::Type(TypeExpr::Slice(Box::new(self.type_expr()?))));
        }
        Ok(Entry::Type(self.type_expr()?))
    }

    fn type_expr(&mut self) -> Result<TypeExpr, SignatureError> {
        if self.eat("*") {
            return Ok(TypeExpr::Pointer(Box::new(self.type_expr()?)));
        }
        if self.eat("[") {
            if self.eat("]") {
                return Ok(TypeExpr::Slice(Box::new(self.type_expr()?)));
            }
            let Some(Tok::Num(n)) = self.peek().cloned() else {
                return self.err("expected an array length");
            };
            self.pos += 1;
            self.expect("]")?;
            return Ok(TypeExpr::Array(n, Box::new(self.type_expr()?)));
        }
        if self.eat("<-") {
            match self.ident() {
                Some(k) if k == "chan" => return Ok(TypeExpr::Chan(Box::new(self.type_expr()?))),
                _ => return self.err("expected \"chan\" after \"<-\""),
            }
        }
        if self.eat("(") {
            let t = self.type_expr()?;
            self.expect(")")?;
            return Ok(t);
        }
        let Some(id) = self.ident() else {
            return self.err("expected a type");
        };
        match id.as_str() {
            "map" => {
                self.expect("[")?;
                let k = self.type_expr()?;
                self.expect("]")?;
                Ok(TypeExpr::Map(Box::new(k), Box::new(self.type_expr()?)))
            }
            "chan" => {
                self.eat("<-");
                Ok(TypeExpr::Chan(Box::new(self.type_expr()?)))
            }
            "func" => {
                self.param_list()?;
                if self.is_punct("(") {
                    self.param_list()?;
                } else if matches!(
                    self.peek(),
                    Some(Tok::Ident(_)) | Some(Tok::Punct("*")) | Some(Tok::Punct("["))
                ) {
                    self.type_expr()?;
                }
                Ok(TypeExpr::Func)
            }
            "interface" => {
                self.skip_braces()?;
                Ok(TypeExpr::Interface)
            }
            "struct" => self.struct_body(),
            _ => {
                if self.eat(".") {
                    let Some(name) = self.ident() else {
                        return self.err("expected a type name after '.'");
                    };
                    return Ok(TypeExpr::Named {
                        package: Some(id),
                        name,
                    });
                }
                Ok(TypeExpr::Named {
                    package: None,
                    name: id,
                })
            }
        }
    }

    fn skip_braces(&mut self) -> Result<(), SignatureError> {
        self.expect("{")?;
        let mut depth = 1;
        while depth > 0 {
            match self.peek() {
                None => return self.err("unclosed '{'"),
                Some(Tok::Punct("{")) => depth += 1,
                Some(Tok::Punct("}")) => depth -= 1,
                _ => {}
            }
            self.pos += 1;
        }
        Ok(())
    }

    fn struct_body(&mut self) -> Result<TypeExpr, SignatureError> {
        self.expect("{")?;
        let mut fields = Vec::new();
        loop {
            self.skip_semis();
            if self.eat("}") {
                break;
            }
            let mut names = vec![match self.ident() {
                Some(n) => n,
                None => return self.err("expected a field name"),
            }];
            while self.eat(",") {
                match self.ident() {
                    Some(n) => names.push(n),
                    None => return self.err("expected a field name"),
                }
            }
            let ty = self.type_expr()?;
            for name in names {
                fields.push(Param {
                    name,
                    ty: ty.clone(),
                });
            }
            if !self.eat(";") {
                self.expect("}")?;
                break;
            }
        }
        Ok(TypeExpr::Struct(fields))
    }
}

fn is_type_keyword(s: &str) -> bool {
    matches!(s, "map" | "chan" | "func" | "interface" | "struct")
}

/// Parses a Go function signature.
pub fn parse_signature(src: &str) -> Result<Signature, SignatureError> {
    let toks = tokenize(src).map_err(|(column, message)| SignatureError {
        signature: src.to_string(),
        column,
        message,
    })?;
    Parser { src, toks, pos: 0 }.signature()
}

#[cfg(test)]
#[path = "signature_tests.rs"]
mod tests;
