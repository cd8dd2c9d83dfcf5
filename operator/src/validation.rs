//! What the operator checks in a ProbeSpec: everything [`gprobe_crds::validate_spec`]
//! checks (globs, signatures, capture names against signatures, `when:` predicates and
//! `sample:`, limits), plus what only matters in a cluster and that neither the CRD schema
//! nor `validate_spec` covers: the syntax of `selector.podSelector` (operators, values,
//! label keys and values).

use gprobe_crds::{validate_spec, ProbeSpec, SpecIssue};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Every issue of `spec`, in document order of `validate_spec` then the pod selector's.
pub fn validate(spec: &ProbeSpec) -> Vec<SpecIssue> {
    let mut issues = validate_spec(spec);
    if let Some(sel) = &spec.spec.selector.pod_selector {
        label_selector_issues("spec.selector.podSelector", sel, &mut issues);
    }
    issues
}

fn issue(field: String, message: impl ToString) -> SpecIssue {
    SpecIssue {
        probe: None,
        field,
        message: message.to_string(),
    }
}

fn label_selector_issues(at: &str, sel: &LabelSelector, out: &mut Vec<SpecIssue>) {
    for (k, v) in sel.match_labels.iter().flatten() {
        if let Err(e) = check_label_key(k) {
            out.push(issue(format!("{at}.matchLabels[{k:?}]"), e));
        }
        if let Err(e) = check_label_value(v) {
            out.push(issue(format!("{at}.matchLabels[{k:?}]"), e));
        }
    }
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let field = format!("{at}.matchExpressions[{i}]");
        if let Err(e) = check_label_key(&req.key) {
            out.push(issue(format!("{field}.key"), e));
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    out.push(issue(
                        format!("{field}.values"),
                        format!("operator {} needs at least one value", req.operator),
                    ));
                }
                for (j, v) in values.iter().enumerate() {
                    if let Err(e) = check_label_value(v) {
                        out.push(issue(format!("{field}.values[{j}]"), e));
                    }
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    out.push(issue(
                        format!("{field}.values"),
                        format!("operator {} takes no values", req.operator),
                    ));
                }
            }
            other => out.push(issue(
                format!("{field}.operator"),
                format!("{other:?} is not an operator: use In, NotIn, Exists or DoesNotExist"),
            )),
        }
    }
}

/// A label name: at most 63 characters, alphanumerics, `-`, `_`, `.`, starting and ending
/// with an alphanumeric.
fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// A DNS subdomain: dot-separated lowercase labels of alphanumerics and `-`.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Why a label key or value of a pod selector is not valid Kubernetes label syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label key {key:?}: prefix {prefix:?} is not a DNS subdomain (e.g. example.com)")]
    KeyPrefix { key: String, prefix: String },
    #[error(
        "label key {key:?}: name {name:?} must be 1-63 characters of [A-Za-z0-9-_.], starting \
        and ending with an alphanumeric"
    )]
    KeyName { key: String, name: String },
    #[error(
        "label value {value:?} must be at most 63 characters of [A-Za-z0-9-_.], starting and \
        ending with an alphanumeric"
    )]
    Value { value: String },
}

fn check_label_key(key: &str) -> Result<(), LabelError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !is_dns_subdomain(p) {
            return Err(LabelError::KeyPrefix {
                key: key.to_string(),
                prefix: p.to_string(),
            });
        }
    }
    if !is_label_name(name) {
        return Err(LabelError::KeyName {
            key: key.to_string(),
            name: name.to_string(),
        });
    }
    Ok(())
}

fn check_label_value(v: &str) -> Result<(), LabelError> {
    if v.is_empty() || is_label_name(v) {
        Ok(())
    } else {
        Err(LabelError::Value {
            value: v.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gprobe_crds::load_specs;

    fn spec(selector: &str) -> ProbeSpec {
        let text = format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: \
            a, namespace: ns}}\nspec:\n  selector: {selector}\n  probes: [{{symbol: main.f}}]\n"
        );
        load_specs(&text, "a.yaml").unwrap().remove(0)
    }

    #[test]
    fn a_good_pod_selector_has_no_issue() {
        let s = spec("{podSelector: {matchLabels: {app: shop, example.com/tier: web}, \
            matchExpressions: [{key: env, operator: In, values: [prod]}, {key: canary, operator: DoesNotExist}]}}");
        assert_eq!(validate(&s), vec![]);
    }

    #[test]
    fn bad_pod_selectors_are_reported_with_their_field() {
        let s = spec(
            "{podSelector: {matchLabels: {'-app': 'shop!'}, matchExpressions: [{key: \
            env, operator: Equals, values: [a]}, {key: tier, operator: In}, {key: x, operator: \
                Exists, values: [y]}]}}",
        );
        let issues = validate(&s);
        let fields: Vec<_> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.selector.podSelector.matchLabels[\"-app\"]",
                "spec.selector.podSelector.matchLabels[\"-app\"]",
                "spec.selector.podSelector.matchExpressions[0].operator",
                "spec.selector.podSelector.matchExpressions[1].values",
                "spec.selector.podSelector.matchExpressions[2].values",
            ]
        );
        assert!(issues[2].message.contains("\"Equals\" is not an operator"));
        assert_eq!(
            issues[0].message,
            "label key \"-app\": name \"-app\" must be 1-63 characters of [A-Za-z0-9-_.], \
            starting and ending with an alphanumeric"
        );
        assert_eq!(
            issues[1].message,
            "label value \"shop!\" must be at most 63 characters of [A-Za-z0-9-_.], starting and \
            ending with an alphanumeric"
        );
    }

    #[test]
    fn a_label_key_prefix_must_be_a_dns_subdomain() {
        let e = check_label_key("Example.com/tier").unwrap_err();
        assert_eq!(
            e,
            LabelError::KeyPrefix {
                key: "Example.com/tier".into(),
                prefix: "Example.com".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "label key \"Example.com/tier\": prefix \"Example.com\" is not a DNS subdomain (e.g. example.com)"
        );
        assert_eq!(check_label_key("example.com/tier"), Ok(()));
        assert_eq!(check_label_value(""), Ok(()));
    }

    #[test]
    fn validate_spec_issues_come_first() {
        let s = spec(
            "{executable: \"/app/[x\", podSelector: {matchExpressions: [{key: a, operator: In}]}}",
        );
        let issues = validate(&s);
        assert_eq!(issues[0].field, "spec.selector.executable");
        assert_eq!(
            issues[1].field,
            "spec.selector.podSelector.matchExpressions[0].values"
        );
    }
}
