//! Trace-context propagation (`propagate: true`): outgoing requests made inside a
//! propagating span carry it in a `traceparent` header, and goroutines keep the span of
//! the call that started them.
//!
//! Layout:
//! - `resolve/propagate.rs` (`crate::resolve::propagate`): where the request probes go in a
//!   Go executable (net/http's round trips and header writer).
//! - `engine/propagate.rs` (`crate::engine::propagate`): placing the request probes in a
//!   process with a propagating probe, removing them with its last one, and their counts.
//! - `engine/tests/propagate.rs` (`crate::engine::tests::propagate`): the tests of the
//!   engine's part, with the fake tracer and resolver.
//! - BPF (`agent-ebpf/src/propagate/`): `spans.h`, the spans of propagating probes kept
//!   per goroutine, the request and connection probes, and runtime.newproc1's part
//!   (included by gprobe.bpf.c); `propagate.h` and `propagate_write.h`, the header writer
//!   gprobe_propagate (and its dry run), a program of its own.
//! - aya's part stays in `attach/propagate.rs`: loading gprobe_propagate and writing its
//!   probes' configurations.
//!
//! End to end: `e2e/tests/services/` (traces across two services over JSONL and OTLP,
//! headers written or, with `--propagate-dry-run`, counted), and `e2e/tests/traces.rs`
//! (spans nest by goroutine, goroutines started inside a call in its trace).
