use super::*;
use crate::load_specs;

fn ok(expr: &str) -> OneLiner {
    parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

fn texts(items: &[Item]) -> Vec<&str> {
    items.iter().map(|i| i.text.as_str()).collect()
}

/// The error of `expr`, and the text its caret points at.
fn bad(expr: &str) -> (OneLinerError, &str) {
    let e = parse(expr).expect_err(expr);
    let at = e.at.unwrap_or_else(|| panic!("{expr}: no place in {e}"));
    (e, &expr[at..])
}

fn exe() -> Selector {
    Selector {
        executable: Some("/usr/local/bin/app".into()),
        ..Selector::default()
    }
}

fn spec_err(expr: &str, opts: &TraceOptions) -> OneLinerError {
    build_spec(expr, opts, exe(), None).expect_err(expr)
}

#[test]
fn go_functions_methods_and_results() {
    let o = ok("main.work(id, name) -> r0");
    assert_eq!(
        o.point,
        Point::Symbol {
            name: "main.work".into(),
            at: 0
        }
    );
    assert_eq!(texts(&o.args), ["id", "name"]);
    assert_eq!(texts(&o.results), ["r0"]);
    assert_eq!(o.args[1].at, "main.work(id, ".len());

    let o = ok("net/http.(*Client).Get(url) -> err");
    assert_eq!(o.point.text(), "net/http.(*Client).Get");
    assert_eq!(
        (texts(&o.args), texts(&o.results)),
        (vec!["url"], vec!["err"])
    );

    let o = ok("main.(*Ledger).Post(e.Account, e.Cents) -> err");
    assert_eq!(o.point.text(), "main.(*Ledger).Post");
    assert_eq!(texts(&o.args), ["e.Account", "e.Cents"]);

    let o = ok("main.handle(len(o.Items), r.URL.Path)");
    assert_eq!(texts(&o.args), ["len(o.Items)", "r.URL.Path"]);
    assert!(o.results.is_empty());

    // Several results, bare or as Go writes them.
    for e in [
        "main.open(path) -> f, err",
        "main.open(path) -> (f, err)",
        "main.open(path)->(f,err)",
    ] {
        assert_eq!(texts(&ok(e).results), ["f", "err"], "{e}");
    }
    // Spaces around the parts are fine.
    let o = ok("  main.work ( id ) ->  r0  ");
    assert_eq!(
        (o.point.text(), texts(&o.args), texts(&o.results)),
        ("main.work".into(), vec!["id"], vec!["r0"])
    );
}

#[test]
fn a_symbol_may_hold_brackets_of_its_own() {
    // No captures: the empty group is the list, `(*T)` belongs to the symbol.
    let o = ok("main.(*T).M()");
    assert_eq!(o.point.text(), "main.(*T).M");
    assert!(o.args.is_empty() && o.results.is_empty());
    // Without a list at all.
    for e in ["main.(*T).M", "main.tick", "main.tick()"] {
        let o = ok(e);
        assert!(o.args.is_empty(), "{e}");
        assert_eq!(o.point.text(), e.trim_end_matches("()"));
    }
    let o = ok("main.(*T).M -> err");
    assert_eq!(
        (o.point.text(), texts(&o.results)),
        ("main.(*T).M".into(), vec!["err"])
    );
    // Generic instantiations: brackets, and parentheses and spaces inside them.
    let o = ok("main.Sum[go.shape.int64](xs) -> r0");
    assert_eq!(o.point.text(), "main.Sum[go.shape.int64]");
    assert_eq!(texts(&o.args), ["xs"]);
    let o = ok("main.F[go.shape.interface { M() }](x)");
    assert_eq!(o.point.text(), "main.F[go.shape.interface { M() }]");
    assert_eq!(texts(&o.args), ["x"]);
    let o = ok("main.(*List[go.shape.string]).Len() -> r0");
    assert_eq!(o.point.text(), "main.(*List[go.shape.string]).Len");
    let o = ok("main.main.func1()");
    assert_eq!(o.point.text(), "main.main.func1");
}

#[test]
fn c_functions_and_usdt_probes() {
    let o = ok("createStringObject(ptr[:len], len) -> r0");
    assert_eq!(o.point.text(), "createStringObject");
    assert_eq!(texts(&o.args), ["ptr[:len]", "len"]);
    let o = ok("usdt:postgresql:query__start(arg0)");
    assert_eq!(
        o.point,
        Point::Usdt {
            name: "postgresql:query__start".into(),
            at: 0
        }
    );
    assert_eq!(o.point.text(), "usdt:postgresql:query__start");
    assert_eq!(texts(&o.args), ["arg0"]);
    assert!(ok("usdt:python:function__entry").args.is_empty());
}

#[test]
fn syntax_mistakes_point_at_the_mistake() {
    for (expr, points_at, says) in [
        ("", "", "names no function"),
        ("(id) -> r0", "(id) -> r0", "names no function"),
        ("main.work(id, name", "(id, name", "never closed"),
        ("main.work(id))", ")", "closes nothing"),
        (
            "main.work(id]",
            "]",
            "does not close the `(` at column 10: expected `)`",
        ),
        (
            "main.work(id,, name)",
            ", name)",
            "empty capture (two commas",
        ),
        (
            "main.work(,id)",
            ",id)",
            "empty capture (two commas, or a comma at the start)",
        ),
        ("main.work(id,)", ")", "a comma at the end"),
        (
            "main.work(id) -> r0 -> r1",
            "-> r1",
            "a second `->` (the first is at column 15)",
        ),
        ("main.work(id) ->", "->", "expected a result after `->`"),
        ("main.work(id) -> r0,", "", "a comma at the end"),
        ("main.work(1+2)", "1+2)", "`1+2` is not a capture"),
        ("main.work(r..URL)", "r..URL)", "empty element"),
        (
            "main.work(buf[:n+1])",
            "buf[:n+1])",
            "PTR[:LEN] takes two C names",
        ),
        ("main work(id)", " work(id)", "a space in the symbol"),
        (
            "uprobe:/bin/app:main.work(id)",
            ":/bin/app:main.work(id)",
            "`:` in a symbol",
        ),
        ("main.(*T)", ".(*T)", "is not a function's name"),
        ("net/http.(id)", ".(id)", "is not a function's name"),
        (
            "usdt:postgresql(arg0)",
            "(arg0)",
            "expected `:NAME` after the provider",
        ),
        (
            "usdt:pg sql:q(arg0)",
            "pg sql:q(arg0)",
            "the provider is not a word",
        ),
        ("usdt:postgresql:query-start", "query-start", "not a word"),
        (
            "usdt:postgresql:query__start(arg0) -> r0",
            "-> r0",
            "no result",
        ),
        ("main.work(id)\n", "\n", "a control character"),
    ] {
        let (e, at) = bad(expr);
        assert_eq!(at, points_at, "{expr:?}: {e}");
        assert!(e.message.contains(says), "{expr:?}: {e}");
    }
}

#[test]
fn the_message_quotes_the_expression_with_a_caret_under_the_mistake() {
    let e = parse("main.work(id,, name)").unwrap_err().to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 3, "{e}");
    assert!(
        lines[0].starts_with("invalid probe: an empty capture"),
        "{e}"
    );
    assert_eq!(lines[1], "  main.work(id,, name)");
    assert_eq!(lines[2], "               ^");
    // Columns count characters, not bytes.
    let e = parse("main.Größe(x,,y)").unwrap_err().to_string();
    assert_eq!(e.lines().nth(2), Some("               ^"), "{e}");
    // A control character is shown as `?`, one for one.
    let e = parse("main.f(a)\tx").unwrap_err().to_string();
    assert_eq!(e.lines().nth(1), Some("  main.f(a)?x"), "{e}");
    assert_eq!(e.lines().nth(2), Some("           ^"), "{e}");
}

#[test]
fn parsing_is_bounded() {
    let long = format!("main.f({})", "a,".repeat(MAX_EXPR_BYTES));
    let e = parse(&long).unwrap_err();
    assert!(
        e.message.contains("at most 4096") && e.expr.len() < 100,
        "{e}"
    );
    let deep = format!(
        "main.F{}{}",
        "[".repeat(MAX_NESTING + 1),
        "]".repeat(MAX_NESTING + 1)
    );
    let (e, at) = bad(&deep);
    assert!(e.message.contains("more than 32 deep"), "{e}");
    // At the first bracket too many: it and every closer are left.
    assert_eq!(at.len(), 1 + MAX_NESTING + 1);
    // Deep but within the limit: parsed without recursion.
    let ok_deep = format!(
        "main.F{}{}(x)",
        "[".repeat(MAX_NESTING),
        "]".repeat(MAX_NESTING)
    );
    assert_eq!(texts(&ok(&ok_deep).args), ["x"]);
    // Long runs of closers or commas are linear work.
    let closers = format!("main.f(x){}", ")".repeat(MAX_EXPR_BYTES - 10));
    assert!(bad(&closers).0.message.contains("closes nothing"));
}

#[test]
fn the_spec_it_stands_for() {
    let opts = TraceOptions {
        signature: Some("func(id int, name string) (int, error)".into()),
        when: Some("id > 3".into()),
        sample: Some(0.5),
        hist: true,
        library: None,
    };
    let s = build_spec("main.work(id, name) -> r0", &opts, exe(), None).unwrap();
    assert_eq!(s.display_name(), "main-work");
    assert_eq!(s.spec.selector, exe());
    let p = &s.spec.probes[0];
    assert_eq!(p.symbol, "main.work");
    assert_eq!(p.capture, ["id", "name", "r0"]);
    assert!(p.latency && p.hist && p.redact);
    assert_eq!(p.when.as_deref(), Some("id > 3"));
    assert_eq!(p.sample, Some(0.5));
    assert_eq!(p.signature, opts.signature);
    // It survives YAML: what `--dry-run` prints loads as the same spec.
    let yaml = spec_yaml(&s);
    assert!(!yaml.contains("status"), "{yaml}");
    let back = load_specs(&yaml, "dry-run.yaml").unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!((&back[0].metadata, &back[0].spec), (&s.metadata, &s.spec));

    let u = build_spec(
        "usdt:postgresql:query__start(query)",
        &TraceOptions {
            signature: Some("(const char *query)".into()),
            ..TraceOptions::default()
        },
        exe(),
        Some("queries"),
    )
    .unwrap();
    let p = &u.spec.probes[0];
    assert_eq!(
        (p.symbol.as_str(), p.usdt.as_deref()),
        ("", Some("postgresql:query__start"))
    );
    assert!(!p.latency);
    assert_eq!(u.display_name(), "queries");
    let c = build_spec(
        "createStringObject(ptr[:len]) -> r0",
        &TraceOptions {
            signature: Some("robj *createStringObject(const char *ptr, size_t len)".into()),
            ..TraceOptions::default()
        },
        exe(),
        None,
    )
    .unwrap();
    assert_eq!(c.spec.probes[0].capture, ["ptr[:len]", "r0"]);
    assert_eq!(c.display_name(), "createstringobject");
}

#[test]
fn spec_names_are_valid_metadata_names() {
    for (point, name) in [
        ("net/http.(*Client).Get", "net-http-client-get"),
        ("main.(*Ledger).Post", "main-ledger-post"),
        ("main.Sum[go.shape.int64]", "main-sum-go-shape-int64"),
        (
            "usdt:postgresql:query__start",
            "usdt-postgresql-query-start",
        ),
        ("_Z3foov", "z3foov"),
        ("(*)", "probe"),
    ] {
        assert_eq!(spec_name(point), name, "{point}");
    }
    let long = spec_name(&"a.b".repeat(100));
    assert!(long.len() <= 50 && !long.ends_with('-'), "{long}");
}

#[test]
fn validation_issues_point_into_the_expression_or_name_the_flag() {
    let sig = |s: &str| TraceOptions {
        signature: Some(s.into()),
        ..TraceOptions::default()
    };
    // A capture the signature lacks: the caret is under it.
    let e = spec_err(
        "main.work(id, nme) -> r0",
        &sig("func(id int, name string) int"),
    );
    assert_eq!(e.at, Some("main.work(id, ".len()), "{e}");
    assert!(
        e.message.contains("\"nme\" is not a parameter")
            && e.message.contains("known names: id, name, r0"),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("\n  main.work(id, nme) -> r0\n                ^"),
        "{e}"
    );
    // A broken signature names --signature.
    let e = spec_err("main.work(id)", &sig("func(id int"));
    assert_eq!(e.flag, Some("--signature"), "{e}");
    assert!(e.to_string().starts_with("--signature: invalid"), "{e}");
    assert!(e.to_string().ends_with("(probe 'main.work(id)')"), "{e}");
    // --when, --sample, --library.
    let e = spec_err(
        "main.work(id)",
        &TraceOptions {
            when: Some("id = 3".into()),
            ..TraceOptions::default()
        },
    );
    assert_eq!(e.flag, Some("--when"), "{e}");
    assert!(e.message.contains("=="), "{e}");
    let e = spec_err(
        "main.work(id)",
        &TraceOptions {
            sample: Some(2.0),
            ..TraceOptions::default()
        },
    );
    assert_eq!(e.flag, Some("--sample"), "{e}");
    let e = spec_err(
        "SSL_write(num)",
        &TraceOptions {
            library: Some("libssl.so[".into()),
            ..TraceOptions::default()
        },
    );
    assert_eq!(e.flag, Some("--library"), "{e}");
    // Too many captures: the caret is under the first one too many.
    let nine = "main.f(a, b, c, d, e, f, g, h) -> i";
    let e = spec_err(nine, &TraceOptions::default());
    assert_eq!(e.at, nine.rfind('i'), "{e}");
    assert!(e.message.contains("at most 8"), "{e}");
    // The same value twice.
    let e = spec_err("main.f(a) -> a", &TraceOptions::default());
    assert_eq!(e.at, Some("main.f(a) -> ".len()), "{e}");
    // A USDT probe has no duration for a histogram.
    let e = spec_err(
        "usdt:postgresql:query__start",
        &TraceOptions {
            hist: true,
            ..TraceOptions::default()
        },
    );
    assert!(e.to_string().starts_with("--hist: a USDT probe"), "{e}");
    // A selector the flags made wrong.
    let e = build_spec(
        "main.f()",
        &TraceOptions::default(),
        Selector {
            executable: Some("app".into()),
            ..Selector::default()
        },
        None,
    )
    .unwrap_err();
    assert_eq!(e.flag, Some("selector"), "{e}");
}

#[test]
fn entry_values_and_results_go_on_their_side_of_the_arrow() {
    // By position, without a signature.
    let e = spec_err("main.work(id, r0)", &TraceOptions::default());
    assert_eq!(e.at, Some("main.work(id, ".len()), "{e}");
    assert!(
        e.message.contains("`r0` is a result") && e.message.contains("'main.work(...) -> r0'"),
        "{e}"
    );
    let e = spec_err("main.work(id) -> p1", &TraceOptions::default());
    assert!(e.message.contains("`p1` is a parameter"), "{e}");
    // By name, with a Go signature: field paths too.
    let go = TraceOptions {
        signature: Some("func(r *http.Request) (n int, err error)".into()),
        ..TraceOptions::default()
    };
    let e = spec_err("main.h(err)", &go);
    assert!(e.message.contains("`err` is a result"), "{e}");
    let e = spec_err("main.h() -> r.URL.Path", &go);
    assert!(e.message.contains("`r.URL.Path` is a parameter"), "{e}");
    assert!(build_spec("main.h(r.URL.Path) -> n, err", &go, exe(), None).is_ok());
    // And with a C prototype.
    let c = TraceOptions {
        signature: Some("int SSL_write(void *ssl, const void *buf, int num)".into()),
        ..TraceOptions::default()
    };
    assert!(spec_err("SSL_write(r0)", &c)
        .message
        .contains("`r0` is a result"));
    assert!(spec_err("SSL_write() -> buf[:num]", &c)
        .message
        .contains("is a parameter"));
    assert!(build_spec("SSL_write(buf[:num]) -> r0", &c, exe(), None).is_ok());
}

/// A small deterministic generator (xorshift64): the same inputs on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn any_text_parses_or_fails_with_a_place_in_it() {
    const PIECES: &[&str] = &[
        "(", ")", "[", "]", "{", "}", ",", "->", "-", ">", ".", "*", "/", " ", ":", "_", "a", "id",
        "main", "usdt:", "r0", "len(", "[:", "é", "\t", "\"", "'", "0",
    ];
    let seeds = [
        "main.work(id, name) -> r0",
        "net/http.(*Client).Get(url) -> err",
        "main.(*Ledger).Post(e.Account, e.Cents) -> err",
        "main.F[go.shape.interface { M() }](x)",
        "usdt:postgresql:query__start(arg0)",
        "createStringObject(ptr[:len]) -> (a, b)",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..20_000 {
        let mut text: String = if round % 2 == 0 {
            seeds[rng.below(seeds.len())].to_string()
        } else {
            String::new()
        };
        for _ in 0..rng.below(12) {
            let piece = PIECES[rng.below(PIECES.len())];
            let mut at = rng.below(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            if rng.below(3) == 0 && at < text.len() {
                let end = (at + 1..=text.len())
                    .find(|e| text.is_char_boundary(*e))
                    .unwrap();
                text.replace_range(at..end, "");
            } else {
                text.insert_str(at, piece);
            }
        }
        match parse(&text) {
            Ok(o) => {
                for item in o.captures() {
                    assert!(
                        text[item.at..].starts_with(&item.text),
                        "{text:?}: {item:?}"
                    );
                }
                assert!(
                    text[o.point.at()..].starts_with(&o.point.text()),
                    "{text:?}"
                );
                let _ = build_spec(&text, &TraceOptions::default(), exe(), None);
            }
            Err(e) => {
                if let Some(at) = e.at {
                    assert!(
                        at <= text.len() && text.is_char_boundary(at),
                        "{text:?}: {e:?}"
                    );
                }
                assert!(!e.to_string().is_empty());
            }
        }
    }
}
