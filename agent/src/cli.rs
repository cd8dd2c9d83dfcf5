//! Command-line interface.

use crate::duration::{parse_duration, parse_size, InvalidDuration};
use crate::export::otlp::Protocol;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// A `--poll-interval` that does not parse, or is out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PollIntervalError {
    #[error(transparent)]
    Invalid(#[from] InvalidDuration),
    #[error("{input} is out of range: use 1ms to 10s")]
    OutOfRange { input: String },
}

/// A poll interval: a zero would spin a core, a long one delays output past use.
fn parse_poll_interval(s: &str) -> Result<Duration, PollIntervalError> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(10) {
        return Err(PollIntervalError::OutOfRange {
            input: s.to_string(),
        });
    }
    Ok(d)
}

#[derive(Debug, Parser)]
#[command(
    name = "gprobe",
    version,
    about = "Trace functions of running programs (Go first) with eBPF uprobes"
)]
pub struct Cli {
    /// Log level on stderr: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "info")]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// One JSON object per call (the default when stdout is not a terminal).
    Jsonl,
    /// A readable table (the default on a terminal).
    Table,
    /// Nothing on stdout (export over OTLP only).
    None,
}

/// OTLP export flags, shared by `run` and `agent`.
#[derive(Debug, Args)]
pub struct OtlpArgs {
    /// OTLP endpoint for spans and metrics, e.g. http://localhost:4317 (https:// uses TLS).
    /// Default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT; none = no OTLP.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// OTLP transport: grpc or http/protobuf. Default: $OTEL_EXPORTER_OTLP_PROTOCOL or grpc.
    #[arg(long, value_parser = |s: &str| s.parse::<Protocol>())]
    pub otlp_protocol: Option<Protocol>,
    /// How often metrics are exported over OTLP (a final export happens at exit).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub metrics_interval: Duration,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Trace the processes of this machine that the ProbeSpecs select, printing each call;
    /// or, after `--`, start a program held until its probes are attached and trace it
    /// until it exits.
    Run {
        /// ProbeSpec YAML files (several documents per file are fine).
        #[arg(required = true, value_name = "SPEC.yaml")]
        specs: Vec<PathBuf>,
        /// Stop after this long (e.g. 30s, 5m); default: until SIGINT/SIGTERM.
        #[arg(long, value_parser = parse_duration, conflicts_with = "command")]
        duration: Option<Duration>,
        /// Output format (on stdout, or --output-file).
        #[arg(long, value_enum)]
        output: Option<OutputFormat>,
        /// Write the calls to this file instead of stdout (JSON lines unless --output says
        /// otherwise). With a command, its stdout is then left as it is.
        #[arg(long, value_name = "PATH")]
        output_file: Option<PathBuf>,
        /// The program to start and trace, after `--`: it is held before its first
        /// instruction until its probes are attached; gprobe stops when it exits and
        /// exits with its status (128 + N when signal N killed it).
        #[arg(last = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
        #[command(flatten)]
        otlp: OtlpArgs,
        /// Size of the kernel ring buffer for call events (power of two, >= 4KiB). The
        /// agent maps it whole, so it counts in its RSS; 1MiB held every call at the
        /// highest rates measured (BENCHMARKS.md).
        #[arg(long, default_value = "1MiB", value_parser = parse_size)]
        ring_buffer_size: u64,
        /// Wake the reader once this much event data waits (at most half the ring
        /// buffer). 0 wakes it on every event, which costs microseconds per traced call.
        #[arg(long, default_value = "256KiB", value_parser = parse_size)]
        wakeup_size: u64,
        /// Read the ring buffer at least this often (bounds output delay when quiet; 1ms-10s).
        #[arg(long, default_value = "25ms", value_parser = parse_poll_interval)]
        poll_interval: Duration,
        /// At exit, write the summary (per probe: attached, delivered, lost, ...; processes
        /// matched, traced and missed with the reason; OTLP counts) as JSON to this file.
        #[arg(long, value_name = "PATH")]
        summary_file: Option<PathBuf>,
        /// `propagate: true` probes check and count everything but the write: outgoing
        /// requests go out unchanged, and the summary's propagation `written` counts the
        /// traceparents that would have been written (for kernels that forbid the write).
        #[arg(long)]
        propagate_dry_run: bool,
    },
    /// Check ProbeSpecs without attaching anything: validate them and, against a binary or
    /// a running process, resolve every symbol, USDT probe, signature and capture. Exit 0,
    /// or 1 with each problem listed once.
    Check {
        /// ProbeSpec YAML files.
        #[arg(required = true, value_name = "SPEC.yaml")]
        specs: Vec<PathBuf>,
        /// Resolve the probes in this executable.
        #[arg(long, value_name = "PATH", conflicts_with = "pid")]
        binary: Option<PathBuf>,
        /// Resolve the probes in this running process: its executable, and the shared
        /// libraries it has mapped for probes with `library`.
        #[arg(long, value_name = "PID")]
        pid: Option<u32>,
    },
    /// Cluster mode on one node (the DaemonSet): ProbeSpecs from the API server (or
    /// --spec-dir), containers from the node's runtime over CRI.
    Agent {
        /// This node's name (default: $NODE_NAME, set from spec.nodeName in the DaemonSet).
        #[arg(long)]
        node_name: Option<String>,
        /// The container runtime's CRI socket (CRI-O: /var/run/crio/crio.sock).
        #[arg(long, default_value = "/run/containerd/containerd.sock")]
        cri_socket: PathBuf,
        /// Read ProbeSpecs from the YAML files of this folder instead of the API server
        /// (no ProbeAttachments are written then; see --report-file).
        #[arg(long)]
        spec_dir: Option<PathBuf>,
        /// How often --spec-dir is read again for changes.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        spec_dir_interval: Duration,
        /// Write what is attached (per spec, as ProbeAttachment status) to this JSON file.
        #[arg(long)]
        report_file: Option<PathBuf>,
        /// Serve /healthz, /readyz and /metrics here (e.g. 0.0.0.0:9090).
        #[arg(long)]
        health_addr: Option<std::net::SocketAddr>,
        /// How often the container runtime is asked for running containers.
        #[arg(long, default_value = "500ms", value_parser = parse_duration)]
        container_poll_interval: Duration,
        /// Output on stdout (none by default: a DaemonSet exports over OTLP).
        #[arg(long, value_enum, default_value = "none")]
        output: OutputFormat,
        #[command(flatten)]
        otlp: OtlpArgs,
        /// Size of the kernel ring buffer for call events (power of two, >= 4KiB).
        #[arg(long, default_value = "1MiB", value_parser = parse_size)]
        ring_buffer_size: u64,
        /// Stop after this long (tests); default: until SIGTERM.
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
    },
    /// List a binary's functions (stripped Go binaries too) with their signatures or C
    /// prototypes where DWARF has them, and its USDT probes; with --pid, also those of the
    /// process's shared libraries.
    Symbols {
        /// The binary to read.
        #[arg(required_unless_present = "pid", conflicts_with = "pid")]
        binary: Option<PathBuf>,
        /// Read the executable of this running process instead, and the shared libraries
        /// it has mapped (their functions are listed with --filter only).
        #[arg(long)]
        pid: Option<u32>,
        /// Only functions (and USDT probes, as provider:name) whose name matches this
        /// regular expression.
        #[arg(long, value_name = "RE")]
        filter: Option<String>,
        /// Also print each function's address, size, probe sites and RET count, and where
        /// gprobe puts its probes on this kernel with what a call costs there (`emulated`
        /// or `single-stepped`, measured on gprobe's own code: needs root and BPF, else
        /// `unmeasured`).
        #[arg(long)]
        verbose: bool,
    },
    /// List the struct layouts a Go binary describes (field offsets and types; stripped
    /// binaries too), to write field paths in `capture`.
    Types {
        /// The binary to read.
        #[arg(required_unless_present = "pid", conflicts_with = "pid")]
        binary: Option<PathBuf>,
        /// Read the executable of this running process instead.
        #[arg(long)]
        pid: Option<u32>,
        /// Only types whose name matches this regular expression (e.g. '^main\.').
        #[arg(long, value_name = "RE")]
        filter: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_interval_must_be_positive_and_bounded() {
        assert!(parse_poll_interval("0s")
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(parse_poll_interval("1h").is_err());
        assert_eq!(parse_poll_interval("25ms"), Ok(Duration::from_millis(25)));
    }
}
