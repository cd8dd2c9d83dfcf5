//! The structure the design promises, checked on the sources: only `attach/` uses aya (the
//! ring-buffer reader, the engine's tracer boundary and discovery speak the project's own
//! types), and no source file of the workspace is over 600 lines (a file that long holds more
//! than one idea: split it where the ideas part). The import graph is checked by
//! scripts/import_cycles.py, line lengths by scripts/check_lines.sh.

use std::path::{Path, PathBuf};

/// Most lines a source file may have.
const MAX_LINES: usize = 600;

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

#[test]
fn no_source_file_is_over_600_lines() {
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
        files_with(&root.join(dir), &["rs", "c", "h"], &mut files);
    }
    assert!(files.len() > 150, "found only {} source files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).unwrap().lines().count();
            (n > MAX_LINES)
                .then(|| format!("{} ({n} lines)", p.strip_prefix(&root).unwrap().display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
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
