//! C programs and Debian packages for the C and USDT tests: the test program built with
//! gcc in several ways, the packaged binaries, and what binutils says about them (`nm`,
//! `readelf -n`), to compare with. A test whose compiler, tool or package is missing fails,
//! naming it and how to install it (`require_program`, `require_file`): scripts/setup.sh
//! --test installs them all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

pub use gprobe_e2e::harness::{require_file, require_program};

/// Where Debian's systemtap-sdt-dev puts sys/sdt.h (the test program's USDT probes; other
/// systems have it in /usr/include/sys).
const SDT_H: &str = "/usr/include/x86_64-linux-gnu/sys/sdt.h";

/// `tool` of binutils (nm, readelf, strip, objcopy), or the test fails naming it.
#[track_caller]
fn binutils(test: &str, tool: &str) -> PathBuf {
    require_program(test, tool, "binutils")
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

/// The test program (testdata/cprog) built as `b`, and for SplitDebug the debug root. The
/// test fails, naming what is missing, without gcc, binutils or sys/sdt.h.
pub fn cprog(test: &str, b: CBuild) -> (PathBuf, PathBuf) {
    static BUILT: Mutex<Option<HashMap<CBuild, (PathBuf, PathBuf)>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get_or_insert_with(HashMap::new).get(&b) {
        return p.clone();
    }
    let gcc_bin = require_program(test, "gcc", "gcc");
    let (strip, objcopy) = (binutils(test, "strip"), binutils(test, "objcopy"));
    if !Path::new("/usr/include/sys/sdt.h").exists() {
        require_file(test, SDT_H, "systemtap-sdt-dev");
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/resolve/testdata/cprog");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("resolve-c")
        .join(format!("{b:?}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("cprog");
    let mut gcc = Command::new(gcc_bin);
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
        CBuild::Stripped => run(Command::new(&strip).arg(&out)),
        CBuild::SplitDebug => {
            let dbg = dir.join("cprog.debug");
            run(Command::new(&objcopy)
                .arg("--only-keep-debug")
                .arg(&out)
                .arg(&dbg));
            run(Command::new(&strip).arg("--strip-debug").arg(&out));
            let id = build_id(test, &out).expect("gcc writes a build ID");
            let to = root.join(".build-id").join(&id[..2]);
            std::fs::create_dir_all(&to).unwrap();
            std::fs::rename(&dbg, to.join(format!("{}.debug", &id[2..]))).unwrap();
        }
        _ => {}
    }
    let v = (out, root);
    built.get_or_insert_with(HashMap::new).insert(b, v.clone());
    v
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
pub fn build_id(test: &str, bin: &Path) -> Option<String> {
    let out = stdout(Command::new(binutils(test, "readelf")).arg("-n").arg(bin));
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

/// `nm` (or `nm -D`): name -> address of the defined text symbols.
pub fn nm(test: &str, bin: &Path, dynamic: bool) -> HashMap<String, u64> {
    let mut c = Command::new(binutils(test, "nm"));
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
pub fn readelf_notes(test: &str, bin: &Path) -> Vec<ReadelfNote> {
    let out = stdout(
        Command::new(binutils(test, "readelf"))
            .args(["-n", "-W"])
            .arg(bin),
    );
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

/// Debian's libc, and its separate debug file (libc6-dbg) by build ID; the test fails,
/// naming the package, where either is missing.
pub fn libc_and_its_debug_file(test: &str) -> (PathBuf, PathBuf) {
    let libc = require_file(test, LIBC, "libc6");
    let id = build_id(test, &libc).expect("Debian's libc has a build ID");
    let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
    (libc, require_file(test, &debug, "libc6-dbg"))
}

pub const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
pub const PYTHON: &str = "/usr/bin/python3.11";
pub const POSTGRES: &str = "/usr/lib/postgresql/15/bin/postgres";
pub const LIBJVM: &str = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
/// /usr/bin/redis-server is a symlink to it.
pub const REDIS: &str = "/usr/bin/redis-check-rdb";
