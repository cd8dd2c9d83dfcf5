//! The checks of a probe's `when:` and `sample:` that need no signature: the predicate's
//! syntax (when.rs), `duration` only where the call is timed, the share of `sample`. The
//! values its terms compare are checked with the `capture` entries, by validate_spec.

use crate::when::{self, Operand, StrOp, Test};
use crate::Probe;

/// A value that the probe's signature must have: a `capture` entry, or the value a `when:`
/// term compares.
pub(super) struct Needed {
    /// Where an issue about it is reported, relative to the probe: `.capture[2]`, `.when`.
    pub field: String,
    /// The value as `capture` spells it: `r.URL.Path`, `len(o.Items)`, `buf[:n]`.
    pub value: String,
    /// The `when:` term that compares it, as written.
    pub term: Option<String>,
}

impl Needed {
    /// The message of an issue about this value: a term's names the term.
    pub fn message(&self, why: String) -> String {
        match &self.term {
            Some(t) => format!("term `{t}`: {why}"),
            None => why,
        }
    }
}

/// The message of a `sample` out of range (the CRD's rule on `sample` says it too).
pub(super) const SAMPLE_RANGE: &str =
    "sample is a share of the calls: more than 0, at most 1 (0.01 keeps 1 in 100)";

/// Reports the issues of `p.when` and `p.sample` through `issue(field, message)`, and
/// returns the values the terms of `when` compare (none if it does not parse).
/// `max_string_bytes` is the spec's `limits.maxStringBytes`: a string literal longer than
/// what is read of a string decides its term alone (a string cut short equals nothing and
/// starts with nothing longer than what was read).
pub(super) fn when_and_sample(
    p: &Probe,
    max_string_bytes: u32,
    issue: &mut impl FnMut(String, String),
) -> Vec<Needed> {
    if let Some(r) = p.sample {
        // NaN fails both comparisons.
        if !(r > 0.0 && r <= 1.0) {
            issue(".sample".into(), format!("{SAMPLE_RANGE}, not {r}"));
        }
    }
    let Some(text) = &p.when else {
        return Vec::new();
    };
    // Too many terms is a parse error too (when::MAX_TERMS).
    let w = match when::parse(text) {
        Ok(w) => w,
        Err(e) => {
            issue(".when".into(), format!("{} ({})", e.message, e.place()));
            return Vec::new();
        }
    };
    let mut needed = Vec::new();
    for t in &w.terms {
        if let Test::Str(op, lit) = &t.test {
            if lit.len() > max_string_bytes as usize {
                let always = match op {
                    StrOp::Ne => "always holds",
                    StrOp::Eq | StrOp::HasPrefix => "can never hold",
                };
                issue(
                    ".when".into(),
                    format!(
                        "`{}` {always}: its string is {} bytes, and spec.limits.maxStringBytes \
                         reads {max_string_bytes} of each string: raise maxStringBytes to at \
                         least {} or shorten the string",
                        t.text,
                        lit.len(),
                        lit.len()
                    ),
                );
            }
        }
        match &t.operand {
            Operand::Duration if p.usdt.is_some() => issue(
                ".when".into(),
                format!(
                    "`{}`: a USDT probe marks a point in the code, not a call: it has no \
                     duration; compare its arguments, or probe a function (symbol) with \
                     `latency: true`",
                    t.text
                ),
            ),
            Operand::Duration if !p.latency => issue(
                ".when".into(),
                format!(
                    "`{}` needs `latency: true` (the call's duration is measured at its return)",
                    t.text
                ),
            ),
            Operand::Duration => {}
            Operand::Capture(c) => needed.push(Needed {
                field: ".when".into(),
                value: c.clone(),
                term: Some(t.text.clone()),
            }),
        }
    }
    needed
}
