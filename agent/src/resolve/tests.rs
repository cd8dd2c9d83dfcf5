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
    assert_eq!(
        crate::gosym::go_package("net/http.(*Client).Get"),
        "net/http"
    );
    assert_eq!(
        crate::gosym::last_component("net/http.(*Client).Get"),
        "Get"
    );
    assert_eq!(crate::gosym::go_package("main.main.func1"), "main");
    assert_eq!(crate::gosym::last_component("main.main.func1"), "func1");
    assert_eq!(crate::gosym::last_component("memcpy"), "memcpy");
}

#[test]
fn refusals_name_symbol_and_offset() {
    let e = ResolveError::NotInstructionBoundary {
        path: "/bin/x".into(),
        symbol: "main.f".into(),
        addr: 0x401000,
        offset: 2,
    };
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "refusing to place a breakpoint at main.f+0x2 (address 0x401002) in \
            /bin/x: not an instruction boundary"
        ),
        "{msg}"
    );
    assert!(msg.contains("the function table may be wrong"), "{msg}");
    let e = ResolveError::CodePastEnd {
        path: "/bin/x".into(),
        symbol: "main.f".into(),
        addr: 0x401000,
        size: 0x20,
        end: 0x22,
    };
    assert_eq!(
        e.to_string(),
        "refusing to probe main.f at 0x401000 in /bin/x: decoded from its first byte, its \
         instructions run past its end (+0x20) to +0x22; the function table may be wrong"
    );
    let e = ResolveError::AddressMismatch {
        path: "/bin/x".into(),
        symbol: "main.f".into(),
        pclntab: 0x401000,
        symtab: 0x401100,
    };
    assert!(e.to_string().starts_with(
        "main.f is at 0x401000 in the Go function table of /bin/x but at 0x401100 in its ELF symbol table"
    ));
}

#[test]
fn plan_warnings_say_what_is_missed() {
    use crate::plan::{PlanWarning, SignatureDifference};
    let w = PlanWarning::InlinedCallSites {
        symbol: "net/http.(*Client).Do".into(),
        count: 3,
    };
    assert_eq!(
        w.to_string(),
        "net/http.(*Client).Do: the compiler also inlined it at 3 call site(s); calls through \
         those run a copy of its body and are not seen (rebuild with -gcflags='net/http=-l' \
         to see them)"
    );
    let w = PlanWarning::SignatureDisagreesWithDwarf {
        symbol: "main.f".into(),
        differences: vec![
            SignatureDifference::ResultCount {
                signature: 1,
                dwarf: 2,
            },
            SignatureDifference::Param {
                index: 0,
                signature: "int".into(),
                dwarf: "string".into(),
            },
        ],
    };
    assert_eq!(
        w.to_string(),
        "main.f: the probe's signature disagrees with DWARF (the signature has 1 result(s), \
         DWARF 2; parameter 0 is int in the signature but string in DWARF); DWARF was used, \
         capture names of the signature map to DWARF's parameters by position"
    );
}
