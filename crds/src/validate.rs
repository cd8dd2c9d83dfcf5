//! Loading ProbeSpec YAML and checking what the CRD schema cannot.

use crate::glob::Glob;
use crate::signature::parse_signature;
use crate::{
    ProbeSpec, API_VERSION, MAX_CAPTURES, MAX_PROBES, MAX_STRING_BYTES_CAP, MAX_SYMBOL_BYTES,
};
use std::fmt;
use thiserror::Error;

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
    #[error("{source_name}: document {doc}: apiVersion {found:?} kind {kind:?} is not a ProbeSpec; expected apiVersion: {API_VERSION} and kind: ProbeSpec")]
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
    #[error("{source_name}: is {bytes} bytes; a ProbeSpec file may have at most {MAX_SPEC_BYTES} (1 MiB): split it into several files")]
    TooLarge { source_name: String, bytes: usize },
    #[error("{source_name}: nests collections {depth} levels deep; at most {MAX_SPEC_DEPTH} are accepted (a ProbeSpec needs about 8): is this the right file?")]
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
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
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
        let spec: ProbeSpec = serde_yaml::from_value(value).map_err(|error| LoadError::Yaml {
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

/// Checks what the schema cannot: globs, signatures, capture names, limits.
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
                format!("{exe:?} is not an absolute path or a glob starting with '*'; write e.g. \"/usr/local/bin/{exe}\" or \"**/{exe}\""),
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
                        format!("{u:?} is not provider:name (e.g. postgresql:query__start; `gprobe symbols BINARY` lists them)"),
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
        let Some(sig_text) = &p.signature else {
            continue;
        };
        match parse_signature(sig_text) {
            Err(e) => probe_issue(".signature".into(), e.to_string()),
            Ok(sig) => {
                // Names, field paths (`r.URL.Path`) and `len(...)` (gopath.rs).
                for (j, c) in p.capture.iter().enumerate() {
                    if let Err(m) = sig.check_capture(c, sig_text) {
                        probe_issue(format!(".capture[{j}]"), m);
                    }
                }
            }
        }
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: http-client-urls, namespace: shop}
spec:
  selector:
    images: ["registry.example/shop/*:v1.*"]
    podSelector: {matchLabels: {app: shop}}
    containerNames: [app]
    executable: "/app/*"
  probes:
    - symbol: "net/http.(*Client).Get"
      signature: "func(c *Client, url string) (resp *Response, err error)"
      capture: [url, err]
      latency: true
    - symbol: main.computeE
      signature: "func(iterations int64) float64"
      capture: [iterations, r0]
  limits: {maxStringBytes: 256, eventsPerSecond: 10000}
"#;

    #[test]
    fn the_design_example_loads_and_validates() {
        let specs = load_specs(GOOD, "good.yaml").unwrap();
        assert_eq!(specs.len(), 1);
        let s = &specs[0];
        assert_eq!(s.display_name(), "http-client-urls");
        assert_eq!(s.spec.probes[0].capture, ["url", "err"]);
        assert!(s.spec.probes[0].latency);
        assert_eq!(
            s.spec
                .selector
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app"],
            "shop"
        );
        assert_eq!(validate_spec(s), vec![]);
    }

    #[test]
    fn defaults_apply_when_limits_are_omitted() {
        let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  selector: {executable: /bin/x}\n  probes: [{symbol: main.f}]\n";
        let s = &load_specs(text, "a.yaml").unwrap()[0];
        assert_eq!(s.spec.limits.max_string_bytes, 256);
        assert_eq!(s.spec.limits.events_per_second, 10_000);
    }

    #[test]
    fn malformed_yaml_names_file_and_line() {
        let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  selector: {executable: /bin/x\n  probes: []\n";
        let e = load_specs(text, "bad.yaml").unwrap_err().to_string();
        assert!(e.starts_with("bad.yaml: document 1:"), "{e}");
        assert!(e.contains("line"), "{e}");
    }

    #[test]
    fn unknown_fields_and_wrong_kinds_are_rejected() {
        let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  selector: {executable: /bin/x}\n  probes: [{symbol: main.f, captures: [x]}]\n";
        let e = load_specs(text, "typo.yaml").unwrap_err().to_string();
        assert!(e.contains("unknown field `captures`"), "{e}");
        let e = load_specs("apiVersion: v1\nkind: Pod\n", "pod.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a ProbeSpec"), "{e}");
        let e = load_specs("apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nspec: {selector: {executable: /x}, probes: []}\n", "noname.yaml").unwrap_err().to_string();
        assert!(e.contains("metadata.name is required"), "{e}");
        assert!(matches!(
            load_specs("", "empty.yaml"),
            Err(LoadError::Empty { .. })
        ));
    }

    #[test]
    fn issues_are_scoped_to_the_probe_they_concern() {
        let text = r#"
apiVersion: gprobe.dev/v1alpha1
kind: ProbeSpec
metadata: {name: a}
spec:
  selector: {executable: "/app/[x"}
  probes:
    - {symbol: main.ok, signature: "func(n int)", capture: [n]}
    - {symbol: main.bad, signature: "func(n int", capture: [n]}
    - {symbol: main.typo, signature: "func(n int) error", capture: [m, r0]}
  limits: {maxStringBytes: 0}
"#;
        let s = &load_specs(text, "a.yaml").unwrap()[0];
        let issues = validate_spec(s);
        let fields: Vec<_> = issues.iter().map(|i| (i.probe, i.field.as_str())).collect();
        assert_eq!(
            fields,
            [
                (None, "spec.selector.executable"),
                (None, "spec.limits.maxStringBytes"),
                (Some(1), "spec.probes[1].signature"),
                (Some(2), "spec.probes[2].capture[0]"),
            ]
        );
        assert!(
            issues[3].message.contains("known names: n, r0"),
            "{}",
            issues[3]
        );
    }

    #[test]
    fn duplicate_captures_are_probe_issues() {
        let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  selector: {executable: /bin/x}\n  probes: [{symbol: main.f, signature: \"func(n int)\", capture: [n, n]}]\n";
        let s = &load_specs(text, "a.yaml").unwrap()[0];
        let issues = validate_spec(s);
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].probe, Some(0));
        assert_eq!(issues[0].field, "spec.probes[0].capture[1]");
        assert!(issues[0].message.contains("already captured at capture[0]"));
        assert!(s.spec.probes[0].redact, "redaction is on by default");
    }

    #[test]
    fn deep_or_huge_documents_are_refused_before_parsing() {
        let t0 = std::time::Instant::now();
        for text in [
            "[".repeat(100_000),
            "- ".repeat(50_000) + "x",
            format!(
                "a:\n{}",
                (1..2000)
                    .map(|i| format!("{}k{i}:\n", " ".repeat(i * 2)))
                    .collect::<String>()
            ),
        ] {
            let e = load_specs(&text, "deep.yaml").unwrap_err();
            assert!(
                matches!(e, LoadError::TooDeep { .. } | LoadError::TooLarge { .. }),
                "{e}"
            );
        }
        let e = load_specs(&" ".repeat(MAX_SPEC_BYTES + 1), "big.yaml").unwrap_err();
        assert!(e.to_string().contains("at most 1048576"), "{e}");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t0.elapsed()
        );
        // The design's example is far from the limit.
        assert!(nesting_depth(GOOD) < 10, "{}", nesting_depth(GOOD));
    }

    #[test]
    fn bounds_match_the_crd_schema() {
        let long_symbol = "a".repeat(crate::MAX_SYMBOL_BYTES + 1);
        let mut probes = String::new();
        for _ in 0..=crate::MAX_PROBES {
            probes.push_str("    - {symbol: main.f}\n");
        }
        let text = format!("apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: a}}\nspec:\n  selector: {{executable: /bin/x}}\n  probes:\n{probes}    - {{symbol: {long_symbol}, capture: [a, b, c, d, e, f, g, h, i]}}\n");
        let s = &load_specs(&text, "a.yaml").unwrap()[0];
        let issues = validate_spec(s);
        let fields: Vec<_> = issues.iter().map(|i| i.field.as_str()).collect();
        let last = crate::MAX_PROBES + 1;
        assert_eq!(
            fields,
            [
                "spec.probes".to_string(),
                format!("spec.probes[{last}].symbol"),
                format!("spec.probes[{last}].capture"),
            ]
        );
        assert!(issues[0].message.contains("at most 128"), "{}", issues[0]);
        assert!(issues[2].message.contains("at most 8"), "{}", issues[2]);
    }
}
