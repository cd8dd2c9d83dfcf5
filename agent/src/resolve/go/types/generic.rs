//! Generic functions. Go compiles one body per GC shape (`main.Sum[go.shape.int64]`; Go
//! 1.18-1.20 add a suffix: `go.shape.int64_0`), and that body takes a dictionary pointer
//! as a hidden first argument (RAX), before the receiver and the declared parameters. A
//! signature written as the source declares it (`func Sum[T Number](xs []T) T`, or
//! `func(xs []int64) int64`) must skip that word; and its type parameters take the
//! instantiation's shapes, in order. Go 1.18-1.20 name every instantiation `F[...]` in
//! the pclntab (the shapes are only in the symbol table and DWARF): such a name takes a
//! dictionary too, and its type parameters cannot be bound.

use gprobe_crds::signature::{parse_signature, TypeExpr};

/// True when `symbol` is a shape instantiation, whose code takes a dictionary. Fully
/// instantiated wrappers (`main.Sum[int64]`) and ordinary functions take none.
pub fn takes_dictionary(symbol: &str) -> bool {
    shape_args(symbol).is_some_and(|a| a.iter().any(|s| s.starts_with("go.shape.") || *s == "..."))
}

/// The type arguments of the first bracketed list of `symbol`: `["go.shape.int64"]` for
/// `main.Sum[go.shape.int64]` and `main.(*List[go.shape.int64]).Push`.
pub(crate) fn shape_args(symbol: &str) -> Option<Vec<&str>> {
    // The package path may contain dots and slashes but no brackets.
    let open = symbol.find('[')?;
    let mut depth = 0usize;
    let mut args = Vec::new();
    let mut start = open + 1;
    for (i, c) in symbol[open..].char_indices().map(|(i, c)| (i + open, c)) {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => {
                depth -= 1;
                if depth == 0 {
                    args.push(symbol[start..i].trim());
                    return Some(args);
                }
            }
            ',' | ';' if depth == 1 => {
                args.push(symbol[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    None
}

/// The Go type a shape stands for, as a signature type: `go.shape.int64` is `int64`,
/// `go.shape.*uint8` a pointer, `go.shape.string_0` (Go 1.18-1.20) `string`. `None` for
/// shapes a signature cannot spell (structs and interfaces of the shape).
pub(crate) fn shape_type(shape: &str) -> Option<TypeExpr> {
    let mut t = shape.strip_prefix("go.shape.")?;
    // Go 1.18-1.20: a per-position suffix, `_0`, `_1`...
    if let Some((head, n)) = t.rsplit_once('_') {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            t = head;
        }
    }
    let sig = parse_signature(&format!("func(x {t})")).ok()?;
    sig.params.into_iter().next().map(|p| p.ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instantiations_by_name() {
        assert!(takes_dictionary("main.Sum[go.shape.int64]"));
        assert!(takes_dictionary("main.Sum[go.shape.int64_0]"));
        assert!(takes_dictionary("main.(*List[go.shape.string]).Push"));
        assert!(takes_dictionary(
            "main.Map[go.shape.string,go.shape.*uint8]"
        ));
        assert!(!takes_dictionary("main.Sum[int64]"));
        assert!(!takes_dictionary("main.main"));
        assert!(!takes_dictionary("net/http.(*Client).Get"));
        assert_eq!(
            shape_args("main.Map[go.shape.struct { X int; Y string },go.shape.int]").unwrap(),
            ["go.shape.struct { X int; Y string }", "go.shape.int"]
        );
    }

    #[test]
    fn shapes_to_types() {
        assert_eq!(shape_type("go.shape.int64").unwrap().to_string(), "int64");
        assert_eq!(shape_type("go.shape.int64_0").unwrap().to_string(), "int64");
        assert_eq!(shape_type("go.shape.*uint8").unwrap().to_string(), "*uint8");
        assert_eq!(shape_type("go.shape.[]int").unwrap().to_string(), "[]int");
        assert!(shape_type("int").is_none());
    }
}
