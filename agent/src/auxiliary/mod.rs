//! gprobe's auxiliary probes: probes it places of its own, besides the user's, each in a
//! folder of its own holding its BPF code (in `agent-ebpf/src/<probe>/`, where it is its
//! own), its agent side and its unit tests:
//!
//! - [`propagate`]: trace-context propagation (`propagate: true`), the request probes in
//!   net/http and the header writer gprobe_propagate;
//! - [`newproc`]: the probe on `runtime.newproc1` that keeps goroutines started inside a
//!   span in its trace;
//! - [`loader`]: the probe on the dynamic loader's `_dl_debug_state` that holds a process
//!   until the probes of a library it loads are attached.
//!
//! Each file of a folder is compiled in the layer it belongs to, declared there with
//! `#[path]`, so that it keeps its module path and reads what its layer keeps private:
//! - `plan.rs`, where the probe goes in a binary, is a child of `crate::resolve`
//!   (`resolve::propagate`; newproc's and the loader's plans are a few lines of
//!   `resolve/resolver.rs`).
//! - `engine.rs`, when the probe is planned, placed and removed (`impl Engine`), is a child
//!   of `crate::engine` (`engine::propagate`, `engine::newproc`, `engine::loader`). What
//!   the engine keeps per executable for these probes is in `engine/aux_state.rs`, so that
//!   the engine names nothing in these folders and they are in no import cycle
//!   (`scripts/import_cycles.py --tree ""`).
//! - `tests.rs`, the unit tests of the engine's part with its fake tracer and resolver, is
//!   a child of `crate::engine::tests` (`engine::tests::propagate`, ...).
//! - What calls aya stays in `crate::attach`, the only module that uses aya
//!   (`agent/tests/structure.rs`): `attach/propagate.rs` loads gprobe_propagate and writes
//!   its probes' configurations; the loader's configuration is `loader_config` in
//!   `attach/mod.rs`; newproc's is an ordinary probe configuration.
//! - `mod.rs` (this module's children) says how the probe works and where each part is,
//!   and holds the probe's types used elsewhere ([`loader::LibraryGlob`]).
//! - The BPF code is in `agent-ebpf/src/propagate/` and `agent-ebpf/src/loader/`, included
//!   by gprobe.bpf.c (agent/build.rs compiles it with `-I agent-ebpf/src`, and checks each
//!   header of those folders alone).

pub mod loader;
pub mod newproc;
pub mod propagate;
