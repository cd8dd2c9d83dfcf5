//! One probe in one argument, as `gprobe trace` and `kubectl gprobe trace` take it:
//! `'main.work(id, name) -> r0'`, `'net/http.(*Client).Get(url) -> err'`,
//! `'main.(*Ledger).Post(e.Account, e.Cents) -> err'`, `'main.tick()'`,
//! `'createStringObject(ptr[:len]) -> r0'`, `'usdt:postgresql:query__start(arg0)'`.
//!
//! The parentheses hold what is read at the call's entry (parameters: names, field paths,
//! `len(x)`, a C `PTR[:LEN]`), and `->` what is read at its return (results); the
//! parentheses may be left out when nothing is read at entry. Every function probe is
//! timed (`latency: true`); a USDT probe is a point, so it has no `->` and no duration.
//!
//! The expression stands for a ProbeSpec ([`build_spec`]), checked by the same validation
//! as a ProbeSpec file; a mistake is one [`OneLinerError`] that quotes the expression and
//! points at the mistake, or names the flag it is in.

mod parse;
#[cfg(test)]
mod tests;

pub use parse::{parse, MAX_EXPR_BYTES, MAX_NESTING};

use crate::csig::{is_go_signature, parse_c_signature, CaptureExpr};
use crate::gopath::parse_go_capture;
use crate::signature::{parse_signature, positional_index, ValueRef};
use crate::{validate_spec, Limits, Probe, ProbeSpec, ProbeSpecSpec, Selector, MAX_CAPTURES};
use std::fmt;

/// Where a probe is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Point {
    /// A function: a Go symbol (`net/http.(*Client).Get`) or a C function (`SSL_write`).
    Symbol { name: String, at: usize },
    /// A USDT probe, `provider:name`.
    Usdt { name: String, at: usize },
}

impl Point {
    /// Where the point starts in the expression (a byte offset).
    pub fn at(&self) -> usize {
        match self {
            Point::Symbol { at, .. } | Point::Usdt { at, .. } => *at,
        }
    }

    /// What the probe is on, as records name it: the symbol, or `usdt:provider:name`.
    pub fn text(&self) -> String {
        match self {
            Point::Symbol { name, .. } => name.clone(),
            Point::Usdt { name, .. } => format!("usdt:{name}"),
        }
    }
}

/// One capture as written, and where (a byte offset in the expression).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub text: String,
    pub at: usize,
}

/// A parsed one-line probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneLiner {
    /// The expression as given.
    pub expr: String,
    pub point: Point,
    /// Read at entry: in the parentheses.
    pub args: Vec<Item>,
    /// Read at return: after `->`.
    pub results: Vec<Item>,
}

/// What the flags of a `trace` command add to the probe.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceOptions {
    /// `--signature`: the Go signature or C prototype, where the binary has no DWARF.
    pub signature: Option<String>,
    /// `--when`: keep only the calls for which it holds.
    pub when: Option<String>,
    /// `--sample`: the share of calls kept.
    pub sample: Option<f64>,
    /// `--hist`: a histogram of durations.
    pub hist: bool,
    /// `--library`: the shared object that holds the symbol or USDT probe.
    pub library: Option<String>,
}

/// A probe expression that cannot be traced: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneLinerError {
    /// The expression (cut when it is too long to show).
    pub expr: String,
    /// The byte the mistake is at, when it is in the expression.
    pub at: Option<usize>,
    /// The flag the mistake is in (`--signature`, `--when`, ...), or `selector`.
    pub flag: Option<&'static str>,
    pub message: String,
}

impl std::error::Error for OneLinerError {}

impl fmt::Display for OneLinerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Shown one character per character, so that the caret lines up.
        let shown: String = self
            .expr
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        match (self.flag, self.at) {
            (Some(flag), _) => write!(f, "{flag}: {} (probe '{shown}')", self.message),
            (None, Some(at)) => write!(
                f,
                "invalid probe: {}\n  {shown}\n  {}^",
                self.message,
                " ".repeat(parse::column(&self.expr, at) - 1)
            ),
            (None, None) => write!(f, "invalid probe '{shown}': {}", self.message),
        }
    }
}

impl OneLiner {
    /// Every capture, as the ProbeSpec lists them: the entry's, then the return's.
    pub fn captures(&self) -> impl Iterator<Item = &Item> {
        self.args.iter().chain(&self.results)
    }

    /// The probe the expression stands for, with what the flags add.
    pub fn probe(&self, o: &TraceOptions) -> Probe {
        let (symbol, usdt) = match &self.point {
            Point::Symbol { name, .. } => (name.clone(), None),
            Point::Usdt { name, .. } => (String::new(), Some(name.clone())),
        };
        Probe {
            latency: usdt.is_none(),
            symbol,
            usdt,
            library: o.library.clone(),
            signature: o.signature.clone(),
            capture: self.captures().map(|c| c.text.clone()).collect(),
            when: o.when.clone(),
            sample: o.sample,
            hist: o.hist,
            ..Probe::default()
        }
    }

    /// A valid `metadata.name` for the spec: the point's letters and digits, lowercased,
    /// runs of anything else as one `-` (`net/http.(*Client).Get` -> `net-http-client-get`).
    pub fn spec_name(&self) -> String {
        spec_name(&self.point.text())
    }

    fn error(
        &self,
        at: Option<usize>,
        flag: Option<&'static str>,
        message: String,
    ) -> OneLinerError {
        OneLinerError {
            expr: self.expr.clone(),
            at,
            flag,
            message,
        }
    }

    /// Where an issue of the spec's validation points: into the expression, or at a flag.
    fn locate(&self, field: &str) -> (Option<usize>, Option<&'static str>) {
        let Some(rest) = field.strip_prefix("spec.probes[0]") else {
            return match field.starts_with("spec.selector") {
                true => (None, Some("selector")),
                false => (None, None),
            };
        };
        let captures: Vec<&Item> = self.captures().collect();
        if let Some(j) = rest
            .strip_prefix(".capture[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|j| j.parse::<usize>().ok())
        {
            return (captures.get(j).map(|c| c.at), None);
        }
        match rest {
            ".capture" => (captures.get(MAX_CAPTURES).map(|c| c.at), None),
            ".symbol" | ".usdt" => (Some(self.point.at()), None),
            ".signature" => (None, Some("--signature")),
            ".when" => (None, Some("--when")),
            ".sample" => (None, Some("--sample")),
            ".library" => (None, Some("--library")),
            ".hist" => (None, Some("--hist")),
            _ => (None, None),
        }
    }

    /// Values read at entry must be parameters and values read at return results: `r0`
    /// in the parentheses would be read before the function has set it.
    fn check_placement(&self, signature: Option<&str>) -> Result<(), OneLinerError> {
        let root = |text: &str| -> Option<String> {
            match CaptureExpr::parse(text) {
                CaptureExpr::Slice { ptr, .. } => Some(ptr.to_string()),
                CaptureExpr::Name(n) => parse_go_capture(n).ok().map(|c| c.root),
            }
        };
        // Where each name points: by the signature, or by its positional form.
        enum Sig {
            Go(crate::signature::Signature),
            C(crate::csig::CSignature),
            None,
        }
        let sig = match signature {
            Some(s) if is_go_signature(s) => parse_signature(s).map_or(Sig::None, Sig::Go),
            Some(s) => parse_c_signature(s).map_or(Sig::None, Sig::C),
            None => Sig::None,
        };
        let place = |name: &str| match &sig {
            Sig::Go(g) => g.lookup(name),
            Sig::C(c) => c.lookup(name),
            Sig::None => positional_index(name),
        };
        for a in &self.args {
            if let Some(ValueRef::Result(_)) = root(&a.text).and_then(|r| place(&r)) {
                return Err(self.error(
                    Some(a.at),
                    None,
                    format!(
                        "`{}` is a result, read when the call returns: write it after `->`, \
                         e.g. '{}(...) -> {}'",
                        a.text,
                        self.point.text(),
                        a.text
                    ),
                ));
            }
        }
        for r in &self.results {
            if let Some(ValueRef::Param(_)) = root(&r.text).and_then(|n| place(&n)) {
                return Err(self.error(
                    Some(r.at),
                    None,
                    format!(
                        "`{}` is a parameter, read when the call starts: write it in the \
                         parentheses, e.g. '{}({}) -> ...'",
                        r.text,
                        self.point.text(),
                        r.text
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A valid `metadata.name` made of `point`: its ASCII letters and digits, lowercased, with
/// every run of other characters as one `-`, at most 50 characters (room for a suffix
/// within the 63 a label value allows); `probe` when nothing is left.
pub fn spec_name(point: &str) -> String {
    let mut out = String::new();
    let mut gap = false;
    for c in point.chars() {
        if c.is_ascii_alphanumeric() {
            let dash = gap && !out.is_empty();
            if out.len() + usize::from(dash) + 1 > 50 {
                break;
            }
            if dash {
                out.push('-');
            }
            gap = false;
            out.push(c.to_ascii_lowercase());
        } else {
            gap = true;
        }
    }
    if out.is_empty() {
        "probe".into()
    } else {
        out
    }
}

/// A spec as YAML, as `--dry-run` prints it: what `gprobe run` and `kubectl apply` read.
pub fn spec_yaml(spec: &ProbeSpec) -> String {
    serde_yaml::to_string(spec).expect("a ProbeSpec serializes to YAML")
}

/// The ProbeSpec that `expr` and the flags `opts` stand for, selecting with `selector`,
/// named `name` (default: made of the symbol, [`spec_name`]), with default limits; checked
/// as a ProbeSpec file is ([`validate_spec`]). The first problem is the error.
pub fn build_spec(
    expr: &str,
    opts: &TraceOptions,
    selector: Selector,
    name: Option<&str>,
) -> Result<ProbeSpec, OneLinerError> {
    let one = parse(expr)?;
    if opts.hist && matches!(one.point, Point::Usdt { .. }) {
        return Err(one.error(
            Some(one.point.at()),
            Some("--hist"),
            "a USDT probe marks a point in the code, not a call: it has no duration to count; \
             probe a function for a histogram"
                .into(),
        ));
    }
    let name = name.map_or_else(|| one.spec_name(), str::to_string);
    let spec = ProbeSpec::new(
        &name,
        ProbeSpecSpec {
            selector,
            probes: vec![one.probe(opts)],
            limits: Limits::default(),
            ttl_seconds: None,
        },
    );
    if let Some(issue) = validate_spec(&spec).into_iter().next() {
        let (at, flag) = one.locate(&issue.field);
        let message = match (at, flag) {
            (None, None) => issue.to_string(),
            _ => issue.message,
        };
        return Err(one.error(at, flag, message));
    }
    one.check_placement(opts.signature.as_deref())?;
    Ok(spec)
}
