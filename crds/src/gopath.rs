//! Go capture entries: a parameter or result name, a field path through it
//! (`r.URL.Path`, `o.Customer.Name`), or the length of one (`len(o.Items)`).
//!
//! Only the syntax is checked here: which fields exist, and whether a step goes through a
//! pointer, is known only with the binary's types at hand (the agent's resolve stage).

use std::fmt;
use thiserror::Error;

use crate::signature::{Signature, ValueRef};

/// At most this many field selectors in one path. The kernel side follows at most 8
/// pointers (a limit the agent checks once it knows which fields are pointers); a longer
/// chain of selectors through by-value structs is legal Go but not a plausible probe.
pub const MAX_PATH_FIELDS: usize = 16;
/// At most this many characters in a capture entry (16 fields of long names fit).
pub const MAX_CAPTURE_CHARS: usize = 1024;

/// One `capture` entry of a Go probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoCapture {
    /// The parameter or result the path starts from (`r` in `r.URL.Path`).
    pub root: String,
    /// The field selectors after the root, in order (`["URL", "Path"]`).
    pub fields: Vec<String>,
    /// `len(...)`: the length of the string, slice, map or channel at the end of the path.
    pub len: bool,
}

impl GoCapture {
    /// True for a plain parameter or result name (what captures were before paths).
    pub fn is_plain(&self) -> bool {
        self.fields.is_empty() && !self.len
    }
}

impl fmt::Display for GoCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.len {
            f.write_str("len(")?;
        }
        f.write_str(&self.root)?;
        for field in &self.fields {
            write!(f, ".{field}")?;
        }
        if self.len {
            f.write_str(")")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error(
    "invalid capture {entry:?}: {message} (write a parameter or result name, a field path \
    such as \"r.URL.Path\", or \"len(o.Items)\")"
)]
pub struct GoCaptureError {
    pub entry: String,
    pub message: String,
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// Parses a Go capture entry: `name`, `name.Field.Field`, `len(name.Field)`. Spaces are
/// allowed around the parentheses of `len(...)` only.
pub fn parse_go_capture(entry: &str) -> Result<GoCapture, GoCaptureError> {
    let err = |message: String| GoCaptureError {
        entry: entry.to_string(),
        message,
    };
    let n = entry.chars().count();
    if n > MAX_CAPTURE_CHARS {
        return Err(GoCaptureError {
            entry: format!("{}…", entry.chars().take(60).collect::<String>()),
            message: format!("is {n} characters long; a capture has at most {MAX_CAPTURE_CHARS}"),
        });
    }
    let text = entry.trim();
    let (inner, len) = match text.strip_prefix("len") {
        Some(rest) if rest.trim_start().starts_with('(') => {
            let rest = rest.trim_start()[1..].trim_end();
            let Some(inner) = rest.strip_suffix(')') else {
                return Err(err("len( has no closing parenthesis".into()));
            };
            (inner.trim(), true)
        }
        _ => (text, false),
    };
    if inner.is_empty() {
        return Err(err("nothing to capture".into()));
    }
    let mut parts = inner.split('.');
    let root = parts.next().unwrap_or_default();
    let fields: Vec<String> = parts.map(str::to_string).collect();
    for (i, p) in std::iter::once(root)
        .chain(fields.iter().map(String::as_str))
        .enumerate()
    {
        if !is_ident(p) {
            return Err(err(if p.is_empty() {
                "a path has an empty element (two dots, or a dot at an end)".into()
            } else if i == 0 {
                format!("{p:?} is not a Go identifier")
            } else {
                format!("field {p:?} is not a Go identifier")
            }));
        }
    }
    if fields.len() > MAX_PATH_FIELDS {
        return Err(err(format!(
            "selects {} fields; at most {MAX_PATH_FIELDS}",
            fields.len()
        )));
    }
    Ok(GoCapture {
        root: root.to_string(),
        fields,
        len,
    })
}

/// Why a capture entry does not fit a Go signature; `written` is the signature as the
/// spec wrote it.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum CaptureError {
    #[error(transparent)]
    Syntax(#[from] GoCaptureError),
    /// A positional name (`p1`, `r0`) of a value the signature names.
    #[error(transparent)]
    Positional(Box<PositionalRoot>),
    /// `path_root`: the value a path or `len(...)` starts at (`None`: a plain name).
    #[error(
        "{} a parameter or result of {written:?}; known names: {}",
        match path_root {
            None => format!("{entry:?} is not"),
            Some(root) => format!("{entry:?} starts at {root:?}, which is not"),
        },
        known.join(", ")
    )]
    NotAParameter {
        entry: String,
        path_root: Option<String>,
        written: String,
        known: Vec<String>,
    },
}

/// A capture entry that starts at a positional name (`p1`, `r0`) of a value `written`
/// names (`real`).
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error(
    "{}; known names: {}",
    crate::signature::positional_message(entry, root, *at, real, &format!("{written:?}")),
    known.join(", ")
)]
pub struct PositionalRoot {
    pub entry: String,
    pub root: String,
    pub at: ValueRef,
    pub real: String,
    pub written: String,
    pub known: Vec<String>,
}

impl Signature {
    /// Checks a capture entry against the signature: its syntax, and that its root is a
    /// parameter or result. `Ok` with where the root points; the message of `Err` quotes
    /// the signature as `written`.
    pub fn check_capture(&self, entry: &str, written: &str) -> Result<ValueRef, CaptureError> {
        let c = parse_go_capture(entry)?;
        if let Some((at, real)) = self.positional(&c.root) {
            return Err(CaptureError::Positional(Box::new(PositionalRoot {
                entry: entry.to_string(),
                root: c.root.clone(),
                at,
                real: real.to_string(),
                written: written.to_string(),
                known: self.capture_names(),
            })));
        }
        self.lookup(&c.root)
            .ok_or_else(|| CaptureError::NotAParameter {
                entry: entry.to_string(),
                path_root: (!c.is_plain()).then(|| c.root.clone()),
                written: written.to_string(),
                known: self.capture_names(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::parse_signature;

    fn ok(s: &str) -> GoCapture {
        parse_go_capture(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn names_paths_and_lengths() {
        assert!(ok("url").is_plain());
        let c = ok("r.URL.Path");
        assert_eq!(
            (c.root.as_str(), &c.fields[..], c.len),
            ("r", &["URL".to_string(), "Path".to_string()][..], false)
        );
        let c = ok(" len( o.Items ) ");
        assert_eq!((c.root.as_str(), c.fields.len(), c.len), ("o", 1, true));
        assert_eq!(c.to_string(), "len(o.Items)");
        assert!(ok("len(s)").len);
        // A parameter may be called len.
        assert!(ok("len").is_plain());
        assert_eq!(ok("élan.Größe").fields, ["Größe"]);
    }

    #[test]
    fn bad_syntax_is_explained() {
        for (bad, why) in [
            ("r..URL", "empty element"),
            ("r.URL.", "empty element"),
            ("len(r.URL", "no closing parenthesis"),
            ("len()", "nothing to capture"),
            ("r.URL[0]", "not a Go identifier"),
            ("ptr[:len]", "not a Go identifier"),
            ("9r", "not a Go identifier"),
            ("*r", "not a Go identifier"),
        ] {
            let e = parse_go_capture(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let long = format!("a{}", ".b".repeat(MAX_PATH_FIELDS + 1));
        assert!(parse_go_capture(&long)
            .unwrap_err()
            .to_string()
            .contains("at most 16"));
        let e = parse_go_capture(&"a".repeat(200_000))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is 200000 characters long; a capture has at most 1024"),
            "{e}"
        );
        assert!(e.len() < 300, "{e}");
    }

    #[test]
    fn roots_must_be_parameters_or_results() {
        let text = "func(w http.ResponseWriter, r *http.Request)";
        let s = parse_signature(text).unwrap();
        assert_eq!(s.check_capture("r.URL.Path", text), Ok(ValueRef::Param(1)));
        assert_eq!(
            s.check_capture("len(r.Header)", text),
            Ok(ValueRef::Param(1))
        );
        let e = s.check_capture("req.URL", text).unwrap_err().to_string();
        assert!(
            e.contains("starts at \"req\"") && e.contains("known names: w, r"),
            "{e}"
        );
        let e = s.check_capture("x", text).unwrap_err().to_string();
        assert!(e.starts_with("\"x\" is not a parameter"), "{e}");
        // A plain name is quoted as written, spaces and all.
        let e = s.check_capture(" x ", text).unwrap_err().to_string();
        assert_eq!(
            e,
            "\" x \" is not a parameter or result of \"func(w http.ResponseWriter, r \
            *http.Request)\"; known names: w, r"
        );
        // Bad syntax is the parser's error, unchanged.
        let e = s.check_capture("r..URL", text).unwrap_err();
        assert_eq!(
            e,
            CaptureError::Syntax(parse_go_capture("r..URL").unwrap_err())
        );
        assert_eq!(
            e.to_string(),
            parse_go_capture("r..URL").unwrap_err().to_string()
        );
        let e = s.check_capture("p1.URL.Path", text).unwrap_err();
        assert!(matches!(e, CaptureError::Positional(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "\"p1.URL.Path\" starts at \"p1\", which names parameter 1 by its position, but \
             \"func(w http.ResponseWriter, r *http.Request)\" names it \"r\": write r \
             (positional names p0, p1, ... and r0, r1, ... stand only for unnamed parameters \
             and results); known names: w, r"
        );
    }
}
