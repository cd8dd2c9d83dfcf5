//! Glob matching for `selector.images`, `selector.executable` and container names.
//!
//! `*` matches any run of characters except `/`, `**` matches any run including `/`,
//! `?` matches one character except `/`, `[abc]`/`[a-z]`/`[!a]` match one character of a
//! class. Everything else matches itself; a pattern without metacharacters is an exact match.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid glob {pattern:?}: {reason}")]
pub struct GlobError {
    pub pattern: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Lit(char),
    Any,      // ?
    Star,     // *
    DeepStar, // **
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    toks: Vec<Tok>,
}

impl Glob {
    pub fn new(pattern: &str) -> Result<Self, GlobError> {
        let err = |reason| GlobError {
            pattern: pattern.to_string(),
            reason,
        };
        if pattern.is_empty() {
            return Err(err("the pattern is empty"));
        }
        let chars: Vec<char> = pattern.chars().collect();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '*' => {
                    if chars.get(i + 1) == Some(&'*') {
                        toks.push(Tok::DeepStar);
                        i += 2;
                        while chars.get(i) == Some(&'*') {
                            i += 1;
                        }
                        continue;
                    }
                    toks.push(Tok::Star);
                }
                '?' => toks.push(Tok::Any),
                '[' => {
                    let mut j = i + 1;
                    let negated = matches!(chars.get(j), Some('!') | Some('^'));
                    if negated {
                        j += 1;
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let Some(&c) = chars.get(j) else {
                            return Err(err("a '[' class is not closed by ']'"));
                        };
                        if c == ']' && !first {
                            break;
                        }
                        first = false;
                        if chars.get(j + 1) == Some(&'-')
                            && chars.get(j + 2).is_some_and(|&e| e != ']')
                        {
                            let end = chars[j + 2];
                            if end < c {
                                return Err(err("a class range runs backwards"));
                            }
                            ranges.push((c, end));
                            j += 3;
                        } else {
                            ranges.push((c, c));
                            j += 1;
                        }
                    }
                    toks.push(Tok::Class { negated, ranges });
                    i = j;
                }
                '\\' => {
                    let Some(&c) = chars.get(i + 1) else {
                        return Err(err("the pattern ends with a lone '\\'"));
                    };
                    toks.push(Tok::Lit(c));
                    i += 1;
                }
                c => toks.push(Tok::Lit(c)),
            }
            i += 1;
        }
        Ok(Self {
            pattern: pattern.to_string(),
            toks,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// True when the pattern has no metacharacters: it names exactly one string.
    pub fn is_literal(&self) -> bool {
        self.toks.iter().all(|t| matches!(t, Tok::Lit(_)))
    }

    pub fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        match_from(&self.toks, &text)
    }
}

fn match_from(toks: &[Tok], text: &[char]) -> bool {
    // Iterative backtracking over the last star seen: linear for typical patterns.
    let (mut t, mut s) = (0usize, 0usize);
    let mut backtrack: Option<(usize, usize, bool)> = None;
    while s < text.len() {
        if t < toks.len() {
            match &toks[t] {
                Tok::Lit(c) if *c == text[s] => {
                    t += 1;
                    s += 1;
                    continue;
                }
                Tok::Any if text[s] != '/' => {
                    t += 1;
                    s += 1;
                    continue;
                }
                Tok::Class { negated, ranges } if text[s] != '/' => {
                    let inside = ranges.iter().any(|(a, b)| (*a..=*b).contains(&text[s]));
                    if inside != *negated {
                        t += 1;
                        s += 1;
                        continue;
                    }
                }
                Tok::Star => {
                    backtrack = Some((t, s, false));
                    t += 1;
                    continue;
                }
                Tok::DeepStar => {
                    backtrack = Some((t, s, true));
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match backtrack {
            Some((bt, bs, deep)) if deep || text[bs] != '/' => {
                backtrack = Some((bt, bs + 1, deep));
                t = bt + 1;
                s = bs + 1;
            }
            _ => return false,
        }
    }
    toks[t..]
        .iter()
        .all(|t| matches!(t, Tok::Star | Tok::DeepStar))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Glob::new(p).unwrap().matches(s)
    }

    #[test]
    fn stars_stop_at_slashes_double_stars_do_not() {
        assert!(m("/app/*", "/app/shop"));
        assert!(!m("/app/*", "/app/bin/shop"));
        assert!(m("/app/**", "/app/bin/shop"));
        assert!(m("**/shop", "/srv/app/shop"));
        assert!(m(
            "registry.example/shop/*:v1.*",
            "registry.example/shop/cart:v1.2.3"
        ));
        assert!(!m(
            "registry.example/shop/*:v1.*",
            "registry.example/shop/cart:v2.0"
        ));
        assert!(!m(
            "registry.example/shop/*:v1.*",
            "registry.example/shop/a/b:v1.0"
        ));
    }

    #[test]
    fn literals_classes_and_questions() {
        assert!(m("/usr/bin/kubectl", "/usr/bin/kubectl"));
        assert!(!m("/usr/bin/kubectl", "/usr/bin/kubectl.1.27"));
        assert!(Glob::new("/usr/bin/kubectl").unwrap().is_literal());
        assert!(m("/bin/kubectl.1.2[7-9]", "/bin/kubectl.1.28"));
        assert!(!m("/bin/kubectl.1.2[!7-9]", "/bin/kubectl.1.28"));
        assert!(m("/tmp/a?c", "/tmp/abc"));
        assert!(!m("/tmp/a?c", "/tmp/a/c"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
    }

    #[test]
    fn malformed_patterns_are_errors() {
        assert_eq!(
            Glob::new("/app/[abc").unwrap_err().reason,
            "a '[' class is not closed by ']'"
        );
        assert!(Glob::new("").is_err());
        assert!(Glob::new("[z-a]").is_err());
    }
}
