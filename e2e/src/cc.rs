//! Builds the C test programs (e2e/testdata/*/*.c) with the system's C compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `src` into `out` with `cc -O1 -pthread` and `flags` (e.g. `-g`), then strips
/// what `strip` says (`Some("-g")`: debug info only; `Some("-s")`: every symbol not
/// needed for dynamic linking). Panics with the compiler's message on failure.
pub fn build(src: &Path, out: &Path, flags: &[&str], strip: Option<&str>) -> PathBuf {
    let status = Command::new("cc")
        .args(["-O1", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("cc (install gcc: apt-get install gcc): {e}"));
    assert!(status.success(), "cc {} failed: {status}", src.display());
    if let Some(what) = strip {
        let status = Command::new("strip")
            .arg(what)
            .arg(out)
            .status()
            .unwrap_or_else(|e| panic!("strip: {e}"));
        assert!(status.success(), "strip {what} {} failed", out.display());
    }
    out.to_path_buf()
}
