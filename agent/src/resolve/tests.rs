//! Unit tests of the resolve stage's public types and messages.

use super::*;

// Binary is shared between pipeline stages through Arc.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Binary>();
};

#[test]
fn error_messages_say_cause_and_fix() {
    let e = ResolveError::NotFound {
        path: "/path/bin".into(),
        symbol: "net/http.Get".into(),
        inlined: true,
        similar: vec!["net/http.(*Client).Get".into()],
    };
    assert_eq!(
        e.to_string(),
        "net/http.Get is inlined into its callers in /path/bin (the compiler copied its body, \
         so there is no function to probe); probe net/http.(*Client).Get instead, or rebuild \
         with -gcflags='net/http=-l'"
    );
    let e = ResolveError::NotFound {
        path: "/path/bin".into(),
        symbol: "main.nope".into(),
        inlined: false,
        similar: vec![],
    };
    assert_eq!(
        e.to_string(),
        "symbol main.nope not found in /path/bin; list functions with: gprobe symbols /path/bin --filter nope"
    );
}

#[test]
fn symbol_parts() {
    assert_eq!(error::go_package("net/http.(*Client).Get"), "net/http");
    assert_eq!(error::last_component("net/http.(*Client).Get"), "Get");
    assert_eq!(error::go_package("main.main.func1"), "main");
    assert_eq!(error::last_component("main.main.func1"), "func1");
    assert_eq!(error::last_component("memcpy"), "memcpy");
}
