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
    let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  \
        selector: {executable: /bin/x}\n  probes: [{symbol: main.f}]\n";
    let s = &load_specs(text, "a.yaml").unwrap()[0];
    assert_eq!(s.spec.limits.max_string_bytes, 256);
    assert_eq!(s.spec.limits.events_per_second, 10_000);
}

#[test]
fn malformed_yaml_names_file_and_line() {
    let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  \
        selector: {executable: /bin/x\n  probes: []\n";
    let e = load_specs(text, "bad.yaml").unwrap_err().to_string();
    assert!(e.starts_with("bad.yaml: document 1:"), "{e}");
    assert!(e.contains("line"), "{e}");
}

#[test]
fn unknown_fields_and_wrong_kinds_are_rejected() {
    let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  \
        selector: {executable: /bin/x}\n  probes: [{symbol: main.f, captures: [x]}]\n";
    let e = load_specs(text, "typo.yaml").unwrap_err().to_string();
    assert!(e.contains("unknown field `captures`"), "{e}");
    let e = load_specs("apiVersion: v1\nkind: Pod\n", "pod.yaml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a ProbeSpec"), "{e}");
    let e = load_specs(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nspec: {selector: \
        {executable: /x}, probes: []}\n",
        "noname.yaml",
    )
    .unwrap_err()
    .to_string();
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
    let text = "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {name: a}\nspec:\n  \
        selector: {executable: /bin/x}\n  probes: [{symbol: main.f, signature: \"func(n int)\", capture: [n, n]}]\n";
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
    let text = format!(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: \
        a}}\nspec:\n  selector: {{executable: /bin/x}}\n  probes:\n{probes}    - {{symbol: \
            {long_symbol}, capture: [a, b, c, d, e, f, g, h, i]}}\n"
    );
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

fn spec_with(probes: &str) -> ProbeSpec {
    let text = format!(
        "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: \
        a}}\nspec:\n  selector: {{executable: /bin/x}}\n  probes:\n{probes}"
    );
    load_specs(&text, "c.yaml").unwrap().remove(0)
}

#[test]
fn the_design_c_and_usdt_probes_validate() {
    let s = spec_with(
        r#"    - symbol: createStringObject
      signature: "robj *createStringObject(const char *ptr, size_t len)"
      capture: ["ptr[:len]", r0]
      latency: true
    - symbol: SSL_write
      library: "libssl.so*"
      signature: "int SSL_write(void *ssl, const void *buf, int num)"
      capture: [num, r0, "buf[:num]"]
    - usdt: "postgresql:query__start"
      signature: "(const char *query)"
      capture: [query]
    - usdt: "python:function__entry"
      capture: [arg0, arg2, "arg0[:arg2]"]
"#,
    );
    assert_eq!(validate_spec(&s), vec![]);
}

#[test]
fn c_captures_are_checked_against_the_prototype() {
    let s = spec_with(
        r#"    - {symbol: f, signature: "void f(const char *s, size_t n, double d, ...)",
       capture: [r0, x, "n[:s]", "s[:d]", "s[:r0]", "s[:n]", p1]}
    - {symbol: g, signature: "(int a)"}
    - {symbol: h, signature: "int h(int a", capture: [a]}
    - {usdt: "p:n", signature: "int f(int a)"}
    - {usdt: "p:n", signature: "func(a int)"}
    - {usdt: "p:n", signature: "(char *q)", capture: [r0, q]}
    - {usdt: "p:n", capture: [query, arg1, "arg0[:arg1]", arg123], latency: true}
"#,
    );
    let issues = validate_spec(&s);
    let got: Vec<(&str, &str)> = issues
        .iter()
        .map(|i| (i.field.as_str(), i.message.as_str()))
        .collect();
    let want: &[(&str, &str)] = &[
        (
            "spec.probes[0].capture[0]",
            "returns void: there is no result",
        ),
        (
            "spec.probes[0].capture[1]",
            "\"x\" is not a parameter or the result of \"void f(const \
            char *s, size_t n, double d, ...)\"; known names: s, n, d; arguments passed through \
                `...` cannot be captured",
        ),
        ("spec.probes[0].capture[2]", "n is size_t, not a pointer"),
        ("spec.probes[0].capture[3]", "d is double, not an integer"),
        (
            "spec.probes[0].capture[4]",
            "r0 is not a parameter or the result",
        ),
        // A positional name of a named parameter: refused, naming it.
        (
            "spec.probes[0].capture[6]",
            "\"p1\" names parameter 1 by its position, but \"void \
            f(const char *s, size_t n, double d, ...)\" names it \"n\": write n",
        ),
        (
            "spec.probes[1].signature",
            "lacks the function's result type and name",
        ),
        ("spec.probes[2].signature", "invalid C prototype"),
        (
            "spec.probes[3].signature",
            "a USDT probe's signature lists its arguments only",
        ),
        ("spec.probes[4].signature", "is a Go signature"),
        (
            "spec.probes[5].capture[0]",
            "a USDT probe has arguments only, no result",
        ),
        ("spec.probes[6].latency", "has no return to time"),
        (
            "spec.probes[6].capture[0]",
            "without a signature a USDT probe's arguments are arg0, arg1",
        ),
        ("spec.probes[6].capture[3]", "without a signature"),
    ];
    assert_eq!(got.len(), want.len(), "{issues:#?}");
    for ((field, msg), (wf, wm)) in got.iter().zip(want) {
        assert_eq!(field, wf, "{msg}");
        assert!(msg.contains(wm), "{field}: {msg}\nwant: {wm}");
    }
}

#[test]
fn propagate_needs_a_go_latency_probe() {
    let s = spec_with(
        r#"    - {symbol: main.handle, latency: true, propagate: true}
    - {symbol: main.handle, propagate: true}
    - {usdt: "p:n", propagate: true}
    - {symbol: SSL_write, library: "libssl.so*", latency: true, propagate: true}
"#,
    );
    let issues = validate_spec(&s);
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.probes[1].propagate",
            "spec.probes[2].propagate",
            "spec.probes[3].propagate"
        ],
        "{issues:#?}"
    );
    assert!(issues[0].message.contains("latency: true"), "{}", issues[0]);
    assert!(s.spec.probes[0].propagate && !s.spec.probes[1].latency);
}

#[test]
fn the_overhead_budget_defaults_to_2_percent_and_is_a_share_of_one_cpu_or_0_for_none() {
    let spec = |limits: &str| {
        format!("apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: \
            b}}\nspec:\n  selector: {{executable: /bin/x}}\n{limits}  probes: [{{symbol: main.f}}]\n")
    };
    let s = &load_specs(&spec(""), "b.yaml").unwrap()[0];
    assert_eq!(s.spec.limits.max_overhead_percent, 2.0);
    assert_eq!(validate_spec(s), vec![]);
    for bad in ["-1", "100.5", ".nan"] {
        let text = spec(&format!("  limits: {{maxOverheadPercent: {bad}}}\n"));
        let s = &load_specs(&text, "b.yaml").unwrap()[0];
        let issues = validate_spec(s);
        assert!(
            issues
                .iter()
                .any(|i| i.field == "spec.limits.maxOverheadPercent"
                    && i.message.contains("is out of range")),
            "{bad}: {issues:?}"
        );
    }
    for good in ["0", "0.5", "100"] {
        let text = spec(&format!("  limits: {{maxOverheadPercent: {good}}}\n"));
        let s = &load_specs(&text, "b.yaml").unwrap()[0];
        assert_eq!(validate_spec(s), vec![], "{good}");
    }
}

/// The issues of `spec` as (field, message).
fn issues_of(s: &ProbeSpec) -> Vec<(String, String)> {
    validate_spec(s)
        .into_iter()
        .map(|i| (i.field, i.message))
        .collect()
}

mod when;
