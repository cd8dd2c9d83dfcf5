//! The dynamic loader hook: libraries loaded after a process started (dlopen, and the
//! libraries of its start when it was held at exec) get their probes before their first
//! call. gprobe places a uprobe on the loader's `_dl_debug_state`, which stops the process
//! there until the engine has attached the probes of the libraries that came.
//!
//! Layout:
//! - The plan is the file offset of `_dl_debug_state` in the loader, found by
//!   `resolve::resolver` (`loader_hook`); [`LibraryGlob`] is which libraries a probe's
//!   `library` names.
//! - `engine/loader.rs` (`crate::engine::loader`): watching the loader of a process with a
//!   library probe, and a loader event (attach, then resume).
//! - `engine/tests/loader.rs` (`crate::engine::tests::loader`): the tests of the engine's
//!   part, with the fake tracer and resolver.
//! - BPF: `agent-ebpf/src/loader/loader.h` (`loader_hit`, included by gprobe.bpf.c); the
//!   configuration is written by `attach/` (`loader_config`), the hold and its event go
//!   through the process hooks' maps (`procmaps.h`).
//!
//! End to end: `e2e/tests/c_libraries.rs` (a JVM's dlopened libjvm.so: every class loaded is
//! seen from the first).

mod glob;

pub use glob::LibraryGlob;
