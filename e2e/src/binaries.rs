//! The binaries the tests run: the `gprobe` under test and the Go programs it traces.

use crate::go::{self, GoVersion, TempDir};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// The `gprobe` binary under test: `$GPROBE_BIN` when set; otherwise the workspace's own,
/// built once per test process with `cargo build -p gprobe-agent --bin gprobe` into the
/// target directory (and profile) this test binary was built in.
pub fn gprobe_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(locate_gprobe).clone()
}

fn locate_gprobe() -> PathBuf {
    if let Some(bin) = std::env::var_os("GPROBE_BIN") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "GPROBE_BIN={} is not a file: build gprobe or unset GPROBE_BIN",
            bin.display()
        );
        eprintln!("gprobe-e2e: using GPROBE_BIN={}", bin.display());
        return bin;
    }
    let out = BuildDir::of_this_test();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-p",
        "gprobe-agent",
        "--bin",
        "gprobe",
        "--manifest-path",
    ])
    .arg(go::repo_root().join("Cargo.toml"))
    .arg("--target-dir")
    .arg(&out.target_dir);
    if let Some(triple) = &out.triple {
        cmd.args(["--target", triple]);
    }
    // What cargo set for this test process describes the test's own package; some build
    // scripts (ring's) track such variables, and would be rebuilt for nothing.
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&k.as_ref())
        {
            cmd.env_remove(&key);
        }
    }
    match out.profile_dir.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let shown: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
    eprintln!(
        "gprobe-e2e: building the gprobe under test: cargo {}",
        shown.join(" ")
    );
    let t0 = Instant::now();
    let status = cmd.status().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed ({status})");
    let bin = out.profile_path().join("gprobe");
    assert!(
        bin.is_file(),
        "{cmd:?} succeeded but {} is missing",
        bin.display()
    );
    eprintln!(
        "gprobe-e2e: using {} (cargo took {:.1?})",
        bin.display(),
        t0.elapsed()
    );
    bin
}

/// Where this test binary was built: `<target>[/<triple>]/<profile>/deps/<test>`.
struct BuildDir {
    target_dir: PathBuf,
    triple: Option<String>,
    profile_dir: String,
}

impl BuildDir {
    fn of_this_test() -> BuildDir {
        let exe = std::env::current_exe().expect("the test binary's path");
        let deps = exe
            .parent()
            .expect("a test binary lives in <target>/<profile>/deps");
        assert!(
            deps.file_name().is_some_and(|n| n == "deps"),
            "cannot find the target directory from {}: set GPROBE_BIN to the gprobe binary",
            exe.display()
        );
        let profile = deps.parent().unwrap();
        let profile_dir = profile.file_name().unwrap().to_string_lossy().into_owned();
        let above = profile.parent().unwrap();
        // cargo marks the target directory itself with CACHEDIR.TAG; with --target, the
        // profile folder sits one level lower, in a folder named after the triple.
        if !above.join("CACHEDIR.TAG").exists()
            && above
                .parent()
                .is_some_and(|t| t.join("CACHEDIR.TAG").exists())
        {
            return BuildDir {
                target_dir: above.parent().unwrap().to_path_buf(),
                triple: Some(above.file_name().unwrap().to_string_lossy().into_owned()),
                profile_dir,
            };
        }
        BuildDir {
            target_dir: above.to_path_buf(),
            triple: None,
            profile_dir,
        }
    }

    fn profile_path(&self) -> PathBuf {
        let mut p = self.target_dir.clone();
        if let Some(t) = &self.triple {
            p.push(t);
        }
        p.join(&self.profile_dir)
    }
}

/// Go programs built for this test process, in one temporary folder removed when the
/// process exits (a static is never dropped, so an exit hook removes it). Each test process
/// runs its own copies: a uprobe follows the file, so no two processes share one.
pub fn build_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_build_dir() {
        if let Some(d) = DIR.get() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    DIR.get_or_init(|| {
        let dir = TempDir::new("e2e-builds");
        // SAFETY: registers a plain function without captures; it only reads DIR.
        unsafe { libc::atexit(remove_build_dir) };
        let path = dir.path().to_path_buf();
        std::mem::forget(dir);
        path
    })
}

/// Builds (once per process) `src` (relative to the repo root) with Go `v`, stripped or
/// not, and returns this process's copy of it.
pub fn program(src: &str, v: GoVersion, stripped: bool) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let key = format!("{src}-{v:?}-{stripped}");
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(&key) {
        return p.clone();
    }
    let name = Path::new(src)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let out = build_go(v, &go::repo_root().join(src), stripped, &name);
    built.insert(key, out.clone());
    out
}

/// The folder (per Go version and strip mode) where Go programs are built for this
/// process: `build_dir()/<go127-full>` and the like.
pub fn build_subdir(v: GoVersion, stripped: bool) -> PathBuf {
    build_dir().join(variant(v, stripped))
}

fn variant(v: GoVersion, stripped: bool) -> String {
    format!("{v:?}-{}", if stripped { "stripped" } else { "full" }).to_lowercase()
}

/// Builds `src` (a folder with a main package, or one .go file) into `build_subdir()/name`.
///
/// The build itself runs in a folder kept between test processes, under the target
/// directory, so Go's build cache (the standard library takes half a minute to compile
/// cold) is shared by every test binary; a file lock serializes builds across processes.
/// Where no (writable) target directory can be found, it builds in the temporary folder.
pub fn build_go(v: GoVersion, src: &Path, stripped: bool, name: &str) -> PathBuf {
    let dest_dir = build_subdir(v, stripped);
    std::fs::create_dir_all(&dest_dir).unwrap();
    let dest = dest_dir.join(name);
    let t0 = Instant::now();
    match shared_go_dir() {
        Some(shared) => {
            let dir = shared.join(variant(v, stripped));
            std::fs::create_dir_all(&dir).unwrap();
            let lock = std::fs::File::create(shared.join("lock")).unwrap();
            // SAFETY: flock on a file descriptor we own; released when `lock` is closed.
            let r = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
            assert_eq!(r, 0, "lock {}", shared.join("lock").display());
            let built = go::build(v, src, &dir.join(name), stripped, &[]);
            std::fs::copy(&built, &dest)
                .unwrap_or_else(|e| panic!("copy {} to {}: {e}", built.display(), dest.display()));
            drop(lock);
        }
        None => {
            go::build(v, src, &dest, stripped, &[]);
        }
    }
    eprintln!(
        "gprobe-e2e: built {} ({v:?}, {}) in {:.1?}",
        src.display(),
        if stripped { "stripped" } else { "with DWARF" },
        t0.elapsed()
    );
    dest
}

/// `<target>/gprobe-e2e-go`, when this test binary lives in a cargo target directory.
fn shared_go_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        let deps = exe.parent()?;
        if deps.file_name()? != "deps" {
            return None;
        }
        let target = BuildDir::of_this_test().target_dir;
        let dir = target.join("gprobe-e2e-go");
        std::fs::create_dir_all(&dir).ok()?;
        // Writable (the lock file is created there), or not used.
        std::fs::File::create(dir.join("lock")).ok()?;
        Some(dir)
    })
    .clone()
}
