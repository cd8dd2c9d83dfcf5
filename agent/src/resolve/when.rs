//! A probe's `when:` against a binary: the values its terms read are planned as captures
//! (those `capture` does not list are hidden: read for the terms, never written to a
//! record), each term's type is taken from its capture's decoder, and the predicate is
//! compiled for each kind of site (`crate::plan::PlanFilter`): at the entry, the terms on
//! parameters; at the returns, those on results and `duration`, with the entry's terms
//! carried over.

use gprobe_crds::when::{Operand, When};
use gprobe_crds::Probe;

use super::error::PlanError;
use crate::abi::filter::{FCAP_DURATION, FCAP_ENTRY, FCAP_NONE, FTF_NIL_ZERO};
use crate::abi::GpFilter;
use crate::filter::{compile, TermType};
use crate::plan::{CapturePlan, Decode, PlanFilter, ProbePlan, Returns};

/// The parsed `when:` of `probe`, if it has one.
pub(crate) fn parse(probe: &Probe) -> Result<Option<When>, PlanError> {
    match probe.when.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => {
            gprobe_crds::when::parse(text)
                .map(Some)
                .map_err(|source| PlanError::WhenSyntax {
                    symbol: probe.point(),
                    source,
                })
        }
    }
}

/// The values the terms of `w` read that `probe.capture` does not list, each once.
pub(crate) fn hidden(probe: &Probe, w: &When) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in &w.terms {
        if let Operand::Capture(c) = &t.operand {
            if !probe.capture.contains(c) && !out.contains(c) {
                out.push(c.clone());
            }
        }
    }
    out
}

/// `probe` with the `hidden` values added to its captures, to plan them all at once.
pub(crate) fn with_hidden(probe: &Probe, hidden: &[String]) -> Probe {
    let mut p = probe.clone();
    p.capture.extend(hidden.iter().cloned());
    p
}

/// The term of `w` that reads `capture`, as written (for messages).
pub(crate) fn term_reading(w: &When, capture: &str) -> String {
    w.terms
        .iter()
        .find(|t| matches!(&t.operand, Operand::Capture(c) if c == capture))
        .map_or_else(|| capture.to_string(), |t| t.text.clone())
}

/// Compiles `w` into `plan` (planned with the `hidden` captures added): moves the hidden
/// captures to the end of each site's list, finds where each term's value is, and checks
/// each term against its value's type.
pub(crate) fn compile_into(
    plan: &mut ProbePlan,
    w: &When,
    hidden: &[String],
    probe: &Probe,
) -> Result<(), PlanError> {
    let symbol = probe.point();
    let term_err = |term: &str, reason: String| PlanError::WhenTerm {
        symbol: symbol.clone(),
        term: term.to_string(),
        reason,
    };
    let is_hidden = |c: &CapturePlan| hidden.contains(&c.name);
    // Stable: the record keeps the spec's captures (and the hidden trace context) first.
    for list in std::iter::once(&mut plan.entry_captures)
        .chain(std::iter::once(&mut plan.return_captures))
        .chain(plan.extra_entry_sites.iter_mut().map(|s| &mut s.captures))
    {
        list.sort_by_key(is_hidden);
    }
    let mut types = Vec::with_capacity(w.terms.len());
    let mut at_entry = Vec::with_capacity(w.terms.len());
    let mut at_return = Vec::with_capacity(w.terms.len());
    let mut nil_zero = Vec::with_capacity(w.terms.len());
    for t in &w.terms {
        match &t.operand {
            Operand::Duration => {
                if !probe.latency || probe.usdt.is_some() {
                    return Err(term_err(
                        &t.text,
                        "`duration` needs `latency: true` on a function (the call's duration \
                         is measured at its return)"
                            .into(),
                    ));
                }
                types.push(TermType::Duration);
                at_entry.push(FCAP_NONE);
                at_return.push(FCAP_DURATION);
                nil_zero.push(false);
            }
            Operand::Capture(name) => {
                let entry = plan.entry_captures.iter().position(|c| &c.name == name);
                let ret = plan.return_captures.iter().position(|c| &c.name == name);
                let cap = entry
                    .map(|i| &plan.entry_captures[i])
                    .or_else(|| ret.map(|i| &plan.return_captures[i]))
                    .ok_or_else(|| {
                        term_err(&t.text, format!("{name:?} was not planned as a value"))
                    })?;
                let (ty, zero) = term_type(&cap.decode).ok_or_else(|| {
                    term_err(
                        &t.text,
                        format!(
                            "{name:?} is {}, which cannot be compared: compare an integer, a \
                             bool, a string or []byte, a pointer or error with nil, or len(x)",
                            decode_name(&cap.decode)
                        ),
                    )
                })?;
                types.push(ty);
                nil_zero.push(zero);
                match (entry, ret) {
                    (Some(i), _) => {
                        at_entry.push(i as u8);
                        at_return.push(FCAP_ENTRY);
                    }
                    (None, Some(i)) => {
                        at_entry.push(FCAP_NONE);
                        at_return.push(i as u8);
                    }
                    (None, None) => unreachable!("found above"),
                }
            }
        }
    }
    let base = compile(w, &types).map_err(|source| PlanError::When {
        symbol: symbol.clone(),
        source,
    })?;
    let site = |caps: &[u8], list: &[CapturePlan]| -> GpFilter {
        let mut f = base;
        for (i, cap) in caps.iter().enumerate() {
            f.terms[i].cap = *cap;
            if nil_zero[i] {
                f.terms[i].flags |= FTF_NIL_ZERO;
            }
        }
        f.n_out = list.iter().filter(|c| !is_hidden(c)).count() as u8;
        f
    };
    let entry_known = at_entry.iter().any(|c| *c != FCAP_NONE);
    let ret_known = at_return.iter().any(|c| *c != FCAP_ENTRY);
    if ret_known && plan.returns == Returns::None {
        // Planned with the hidden results, a function always has its returns; a USDT
        // probe has none.
        let term = w
            .terms
            .iter()
            .zip(&at_return)
            .find(|(_, c)| **c != FCAP_ENTRY)
            .map_or_else(String::new, |(t, _)| t.text.clone());
        return Err(term_err(
            &term,
            "this probe has no return (a USDT probe is a point, not a call): test its arguments"
                .into(),
        ));
    }
    plan.filter = Some(PlanFilter {
        entry: entry_known.then(|| site(&at_entry, &plan.entry_captures)),
        ret: ret_known.then(|| site(&at_return, &plan.return_captures)),
    });
    Ok(())
}

/// The type a term compares, from its value's decoder; `None` when it cannot be compared.
/// The flag: `len(x)` of a nil map or channel is 0.
fn term_type(d: &Decode) -> Option<(TermType, bool)> {
    Some(match *d {
        Decode::Bool => (TermType::Bool, false),
        Decode::Int { size, signed } => (TermType::Int { signed, size }, false),
        Decode::Len { nil_is_zero } => (
            TermType::Int {
                signed: true,
                size: 8,
            },
            nil_is_zero,
        ),
        Decode::Pointer | Decode::Interface | Decode::Error | Decode::ErrorText { .. } => {
            (TermType::Pointer, false)
        }
        Decode::Str | Decode::Bytes => (TermType::Str, false),
        Decode::Float { .. }
        | Decode::Slice { .. }
        | Decode::Strings
        | Decode::Interfaces { .. }
        | Decode::Header
        | Decode::Span => return None,
    })
}

fn decode_name(d: &Decode) -> &'static str {
    match d {
        Decode::Float { .. } => "a float",
        Decode::Slice { .. } | Decode::Strings | Decode::Interfaces { .. } => {
            "a slice (compare len(x))"
        }
        _ => "not a value a term can test",
    }
}

#[cfg(test)]
mod tests;
