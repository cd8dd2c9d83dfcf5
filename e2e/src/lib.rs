//! gprobe's end-to-end tests share this library (the tests are in `tests/`, one binary per
//! topic):
//!
//! - [`go`]: builds Go programs with the Go toolchains of this machine; [`cc`]: C ones;
//! - [`harness`]: runs `gprobe run` against them and collects its records, log and summary
//!   (the `gprobe` under test comes from `$GPROBE_BIN` or is built by cargo once per process);
//! - [`spec`]: typed ProbeSpec builders that serialize to the YAML gprobe reads;
//! - [`summary`]: the `--summary-file` contract, typed;
//! - [`procmem`]: whether a process's memory holds a uprobe's breakpoint;
//! - [`footprint`]: what a running gprobe holds (memory, fds, threads, BPF objects) and
//!   whether its BPF objects outlive it;
//! - [`otlp_receiver`] (feature `otlp`): a real OTLP receiver, gRPC and HTTP/protobuf;
//! - [`cri`] (feature `cri`): real pods on a private containerd, over CRI.

mod binaries;
pub mod cc;
pub mod footprint;
pub mod go;
pub mod harness;
pub mod procmem;
pub mod spec;
pub mod summary;

#[cfg(feature = "cri")]
pub mod cri;
#[cfg(feature = "otlp")]
pub mod otlp_receiver;
