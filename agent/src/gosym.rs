//! Go symbol names, as the pclntab and the ELF symbol tables spell them
//! (`net/http.(*Client).Get`): their package and last component. A leaf: the resolve
//! stage's errors and the plan's warnings both name packages with it.

/// The package of a Go symbol: everything up to the first '.' after the last '/'.
pub fn go_package(symbol: &str) -> &str {
    let start = symbol.rfind('/').map_or(0, |i| i + 1);
    match symbol[start..].find('.') {
        Some(i) => &symbol[..start + i],
        None => symbol,
    }
}

/// The last component of a symbol: `Get` for `net/http.(*Client).Get`.
pub fn last_component(symbol: &str) -> &str {
    let start = symbol.rfind('/').map_or(0, |i| i + 1);
    match symbol[start..].rfind('.') {
        Some(i) => &symbol[start + i + 1..],
        None => &symbol[start..],
    }
}
