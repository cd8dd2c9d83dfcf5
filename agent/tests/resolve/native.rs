//! C programs and Debian packages for the C and USDT tests: the test program built with
//! gcc in several ways, the packaged binaries (skipped with a reason where missing), and
//! what binutils says about them (`nm`, `readelf -n`), to compare with.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Prints why a test did not run (CI installs what it needs: scripts/setup.sh --test).
pub fn skip(test: &str, reason: &str) {
    println!("SKIPPED {test}: {reason}");
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// How the test program is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CBuild {
    /// -O2 -g: DWARF in the binary.
    Debug,
    /// -O2: no DWARF, .symtab kept.
    NoDebug,
    /// -O2 -rdynamic, then `strip`: no .symtab; exported functions in .dynsym only.
    Stripped,
    /// -O2 -g, then the DWARF moved to a separate file under a debug root by build ID
    /// (`objcopy --only-keep-debug`, `strip --strip-debug`).
    SplitDebug,
}

/// The test program (testdata/cprog) built as `b`, and for SplitDebug the debug root;
/// `None` (with the reason printed) when gcc, sys/sdt.h or binutils are missing.
pub fn cprog(test: &str, b: CBuild) -> Option<(PathBuf, PathBuf)> {
    static BUILT: Mutex<Option<HashMap<CBuild, (PathBuf, PathBuf)>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get_or_insert_with(HashMap::new).get(&b) {
        return Some(p.clone());
    }
    for tool in ["gcc", "strip", "objcopy"] {
        if !have(tool) {
            skip(
                test,
                &format!("{tool} is not installed (apt-get install gcc binutils)"),
            );
            return None;
        }
    }
    if !Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
        && !Path::new("/usr/include/sys/sdt.h").exists()
    {
        skip(
            test,
            "sys/sdt.h is missing (apt-get install systemtap-sdt-dev)",
        );
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/resolve/testdata/cprog");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("resolve-c")
        .join(format!("{b:?}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("cprog");
    let mut gcc = Command::new("gcc");
    gcc.args(["-O2", "-Wl,--build-id", "-o"]).arg(&out);
    gcc.arg(src.join("cprog.c")).arg(src.join("cprog_sema.c"));
    match b {
        CBuild::Debug | CBuild::SplitDebug => {
            gcc.arg("-g");
        }
        CBuild::Stripped => {
            gcc.arg("-rdynamic");
        }
        CBuild::NoDebug => {}
    }
    run(&mut gcc);
    let root = dir.join("debug");
    match b {
        CBuild::Stripped => run(Command::new("strip").arg(&out)),
        CBuild::SplitDebug => {
            let dbg = dir.join("cprog.debug");
            run(Command::new("objcopy")
                .arg("--only-keep-debug")
                .arg(&out)
                .arg(&dbg));
            run(Command::new("strip").arg("--strip-debug").arg(&out));
            let id = build_id(&out).expect("gcc writes a build ID");
            let to = root.join(".build-id").join(&id[..2]);
            std::fs::create_dir_all(&to).unwrap();
            std::fs::rename(&dbg, to.join(format!("{}.debug", &id[2..]))).unwrap();
        }
        _ => {}
    }
    let v = (out, root);
    built.get_or_insert_with(HashMap::new).insert(b, v.clone());
    Some(v)
}

fn run(c: &mut Command) {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        o.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn stdout(c: &mut Command) -> String {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(
        o.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The build ID as `readelf -n` prints it.
pub fn build_id(bin: &Path) -> Option<String> {
    let out = stdout(Command::new("readelf").arg("-n").arg(bin));
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

/// `nm` (or `nm -D`): name -> address of the defined text symbols.
pub fn nm(bin: &Path, dynamic: bool) -> HashMap<String, u64> {
    let mut c = Command::new("nm");
    if dynamic {
        c.arg("-D");
    }
    let out = stdout(c.arg("--defined-only").arg(bin));
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && matches!(f[1], "T" | "t"))
                .then(|| (f[2].to_string(), u64::from_str_radix(f[0], 16).unwrap()))
        })
        .collect()
}

/// One note of `readelf -n`'s .note.stapsdt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadelfNote {
    pub provider: String,
    pub name: String,
    pub location: u64,
    pub base: u64,
    pub semaphore: u64,
    pub args: String,
}

/// The USDT notes as `readelf -n` prints them, in order.
pub fn readelf_notes(bin: &Path) -> Vec<ReadelfNote> {
    let out = stdout(Command::new("readelf").args(["-n", "-W"]).arg(bin));
    let hex = |s: &str| {
        u64::from_str_radix(s.trim().trim_start_matches("0x").trim_end_matches(','), 16).unwrap()
    };
    let mut notes = Vec::new();
    let mut cur: Option<ReadelfNote> = None;
    for l in out.lines().map(str::trim) {
        // `-W` puts the provider on the note's header line, after a tab.
        if let Some(p) = l.find("Provider: ").map(|i| &l[i + "Provider: ".len()..]) {
            if let Some(n) = cur.take() {
                notes.push(n);
            }
            cur = Some(ReadelfNote {
                provider: p.to_string(),
                name: String::new(),
                location: 0,
                base: 0,
                semaphore: 0,
                args: String::new(),
            });
        } else if let Some(n) = cur.as_mut() {
            if let Some(v) = l.strip_prefix("Name: ") {
                n.name = v.to_string();
            } else if let Some(v) = l.strip_prefix("Location: ") {
                let f: Vec<&str> = v.split_whitespace().collect();
                n.location = hex(f[0]);
                n.base = hex(f[2]);
                n.semaphore = hex(f[4]);
            } else if let Some(v) = l.strip_prefix("Arguments: ") {
                n.args = v.trim().to_string();
            }
        }
    }
    notes.extend(cur);
    notes
}

/// The file offset of `addr` through the PT_LOAD segments, as `object` reads them.
pub fn file_offset(bin: &Path, addr: u64) -> u64 {
    use object::{Object, ObjectSegment};
    let data = std::fs::read(bin).unwrap();
    let f = object::File::parse(&*data).unwrap();
    for s in f.segments() {
        let (off, _) = s.file_range();
        if addr >= s.address() && addr < s.address() + s.size() {
            return addr - s.address() + off;
        }
    }
    panic!("{addr:#x} is in no segment of {}", bin.display());
}

/// A Debian package's file, or `None` with the reason printed.
pub fn packaged(test: &str, path: &str, package: &str) -> Option<PathBuf> {
    let p = PathBuf::from(path);
    if p.exists() {
        Some(p)
    } else {
        skip(
            test,
            &format!("{path} is missing (apt-get install {package})"),
        );
        None
    }
}

pub const PYTHON: &str = "/usr/bin/python3.11";
pub const POSTGRES: &str = "/usr/lib/postgresql/15/bin/postgres";
pub const LIBJVM: &str = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
/// /usr/bin/redis-server is a symlink to it.
pub const REDIS: &str = "/usr/bin/redis-check-rdb";
