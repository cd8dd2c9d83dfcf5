use super::*;
use crate::abi::filter::{FOP_AND, FOP_NOT, FOP_OR, FT_FALSE, FT_TRUE};
use gprobe_crds::when::parse;

const I64: TermType = TermType::Int {
    signed: true,
    size: 8,
};
const U8: TermType = TermType::Int {
    signed: false,
    size: 1,
};

#[test]
fn terms_compile_to_their_tests_and_the_expression_to_postfix() {
    let w = parse(r#"!(err != nil) || hasPrefix(s, "ab") && n >= -5"#).unwrap();
    let f = compile(&w, &[TermType::Pointer, TermType::Str, I64]).unwrap();
    assert_eq!(f.n_terms, 3);
    assert_eq!(
        &f.ops[..f.n_ops as usize],
        &[0, FOP_NOT, 1, 2, FOP_AND, FOP_OR]
    );
    assert_eq!(f.terms[0].test, FT_NOT_NIL);
    assert_eq!((f.terms[1].test, f.terms[1].len), (FT_PREFIX, 2));
    assert_eq!(&f.terms[1].str[..2], b"ab");
    assert_eq!(
        (f.terms[2].test, f.terms[2].flags, f.terms[2].lit),
        (FT_GE, FTF_SIGNED, -5i64 as u64)
    );
}

#[test]
fn a_literal_outside_the_values_type_decides_the_term() {
    let one = |text: &str, ty| compile(&parse(text).unwrap(), &[ty]).unwrap().terms[0].test;
    assert_eq!(one("b == 256", U8), FT_FALSE);
    assert_eq!(one("b != 256", U8), FT_TRUE);
    assert_eq!(one("b < 256", U8), FT_TRUE);
    assert_eq!(one("b > -1", U8), FT_TRUE);
    assert_eq!(one("b <= -1", U8), FT_FALSE);
    assert_eq!(one("b <= 255", U8), FT_LE);
    assert_eq!(one("duration > 5ns", TermType::Duration), FT_GT);
}

#[test]
fn a_term_of_the_wrong_type_is_refused_with_its_fix() {
    for (text, ty, says) in [
        ("s == 1", TermType::Str, "compare it with a \"string\""),
        (r#"n == "1""#, I64, "compare it with an integer"),
        ("p == 0", TermType::Pointer, "compare it with nil"),
        ("ok == nil", TermType::Bool, "compare with true or false"),
        (
            "duration == nil",
            TermType::Duration,
            "compare it with a duration",
        ),
    ] {
        let e = compile(&parse(text).unwrap(), &[ty]).unwrap_err();
        assert!(e.to_string().contains(says), "{text}: {e}");
        assert!(e.to_string().contains(&format!("`{text}`")), "{text}: {e}");
    }
    // The parser refuses what the program cannot hold (in every mode, without a binary);
    // compiling checks again, for a predicate made otherwise.
    let long = format!("s == \"{}\"", "x".repeat(65));
    assert!(parse(&long).unwrap_err().message.contains("at most 64"));
    let mut w = parse("s == \"x\"").unwrap();
    w.terms[0].test = Test::Str(StrOp::Eq, vec![b'x'; 65]);
    assert!(matches!(
        compile(&w, &[TermType::Str]),
        Err(FilterError::LongString { len: 65, .. })
    ));
    let deep = format!("{}x", "!".repeat(32));
    assert!(parse(&deep).unwrap_err().message.contains("has 33 steps"));
    let mut w = parse("x").unwrap();
    for _ in 0..32 {
        w.expr = Expr::Not(Box::new(w.expr));
    }
    assert!(matches!(
        compile(&w, &[TermType::Bool]),
        Err(FilterError::TooComplex { steps: 33 })
    ));
}
