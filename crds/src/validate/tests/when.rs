//! Tests of `when:`, `sample`, `hist` and of values named by their field.

use super::*;

#[test]
fn a_when_that_does_not_parse_is_one_issue_with_the_place_and_the_fix() {
    let s = spec_with(
        r#"    - {symbol: main.f, when: "err !="}
    - {symbol: main.f, when: "x = 1"}
"#,
    );
    assert_eq!(
        issues_of(&s),
        [
            (
                "spec.probes[0].when".to_string(),
                "expected a literal: a number, a duration, a \"string\", true, false or nil \
                 (at character 7 of \"err !=\")"
                    .to_string()
            ),
            (
                "spec.probes[1].when".to_string(),
                "`=` is not a comparison: write `==` (at character 3 of \"x = 1\")".to_string()
            ),
        ]
    );
}

#[test]
fn a_when_has_at_most_16_terms() {
    let terms = |n: usize| {
        (0..n)
            .map(|i| format!("n == {i}"))
            .collect::<Vec<_>>()
            .join(" || ")
    };
    let s = spec_with(&format!(
        "    - {{symbol: main.f, signature: \"func(n int)\", when: \"{}\"}}\n    - {{symbol: \
         main.f, signature: \"func(n int)\", when: \"{}\"}}\n",
        terms(16),
        terms(17)
    ));
    let issues = issues_of(&s);
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_eq!(issues[0].0, "spec.probes[1].when");
    assert!(
        issues[0]
            .1
            .starts_with("has more than 16 terms; split the probe or simplify"),
        "{}",
        issues[0].1
    );
}

#[test]
fn duration_needs_a_timed_call() {
    let s = spec_with(
        r#"    - {symbol: main.f, latency: true, when: "duration > 100ms"}
    - {symbol: main.f, when: "duration > 100ms"}
    - {usdt: "p:n", when: "arg0 > 1 && duration > 1ms"}
"#,
    );
    let issues = issues_of(&s);
    assert_eq!(issues.len(), 2, "{issues:#?}");
    assert_eq!(
        issues[0],
        (
            "spec.probes[1].when".to_string(),
            "`duration > 100ms` needs `latency: true` (the call's duration is measured at its \
             return)"
                .to_string()
        )
    );
    // A USDT probe is a point: latency cannot be turned on, so that is not the fix given.
    assert_eq!(issues[1].0, "spec.probes[2].when");
    assert!(
        issues[1]
            .1
            .starts_with("`duration > 1ms`: a USDT probe marks a point in the code, not a call"),
        "{}",
        issues[1].1
    );
    assert!(!issues[1].1.contains("needs `latency: true`"));
}

#[test]
fn when_terms_are_checked_like_captures_and_name_the_term() {
    let s = spec_with(
        r#"    - symbol: main.handle
      signature: "func(w http.ResponseWriter, r *http.Request)"
      capture: [r.URL.Path]
      when: 'r.URL.Path != "/healthz" && req.Method == "GET" && len(r.Header) > 3'
    - symbol: SSL_write
      signature: "int SSL_write(void *ssl, const void *buf, int num)"
      when: 'buf[:num] == "GET" || buf[:n] == "PUT" || r0 < 0'
    - {usdt: "p:n", when: 'arg0 > 1 && query == "x"'}
    - {usdt: "p:n", signature: "(const char *query)", when: 'query == "x" && r0 == 1'}
"#,
    );
    let issues = issues_of(&s);
    let fields: Vec<&str> = issues.iter().map(|i| i.0.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.probes[0].when",
            "spec.probes[1].when",
            "spec.probes[2].when",
            "spec.probes[3].when"
        ],
        "{issues:#?}"
    );
    let want = [
        "term `req.Method == \"GET\"`: \"req.Method\" starts at \"req\"",
        "term `buf[:n] == \"PUT\"`: \"buf[:n]\": n is not a parameter or the result of \"int \
         SSL_write(void *ssl, const void *buf, int num)\"; known names: ssl, buf, num, r0",
        "term `query == \"x\"`: \"query\": without a signature a USDT probe's arguments are \
         arg0, arg1",
        "term `r0 == 1`: \"r0\": a USDT probe has arguments only, no result",
    ];
    for ((_, got), want) in issues.iter().zip(want) {
        assert!(got.starts_with(want), "{got}\nwant: {want}");
    }
    assert!(issues[0].1.contains("known names: w, r"), "{}", issues[0].1);
}

#[test]
fn when_values_need_not_be_captured_and_results_without_a_signature_are_left_to_the_agent() {
    let s = spec_with(
        r#"    - {symbol: main.f, signature: "func(n int) error", when: "n > 3 && r0 != nil"}
    - {symbol: main.g, when: "err != nil || r0 == 3 || resp.StatusCode >= 500"}
    - {symbol: main.place, signature: "func(ctx context.Context, o *Order) (id string, err error)",
       when: 'hasPrefix(o.Customer.Name, "acme") && len(o.Items) > 10 && err == nil'}
    - {symbol: main.h, latency: true, capture: [r0], when: "duration > 100ms || err != nil"}
"#,
    );
    assert_eq!(issues_of(&s), []);
    // With a signature, a result is checked as any value: `err` of an unnamed result is r0.
    let s = spec_with(
        "    - {symbol: main.f, signature: \"func(n int) error\", when: \"err != nil\"}\n",
    );
    let issues = issues_of(&s);
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert!(
        issues[0]
            .1
            .starts_with("term `err != nil`: \"err\" is not a parameter or result")
            && issues[0].1.contains("known names: n, r0"),
        "{}",
        issues[0].1
    );
}

#[test]
fn sample_is_a_share_of_the_calls() {
    for bad in ["0", "-0.5", "1.5", ".nan", ".inf"] {
        let s = spec_with(&format!("    - {{symbol: main.f, sample: {bad}}}\n"));
        let issues = issues_of(&s);
        assert_eq!(issues.len(), 1, "{bad}: {issues:#?}");
        assert_eq!(issues[0].0, "spec.probes[0].sample");
        assert!(
            issues[0].1.starts_with(
                "sample is a share of the calls: more than 0, at most 1 (0.01 keeps 1 in 100), not "
            ),
            "{bad}: {}",
            issues[0].1
        );
    }
    for good in ["0.01", "0.5", "1"] {
        let s = spec_with(&format!("    - {{symbol: main.f, sample: {good}}}\n"));
        assert_eq!(issues_of(&s), [], "{good}");
    }
    // The CRD's rule says the same to kubectl.
    assert!(crate::crds_yaml().contains(when_checks::SAMPLE_RANGE));
}

#[test]
fn a_histogram_needs_the_calls_timed() {
    let s = spec_with("    - {symbol: main.f, hist: true}\n");
    let issues = issues_of(&s);
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_eq!(issues[0].0, "spec.probes[0].hist");
    assert!(
        issues[0].1.contains("needs `latency: true`"),
        "{}",
        issues[0].1
    );
    let s = spec_with("    - {symbol: main.f, hist: true, latency: true}\n");
    assert_eq!(issues_of(&s), []);
}

#[test]
fn a_value_of_the_wrong_type_is_named_by_its_field() {
    let doc = |probe: &str, limits: &str| {
        format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: a}}\nspec:\n  \
             selector: {{executable: /bin/x}}\n  probes:\n    - {{symbol: main.f}}\n    - \
             {{symbol: main.g{probe}}}\n  limits: {{{limits}}}\n"
        )
    };
    for (text, field) in [
        (
            doc(", sample: \"abc\"", ""),
            "spec.probes[1].sample: invalid type: string \"abc\"",
        ),
        (
            doc(", when: [a]", ""),
            "spec.probes[1].when: invalid type: sequence, expected a string",
        ),
        (
            doc("", "maxOverheadPercent: \"abc\""),
            "spec.limits.maxOverheadPercent: invalid type: string \"abc\"",
        ),
        (
            doc(", capture: x", ""),
            "spec.probes[1].capture: invalid type: string \"x\"",
        ),
    ] {
        let e = load_specs(&text, "t.yaml").unwrap_err().to_string();
        assert!(e.starts_with("t.yaml: document 1: "), "{e}");
        assert!(e.contains(field), "{e}");
        assert!(e.contains(" at line "), "{e}");
    }
    // A YAML bool reads as the text `true`, which is not a condition.
    let s = load_specs(&doc(", when: true", ""), "t.yaml")
        .unwrap()
        .remove(0);
    assert_eq!(
        issues_of(&s),
        [(
            "spec.probes[1].when".to_string(),
            "`true` is a literal, not a condition on the call: write a term such as \
             `err != nil`, or leave `when` out to keep every call (at character 1 of \"true\")"
                .to_string()
        )]
    );
    // Two documents: the second's error names it.
    let two = format!("{}---\n{}", doc("", ""), doc(", latency: 3", ""));
    let e = load_specs(&two, "t.yaml").unwrap_err().to_string();
    assert!(
        e.starts_with("t.yaml: document 2: spec.probes[1].latency: invalid type"),
        "{e}"
    );
}

#[test]
fn a_string_longer_than_max_string_bytes_is_refused_where_it_decides_its_term() {
    let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  \
        selector: {executable: /bin/x}\n  probes:\n    - {symbol: main.f, signature: \"func(s \
        string)\", when: 'hasPrefix(s, \"abcdefghX\")'}\n    - {symbol: main.f, signature: \
        \"func(s string)\", when: 's != \"abcdefghX\"'}\n    - {symbol: main.f, signature: \
        \"func(s string)\", when: 's == \"abcdefgh\"'}\n  limits: {maxStringBytes: 8}\n";
    let s = load_specs(text, "t.yaml").unwrap().remove(0);
    let issues = issues_of(&s);
    assert_eq!(issues.len(), 2, "{issues:#?}");
    assert_eq!(issues[0].0, "spec.probes[0].when");
    assert_eq!(
        issues[0].1,
        "`hasPrefix(s, \"abcdefghX\")` can never hold: its string is 9 bytes, and \
         spec.limits.maxStringBytes reads 8 of each string: raise maxStringBytes to at least 9 \
         or shorten the string"
    );
    assert_eq!(issues[1].0, "spec.probes[1].when");
    assert!(
        issues[1].1.starts_with("`s != \"abcdefghX\"` always holds"),
        "{}",
        issues[1].1
    );
}
