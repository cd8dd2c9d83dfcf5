//! gprobe's auxiliary probes: probes it places of its own, besides the user's. Each has a
//! folder here whose `mod.rs` says how the probe works and where each of its parts lives:
//!
//! - [`propagate`]: trace-context propagation (`propagate: true`), the request probes in
//!   net/http and the header writer gprobe_propagate;
//! - [`newproc`]: the probe on `runtime.newproc1` that keeps goroutines started inside a
//!   span in its trace;
//! - [`loader`]: the probe on the dynamic loader's `_dl_debug_state` that holds a process
//!   until the probes of a library it loads are attached.
//!
//! The parts of a probe live in the modules of the layers they belong to, where they read
//! what those layers keep private:
//! - BPF: `agent-ebpf/src/propagate/` and `agent-ebpf/src/loader/`, included by
//!   gprobe.bpf.c (agent/build.rs compiles it with `-I agent-ebpf/src`, and checks each
//!   header of those folders alone); newproc's entry and return are in
//!   `agent-ebpf/src/propagate/spans.h`.
//! - The plan, where the probe goes in a binary: `resolve/propagate.rs`
//!   (`crate::resolve::propagate`); newproc's and the loader's plans are a few lines of
//!   `resolve/resolver.rs`.
//! - The engine's part, when the probe is planned, placed and removed (`impl Engine`):
//!   `engine/propagate.rs`, `engine/newproc.rs`, `engine/loader.rs` (`crate::engine::propagate`,
//!   ...). What the engine keeps per executable for these probes is in `engine/aux_state.rs`,
//!   so that the engine names nothing in these folders and they are in no import cycle
//!   (`scripts/import_cycles.py --tree ""`).
//! - The unit tests of the engine's part, with its fake tracer and resolver:
//!   `engine/tests/propagate.rs`, `engine/tests/newproc.rs`, `engine/tests/loader.rs`
//!   (`crate::engine::tests::propagate`, ...).
//! - What calls aya stays in `crate::attach`, the only module that uses aya
//!   (`agent/tests/structure.rs`): `attach/propagate.rs` loads gprobe_propagate and writes
//!   its probes' configurations; the loader's configuration is `loader_config` in
//!   `attach/mod.rs`; newproc's is an ordinary probe configuration.
//! - Here: the probes' types used elsewhere ([`loader::LibraryGlob`], in `loader/glob.rs`).

pub mod loader;
pub mod newproc;
pub mod propagate;
