//! Dynamic type names for the decoder: a captured interface holds the runtime address of
//! its type descriptor, which is the binary's link-time address plus the process's load
//! bias (0 for Go's default position-dependent executables, not for `-buildmode=pie`).

use crate::plan::TypeNames;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

/// The type names of one binary, and the load bias of each process that runs it.
#[derive(Debug)]
pub struct DynTypes {
    names: TypeNames,
    /// The binary's inode: which lines of /proc/PID/maps map it.
    ino: Option<u64>,
    /// A position-dependent executable (ELF ET_EXEC) loads where it was linked: its bias is
    /// 0 in every process, known even after the process is gone.
    fixed: bool,
    biases: Mutex<Biases>,
}

/// Load biases by pid, of live processes (and of ones that exited since the last prune).
#[derive(Debug, Default)]
struct Biases {
    by_pid: HashMap<u32, u64>,
    /// Size above which the next learned pid prunes the pids that are gone.
    prune_at: usize,
}

/// Prune no more often than this many pids are held.
const PRUNE_MIN: usize = 64;
/// The names as one process sees them.
#[derive(Debug, Clone, Copy)]
pub struct TypeLookup<'a> {
    names: &'a TypeNames,
    bias: u64,
}

impl<'a> TypeLookup<'a> {
    /// The names of a process that loaded the binary at `bias` (tests).
    #[doc(hidden)]
    pub fn with_bias(names: &'a TypeNames, bias: u64) -> Self {
        TypeLookup { names, bias }
    }
}

impl TypeLookup<'_> {
    /// The `%T` name of the type whose descriptor (or itab) is at runtime address `addr`.
    pub fn name(&self, addr: u64) -> Option<&str> {
        self.names.name_at(addr, self.bias)
    }

    /// The binary's error types whose text is built from their fields.
    pub fn errors(&self) -> &crate::plan::ErrTable {
        self.names.errors()
    }
}

impl DynTypes {
    /// The names of the binary at `path` (the file the probes were attached through).
    pub fn new(names: TypeNames, path: &Path) -> Self {
        DynTypes {
            names,
            ino: std::fs::metadata(path).ok().map(|m| m.ino()),
            fixed: is_fixed_executable(path),
            biases: Mutex::new(Biases::default()),
        }
    }

    /// Reads process `pid`'s load bias while it surely runs (when probes are attached to
    /// it), replacing what an earlier process with the same pid left: a PIE binary loads
    /// at another address in every process.
    pub fn learn(&self, pid: u32) {
        if self.fixed {
            return;
        }
        let bias = self.read_bias(pid);
        let mut b = self.biases.lock().unwrap_or_else(|e| e.into_inner());
        match bias {
            Some(bias) => b.by_pid.insert(pid, bias),
            None => b.by_pid.remove(&pid),
        };
        if b.by_pid.len() > b.prune_at {
            b.by_pid
                .retain(|pid, _| Path::new(&format!("/proc/{pid}")).exists());
            b.prune_at = (b.by_pid.len() * 2).max(PRUNE_MIN);
        }
    }

    /// The names for process `pid`. `None` when its load bias is not known (a PIE process
    /// that was gone before it was learned): a type named at a guessed bias could be
    /// another type's name.
    pub fn for_pid(&self, pid: u32) -> Option<TypeLookup<'_>> {
        let bias = if self.fixed {
            0
        } else {
            let mut b = self.biases.lock().unwrap_or_else(|e| e.into_inner());
            match b.by_pid.get(&pid) {
                Some(&bias) => bias,
                None => {
                    let bias = self.read_bias(pid)?;
                    b.by_pid.insert(pid, bias);
                    bias
                }
            }
        };
        Some(TypeLookup {
            names: &self.names,
            bias,
        })
    }

    fn read_bias(&self, pid: u32) -> Option<u64> {
        let ino = self.ino?;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
        maps.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 6 || f[4].parse::<u64>().ok()? != ino {
                return None;
            }
            let start = u64::from_str_radix(f[0].split('-').next()?, 16).ok()?;
            let offset = u64::from_str_radix(f[2], 16).ok()?;
            self.names.load_bias(start, offset)
        })
    }
}

/// Whether the ELF file at `path` is a position-dependent executable (e_type ET_EXEC).
fn is_fixed_executable(path: &Path) -> bool {
    const ET_EXEC: u16 = 2;
    let mut head = [0u8; 18];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok()
        && head[..4] == *b"\x7fELF"
        && u16::from_le_bytes([head[16], head[17]]) == ET_EXEC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_dependent_executable_is_told_from_a_pie_by_its_header() {
        let dir = std::env::temp_dir().join(format!("gprobe-dyntypes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        for (e_type, fixed) in [(2u16, true), (3, false)] {
            elf[16..18].copy_from_slice(&e_type.to_le_bytes());
            let p = dir.join(format!("t{e_type}"));
            std::fs::write(&p, &elf).unwrap();
            assert_eq!(is_fixed_executable(&p), fixed, "e_type {e_type}");
        }
        std::fs::write(dir.join("short"), b"\x7fEL").unwrap();
        assert!(!is_fixed_executable(&dir.join("short")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
