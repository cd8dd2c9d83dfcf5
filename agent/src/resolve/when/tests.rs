use super::*;
use crate::abi::filter::{FTF_SIGNED, FTF_STR, FT_GT, FT_NIL, FT_PREFIX};
use crate::abi::GpCapture;
use crate::plan::Returns;

fn cap(name: &str, decode: Decode) -> CapturePlan {
    CapturePlan {
        name: name.into(),
        decode,
        bpf: GpCapture::default(),
    }
}

fn probe(capture: &[&str], when: &str, latency: bool) -> Probe {
    Probe {
        symbol: "main.handle".into(),
        capture: capture.iter().map(|c| c.to_string()).collect(),
        when: Some(when.into()),
        latency,
        ..Default::default()
    }
}

/// The plan the Go planner makes for `p` with the hidden values added: captures in the
/// order of `capture` (spec's, then hidden), results at the return.
fn planned(p: &Probe, hidden: &[String], decodes: &[(&str, Decode)]) -> ProbePlan {
    let all = with_hidden(p, hidden);
    let mut plan = ProbePlan {
        symbol: p.symbol.clone(),
        returns: Returns::ret_sites(vec![0x10]),
        ..Default::default()
    };
    for name in &all.capture {
        let d = decodes.iter().find(|(n, _)| n == name).unwrap().1;
        if name.starts_with('r') || name == "err" {
            plan.return_captures.push(cap(name, d));
        } else {
            plan.entry_captures.push(cap(name, d));
        }
    }
    plan
}

const INT: Decode = Decode::Int {
    size: 4,
    signed: true,
};

#[test]
fn terms_read_their_captures_where_each_site_has_them_and_hidden_ones_go_last() {
    let p = probe(
        &["r0", "n"],
        r#"hasPrefix(path, "/api") && n > 5 && err == nil && duration > 1ms"#,
        true,
    );
    let w = parse(&p).unwrap().unwrap();
    let hidden = hidden(&p, &w);
    assert_eq!(hidden, ["path", "err"]);
    let mut plan = planned(
        &p,
        &hidden,
        &[
            ("r0", INT),
            ("n", INT),
            ("path", Decode::Str),
            ("err", Decode::Error),
        ],
    );
    compile_into(&mut plan, &w, &hidden, &p).unwrap();
    let names = |c: &[CapturePlan]| c.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&plan.entry_captures), ["n", "path"]);
    assert_eq!(names(&plan.return_captures), ["r0", "err"]);
    let f = plan.filter.unwrap();
    let entry = f.entry.unwrap();
    let ret = f.ret.unwrap();
    // The record keeps the spec's captures only.
    assert_eq!((entry.n_out, ret.n_out), (1, 1));
    // path: entry capture 1; n: entry capture 0; err: return capture 1; duration.
    let caps = |g: &GpFilter| g.terms[..4].iter().map(|t| t.cap).collect::<Vec<_>>();
    assert_eq!(caps(&entry), [1, 0, FCAP_NONE, FCAP_NONE]);
    assert_eq!(caps(&ret), [FCAP_ENTRY, FCAP_ENTRY, 1, FCAP_DURATION]);
    assert_eq!(entry.terms[0].test, FT_PREFIX);
    assert_ne!(entry.terms[0].flags & FTF_STR, 0);
    assert_eq!(entry.terms[1].test, FT_GT);
    assert_eq!(
        (entry.terms[1].vsize, entry.terms[1].flags),
        (4, FTF_SIGNED)
    );
    assert_eq!(ret.terms[2].test, FT_NIL);
    assert_eq!(ret.terms[3].lit, 1_000_000);
}

#[test]
fn a_predicate_on_parameters_only_is_decided_at_the_entry() {
    let p = probe(&["n"], "n != 3", false);
    let w = parse(&p).unwrap().unwrap();
    let mut plan = planned(&p, &[], &[("n", INT)]);
    plan.returns = Returns::None;
    compile_into(&mut plan, &w, &[], &p).unwrap();
    let f = plan.filter.unwrap();
    assert!(f.entry.is_some() && f.ret.is_none());
    assert_eq!(f.entry.unwrap().n_out, 1);
}

#[test]
fn refusals_name_the_term_and_the_fix() {
    let check = |p: Probe, decodes: &[(&str, Decode)], want: &str| {
        let w = parse(&p).unwrap().unwrap();
        let hidden = hidden(&p, &w);
        let mut plan = planned(&p, &hidden, decodes);
        let e = compile_into(&mut plan, &w, &hidden, &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    };
    check(
        probe(&[], "duration > 100ms", false),
        &[],
        "main.handle: when: `duration > 100ms`: `duration` needs `latency: true`",
    );
    check(
        probe(&[], "f > 1", false),
        &[("f", Decode::Float { size: 8 })],
        "when: `f > 1`: \"f\" is a float, which cannot be compared",
    );
    check(
        probe(&[], "xs == nil", false),
        &[(
            "xs",
            Decode::Slice {
                elem: crate::plan::Elem::Pointer,
            },
        )],
        "is a slice (compare len(x))",
    );
    check(
        probe(&[], r#"n == "x""#, false),
        &[("n", INT)],
        "when: `n == \"x\"`: `n` is a signed integer; compare it with an integer",
    );
    check(
        probe(&[], r#"path > 3"#, false),
        &[("path", Decode::Str)],
        "`path` is a string; compare it with a \"string\"",
    );
}

#[test]
fn a_syntax_error_is_a_plan_error_naming_the_probe() {
    let p = probe(&[], "n >", false);
    let e = parse(&p).unwrap_err().to_string();
    assert!(e.starts_with("main.handle: "), "{e}");
    assert!(parse(&probe(&[], "  ", false)).unwrap().is_none());
}

#[test]
fn a_value_over_the_limit_says_that_the_values_when_compares_count_too() {
    // 8 captures and a 9th value that only `when:` reads.
    let list: Vec<CapturePlan> = (0..9)
        .map(|i| cap(&format!("a.B.C.D.E.V{i}"), INT))
        .collect();
    let e = crate::resolve::sizes::check_sizes("main.handle", [&list[..]])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read \"a.B.C.D.E.V8\""), "{e}");
    assert!(
        e.contains(
            "at most 8 values at a call's entry (and 8 at its return), and the values `when:` \
             compares count too"
        ),
        "{e}"
    );
}
