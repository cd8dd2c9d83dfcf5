//! The structure the design promises, checked on the sources: only `attach/` uses aya (the
//! ring-buffer reader, the engine's tracer boundary and discovery speak the project's own
//! types).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
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
