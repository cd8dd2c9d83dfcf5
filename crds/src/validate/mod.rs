//! Loading ProbeSpec YAML and checking what the CRD schema cannot.

use crate::csig::{is_go_signature, parse_c_signature, CSignature, CaptureExpr};
use crate::glob::Glob;
use crate::signature::{parse_signature, ValueRef};
use crate::{
    ProbeSpec, API_VERSION, MAX_CAPTURES, MAX_PROBES, MAX_STRING_BYTES_CAP, MAX_SYMBOL_BYTES,
};
use std::fmt;
use thiserror::Error;
use when_checks::{when_and_sample, Needed};

mod when_checks;

/// One problem found in a ProbeSpec. `probe` is set when only that probe is affected: the
/// spec's other probes can still run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecIssue {
    pub probe: Option<usize>,
    /// Where, as a path into the document: `spec.probes[1].capture[0]`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for SpecIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("{source_name}: document {doc}: {error}")]
    Yaml {
        source_name: String,
        doc: usize,
        error: serde_yaml::Error,
    },
    #[error(
        "{source_name}: document {doc}: apiVersion {found:?} kind {kind:?} is not a \
        ProbeSpec; expected apiVersion: {API_VERSION} and kind: ProbeSpec"
    )]
    NotAProbeSpec {
        source_name: String,
        doc: usize,
        found: String,
        kind: String,
    },
    #[error("{source_name}: document {doc}: metadata.name is required (it names the probe in every record)")]
    NoName { source_name: String, doc: usize },
    #[error("{source_name}: holds no ProbeSpec")]
    Empty { source_name: String },
    #[error(
        "{source_name}: is {bytes} bytes; a ProbeSpec file may have at most {MAX_SPEC_BYTES} \
        (1 MiB): split it into several files"
    )]
    TooLarge { source_name: String, bytes: usize },
    #[error(
        "{source_name}: nests collections {depth} levels deep; at most {MAX_SPEC_DEPTH} are \
        accepted (a ProbeSpec needs about 8): is this the right file?"
    )]
    TooDeep { source_name: String, depth: usize },
}

/// Largest ProbeSpec text accepted (a spec with 128 probes is a few tens of KiB).
pub const MAX_SPEC_BYTES: usize = 1 << 20;
/// Deepest nesting of collections accepted (a ProbeSpec needs about 8).
pub const MAX_SPEC_DEPTH: usize = 64;

/// The deepest nesting of YAML collections in `text`, estimated without parsing: flow
/// brackets, block indentation and compact sequence entries (`- - - x`). Parsing a deeply
/// nested document costs time quadratic in its depth, so this check runs first.
fn nesting_depth(text: &str) -> usize {
    let mut max = 0usize;
    let mut flow = 0usize;
    for line in text.lines() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        // Each "- " at the start of a line's content opens one more block level.
        let mut rest = trimmed;
        let mut dashes = 0usize;
        while let Some(r) = rest.strip_prefix("- ").or_else(|| rest.strip_prefix("-\t")) {
            dashes += 1;
            rest = r.trim_start_matches(' ');
        }
        let (mut quote, mut escaped) = (None::<char>, false);
        for c in rest.chars() {
            match (quote, c) {
                (Some('"'), '\\') if !escaped => {
                    escaped = true;
                    continue;
                }
                (Some(q), c) if c == q && !escaped => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => flow += 1,
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
            escaped = false;
            max = max.max(flow);
        }
        max = max.max(indent / 2 + dashes + flow);
    }
    max
}

/// Parses every YAML document of `text` as a ProbeSpec. `source_name` names the file in errors.
pub fn load_specs(text: &str, source_name: &str) -> Result<Vec<ProbeSpec>, LoadError> {
    use serde::Deserialize;
    if text.len() > MAX_SPEC_BYTES {
        return Err(LoadError::TooLarge {
            source_name: source_name.to_string(),
            bytes: text.len(),
        });
    }
    let depth = nesting_depth(text);
    if depth > MAX_SPEC_DEPTH {
        return Err(LoadError::TooDeep {
            source_name: source_name.to_string(),
            depth,
        });
    }
    let mut out = Vec::new();
    // Each document is read twice: as a YAML value, to tell what it is, then as a
    // ProbeSpec from its text, whose errors name the field (`spec.probes[0].sample: invalid
    // type: ...`) where those of a value would not.
    let typed = serde_yaml::Deserializer::from_str(text);
    for (i, (doc, typed)) in serde_yaml::Deserializer::from_str(text)
        .zip(typed)
        .enumerate()
    {
        let doc_no = i + 1;
        let value = serde_yaml::Value::deserialize(doc).map_err(|error| LoadError::Yaml {
            source_name: source_name.to_string(),
            doc: doc_no,
            error,
        })?;
        if value.is_null() {
            continue;
        }
        let field = |k: &str| {
            value
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let (api, kind) = (field("apiVersion"), field("kind"));
        if api != API_VERSION || kind != "ProbeSpec" {
            return Err(LoadError::NotAProbeSpec {
                source_name: source_name.to_string(),
                doc: doc_no,
                found: api,
                kind,
            });
        }
        if value.get("metadata").and_then(|m| m.get("name")).is_none() {
            return Err(LoadError::NoName {
                source_name: source_name.to_string(),
                doc: doc_no,
            });
        }
        let spec = ProbeSpec::deserialize(typed).map_err(|error| LoadError::Yaml {
            source_name: source_name.to_string(),
            doc: doc_no,
            error,
        })?;
        if spec.metadata.name.as_deref().unwrap_or("").is_empty() {
            return Err(LoadError::NoName {
                source_name: source_name.to_string(),
                doc: doc_no,
            });
        }
        out.push(spec);
    }
    if out.is_empty() {
        return Err(LoadError::Empty {
            source_name: source_name.to_string(),
        });
    }
    Ok(out)
}

/// Checks what the schema cannot: globs, signatures, capture names, `when:` predicates,
/// limits.
pub fn validate_spec(spec: &ProbeSpec) -> Vec<SpecIssue> {
    let mut issues = Vec::new();
    let mut spec_issue = |field: &str, message: String| {
        issues.push(SpecIssue {
            probe: None,
            field: field.to_string(),
            message,
        })
    };
    let s = &spec.spec;
    let sel = &s.selector;
    if sel.images.is_empty()
        && sel.pod_selector.is_none()
        && sel.container_names.is_empty()
        && sel.executable.is_none()
    {
        spec_issue(
            "spec.selector",
            "selects nothing: give at least one of images, podSelector, containerNames, executable"
                .into(),
        );
    }
    for (i, img) in sel.images.iter().enumerate() {
        if let Err(e) = Glob::new(img) {
            spec_issue(&format!("spec.selector.images[{i}]"), e.to_string());
        }
    }
    for (i, c) in sel.container_names.iter().enumerate() {
        if let Err(e) = Glob::new(c) {
            spec_issue(&format!("spec.selector.containerNames[{i}]"), e.to_string());
        }
    }
    if let Some(exe) = &sel.executable {
        if let Err(e) = Glob::new(exe) {
            spec_issue("spec.selector.executable", e.to_string());
        } else if !exe.starts_with('/') && !exe.starts_with('*') {
            spec_issue(
                "spec.selector.executable",
                format!(
                    "{exe:?} is not an absolute path or a glob starting with '*'; write e.g. \
                    \"/usr/local/bin/{exe}\" or \"**/{exe}\""
                ),
            );
        }
    }
    if s.limits.max_string_bytes == 0 || s.limits.max_string_bytes > MAX_STRING_BYTES_CAP {
        spec_issue(
            "spec.limits.maxStringBytes",
            format!(
                "{} is out of range: use 1..={MAX_STRING_BYTES_CAP}",
                s.limits.max_string_bytes
            ),
        );
    }
    let overhead = s.limits.max_overhead_percent;
    if !(0.0..=100.0).contains(&overhead) {
        spec_issue(
            "spec.limits.maxOverheadPercent",
            format!("{overhead} is out of range: use a percentage from 0 (no budget) to 100"),
        );
    }
    if s.probes.is_empty() {
        spec_issue(
            "spec.probes",
            "lists no probe: add at least one symbol".into(),
        );
    } else if s.probes.len() > MAX_PROBES {
        spec_issue(
            "spec.probes",
            format!(
                "lists {} probes; at most {MAX_PROBES} per ProbeSpec: split them over several ProbeSpecs",
                s.probes.len()
            ),
        );
    }
    for (i, p) in s.probes.iter().enumerate() {
        let mut probe_issue = |field: String, message: String| {
            issues.push(SpecIssue {
                probe: Some(i),
                field: format!("spec.probes[{i}]{field}"),
                message,
            })
        };
        match (p.symbol.trim().is_empty(), p.usdt.as_deref().map(str::trim)) {
            (true, None) | (true, Some("")) => probe_issue(
                ".symbol".into(),
                "is empty: name a function (e.g. main.computeE) or a USDT probe (usdt: provider:name)"
                    .into(),
            ),
            (false, Some(u)) if !u.is_empty() => probe_issue(
                ".usdt".into(),
                "is given together with symbol: a probe is on one function or one USDT probe"
                    .into(),
            ),
            (true, Some(u)) => {
                let ok = u.split_once(':').is_some_and(|(prov, name)| {
                    let word = |w: &str| {
                        !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    };
                    word(prov) && word(name)
                });
                if !ok {
                    probe_issue(
                        ".usdt".into(),
                        format!("{u:?} is not provider:name (e.g. postgresql:query__start; \
                            `gprobe symbols BINARY` lists them)"),
                    );
                }
            }
            _ => {}
        }
        if p.symbol.len() > MAX_SYMBOL_BYTES {
            probe_issue(
                ".symbol".into(),
                format!(
                    "is {} bytes long; at most {MAX_SYMBOL_BYTES}",
                    p.symbol.len()
                ),
            );
        }
        if let Some(lib) = &p.library {
            if let Err(e) = Glob::new(lib) {
                probe_issue(".library".into(), e.to_string());
            }
        }
        if p.capture.len() > MAX_CAPTURES {
            probe_issue(
                ".capture".into(),
                format!(
                    "lists {} values; at most {MAX_CAPTURES} per probe",
                    p.capture.len()
                ),
            );
        }
        for (j, c) in p.capture.iter().enumerate() {
            if let Some(first) = p.capture[..j].iter().position(|d| d == c) {
                probe_issue(
                    format!(".capture[{j}]"),
                    format!("{c:?} is already captured at capture[{first}]: list each value once"),
                );
            }
        }
        if let Some(m) = &p.metrics {
            if m.labels.len() > 4 {
                probe_issue(
                    ".metrics.labels".into(),
                    format!(
                        "lists {} labels; at most 4 (each multiplies the series)",
                        m.labels.len()
                    ),
                );
            }
            for (j, l) in m.labels.iter().enumerate() {
                if !p.capture.contains(l) {
                    probe_issue(
                        format!(".metrics.labels[{j}]"),
                        format!(
                            "{l:?} is not captured: add it to capture, or name one of {:?}",
                            p.capture
                        ),
                    );
                }
            }
            if m.max_series.is_some_and(|n| n == 0 || n > 10_000) {
                probe_issue(
                    ".metrics.maxSeries".into(),
                    "is out of range: use 1..=10000".into(),
                );
            }
        }
        if p.propagate && (!p.latency || p.usdt.is_some() || p.library.is_some()) {
            probe_issue(
                ".propagate".into(),
                "needs `latency: true` on a Go function of the executable: the span must be \
                 open while the requests that carry it are made"
                    .into(),
            );
        }
        if p.hist && !p.latency {
            probe_issue(
                ".hist".into(),
                "a histogram of durations needs `latency: true` (the duration is measured at \
                 the call's return)"
                    .into(),
            );
        }
        if p.latency && p.usdt.is_some() {
            probe_issue(
                ".latency".into(),
                "a USDT probe marks a point in the code, not a call: it has no return to time; \
                 set latency: false, or probe a function (symbol) for latency"
                    .into(),
            );
        }
        // The values the signature must have: the capture entries, then those `when`
        // compares (a term's value need not be captured).
        let mut needed: Vec<Needed> = p
            .capture
            .iter()
            .enumerate()
            .map(|(j, c)| Needed {
                field: format!(".capture[{j}]"),
                value: c.clone(),
                term: None,
            })
            .collect();
        needed.extend(when_and_sample(
            p,
            s.limits.max_string_bytes,
            &mut probe_issue,
        ));
        let Some(sig_text) = &p.signature else {
            // Without a signature, only a USDT probe's names are known here (arg0, ...):
            // a function's are the binary's DWARF's, checked by the agent.
            if p.usdt.is_some() {
                for n in &needed {
                    if let Some(m) = usdt_default_capture_issue(&n.value) {
                        probe_issue(n.field.clone(), n.message(m));
                    }
                }
            }
            continue;
        };
        if is_go_signature(sig_text) {
            if p.usdt.is_some() {
                probe_issue(
                    ".signature".into(),
                    format!(
                        "{sig_text:?} is a Go signature; a USDT probe's signature is its C \
                        argument list, e.g. \"(const char *query)\""
                    ),
                );
                continue;
            }
            match parse_signature(sig_text) {
                Err(e) => probe_issue(".signature".into(), e.to_string()),
                Ok(sig) => {
                    // Names, field paths (`r.URL.Path`) and `len(...)` (gopath.rs).
                    for n in &needed {
                        if let Err(e) = sig.check_capture(&n.value, sig_text) {
                            probe_issue(n.field.clone(), n.message(e.to_string()));
                        }
                    }
                }
            }
            continue;
        }
        match parse_c_signature(sig_text) {
            Err(e) => probe_issue(".signature".into(), e.to_string()),
            Ok(sig) if p.usdt.is_some() && !sig.is_arg_list() => probe_issue(
                ".signature".into(),
                format!(
                    "{sig_text:?} is a function prototype; a USDT probe's signature lists its \
                    arguments only, e.g. \"(const char *query)\""
                ),
            ),
            Ok(sig) if p.usdt.is_none() && sig.is_arg_list() => probe_issue(
                ".signature".into(),
                format!(
                    "{sig_text:?} lacks the function's result type and name; write the whole \
                    C prototype, e.g. \"int SSL_write(void *ssl, const void *buf, int num)\""
                ),
            ),
            Ok(sig) => {
                for n in &needed {
                    if let Some(m) = c_capture_issue(&sig, sig_text, &n.value) {
                        probe_issue(n.field.clone(), n.message(m));
                    }
                }
            }
        }
    }
    issues
}

/// Why `capture` entry `c` cannot be read with the C prototype `sig`, if it cannot.
fn c_capture_issue(sig: &CSignature, text: &str, c: &str) -> Option<String> {
    let known = || {
        let mut k = sig.capture_names().join(", ");
        if k.is_empty() {
            k = "(none)".into();
        }
        if sig.variadic {
            k.push_str("; arguments passed through `...` cannot be captured");
        }
        k
    };
    let what = if sig.is_arg_list() {
        "an argument"
    } else {
        "a parameter or the result"
    };
    let positional = |name: &str| {
        sig.positional(name).map(|(r, real)| {
            format!(
                "{}; known names: {}",
                crate::signature::positional_message(c, name, r, real, &format!("{text:?}")),
                known()
            )
        })
    };
    let param = |name: &str| match sig.lookup(name) {
        Some(ValueRef::Param(i)) => Ok(&sig.params[i]),
        None if sig.positional(name).is_some() => Err(positional(name).unwrap_or_default()),
        Some(ValueRef::Result(_)) => Err(format!(
            "{c:?}: {name} is the result; NAME[:LEN] takes two parameters"
        )),
        None => Err(format!(
            "{c:?}: {name} is not {what} of {text:?}; known names: {}",
            known()
        )),
    };
    match CaptureExpr::parse(c) {
        CaptureExpr::Name(n) => {
            if sig.lookup(n).is_some() {
                return None;
            }
            if let Some(m) = positional(n) {
                return Some(m);
            }
            if n == "r0" {
                return Some(if sig.is_arg_list() {
                    "\"r0\": a USDT probe has arguments only, no result".into()
                } else {
                    format!("\"r0\": {text:?} returns void: there is no result to capture")
                });
            }
            Some(format!(
                "{c:?} is not {what} of {text:?}; known names: {} (NAME[:LEN] captures LEN bytes at pointer NAME)",
                known()
            ))
        }
        CaptureExpr::Slice { ptr, len } => {
            let (p, l) = match (param(ptr), param(len)) {
                (Ok(p), Ok(l)) => (p, l),
                (Err(e), _) | (_, Err(e)) => return Some(e),
            };
            if !p.ty.is_pointer() {
                return Some(format!(
                    "{c:?}: {ptr} is {}, not a pointer: NAME[:LEN] reads LEN bytes at the pointer NAME",
                    p.ty.declare("")
                ));
            }
            if !l.ty.is_integer() {
                return Some(format!(
                    "{c:?}: {len} is {}, not an integer: NAME[:LEN] takes its length from the integer LEN",
                    l.ty.declare("")
                ));
            }
            None
        }
    }
}

/// Why `capture` entry `c` of a USDT probe without a signature is not one of its default
/// names (`arg0`, `arg1`, ... or `argI[:argJ]`), if it is not.
fn usdt_default_capture_issue(c: &str) -> Option<String> {
    let is_arg = |n: &str| {
        n.strip_prefix("arg")
            .is_some_and(|i| !i.is_empty() && i.len() <= 2 && i.bytes().all(|b| b.is_ascii_digit()))
    };
    let ok = match CaptureExpr::parse(c) {
        CaptureExpr::Name(n) => is_arg(n),
        CaptureExpr::Slice { ptr, len } => is_arg(ptr) && is_arg(len),
    };
    (!ok).then(|| {
        format!(
            "{c:?}: without a signature a USDT probe's arguments are arg0, arg1, ... (integers); \
             name and type them with signature: \"(type name, ...)\""
        )
    })
}

#[cfg(test)]
mod tests;
