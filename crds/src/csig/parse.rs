//! The parser of C prototypes: tokens, the C specifier and declarator grammar that
//! prototypes use (qualifiers, storage classes, base type words, pointers, arrays,
//! attributes), and the base type a list of keywords names. What it builds, and the names
//! captures use, are in csig.rs.

use super::{CParam, CSignature, CSignatureError};
use crate::ctype::{typedef, CType, TagKind};
use crate::signature::MAX_TYPE_DEPTH;

/// The message of more stars or `[N]` than [`MAX_TYPE_DEPTH`] on one type.
fn too_deep() -> String {
    format!("nests types more than {MAX_TYPE_DEPTH} deep: is this the right prototype?")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    Ident(String),
    Num(u64),
    Punct(&'static str),
}

pub(super) fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, (usize, String)> {
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

pub(super) struct Parser<'a> {
    pub(super) src: &'a str,
    pub(super) toks: Vec<(Tok, usize)>,
    pub(super) pos: usize,
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
                Err(e) => {
                    self.pos = start;
                    return self.err(e.to_string());
                }
            },
        };
        Ok(qualify(base, &quals))
    }

    /// Pointer stars with their qualifiers: `* const *`.
    fn pointers(&mut self, mut ty: CType) -> Result<CType, CSignatureError> {
        let mut stars = 0;
        while self.eat("*") {
            stars += 1;
            if stars > MAX_TYPE_DEPTH {
                return self.err(too_deep());
            }
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
        Ok(ty)
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
            if dims.len() > MAX_TYPE_DEPTH {
                return self.err(too_deep());
            }
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
        let ty = self.pointers(base)?;
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

    pub(super) fn signature(&mut self) -> Result<CSignature, CSignatureError> {
        if self.toks.is_empty() {
            return self.err("empty");
        }
        let (name, ret) = if self.is_punct("(") {
            (None, None)
        } else {
            let base = self.specifiers()?;
            let ret = self.pointers(base)?;
            self.skip_attributes()?;
            if self.is_punct("(") {
                return self.err(
                    "expected the function's name (functions returning function pointers are not \
                    supported: write void *)",
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

/// Why a list of base keywords names no type gprobe can capture.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum BaseTypeError {
    /// `words`: the keywords as written, space-separated.
    #[error("{words:?} is not a C type")]
    NotAType { words: String },
    #[error("__int128 values (two registers) cannot be captured")]
    Int128,
}

/// The type a list of base keywords names (`unsigned long long int`).
fn base_type(words: &[String]) -> Result<CType, BaseTypeError> {
    let count = |w: &str| words.iter().filter(|x| *x == w).count();
    let (signed, unsigned) = (count("signed") + count("__signed__"), count("unsigned"));
    let (longs, shorts) = (count("long"), count("short"));
    let others: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| !matches!(*w, "signed" | "__signed__" | "unsigned" | "long" | "short"))
        .collect();
    let bad = || BaseTypeError::NotAType {
        words: words.join(" "),
    };
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
        ["__int128"] => Err(BaseTypeError::Int128),
        [] | ["int"] => match (shorts, longs) {
            (1, _) => int(2, "short"),
            (_, 2) => int(8, "long long"),
            (_, 1) => int(8, "long"),
            _ => int(4, "int"),
        },
        _ => Err(bad()),
    }
}
