use super::*;

fn term(w: &When, i: usize) -> (&Operand, &Test) {
    (&w.terms[i].operand, &w.terms[i].test)
}

fn cap(s: &str) -> Operand {
    Operand::Capture(s.into())
}

#[test]
fn the_documented_examples_parse_into_their_terms() {
    let w = parse(r#"r.URL.Path != "/healthz""#).unwrap();
    assert_eq!(
        term(&w, 0),
        (
            &cap("r.URL.Path"),
            &Test::Str(StrOp::Ne, b"/healthz".to_vec())
        )
    );
    assert_eq!(w.expr, Expr::Term(0));

    let w = parse("err != nil").unwrap();
    assert_eq!(term(&w, 0), (&cap("err"), &Test::Nil(false)));

    let w = parse("duration > 100ms").unwrap();
    assert_eq!(
        term(&w, 0),
        (&Operand::Duration, &Test::Int(CmpOp::Gt, 100_000_000))
    );

    let w = parse(r#"hasPrefix(o.Customer.Name, "acme") && len(o.Items) > 10"#).unwrap();
    assert_eq!(
        term(&w, 0),
        (
            &cap("o.Customer.Name"),
            &Test::Str(StrOp::HasPrefix, b"acme".to_vec())
        )
    );
    assert_eq!(
        term(&w, 1),
        (&cap("len(o.Items)"), &Test::Int(CmpOp::Gt, 10))
    );
    assert_eq!(
        w.expr,
        Expr::And(Box::new(Expr::Term(0)), Box::new(Expr::Term(1)))
    );
    assert_eq!(w.terms[1].text, "len(o.Items) > 10");
}

#[test]
fn precedence_parentheses_negation_and_literals() {
    // && binds tighter than ||; ! applies to the next unary.
    let w = parse("a == 1 || b == 2 && !(c < -3 || ok)").unwrap();
    let t = |i| Box::new(Expr::Term(i));
    assert_eq!(
        w.expr,
        Expr::Or(
            t(0),
            Box::new(Expr::And(
                t(1),
                Box::new(Expr::Not(Box::new(Expr::Or(t(2), t(3)))))
            ))
        )
    );
    assert_eq!(term(&w, 2).1, &Test::Int(CmpOp::Lt, -3));
    assert_eq!(term(&w, 3), (&cap("ok"), &Test::Bool(true)));
    assert_eq!(
        parse("x >= 0x10").unwrap().terms[0].test,
        Test::Int(CmpOp::Ge, 16)
    );
    assert_eq!(
        parse("x <= 18446744073709551615").unwrap().terms[0].test,
        Test::Int(CmpOp::Le, u64::MAX as i128)
    );
    assert_eq!(
        parse("ok != true").unwrap().terms[0].test,
        Test::Bool(false)
    );
    assert_eq!(
        parse("ok == false").unwrap().terms[0].test,
        Test::Bool(false)
    );
    assert_eq!(parse("p == nil").unwrap().terms[0].test, Test::Nil(true));
    assert_eq!(
        parse(r#"s == "a\"b\\c\n\x41é""#).unwrap().terms[0].test,
        Test::Str(StrOp::Eq, "a\"b\\c\nAé".as_bytes().to_vec())
    );
    assert_eq!(
        parse("buf[:n] == \"GET\"").unwrap().terms[0].operand,
        cap("buf[:n]")
    );
    for (d, ns) in [
        ("1.5s", 1_500_000_000),
        ("250us", 250_000),
        ("10ns", 10),
        ("2m", 120_000_000_000),
    ] {
        assert_eq!(
            parse(&format!("duration >= {d}")).unwrap().terms[0].test,
            Test::Int(CmpOp::Ge, ns),
            "{d}"
        );
    }
}

#[test]
fn bad_predicates_name_the_place_and_the_fix() {
    for (text, at, says) in [
        ("", 1, "is empty"),
        ("err !=", 7, "expected a literal"),
        ("err != nil &&", 14, "expected a value"),
        (
            "(x == 1",
            8,
            "expected `&&`, `||` or `)` to close the `(` at character 1",
        ),
        ("x == 1 y == 2", 8, "expected `&&`, `||` or the end"),
        ("s < \"a\"", 5, "strings compare with == or != only"),
        ("p > nil", 5, "nil compare with == or != only"),
        ("x == 10ms", 6, "a duration compares with `duration` only"),
        ("duration > 10", 12, "expected a duration"),
        ("x == 99999999999999999999", 6, "expected an integer"),
        ("s == \"abc", 10, "no closing quote"),
        ("s == \"\\q\"", 7, "unknown escape"),
        ("hasPrefix(s \"a\")", 13, "expected `,`"),
        ("len(x > 1", 10, "unbalanced"),
        // Common slips are told the fix.
        ("x = 1", 3, "`=` is not a comparison: write `==`"),
        (
            "a == 1 and b == 2",
            8,
            "join terms with `&&` (and) or `||` (or)",
        ),
        (
            "a == 1 OR b == 2",
            8,
            "join terms with `&&` (and) or `||` (or)",
        ),
        ("a == 1 & b == 2", 8, "join terms with `&&`"),
        ("(a == 1 | b == 2)", 9, "join terms with `&&`"),
        ("s == 'GET'", 6, "strings take double quotes"),
        ("hasPrefix(s, 'a')", 14, "strings take double quotes"),
        ("x > 1.5", 5, "a float cannot be compared"),
        (
            "strings.HasPrefix(s, \"a\")",
            1,
            "write hasPrefix(value, \"prefix\")",
        ),
        ("p startsWith \"/a\"", 3, "a term is `value op literal`"),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.message.contains(says), "{text:?}: {e}");
        assert_eq!(e.at, at, "{text:?}: {e}");
    }
    let many = (0..=MAX_TERMS)
        .map(|i| format!("x{i} == 1"))
        .collect::<Vec<_>>()
        .join(" || ");
    assert!(parse(&many)
        .unwrap_err()
        .message
        .contains("more than 16 terms"));
    let most = (0..MAX_TERMS)
        .map(|i| format!("x{i} == 1"))
        .collect::<Vec<_>>()
        .join(" || ");
    assert_eq!(parse(&most).unwrap().terms.len(), MAX_TERMS);
}

#[test]
fn evaluation_is_three_valued_until_every_term_is_known() {
    // An entry term and a return term: at entry the result decides only when the entry
    // term alone does.
    let w = parse("len(o.Items) > 10 && duration > 1ms").unwrap();
    let at_entry = |items: i128| w.eval(|i| (i == 0).then_some(Value::Int(items)));
    assert_eq!(at_entry(3), Truth::False);
    assert_eq!(at_entry(30), Truth::Unknown);
    let at_return =
        |items: i128, d: i128| w.eval(|i| Some(Value::Int(if i == 0 { items } else { d })));
    assert_eq!(at_return(30, 2_000_000), Truth::True);
    assert_eq!(at_return(30, 999_999), Truth::False);

    let w = parse("err != nil || duration > 1s").unwrap();
    assert_eq!(
        w.eval(|i| (i == 0).then_some(Value::IsNil(false))),
        Truth::True
    );
    assert_eq!(
        w.eval(|i| (i == 0).then_some(Value::IsNil(true))),
        Truth::Unknown
    );
    assert_eq!(
        parse("!(duration > 1s)").unwrap().eval(|_| None),
        Truth::Unknown
    );
}

#[test]
fn strings_cut_short_equal_nothing_but_keep_their_prefix() {
    let cut = Value::Str {
        bytes: b"/api/v1/orders".to_vec(),
        truncated: true,
    };
    let whole = Value::Str {
        bytes: b"/api/v1/orders".to_vec(),
        truncated: false,
    };
    let eq = Test::Str(StrOp::Eq, b"/api/v1/orders".to_vec());
    let ne = Test::Str(StrOp::Ne, b"/api/v1/orders".to_vec());
    let pre = Test::Str(StrOp::HasPrefix, b"/api/".to_vec());
    assert!(eq.passes(&whole) && !eq.passes(&cut));
    assert!(!ne.passes(&whole) && ne.passes(&cut));
    assert!(pre.passes(&whole) && pre.passes(&cut));
    // A path through a nil pointer fails every comparison.
    for t in [eq, ne, pre, Test::Int(CmpOp::Ne, 0), Test::Bool(false)] {
        assert!(!t.passes(&Value::Unreadable), "{t:?}");
    }
}

#[test]
fn deep_nesting_and_long_conditions_are_refused_with_their_limit() {
    // 20,000 parentheses and 200,000 `!` once overflowed the stack (exit 134).
    for text in [
        format!("{}x == 1{}", "(".repeat(20_000), ")".repeat(20_000)),
        format!("{}ok", "!".repeat(200_000)),
        format!("{}ok", "!".repeat(MAX_DEPTH + 1)),
    ] {
        let e = parse(&text).unwrap_err();
        assert!(
            e.message.contains("more than 32 deep") || e.message.contains("characters long"),
            "{e}"
        );
        // The message quotes a part of the condition, not all of it.
        assert!(e.to_string().len() < 300, "{e}");
    }
    let e = parse(&format!("{}ok", "!".repeat(MAX_DEPTH + 1))).unwrap_err();
    assert!(
        e.message.contains("nests `(` and `!` more than 32 deep"),
        "{e}"
    );
    assert_eq!(e.at, MAX_DEPTH + 1);
    let deepest = format!("{}x == 1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    assert_eq!(parse(&deepest).unwrap().terms.len(), 1);
    // (32 `!` and a term would be 33 steps.)
    assert!(parse(&format!("{}ok", "!".repeat(MAX_DEPTH - 1))).is_ok());

    // The CRD schema's 4096 characters, in every mode.
    let pad = |n: usize| format!("x == 1{}", " ".repeat(n - 6));
    assert_eq!(pad(MAX_WHEN_CHARS).chars().count(), MAX_WHEN_CHARS);
    assert!(parse(&pad(MAX_WHEN_CHARS)).is_ok());
    let e = parse(&pad(4215)).unwrap_err();
    assert!(
        e.message
            .contains("is 4215 characters long; a condition has at most 4096"),
        "{e}"
    );
}

#[test]
fn an_error_in_a_long_condition_quotes_the_place_not_the_whole() {
    let many = (1..=MAX_TERMS + 1)
        .map(|i| format!("a.B.C.D.E.field{i} == 123456"))
        .collect::<Vec<_>>()
        .join(" || ");
    assert!(many.len() > 400);
    let e = parse(&many).unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("more than 16 terms"), "{shown}");
    // Points at the 17th term and quotes the characters around it.
    let at17 = many.find("a.B.C.D.E.field17").unwrap() + 1;
    assert_eq!(e.at, at17, "{shown}");
    assert!(
        shown.ends_with("of 514: \"….B.C.D.E.field16 == 123456 || a.B.C.D.E.field17 == 123456\")"),
        "{shown}"
    );
    assert!(shown.len() < 250, "{} characters: {shown}", shown.len());
    // A short condition is quoted whole.
    let e = parse("x == 1 y == 2").unwrap_err();
    assert!(
        e.to_string()
            .ends_with("(at character 8 of \"x == 1 y == 2\")"),
        "{e}"
    );
}

#[test]
fn what_the_kernel_cannot_hold_is_refused_without_a_binary() {
    // A string literal longer than the in-kernel buffer.
    let ok = format!("s == \"{}\"", "a".repeat(MAX_STRING_BYTES));
    assert!(parse(&ok).is_ok());
    let e = parse(&format!(
        "hasPrefix(s, \"{}\")",
        "a".repeat(MAX_STRING_BYTES + 1)
    ))
    .unwrap_err();
    assert!(
        e.message
            .contains("the string is 65 bytes; at most 64 can be compared"),
        "{e}"
    );
    // The term is named, and pointed at.
    assert!(e.message.starts_with("`hasPrefix(s, \"aaaa"), "{e}");
    assert_eq!(e.at, 1, "{e}");
    // 16 terms, 15 `||` and two `!`: 33 steps.
    let terms: Vec<String> = (0..MAX_TERMS).map(|i| format!("x{i} == 1")).collect();
    let steps33 = format!("!!({})", terms.join(" || "));
    let e = parse(&steps33).unwrap_err();
    assert!(
        e.message
            .contains("has 33 steps (terms and `&&`, `||`, `!`); at most 32"),
        "{e}"
    );
    let steps32 = format!("!({})", terms.join(" || "));
    assert_eq!(parse(&steps32).unwrap().steps(), MAX_STEPS);
}

#[test]
fn a_literal_first_and_a_duration_out_of_range_are_told_so() {
    for (text, says) in [
        (
            "nil == r1",
            "`nil` is a literal: write the value first, as in `r1 == nil`",
        ),
        (
            "10 < len(xs)",
            "`10` is a literal: write the value first, as in `len(xs) > 10`",
        ),
        (
            "true != ok",
            "`true` is a literal: write the value first, as in `ok != true`",
        ),
        (
            "-1 == n",
            "`-1` is a literal: write the value first, as in `n == -1`",
        ),
        (
            "1ms < duration",
            "`1ms` is a literal: write the value first, as in `duration > 1ms`",
        ),
        ("nil == nil", "`nil` is a literal: write the value first"),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.message.contains(says), "{text:?}: {e}");
        assert_eq!(e.at, 1, "{text:?}: {e}");
    }
    let e = parse("duration > 18446744073709551615ns").unwrap_err();
    assert!(e.message.contains("the duration is out of range"), "{e}");
    assert_eq!(e.at, 12);
    assert!(parse("duration > 9999999999s").is_ok());
    let e = parse("duration > 10000000000s").unwrap_err();
    assert!(e.message.contains("out of range"), "{e}");
}
