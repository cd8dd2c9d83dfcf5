//! The resolve stage: from an ELF binary and a probe to what attach needs. [`Binary`]
//! reads a binary's functions (Go's pclntab, else the ELF symbol tables), their probe
//! sites and signatures; [`planner::plan_probe`] turns one probe into a [`crate::plan::ProbePlan`].
//!
//! Layout: `binary.rs` ([`Binary`]; the files that take a `&Binary` import it from there,
//! not through this file, which only declares and re-exports: that keeps import cycles
//! out), `func.rs` (a function), `elf.rs` (the file), `x86.rs` (instruction decoding),
//! `planner.rs` (which planner plans a probe) and `sizes.rs` (what a plan must fit),
//! `dwarf_sections.rs` (DWARF bytes for gimli), `dwarf_units.rs` (the one DWARF reader,
//! its units parsed once per file), and one folder per target kind: `go/` (pclntab, module
//! data, DWARF, register ABI, inline trees), `c/` (ELF symbols, C DWARF and separate debug
//! files, the System V ABI), `usdt/` (`.note.stapsdt`, argument specs).
//!
//! Errors: `error.rs` (what the stage reports) wraps the readers' errors, which sit at the
//! bottom in files of their own that import only each other (`dwarf_error.rs`,
//! `elf_error.rs`, `go/error.rs`, `go/types/error.rs`, `usdt/error.rs`);
//! scripts/import_cycles.py checks that no error module is in an import cycle.

pub mod c;
pub mod go;
pub mod planner;
// Where gprobe's own request probes go (the probe: `crate::auxiliary::propagate`).
pub mod propagate;
pub mod resolver;
pub mod sites;
mod sizes;
pub mod usdt;
mod when;

mod binary;
mod dwarf_error;
mod dwarf_sections;
mod dwarf_units;
mod elf;
mod elf_error;
mod error;
mod func;
mod funcs;
#[doc(hidden)]
pub mod fuzzing;
mod unwind;
mod x86;

#[cfg(test)]
mod tests;

pub use binary::Binary;
pub use dwarf_error::{DwarfError, UnreadableDwarf};
pub use elf_error::NoteError;
pub use error::{
    CProblem, DecoderCheckError, PlanError, ResolveError, Uncapturable, UnsupportedArg,
};
pub use func::{FuncInfo, TargetKind};
pub use go::dwarf::{DwarfParam, DwarfSignature};
pub use go::error::PclntabError;
// Older paths, kept for callers: `resolve::abi`, `resolve::gotype`.
pub use go::{abi, gotype};
pub use sites::{EntryProbe, ProbeSites};
pub use usdt::{UsdtProbe, UsdtSite};
