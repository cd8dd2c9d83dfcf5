//! TARGET (`deploy/NAME`, `pod/NAME`) or `-l SELECTOR`: the label selector that the trace's
//! ProbeSpec selects pods with, in the target's namespace.

use crate::error::Error;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::{Api, Client};
use std::collections::BTreeMap;

/// What the user named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Deployment(String),
    StatefulSet(String),
    DaemonSet(String),
    Pod(String),
    /// `-l SELECTOR`.
    Selector(String),
}

impl Target {
    /// Parses `KIND/NAME` as kubectl spells the kinds.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let (kind, name) = s
            .split_once('/')
            .filter(|(_, n)| !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| {
                Error::Usage(format!(
                    "TARGET {s:?}: give KIND/NAME (deploy/web, pod/web-1)"
                ))
            })?;
        let name = name.to_string();
        Ok(match kind {
            "deploy" | "deployment" | "deployments" | "deployment.apps" => Self::Deployment(name),
            "sts" | "statefulset" | "statefulsets" | "statefulset.apps" => Self::StatefulSet(name),
            "ds" | "daemonset" | "daemonsets" | "daemonset.apps" => Self::DaemonSet(name),
            "po" | "pod" | "pods" => Self::Pod(name),
            _ => {
                return Err(Error::Usage(format!(
                    "TARGET {s:?}: kind {kind:?} is not one of deploy, sts, ds, pod"
                )))
            }
        })
    }

    /// `kind/name`, as said in messages.
    pub fn shown(&self) -> String {
        match self {
            Self::Deployment(n) => format!("deployment/{n}"),
            Self::StatefulSet(n) => format!("statefulset/{n}"),
            Self::DaemonSet(n) => format!("daemonset/{n}"),
            Self::Pod(n) => format!("pod/{n}"),
            Self::Selector(s) => format!("pods -l {s}"),
        }
    }
}

/// The pods a trace selects: by labels, and (for `pod/NAME`) by name too, since other pods
/// may carry the same labels (their calls are not shown).
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub labels: LabelSelector,
    pub pod_name: Option<String>,
}

/// Resolves `target` in `namespace` to the pods' label selector.
pub async fn resolve(
    client: &Client,
    namespace: &str,
    target: &Target,
) -> Result<Selection, Error> {
    let get_err = |what: String| {
        move |e: kube::Error| match e {
            kube::Error::Api(s) if s.code == 404 => Error::NotFound(what),
            source => Error::Api {
                what: format!("reading {what}"),
                source,
            },
        }
    };
    let shown = format!("{} in namespace {namespace}", target.shown());
    let workload = |kind: &'static str, name: &str, sel: Option<LabelSelector>| {
        sel.filter(|s| {
            s.match_labels.as_ref().is_some_and(|m| !m.is_empty())
                || s.match_expressions.as_ref().is_some_and(|m| !m.is_empty())
        })
        .map(|labels| Selection {
            labels,
            pod_name: None,
        })
        .ok_or_else(|| Error::NoSelector {
            kind,
            name: name.to_string(),
        })
    };
    match target {
        Target::Deployment(n) => {
            let d = Api::<Deployment>::namespaced(client.clone(), namespace)
                .get(n)
                .await
                .map_err(get_err(shown))?;
            workload("deployment", n, Some(d.spec.selector))
        }
        Target::StatefulSet(n) => {
            let d = Api::<StatefulSet>::namespaced(client.clone(), namespace)
                .get(n)
                .await
                .map_err(get_err(shown))?;
            workload("statefulset", n, Some(d.spec.selector))
        }
        Target::DaemonSet(n) => {
            let d = Api::<DaemonSet>::namespaced(client.clone(), namespace)
                .get(n)
                .await
                .map_err(get_err(shown))?;
            workload("daemonset", n, Some(d.spec.selector))
        }
        Target::Pod(n) => {
            let p = Api::<Pod>::namespaced(client.clone(), namespace)
                .get(n)
                .await
                .map_err(get_err(shown))?;
            let labels = p.metadata.labels.unwrap_or_default();
            if labels.is_empty() {
                return Err(Error::NoSelector {
                    kind: "pod",
                    name: n.clone(),
                });
            }
            Ok(Selection {
                labels: LabelSelector {
                    match_labels: Some(labels),
                    match_expressions: None,
                },
                pod_name: Some(n.clone()),
            })
        }
        Target::Selector(s) => Ok(Selection {
            labels: parse_selector(s)?,
            pod_name: None,
        }),
    }
}

/// A label selector as kubectl takes it: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
/// `k notin (a,b)`, joined by commas.
pub fn parse_selector(s: &str) -> Result<LabelSelector, Error> {
    let bad = |why: &str| Error::Usage(format!("-l {s:?}: {why}"));
    let mut labels = BTreeMap::new();
    let mut exprs = Vec::new();
    let req = |key: &str, op: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
        key: key.trim().to_string(),
        operator: op.to_string(),
        values,
    };
    for term in split_terms(s) {
        let term = term.trim();
        if term.is_empty() {
            return Err(bad("an empty term"));
        }
        if let Some((k, rest)) = term
            .split_once(" notin ")
            .or_else(|| term.split_once(" in "))
        {
            let op = if term.contains(" notin ") {
                "NotIn"
            } else {
                "In"
            };
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| bad("a set needs parentheses: k in (a,b)"))?;
            let values = inner.split(',').map(|v| v.trim().to_string()).collect();
            exprs.push(req(k, op, Some(values)));
        } else if let Some((k, v)) = term.split_once("!=") {
            exprs.push(req(k, "NotIn", Some(vec![v.trim().to_string()])));
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.insert(k.trim().to_string(), v.trim().to_string());
        } else if let Some(k) = term.strip_prefix('!') {
            exprs.push(req(k, "DoesNotExist", None));
        } else {
            exprs.push(req(term, "Exists", None));
        }
    }
    if labels.is_empty() && exprs.is_empty() {
        return Err(bad("selects every pod: name at least one label"));
    }
    Ok(LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

/// Splits at the commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The selector as a `labelSelector` query value, to list the pods it selects.
pub fn selector_query(sel: &LabelSelector) -> String {
    let mut terms: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        terms.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    terms.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_as_kubectl_spells_them() {
        assert_eq!(
            Target::parse("deploy/web").unwrap(),
            Target::Deployment("web".into())
        );
        assert_eq!(
            Target::parse("pod/web-1").unwrap(),
            Target::Pod("web-1".into())
        );
        assert_eq!(
            Target::parse("sts/db").unwrap(),
            Target::StatefulSet("db".into())
        );
        for bad in ["web", "deploy/", "svc/web", "deploy/a/b"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn selectors_parse_into_labels_and_expressions_and_back() {
        let sel = parse_selector("app=web, tier!=db,env in (a, b),canary,!legacy").unwrap();
        assert_eq!(
            sel.match_labels,
            Some(BTreeMap::from([("app".to_string(), "web".to_string())]))
        );
        let ops: Vec<(&str, &str)> = sel
            .match_expressions
            .iter()
            .flatten()
            .map(|e| (e.key.as_str(), e.operator.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                ("tier", "NotIn"),
                ("env", "In"),
                ("canary", "Exists"),
                ("legacy", "DoesNotExist")
            ]
        );
        assert_eq!(
            selector_query(&sel),
            "app=web,tier notin (db),env in (a,b),canary,!legacy"
        );
        assert!(parse_selector("").is_err());
        assert!(parse_selector("a in b").is_err());
    }
}
