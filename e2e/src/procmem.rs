//! What a process's memory holds: whether a uprobe's breakpoint (int3, 0xCC) sits at a
//! function of its executable. The kernel writes it into each process it inserts the uprobe
//! into, so this tells per-process uprobes from ones on every process of a file.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Command;

/// The file offset where gprobe places the entry uprobe of `symbol` in `bin` on this kernel
/// (its `probe=` in `gprobe symbols --verbose`).
pub fn probe_offset(bin: &Path, symbol: &str) -> u64 {
    let out = Command::new(crate::harness::gprobe_bin())
        .arg("symbols")
        .arg(bin)
        .args([
            "--verbose",
            "--filter",
            &format!("^{}$", regex_escape(symbol)),
        ])
        .output()
        .expect("run gprobe symbols");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == symbol))
        .unwrap_or_else(|| panic!("{symbol} not listed by gprobe symbols:\n{text}"));
    let probe = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("probe=0x"))
        .unwrap_or_else(|| panic!("no probe= in {line:?}"));
    u64::from_str_radix(probe, 16).unwrap()
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

/// The byte of `pid`'s memory where the file offset `offset` of its executable is mapped.
pub fn byte_at_file_offset(pid: u32, offset: u64) -> u8 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let addr = maps
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 6 || Path::new(f[5]) != exe {
                return None;
            }
            let (lo, hi) = f[0].split_once('-')?;
            let (lo, hi) = (
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
            );
            let off = u64::from_str_radix(f[2], 16).ok()?;
            (offset >= off && offset < off + (hi - lo)).then_some(lo + offset - off)
        })
        .unwrap_or_else(|| panic!("file offset {offset:#x} is not mapped in pid {pid}:\n{maps}"));
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    mem.seek(SeekFrom::Start(addr)).unwrap();
    let mut b = [0u8; 1];
    mem.read_exact(&mut b).unwrap();
    b[0]
}

/// The x86 breakpoint instruction a uprobe writes.
pub const INT3: u8 = 0xcc;

/// The file offset of the data symbol `name` of `bin` (from `nm` and the section headers
/// of `readelf`: the section holding its address, from the file's bytes).
pub fn data_symbol_file_offset(bin: &Path, name: &str) -> u64 {
    let run = |cmd: &str, args: &[&str]| {
        let out = std::process::Command::new(cmd)
            .args(args)
            .arg(bin)
            .output()
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let addr = run("nm", &[])
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{name} is not in the symbol table of {}", bin.display()));
    run("readelf", &["-SW"])
        .lines()
        .filter_map(|l| l.split_once(']').map(|(_, rest)| rest))
        .find_map(|rest| {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if f.len() < 5 || f[1] == "NOBITS" {
                return None;
            }
            let (a, o, s) = (
                u64::from_str_radix(f[2], 16).ok()?,
                u64::from_str_radix(f[3], 16).ok()?,
                u64::from_str_radix(f[4], 16).ok()?,
            );
            (a != 0 && addr >= a && addr < a + s).then_some(o + addr - a)
        })
        .unwrap_or_else(|| panic!("{name} ({addr:#x}) is in no section of {}", bin.display()))
}
