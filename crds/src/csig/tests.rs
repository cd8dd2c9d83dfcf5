use super::*;
use crate::ctype::CClass;

fn sig(s: &str) -> CSignature {
    parse_c_signature(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn classes(s: &CSignature) -> Vec<(String, CClass)> {
    s.params
        .iter()
        .map(|p| (p.name.clone(), p.ty.class()))
        .collect()
}

const U8: CClass = CClass::Int {
    size: 8,
    signed: false,
};
const I4: CClass = CClass::Int {
    size: 4,
    signed: true,
};

#[test]
fn the_design_prototypes() {
    let s = sig("robj *createStringObject(const char *ptr, size_t len)");
    assert_eq!(s.name.as_deref(), Some("createStringObject"));
    assert_eq!(s.ret.as_ref().unwrap().class(), CClass::Pointer);
    assert_eq!(
        classes(&s),
        [("ptr".into(), CClass::CString), ("len".into(), U8)]
    );
    assert!(s.has_result());
    assert_eq!(s.capture_names(), ["ptr", "len", "r0"]);
    assert_eq!(
        s.to_string(),
        "robj *createStringObject(const char *ptr, size_t len)"
    );

    let s = sig("int SSL_write(void *ssl, const void *buf, int num);");
    assert_eq!(
        classes(&s),
        [
            ("ssl".into(), CClass::Pointer),
            ("buf".into(), CClass::Pointer),
            ("num".into(), I4)
        ]
    );
    assert_eq!(s.lookup("num"), Some(ValueRef::Param(2)));
    assert_eq!(s.lookup("r0"), Some(ValueRef::Result(0)));
    // `p1` names buf by position: refused, with its name.
    assert_eq!(s.lookup("p1"), None);
    assert_eq!(s.positional("p1"), Some((ValueRef::Param(1), "buf")));
    assert_eq!(s.lookup("p3"), None);
    assert_eq!(s.positional("p3"), None);
    assert_eq!(s.positional("r0"), None);
    let u = sig("int f(int, char *name)");
    assert_eq!(u.lookup("p0"), Some(ValueRef::Param(0)));
    assert_eq!(u.positional("p1"), Some((ValueRef::Param(1), "name")));

    let s = sig("(const char *query)");
    assert!(s.is_arg_list());
    assert!(!s.has_result());
    assert_eq!(classes(&s), [("query".into(), CClass::CString)]);
    assert_eq!(s.lookup("r0"), None);
    let s = sig("(char *file, char *func, int line)");
    assert_eq!(s.capture_names(), ["file", "func", "line"]);
    assert_eq!(s.to_string(), "(char *file, char *func, int line)");
}

#[test]
fn integer_types_by_size_and_sign() {
    let s = sig("void f(int a, unsigned long b, size_t c, ssize_t d, int64_t e, uint8_t f, long \
        long g, char h, _Bool i, bool j, unsigned k, short l, unsigned short int m, signed char \
            n, unsigned char o, long unsigned int p, long double q, double r, float s, enum color t)");
    let want = [
        I4,
        U8,
        U8,
        CClass::Int {
            size: 8,
            signed: true,
        },
        CClass::Int {
            size: 8,
            signed: true,
        },
        CClass::Int {
            size: 1,
            signed: false,
        },
        CClass::Int {
            size: 8,
            signed: true,
        },
        CClass::Int {
            size: 1,
            signed: true,
        },
        CClass::Bool,
        CClass::Bool,
        CClass::Int {
            size: 4,
            signed: false,
        },
        CClass::Int {
            size: 2,
            signed: true,
        },
        CClass::Int {
            size: 2,
            signed: false,
        },
        CClass::Int {
            size: 1,
            signed: true,
        },
        CClass::Int {
            size: 1,
            signed: false,
        },
        U8,
        CClass::Float { size: 16 },
        CClass::Float { size: 8 },
        CClass::Float { size: 4 },
        I4,
    ];
    let got: Vec<CClass> = classes(&s).into_iter().map(|(_, c)| c).collect();
    assert_eq!(got, want);
    assert!(!s.has_result());
    assert_eq!(s.lookup("r0"), None);
}

#[test]
fn pointers_qualifiers_and_odd_declarators() {
    let s = sig(
        "static inline const struct foo *const *get(volatile unsigned char *restrict buf, \
        char **argv, char name[16], void (*cb)(int, void *), int, ...) __attribute__((nonnull))",
    );
    assert_eq!(s.name.as_deref(), Some("get"));
    assert!(s.variadic);
    assert_eq!(
        classes(&s),
        [
            ("buf".into(), CClass::Pointer),
            ("argv".into(), CClass::Pointer),
            ("name".into(), CClass::CString),
            ("cb".into(), CClass::Pointer),
            ("p4".into(), I4),
        ]
    );
    assert_eq!(
        s.to_string(),
        "const struct foo *const *get(volatile unsigned char *buf, char **argv, char name[16], \
        void (*cb)(), int p4, ...)"
    );
    // Unnamed parameters, (void), ().
    let s = sig("long f(void *, size_t)");
    assert_eq!(s.capture_names(), ["p0", "p1", "r0"]);
    assert!(sig("int f(void)").params.is_empty());
    assert!(sig("int f()").params.is_empty());
    assert_eq!(sig("int f(void)").to_string(), "int f(void)");
    let fp = CSignature {
        name: Some("pick".into()),
        ret: Some(CType::pointer_to(CType::Function)),
        params: sig("(int x)").params,
        variadic: false,
    };
    assert_eq!(fp.to_string(), "void (*pick(int x))()");
    assert!(sig("()").params.is_empty());
    let s = sig("int printf(const char *fmt, ...)");
    assert!(s.variadic);
    assert_eq!(s.params.len(), 1);
}

#[test]
fn errors_say_where_and_what() {
    for (bad, want) in [
        ("", "empty"),
        ("int f(int a", "expected \")\""),
        ("int (int a)", "expected the function's name"),
        ("int f(int a) extra", "after the parameter list"),
        ("int f(void a)", "cannot be void"),
        ("int f(int a, int a)", "declared twice"),
        ("int f(..., int a)", "must be the last"),
        ("int f(long short x)", "is not a C type"),
        ("int f(unsigned double x)", "is not a C type"),
        ("int f(int @x)", "unexpected character"),
        (
            "void (*signal(int sig, void (*func)(int)))(int)",
            "function pointers",
        ),
        ("int f(__int128 x)", "__int128"),
    ] {
        let e = parse_c_signature(bad).unwrap_err();
        assert!(e.to_string().contains(want), "{bad}: {e}");
        assert!(e.to_string().contains("expected C syntax"), "{e}");
    }
    assert_eq!(parse_c_signature("int f(int a").unwrap_err().column, 12);
    // The base keywords' messages, word for word.
    assert_eq!(
        parse_c_signature("int f(long short x)")
            .unwrap_err()
            .message,
        "\"long short\" is not a C type"
    );
    assert_eq!(
        parse_c_signature("int f(unsigned __int128 x)")
            .unwrap_err()
            .message,
        "__int128 values (two registers) cannot be captured"
    );
}

#[test]
fn capture_expressions_and_go_detection() {
    assert_eq!(
        CaptureExpr::parse("ptr[:len]"),
        CaptureExpr::Slice {
            ptr: "ptr",
            len: "len"
        }
    );
    assert_eq!(CaptureExpr::parse("ptr"), CaptureExpr::Name("ptr"));
    assert_eq!(CaptureExpr::parse("[:len]"), CaptureExpr::Name("[:len]"));
    assert!(is_go_signature("func(a int)"));
    assert!(is_go_signature("  func (c *Client) Get(url string) error"));
    assert!(!is_go_signature("int func(int a)"));
    assert!(!is_go_signature("functor *make(void)"));
    assert!(!is_go_signature("(const char *query)"));
}

#[test]
fn deep_and_long_prototypes_are_refused_with_their_limit() {
    use crate::signature::MAX_TYPE_DEPTH;
    let e = parse_c_signature(&format!("int f(char {}p)", "*".repeat(200_000))).unwrap_err();
    assert!(
        e.message
            .contains("characters long; a signature has at most 4096"),
        "{e}"
    );
    assert!(e.to_string().len() < 400, "{e}");
    for deep in [
        format!("int f(char {}p)", "*".repeat(MAX_TYPE_DEPTH + 1)),
        format!("int f(char p{})", "[2]".repeat(MAX_TYPE_DEPTH + 1)),
        format!("char {}f(void)", "*".repeat(MAX_TYPE_DEPTH + 1)),
    ] {
        let e = parse_c_signature(&deep).unwrap_err();
        assert!(
            e.message.contains("nests types more than 32 deep"),
            "{deep}: {e}"
        );
    }
    assert!(parse_c_signature(&format!("int f(char {}p)", "*".repeat(MAX_TYPE_DEPTH))).is_ok());
}
