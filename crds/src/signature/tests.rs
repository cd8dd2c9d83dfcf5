//! Tests of the Go signature parser.

use super::*;

fn named(n: &str) -> TypeExpr {
    TypeExpr::Named {
        package: None,
        name: n.to_string(),
        args: Vec::new(),
    }
}

fn qualified(p: &str, n: &str) -> TypeExpr {
    TypeExpr::Named {
        package: Some(p.to_string()),
        name: n.to_string(),
        args: Vec::new(),
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
    // Positional names stand for unnamed values only: resp and url have names.
    assert_eq!(s.lookup("r0"), None);
    assert_eq!(s.positional("r0"), Some((ValueRef::Result(0), "resp")));
    assert_eq!(s.positional("p1"), Some((ValueRef::Param(1), "url")));
    assert_eq!(s.positional("p2"), None);
    assert_eq!(s.positional("p01"), None);
    assert_eq!(s.lookup("nope"), None);
    let u = parse_signature("func(int64, string) float64").unwrap();
    assert_eq!(u.lookup("p0"), Some(ValueRef::Param(0)));
    assert_eq!(u.lookup("p1"), Some(ValueRef::Param(1)));
    assert_eq!(u.lookup("r0"), Some(ValueRef::Result(0)));
    assert_eq!(u.positional("p0"), None);
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

    let s = parse_signature(
        "func(ctx context.Context, m map[string][]int, f func(int) error, ch \
        <-chan struct{}, x interface{ Foo() }, arr [4]uint8)",
    )
    .unwrap();
    assert_eq!(s.params[0].ty, qualified("context", "Context"));
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

#[test]
fn named_types_by_package_name_or_import_path() {
    let s = parse_signature(
        "func(w http.ResponseWriter, r *net/http.Request, n \
        gopkg.in/yaml.v3.Node, c *k8s.io/client-go/rest.Config) error",
    )
    .unwrap();
    assert_eq!(s.params[0].ty, qualified("http", "ResponseWriter"));
    assert_eq!(
        s.params[1].ty,
        TypeExpr::Pointer(Box::new(qualified("net/http", "Request")))
    );
    assert_eq!(s.params[2].ty, qualified("gopkg.in/yaml.v3", "Node"));
    assert_eq!(s.params[3].ty.to_string(), "*k8s.io/client-go/rest.Config");
    // Unnamed parameters qualified by a path.
    let s = parse_signature("func(*main.order, net/url.Values) error").unwrap();
    assert_eq!(s.params[1].ty, qualified("net/url", "Values"));
    let e = parse_signature("func(r *net/http)").unwrap_err();
    assert!(e.message.contains("expected"), "{e}");
}

#[test]
fn generic_functions_and_types() {
    let s = parse_signature("func Sum[T Number](xs []T) T").unwrap();
    assert_eq!(s.type_params, ["T"]);
    assert_eq!(s.params[0].ty, TypeExpr::Slice(Box::new(named("T"))));
    assert_eq!(s.results[0].ty, named("T"));
    let s = parse_signature(
        "func Map[K comparable, V ~int64 | ~float64, W interface{ ~int }](m \
        map[K]V, f func(V) W) []W",
    )
    .unwrap();
    assert_eq!(s.type_params, ["K", "V", "W"]);
    let s = parse_signature("func[A, B any](a A, b B) (A, B)").unwrap();
    assert_eq!(s.type_params, ["A", "B"]);
    assert_eq!(s.results[1].name, "r1");
    // A name without type parameters, and instantiated types.
    let s = parse_signature("func Add(a, b int64) int64").unwrap();
    assert!(s.type_params.is_empty());
    let s = parse_signature("func(l *main.List[int], p Pair[string, []byte], xs []int, a [4]int)")
        .unwrap();
    assert_eq!(s.params[0].ty.to_string(), "*main.List[int]");
    assert_eq!(
        s.params[1].ty.to_string(),
        "Pair[string,[]uint8]".replace("uint8", "byte")
    );
    assert_eq!(s.params[3].ty, TypeExpr::Array(4, Box::new(named("int"))));
    let s = parse_signature("func(main.Box[int]) int").unwrap();
    assert_eq!(s.params[0].ty.to_string(), "main.Box[int]");
    // A method of a generic type: the receiver declares T.
    let s = parse_signature("func (l *List[T]) Push(v T) int").unwrap();
    assert_eq!(s.type_params, ["T"]);
    assert_eq!(s.params.len(), 2);
    let e = parse_signature("func F[T any(x T)").unwrap_err();
    assert!(
        e.message.contains("unclosed") || e.message.contains("expected"),
        "{e}"
    );
}

#[test]
fn empty_interface_is_any() {
    let s = parse_signature("func(a interface{}, b interface{ Error() string }, c any)").unwrap();
    assert_eq!(s.params[0].ty, named("any"));
    assert_eq!(s.params[1].ty, TypeExpr::Interface);
}

#[test]
fn deep_and_long_signatures_are_refused_with_their_limit() {
    use crate::signature::{MAX_SIGNATURE_CHARS, MAX_TYPE_DEPTH};
    // 200,000 stars once overflowed the parser's stack; the limit is checked first.
    let e = parse_signature(&format!("func(x {}int)", "*".repeat(200_000))).unwrap_err();
    assert!(
        e.message
            .contains("is 200011 characters long; a signature has at most 4096"),
        "{e}"
    );
    assert!(e.to_string().len() < 400, "{e}");
    for deep in [
        format!("func(x {}int)", "*".repeat(MAX_TYPE_DEPTH + 1)),
        format!(
            "func(x {}int{})",
            "(".repeat(MAX_TYPE_DEPTH + 1),
            ")".repeat(MAX_TYPE_DEPTH + 1)
        ),
        format!("func(x {}int)", "[]".repeat(MAX_TYPE_DEPTH + 1)),
        format!("func(x {}int)", "map[int]".repeat(MAX_TYPE_DEPTH + 1)),
        format!(
            "func(x {}){}",
            "func(".repeat(MAX_TYPE_DEPTH + 1),
            ")".repeat(MAX_TYPE_DEPTH + 1)
        ),
    ] {
        assert!(deep.chars().count() <= MAX_SIGNATURE_CHARS);
        let e = parse_signature(&deep).unwrap_err();
        assert!(
            e.message.contains("nests types more than 32 deep"),
            "{deep}: {e}"
        );
    }
    let s = parse_signature(&format!("func(x {}int)", "*".repeat(MAX_TYPE_DEPTH - 1))).unwrap();
    assert_eq!(s.params.len(), 1);
}
