//! The parser of Go signatures: a recursive descent over the tokens of signature_text.rs,
//! from `func` (or a method's receiver, or a generic's type parameters) through grouped
//! and unnamed parameters to the types, nested as Go writes them. What it builds, and the
//! names captures use, are in signature.rs.

use super::text::Tok;
use super::{Param, Signature, SignatureError, TypeExpr, MAX_TYPE_DEPTH};

pub(super) struct Parser<'a> {
    pub(super) src: &'a str,
    pub(super) toks: Vec<(Tok, usize)>,
    pub(super) pos: usize,
    /// The types open where the parser is.
    pub(super) depth: usize,
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

    pub(super) fn signature(&mut self) -> Result<Signature, SignatureError> {
        self.skip_semis();
        match self.ident() {
            Some(k) if k == "func" => {}
            _ => return self.err("a signature starts with \"func\""),
        }
        // The declaration form: func Name[T C](params) results (name and type
        // parameters optional).
        if let Some(Tok::Ident(_)) = self.peek() {
            if matches!(self.peek_at(1), Some(Tok::Punct("(" | "["))) {
                self.pos += 1;
            }
        }
        let mut type_params = Vec::new();
        if self.is_punct("[") {
            type_params = self.type_params()?;
        }
        let mut params = self.param_list()?;
        // Method form: func (recv T) Name(params) results
        if let Some(Tok::Ident(_)) = self.peek() {
            if matches!(self.peek_at(1), Some(Tok::Punct("("))) {
                if params.len() != 1 {
                    return self.err("a method has exactly one receiver");
                }
                // A generic type's receiver declares its type parameters:
                // func (l *List[T]) Len() int.
                let recv = match &params[0].ty {
                    TypeExpr::Pointer(t) => &**t,
                    t => t,
                };
                if let TypeExpr::Named { args, .. } = recv {
                    for a in args {
                        if let TypeExpr::Named {
                            package: None,
                            name,
                            args,
                        } = a
                        {
                            if args.is_empty() {
                                type_params.push(name.clone());
                            }
                        }
                    }
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
            type_params,
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
                    Entry::NameOrType(name, package) => TypeExpr::Named {
                        package,
                        name,
                        args: Vec::new(),
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
                    if self.is_punct("[") {
                        let args = self.type_args()?;
                        return Ok(Entry::Type(TypeExpr::Named {
                            package: Some(first),
                            name,
                            args,
                        }));
                    }
                    return Ok(Entry::NameOrType(name, Some(first)));
                }
                if self.is_punct(",") || self.is_punct(")") || self.is_punct(";") {
                    return Ok(Entry::NameOrType(first, None));
                }
                // `List[int]` alone (an instantiated type) rather than a name followed by
                // a slice or array type (`xs []int`, `a [4]int`), as Go's parser decides.
                if self.is_punct("[")
                    && !matches!(self.peek_at(1), Some(Tok::Punct("]")) | Some(Tok::Num(_)))
                {
                    let args = self.type_args()?;
                    return Ok(Entry::Type(TypeExpr::Named {
                        package: None,
                        name: first,
                        args,
                    }));
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
        if self.depth == MAX_TYPE_DEPTH {
            return self.err(format!(
                "nests types more than {MAX_TYPE_DEPTH} deep: is this the right signature?"
            ));
        }
        self.depth += 1;
        let t = self.type_expr_here();
        self.depth -= 1;
        t
    }

    fn type_expr_here(&mut self) -> Result<TypeExpr, SignatureError> {
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
                let start = self.pos;
                self.skip_braces()?;
                // `interface{}` is `any`: the decoder needs to know an empty interface
                // (its first word is a type, not an itab).
                if self.pos == start + 2 {
                    return Ok(TypeExpr::Named {
                        package: None,
                        name: "any".into(),
                        args: Vec::new(),
                    });
                }
                Ok(TypeExpr::Interface)
            }
            "struct" => self.struct_body(),
            _ => {
                let (package, name) = if self.eat(".") {
                    let Some(name) = self.ident() else {
                        return self.err("expected a type name after '.'");
                    };
                    (Some(id), name)
                } else {
                    (None, id)
                };
                let args = if self.is_punct("[") {
                    self.type_args()?
                } else {
                    Vec::new()
                };
                Ok(TypeExpr::Named {
                    package,
                    name,
                    args,
                })
            }
        }
    }

    /// `[A, B]` after a generic type's name.
    fn type_args(&mut self) -> Result<Vec<TypeExpr>, SignatureError> {
        self.expect("[")?;
        let mut args = vec![self.type_expr()?];
        while self.eat(",") {
            args.push(self.type_expr()?);
        }
        self.expect("]")?;
        Ok(args)
    }

    /// `[T any, K comparable, V int64 | float64]` after a function's name: the names, in
    /// order. Constraints are skipped: the probed instantiation says what T is.
    fn type_params(&mut self) -> Result<Vec<String>, SignatureError> {
        self.expect("[")?;
        let mut names = Vec::new();
        loop {
            let Some(name) = self.ident() else {
                return self.err("expected a type parameter name");
            };
            names.push(name);
            // A constraint runs to the next ',' or ']' outside brackets and braces; a
            // name directly followed by ',' shares the next constraint (`[K, V any]`).
            let mut depth = 0usize;
            loop {
                match self.peek() {
                    None => return self.err("unclosed '['"),
                    Some(Tok::Punct("[" | "{" | "(")) => depth += 1,
                    Some(Tok::Punct("}" | ")")) => depth = depth.saturating_sub(1),
                    Some(Tok::Punct("]")) if depth == 0 => break,
                    Some(Tok::Punct("]")) => depth -= 1,
                    Some(Tok::Punct(",")) if depth == 0 => break,
                    _ => {}
                }
                self.pos += 1;
            }
            if self.eat("]") {
                return Ok(names);
            }
            self.expect(",")?;
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
