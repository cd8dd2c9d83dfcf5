//! The structure the design promises, checked on the sources: only `attach/` uses aya (the
//! ring-buffer reader, the engine's tracer boundary and discovery speak the project's own
//! types), and the module tree is the folder tree: no module of the workspace is declared
//! with a path attribute, so a module's file is where its path says (`a::b` in `a/b.rs` or
//! `a/b/mod.rs`, a child of `a.rs` in `a/`). The import graph is checked by
//! scripts/import_cycles.py, line lengths by scripts/check_lines.py.

use std::path::{Path, PathBuf};

/// What starts a path attribute (built in two parts so that this file has none).
const PATH_ATTRIBUTE: &str = concat!("#[", "path");

fn files_with(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_with(&p, exts, out);
        } else if p.extension().is_some_and(|x| exts.iter().any(|e| x == *e)) {
            out.push(p);
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    files_with(dir, &["rs"], out);
}

/// `file:line` of each line of `text` that has a path attribute, comments left out.
fn path_attributes(file: &str, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//") && l.contains(PATH_ATTRIBUTE))
        .map(|(i, _)| format!("{file}:{}", i + 1))
        .collect()
}

#[test]
fn no_module_is_declared_with_a_path_attribute() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in [
        "agent/src",
        "agent/tests",
        "agent-ebpf/src",
        "crds/src",
        "operator/src",
        "e2e/src",
        "e2e/tests",
        "httpd/src",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 150, "found only {} source files", files.len());
    let found: Vec<String> = files
        .iter()
        .flat_map(|p| {
            let name = p.strip_prefix(&root).unwrap().display().to_string();
            path_attributes(&name, &std::fs::read_to_string(p).unwrap())
        })
        .collect();
    assert!(
        found.is_empty(),
        "modules declared with {PATH_ATTRIBUTE}] (move the file to the folder of its module): \
         {found:?}"
    );
}

#[test]
fn a_path_attribute_is_found_and_a_comment_is_not() {
    let text = format!(
        "// {PATH_ATTRIBUTE} = \"x.rs\"] in a comment\n\
         /// {PATH_ATTRIBUTE}] in a doc comment\n\
         #[cfg(test)]\n\
         {PATH_ATTRIBUTE} = \"x.rs\"]\n\
         mod tests;\n"
    );
    assert_eq!(path_attributes("a.rs", &text), ["a.rs:4"]);
}

#[test]
fn only_attach_uses_aya() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 50,
        "found only {} files under {}",
        files.len(),
        src.display()
    );
    let outside: Vec<String> = files
        .iter()
        .filter(|p| !p.starts_with(src.join("attach")))
        .filter(|p| {
            std::fs::read_to_string(p).unwrap().lines().any(|l| {
                let code = l.split("//").next().unwrap_or("");
                code.contains("aya::") || code.contains("use aya")
            })
        })
        .map(|p| p.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert!(
        outside.is_empty(),
        "aya used outside src/attach/: {outside:?}"
    );
}
