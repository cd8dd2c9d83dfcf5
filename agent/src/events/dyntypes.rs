//! Dynamic type names for the decoder: a captured interface holds the runtime address of
//! its type descriptor, which is the binary's link-time address plus the process's load
//! bias (0 for Go's default position-dependent executables, not for `-buildmode=pie`).

use crate::resolve::go::types::TypeNames;
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
    biases: Mutex<HashMap<u32, u64>>,
}

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
    pub fn errors(&self) -> &crate::resolve::go::types::ErrTable {
        self.names.errors()
    }
}

impl DynTypes {
    /// The names of the binary at `path` (the file the probes were attached through).
    pub fn new(names: TypeNames, path: &Path) -> Self {
        DynTypes {
            names,
            ino: std::fs::metadata(path).ok().map(|m| m.ino()),
            biases: Mutex::new(HashMap::new()),
        }
    }

    /// The names for process `pid`, its bias read once from /proc/PID/maps. A process
    /// already gone is taken as unbiased (right for position-dependent executables).
    pub fn for_pid(&self, pid: u32) -> TypeLookup<'_> {
        let mut biases = self.biases.lock().unwrap_or_else(|e| e.into_inner());
        let bias = *biases.entry(pid).or_insert_with(|| self.read_bias(pid));
        TypeLookup {
            names: &self.names,
            bias,
        }
    }

    fn read_bias(&self, pid: u32) -> u64 {
        let (Some(ino), Ok(maps)) = (
            self.ino,
            std::fs::read_to_string(format!("/proc/{pid}/maps")),
        ) else {
            return 0;
        };
        maps.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 6 || f[4].parse::<u64>().ok()? != ino {
                    return None;
                }
                let start = u64::from_str_radix(f[0].split('-').next()?, 16).ok()?;
                let offset = u64::from_str_radix(f[2], 16).ok()?;
                self.names.load_bias(start, offset)
            })
            .unwrap_or(0)
    }
}
