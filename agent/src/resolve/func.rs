//! A function of a binary, as [`super::binary::Binary`] answers it, and what kind of code a
//! binary's functions are: plain data that planners and listings take, in a leaf that
//! imports nothing.

/// A function of the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncInfo {
    pub name: String,
    /// ELF virtual address of the first instruction.
    pub addr: u64,
    pub size: u64,
}

/// What kind of code a binary's functions are, which decides how probes are planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A Go binary (it has a pclntab): Go register ABI, stack-growth checks.
    Go,
    /// Any other ELF binary: functions from its symbol tables.
    Elf,
}
