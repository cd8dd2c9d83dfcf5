//! The text of a Go signature: its tokens, and how types and signatures print.

use std::fmt;

use super::{Param, Signature, TypeExpr};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    Ident(String),
    Num(u64),
    Punct(&'static str),
}

pub(super) fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, (usize, String)> {
    const PUNCTS: [&str; 15] = [
        "...", "<-", "(", ")", "[", "]", "{", "}", "*", ",", ".", ";", "\n", "~", "|",
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
            if let Some(n) = import_path(&src[i..]) {
                // `net/http.Request`: the import path is one identifier-like token, then
                // the usual '.' and type name.
                let text = &src[i..i + n];
                match text.rsplit_once('.').filter(|(path, _)| !text[path.len()..].contains('/')) {
                    Some((path, name)) => {
                        out.push((Tok::Ident(path.to_string()), i + 1));
                        out.push((Tok::Punct("."), i + path.len() + 1));
                        if !name.is_empty() {
                            out.push((Tok::Ident(name.to_string()), i + path.len() + 2));
                        }
                    }
                    None => {
                        return Err((
                            i + 1,
                            format!("expected a type name after the import path {text:?} (e.g. net/http.Request)"),
                        ))
                    }
                }
                i += n;
                continue;
            }
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

/// The length of the qualified name starting `s` when it is qualified by an import path
/// (it has a '/'): `net/http.Request`, `gopkg.in/yaml.v3.Node`,
/// `k8s.io/client-go/rest.Config`. A type name has no '.', so the last '.' separates path
/// and name.
fn import_path(s: &str) -> Option<usize> {
    let run = s
        .char_indices()
        .find(|&(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')))
        .map_or(s.len(), |(i, _)| i);
    s[..run].contains('/').then_some(run)
}

impl fmt::Display for TypeExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeExpr::Named {
                package,
                name,
                args,
            } => {
                if let Some(p) = package {
                    write!(f, "{p}.")?;
                }
                f.write_str(name)?;
                // Go's own spelling of an instantiation: `List[int,string]`.
                for (i, a) in args.iter().enumerate() {
                    f.write_str(if i == 0 { "[" } else { "," })?;
                    write!(f, "{a}")?;
                }
                if !args.is_empty() {
                    f.write_str("]")?;
                }
                Ok(())
            }
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
