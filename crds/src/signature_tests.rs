use super::*;

fn named(n: &str) -> TypeExpr {
    TypeExpr::Named {
        package: None,
        name: n.to_string(),
    }
}

#[test]
fn design_example() {
    let s = parse_signature("func(c *Client, url string) (resp *Response, err error)").unwrap();
    assert_eq!(s.params.len(), 2);
    assert_eq!(s.params[0].name, "c");
    assert_eq!(s.params[0].ty, TypeExpr::Pointer(Box::new(named("Client"))));
    assert_eq!(s.params[1].ty, named("string"));
    assert_eq!(s.results[1].name, "err");
    assert_eq!(s.lookup("url"), Some(ValueRef::Param(1)));
    assert_eq!(s.lookup("err"), Some(ValueRef::Result(1)));
    assert_eq!(s.lookup("r0"), Some(ValueRef::Result(0)));
    assert_eq!(s.lookup("nope"), None);
}

#[test]
fn unnamed_grouped_variadic_and_method_forms() {
    let s = parse_signature("func(int64) float64").unwrap();
    assert_eq!(s.params[0].name, "p0");
    assert_eq!(s.results[0].name, "r0");
    assert_eq!(s.results[0].ty, named("float64"));

    let s = parse_signature("func(a, b int, c []byte, d ...string) (n int, err error)").unwrap();
    let names: Vec<_> = s.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    assert_eq!(s.params[0].ty, named("int"));
    assert_eq!(s.params[3].ty, TypeExpr::Slice(Box::new(named("string"))));

    let s = parse_signature("func (c *Client) Get(url string) (*Response, error)").unwrap();
    assert_eq!(s.params.len(), 2);
    assert_eq!(s.params[0].name, "c");
    assert_eq!(s.results[0].name, "r0");
    assert_eq!(s.results[1].name, "r1");

    let s = parse_signature("func(ctx context.Context, m map[string][]int, f func(int) error, ch <-chan struct{}, x interface{ Foo() }, arr [4]uint8)").unwrap();
    assert_eq!(
        s.params[0].ty,
        TypeExpr::Named {
            package: Some("context".into()),
            name: "Context".into()
        }
    );
    assert!(matches!(s.params[1].ty, TypeExpr::Map(..)));
    assert_eq!(s.params[2].ty, TypeExpr::Func);
    assert!(matches!(s.params[3].ty, TypeExpr::Chan(..)));
    assert_eq!(s.params[4].ty, TypeExpr::Interface);
    assert_eq!(s.params[5].ty, TypeExpr::Array(4, Box::new(named("uint8"))));

    let s = parse_signature("func(p struct{ a, b int32; c string })").unwrap();
    let TypeExpr::Struct(f) = &s.params[0].ty else {
        panic!()
    };
    assert_eq!(f.len(), 3);
}

#[test]
fn errors_point_at_the_problem() {
    let e = parse_signature("func(url string").unwrap_err();
    assert!(e.message.contains("expected \")\""), "{e}");
    let e = parse_signature("(url string)").unwrap_err();
    assert!(e.message.contains("starts with \"func\""), "{e}");
    let e = parse_signature("func(a, b int, string)").unwrap_err();
    assert!(e.message.contains("has no type"), "{e}");
    let e = parse_signature("func(a int, a string)").unwrap_err();
    assert!(e.message.contains("declared twice"), "{e}");
    let e = parse_signature("func(a int) $").unwrap_err();
    assert_eq!(e.column, 13);
}
