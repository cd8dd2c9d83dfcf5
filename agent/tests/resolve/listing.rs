//! `gprobe symbols` on C binaries: prototypes from DWARF, USDT probes with their argument
//! specs, semaphores and sites, and a running process's libraries.

use gprobe_agent::symbols::{list, list_pid};

use crate::native::{cprog, libc_and_its_debug_file, CBuild};

fn listing(f: impl FnOnce(&mut Vec<u8>) -> usize) -> (usize, String) {
    let mut out = Vec::new();
    let n = f(&mut out);
    (n, String::from_utf8(out).unwrap())
}

#[test]
fn c_functions_and_usdt_probes_are_listed() {
    let test = "c_functions_and_usdt_probes_are_listed";
    let (path, _) = cprog(test, CBuild::Debug);
    let (n, text) = listing(|o| list(&path, None, false, o).unwrap());
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].ends_with(
            "ELF binary, 21 functions, symbol table, DWARF: prototypes shown, 4 USDT probes"
        ),
        "{}",
        lines[0]
    );
    for want in [
        "add  int add(int a, int b)",
        "greet  size_t greet(const char *name, char *out, size_t cap)",
        "hidden_helper  int hidden_helper(int x)",
        "usdt cprog:twice  [-4@%edi -8@$7] [-4@%edx -8@%rdi]  no semaphore  2 sites",
        "usdt cprog:constant  [-4@$42]  no semaphore  1 site",
        "usdt cprog:sib  [-4@-8(%rsp,%rax,8) 8@%rdi 2@$-5]  no semaphore  1 site  (arg0 \
        unsupported: scaled-index operands (base, index, scale) are not supported)",
    ] {
        assert!(lines.contains(&want), "{want}\n{text}");
    }
    assert!(
        text.contains("usdt cprog:request  [8@%rdi -4@%esi]  semaphore 0x"),
        "{text}"
    );
    assert_eq!(n, 21 + 4);
    // --filter applies to probes as provider:name; --verbose adds each site.
    let (n, text) = listing(|o| list(&path, Some("twice"), true, o).unwrap());
    assert_eq!(n, 1, "{text}");
    assert_eq!(text.matches("    pc=0x").count(), 2, "{text}");
    // Without DWARF.
    let (nodebug, _) = cprog(test, CBuild::NoDebug);
    let (_, text) = listing(|o| list(&nodebug, Some("^add$"), false, o).unwrap());
    assert!(
        text.contains("no DWARF: captures need a signature"),
        "{text}"
    );
    assert!(text.lines().any(|l| l == "add"), "{text}");
}

#[test]
fn a_process_and_its_libraries() {
    let (_, debug) = libc_and_its_debug_file("a_process_and_its_libraries");
    // This test process: a Rust executable and the C libraries it maps.
    let (n, text) = listing(|o| list_pid(std::process::id(), Some("^malloc$"), false, o).unwrap());
    assert!(n >= 1, "{text}");
    let libc = text
        .split("\n\n")
        .find(|s| s.contains("/libc.so.6:"))
        .unwrap_or_else(|| panic!("libc not listed:\n{text}"));
    assert!(libc.lines().any(|l| l.starts_with("malloc")), "{libc}");
    // Its prototypes come from libc6-dbg's debug file.
    let from = format!("DWARF from {}: prototypes shown", debug.display());
    assert!(libc.contains(&from), "{from}\n{libc}");
    assert!(
        libc.contains("malloc  void *malloc(size_t bytes)"),
        "{libc}"
    );
    // Without a filter the libraries' functions are not listed: a library with no USDT
    // probes (libgcc_s here) has nothing to list and is only counted.
    let (_, text) = listing(|o| list_pid(std::process::id(), None, false, o).unwrap());
    assert!(
        text.contains("nothing to list (no USDT probes; list their functions with --filter RE)"),
        "{text}"
    );
    assert!(!text.contains("/libgcc_s.so.1:"), "{text}");
}
