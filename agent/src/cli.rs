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

/// A `--hist-interval` shorter than this would print histograms faster than anyone reads.
const MIN_HIST_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistIntervalError {
    #[error(transparent)]
    Invalid(#[from] InvalidDuration),
    #[error("{input} is too short: use 100ms or more")]
    TooShort { input: String },
}

fn parse_hist_interval(s: &str) -> Result<Duration, HistIntervalError> {
    let d = parse_duration(s)?;
    if d < MIN_HIST_INTERVAL {
        return Err(HistIntervalError::TooShort {
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

/// The flags of `gprobe run`, shared by `gprobe trace`.
#[derive(Debug, Args)]
pub struct RunFlags {
    /// Trace this process only, and stop when it exits (with `gprobe run`, a spec's
    /// selector must match it too).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Stop after this long (e.g. 30s, 5m); default: until SIGINT/SIGTERM.
    #[arg(long, value_parser = parse_duration, conflicts_with = "command")]
    pub duration: Option<Duration>,
    /// Output format (on stdout, or --output-file).
    #[arg(long, value_enum)]
    pub output: Option<OutputFormat>,
    /// Write the calls to this file instead of stdout (JSON lines unless --output says
    /// otherwise). With a command, its stdout is then left as it is.
    #[arg(long, value_name = "PATH")]
    pub output_file: Option<PathBuf>,
    #[command(flatten)]
    pub otlp: OtlpArgs,
    /// Size of the kernel ring buffer for call events (power of two, >= 4KiB). The
    /// agent maps it whole, so it counts in its RSS; 4MiB held every call of a crowd of
    /// 200 new processes (1MiB lost a third of them, BENCHMARKS.md).
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub ring_buffer_size: u64,
    /// Wake the reader once this much event data waits (at most half the ring
    /// buffer). 0 wakes it on every event, which costs microseconds per traced call.
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    pub wakeup_size: u64,
    /// Read the ring buffer at least this often (bounds output delay when quiet; 1ms-10s).
    #[arg(long, default_value = "25ms", value_parser = parse_poll_interval)]
    pub poll_interval: Duration,
    /// At exit, write the summary (per probe: attached, delivered, lost, ...; processes
    /// matched, traced and missed with the reason; OTLP counts) as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub summary_file: Option<PathBuf>,
    /// `propagate: true` probes check and count everything but the write: outgoing
    /// requests go out unchanged, and the summary's propagation `written` counts the
    /// traceparents that would have been written (for kernels that forbid the write).
    #[arg(long)]
    pub propagate_dry_run: bool,
    /// Print the histograms of `hist: true` probes this often too (e.g. 10s), counted since
    /// the start; default: at the end and on SIGUSR1 only.
    #[arg(long, value_name = "D", value_parser = parse_hist_interval)]
    pub hist_interval: Option<Duration>,
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
        /// The program to start and trace, after `--`: it is held before its first
        /// instruction until its probes are attached; gprobe stops when it exits and
        /// exits with its status (128 + N when signal N killed it).
        #[arg(last = true, value_name = "CMD", conflicts_with = "pid")]
        command: Vec<std::ffi::OsString>,
        #[command(flatten)]
        run: RunFlags,
    },
    /// Trace one function of one program, given in one argument:
    /// 'SYMBOL(CAPTURE, ...) -> RESULT, ...' (e.g. 'main.work(id, name) -> r0'), in the
    /// process --pid, the processes of --executable, or the program after `--`. It runs
    /// the ProbeSpec it stands for as `gprobe run` does (--dry-run prints it).
    #[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "executable", "command"])))]
    Trace {
        /// The probe: 'SYMBOL(CAPTURE, ...) -> RESULT, ...', e.g. 'main.work(id, name) -> r0',
        /// 'net/http.(*Client).Get(url) -> err', 'main.tick()', 'createStringObject(ptr[:len])',
        /// 'usdt:postgresql:query__start(arg0)'. Captures are what a ProbeSpec's `capture`
        /// takes: names, field paths, len(x), PTR[:LEN].
        #[arg(value_name = "PROBE")]
        probe: String,
        /// The Go signature or C prototype, where the binary has no DWARF (as a ProbeSpec's
        /// `signature`).
        #[arg(long, value_name = "SIG")]
        signature: Option<String>,
        /// Keep only the calls for which this holds (as a ProbeSpec's `when`), e.g.
        /// 'duration > 1ms', 'err != nil'.
        #[arg(long, value_name = "EXPR")]
        when: Option<String>,
        /// Keep this share of the calls (0 < F <= 1), as a ProbeSpec's `sample`.
        #[arg(long, value_name = "F")]
        sample: Option<f64>,
        /// The shared object that holds the symbol or USDT probe (a path or file-name
        /// glob, as a ProbeSpec's `library`).
        #[arg(long, value_name = "GLOB")]
        library: Option<String>,
        /// Print a log2 histogram of the call durations on stderr at the end (and every
        /// --hist-interval, and on SIGUSR1); it counts the calls --when left out too.
        #[arg(long)]
        hist: bool,
        /// Trace the processes that run this file (a path, or a glob such as
        /// '**/http-client'), those running now and those that start.
        #[arg(long, value_name = "PATH")]
        executable: Option<String>,
        /// Print the ProbeSpec YAML this stands for on stdout, and exit.
        #[arg(long)]
        dry_run: bool,
        /// The program to start and trace, after `--`, as with `gprobe run`.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<std::ffi::OsString>,
        #[command(flatten)]
        run: RunFlags,
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
        #[arg(long, default_value = "4MiB", value_parser = parse_size)]
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

    #[test]
    fn hist_interval_is_not_too_short() {
        assert!(parse_hist_interval("0s")
            .unwrap_err()
            .to_string()
            .contains("too short: use 100ms or more"));
        assert_eq!(parse_hist_interval("10s"), Ok(Duration::from_secs(10)));
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("gprobe").chain(args.iter().copied()))
    }

    #[test]
    fn trace_takes_exactly_one_target() {
        let c = parse(&["trace", "main.f()", "--pid", "7", "--hist"]).unwrap();
        let Command::Trace {
            probe, hist, run, ..
        } = c.command
        else {
            panic!("not trace")
        };
        assert_eq!((probe.as_str(), hist, run.pid), ("main.f()", true, Some(7)));
        let c = parse(&["trace", "main.f()", "--", "./app", "-x"]).unwrap();
        let Command::Trace { command, .. } = c.command else {
            panic!("not trace")
        };
        assert_eq!(command, ["./app", "-x"]);
        for bad in [
            &["trace", "main.f()"][..],
            &["trace", "main.f()", "--pid", "7", "--executable", "/x"],
            &["trace", "main.f()", "--pid", "7", "--", "./app"],
            &["trace", "--pid", "7"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        // `gprobe run` takes --pid too, but not with a command.
        assert!(parse(&["run", "s.yaml", "--pid", "7"]).is_ok());
        assert!(parse(&["run", "s.yaml", "--pid", "7", "--", "./app"]).is_err());
    }
}
