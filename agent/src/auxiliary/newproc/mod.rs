//! The probe on `runtime.newproc1`: goroutines started inside a span stay in its trace.
//! In a Go process with a latency probe, gprobe places its own entry and return probe on
//! the function every `go` statement runs; its records pair the parent goroutine with the
//! new one, and are never output.
//!
//! Layout:
//! - The plan is an ordinary probe plan of `runtime.newproc1` (its `callergp` and result),
//!   made by `resolve::resolver` (`newproc_plan`).
//! - `engine/newproc.rs` (`crate::engine::newproc`): planning it once per executable,
//!   placing it in a process with a latency probe and removing it with the last one.
//! - `engine/tests/newproc.rs` (`crate::engine::tests::newproc`): the tests of the engine's
//!   part, with the fake tracer and resolver.
//! - BPF: the newproc1 entry and return in `agent-ebpf/src/propagate/spans.h` (they hand
//!   the starting goroutine's span to the new one, with the other span code); the agent
//!   reads its records in `events/` (`InternalProbe::Newproc`).
//!
//! End to end: `e2e/tests/traces.rs` (a goroutine started inside a call has its calls in
//! that call's trace; nothing of the probe is output) and `e2e/tests/churn.rs`.
