use anyhow::{Context, Result};
use clap::Parser;
use gprobe_agent::attach::LoadOptions;
use gprobe_agent::check;
use gprobe_agent::cli::{Cli, Command, OutputFormat, RunFlags};
use gprobe_agent::cluster::{self, AgentOptions};
use gprobe_agent::command::ChildStdout;
use gprobe_agent::export::otlp::OtlpConfig;
use gprobe_agent::export::Format;
use gprobe_agent::local::{self, CommandOptions, RunError, RunOptions};
use gprobe_agent::pipeline::PipelineOptions;
use gprobe_agent::trace::{self, Target, TraceError};
use gprobe_agent::util::{error_chain, printable};
use gprobe_crds::oneliner::TraceOptions;
use gprobe_crds::ProbeSpec;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

fn init_logs(level: &str) -> Result<()> {
    let filter: tracing_subscriber::filter::LevelFilter = level
        .parse()
        .with_context(|| format!("invalid --log-level {level:?}"))?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(filter)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    Ok(())
}

fn format_of(output: Option<OutputFormat>) -> Format {
    match output {
        Some(OutputFormat::Jsonl) => Format::Jsonl,
        Some(OutputFormat::Table) => Format::Table,
        Some(OutputFormat::None) => Format::None,
        None if std::io::stdout().is_terminal() => Format::Table,
        None => Format::Jsonl,
    }
}

fn check_ring_size(n: u64) -> Result<()> {
    anyhow::ensure!(
        n.is_power_of_two() && (4096..=1 << 30).contains(&n),
        "--ring-buffer-size must be a power of two between 4KiB and 1GiB, got {n}"
    );
    Ok(())
}

/// A wake-up threshold above half the ring would let it fill before the reader wakes
/// (it would then rely on --poll-interval alone).
fn check_wakeup_size(wakeup: u64, ring: u64) -> Result<()> {
    anyhow::ensure!(
        wakeup <= ring / 2,
        "--wakeup-size {wakeup} must be at most half of --ring-buffer-size {ring}: \
         lower it or enlarge the ring buffer"
    );
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // The ring buffer's reader runs on these (see gprobe_agent::priority).
        .on_thread_start(gprobe_agent::priority::raise)
        .enable_all()
        .build()?)
}

/// Exit status of `gprobe run` when no probe was ever attached, or when no spec can select
/// anything on this machine.
const EXIT_NOTHING_ATTACHED: u8 = 3;

/// Writes to stderr; a closed stderr is not worth a panic (which `eprint!` would be).
fn say(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// True when `e` came from writing to a stdout whose reader went away (`| head`): the
/// listing commands write nothing else that could fail so.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Exit status of `gprobe trace` when its probe expression (or a flag of it) is wrong:
/// that of a usage error, as clap gives for a wrong flag.
const EXIT_BAD_PROBE: u8 = 2;

/// The exit status for an error: what a shell would give for a command that cannot run,
/// 2 for a wrong probe expression, 3 when nothing can be selected, 128 + N for a signal,
/// else 1.
fn exit_code_of(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<TraceError>() {
        Some(TraceError::Probe(_)) => return EXIT_BAD_PROBE,
        Some(TraceError::Command(c)) => return c.exit_code(),
        _ => {}
    }
    match e.downcast_ref::<RunError>() {
        Some(RunError::SelectsNothing(_)) => EXIT_NOTHING_ATTACHED,
        Some(RunError::Command(c)) => c.exit_code(),
        Some(RunError::Interrupted(sig)) => (128 + *sig).min(255) as u8,
        _ => 1,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // User errors are printed as their message and its causes (each once), not as a Debug
    // dump with a backtrace (anyhow would print one with RUST_BACKTRACE=1).
    let result = init_logs(&cli.log_level).and_then(|_| run(cli.command));
    match result {
        Ok(code) => code,
        // The reader of the listing has what it wanted.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("error: {}\n", error_chain(e.chain())));
            ExitCode::from(exit_code_of(&e))
        }
    }
}

/// Writes a listing to stdout, flushed before returning (so that a closed pipe is an error
/// here, not a silent loss at drop).
fn to_stdout<E: Into<anyhow::Error>>(
    f: impl FnOnce(&mut dyn Write) -> Result<usize, E>,
) -> Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    f(&mut out).map_err(Into::into)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Symbols {
            binary,
            pid,
            filter,
            verbose,
        } => {
            if verbose {
                // Where probes go, and what they cost, depends on this kernel.
                match gprobe_agent::attach::selftest::measure_sites() {
                    Ok(k) => gprobe_agent::resolve::sites::set_kernel(k),
                    Err(e) => eprintln!("{e}: probe sites are shown as unmeasured (measuring them needs root and BPF)"),
                }
            }
            match (binary, pid) {
                (Some(b), _) => to_stdout(|out| {
                    gprobe_agent::symbols::list(&b, filter.as_deref(), verbose, out)
                }),
                (None, Some(p)) => to_stdout(|out| {
                    gprobe_agent::symbols::list_pid(p, filter.as_deref(), verbose, out)
                }),
                (None, None) => unreachable!("clap requires one"),
            }
        }
        Command::Types {
            binary,
            pid,
            filter,
        } => {
            let path = match (binary, pid) {
                (Some(b), _) => b,
                (None, Some(p)) => format!("/proc/{p}/exe").into(),
                (None, None) => unreachable!("clap requires one"),
            };
            to_stdout(|out| gprobe_agent::types::list(&path, filter.as_deref(), out))
        }
        Command::Check { specs, binary, pid } => {
            let target = match (binary, pid) {
                (Some(b), _) => check::Target::Binary(b),
                (None, Some(p)) => check::Target::Pid(p),
                (None, None) => check::Target::None,
            };
            let mut report = check::check(&specs, &target)?;
            let kernel = gprobe_agent::attach::features::probe();
            if let Some(why) = kernel.blocker() {
                report.problems.push(why);
            }
            let failed = !report.problems.is_empty();
            to_stdout(|out| {
                write_kernel(kernel, out)?;
                write_check(&report, &target, out)
            })?;
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Agent {
            node_name,
            cri_socket,
            spec_dir,
            spec_dir_interval,
            report_file,
            health_addr,
            container_poll_interval,
            output,
            otlp,
            ring_buffer_size,
            duration,
        } => {
            let node_name = node_name
                .or_else(|| std::env::var("NODE_NAME").ok())
                .filter(|n| !n.is_empty())
                .context(
                    "the node name is needed: pass --node-name or set NODE_NAME (the chart \
                    sets it from spec.nodeName)",
                )?;
            let otlp = OtlpConfig::from_flags_and_env(
                otlp.otlp_endpoint,
                otlp.otlp_protocol,
                otlp.metrics_interval,
            )?
            .map(|mut c| {
                c.agent_resource.push(("k8s.node.name", node_name.clone()));
                c
            });
            check_ring_size(ring_buffer_size)?;
            let opts = AgentOptions {
                node_name,
                cri_socket,
                spec_dir,
                spec_dir_interval,
                pipeline: PipelineOptions {
                    format: format_of(Some(output)),
                    otlp,
                    load: LoadOptions {
                        ring_buffer_bytes: ring_buffer_size as u32,
                        // The default threshold, kept at most half of a small ring.
                        wakeup_bytes: LoadOptions::default()
                            .wakeup_bytes
                            .min(ring_buffer_size / 2),
                        propagate_dry_run: false,
                    },
                    poll_interval: std::time::Duration::from_millis(25),
                    only_pid: None,
                    // The agent sets its trace streams (cluster::run).
                    tap: None,
                },
                container_poll: container_poll_interval,
                report_file,
                health_addr,
                duration,
            };
            let summary = runtime()?.block_on(cluster::run(opts, Box::new(std::io::stdout())))?;
            say(&summary.summary().render());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            specs,
            command,
            run,
        } => run_local(specs, Vec::new(), command, run),
        Command::Trace {
            probe,
            signature,
            when,
            sample,
            library,
            hist,
            executable,
            dry_run,
            command,
            run,
        } => {
            let target = match (run.pid, executable) {
                (Some(pid), _) => Target::Pid(pid),
                (None, Some(exe)) => Target::Executable(exe),
                (None, None) => Target::Command(command.clone()),
            };
            let opts = TraceOptions {
                signature,
                when,
                sample,
                hist,
                library,
            };
            let spec = trace::spec(&probe, &opts, &target)?;
            if dry_run {
                return to_stdout(|out| {
                    out.write_all(trace::dry_run_yaml(&spec, &target).as_bytes())
                        .map(|()| 0)
                });
            }
            run_local(Vec::new(), vec![spec], command, run)
        }
    }
}

/// `gprobe run` (and `gprobe trace`, with its spec given whole): traces until stopped or
/// until the command exits; the summary on stderr, the exit status of the contract.
fn run_local(
    spec_files: Vec<PathBuf>,
    specs: Vec<ProbeSpec>,
    command: Vec<std::ffi::OsString>,
    flags: RunFlags,
) -> Result<ExitCode> {
    let RunFlags {
        pid,
        duration,
        output,
        output_file,
        otlp,
        ring_buffer_size,
        wakeup_size,
        poll_interval,
        summary_file,
        propagate_dry_run,
        hist_interval,
    } = flags;
    // Before any thread starts, so that every thread inherits the blocked set.
    let signals = if command.is_empty() {
        None
    } else {
        Some(gprobe_agent::command::block().context("setting up signal handling")?)
    };
    let out: Box<dyn Write + Send> = match &output_file {
        Some(p) => Box::new(
            std::fs::File::create(p)
                .with_context(|| format!("creating --output-file {}", p.display()))?,
        ),
        None => Box::new(std::io::stdout()),
    };
    let format = match (output, &output_file) {
        (None, Some(_)) => Format::Jsonl,
        _ => format_of(output),
    };
    let otlp = OtlpConfig::from_flags_and_env(
        otlp.otlp_endpoint,
        otlp.otlp_protocol,
        otlp.metrics_interval,
    )?;
    check_ring_size(ring_buffer_size)?;
    check_wakeup_size(wakeup_size, ring_buffer_size)?;
    let command = (!command.is_empty()).then(|| CommandOptions {
        stdout: child_stdout(format, output_file.is_some()),
        argv: command,
    });
    let opts = RunOptions {
        spec_files,
        specs,
        duration,
        hist_interval,
        pipeline: PipelineOptions {
            format,
            otlp,
            load: LoadOptions {
                ring_buffer_bytes: ring_buffer_size as u32,
                wakeup_bytes: wakeup_size,
                propagate_dry_run,
            },
            poll_interval,
            only_pid: pid,
            tap: None,
        },
        command,
    };
    let outcome = runtime()?.block_on(local::run(opts, out, signals))?;
    let summary = outcome.summary;
    let report = summary.summary();
    say(&report.render());
    if let Some(path) = summary_file {
        report
            .write_file(&path)
            .with_context(|| format!("writing --summary-file {}", path.display()))?;
    }
    if !summary.any_attached() {
        say(&format!(
            "{}: no probe was attached at any time: {}\n",
            if outcome.command.is_some() {
                "warning"
            } else {
                "error"
            },
            summary.why_nothing_attached()
        ));
    }
    // A command's status is gprobe's, as with strace and perf record.
    if let Some(end) = outcome.command {
        return Ok(ExitCode::from(end.status()));
    }
    if !summary.any_attached() {
        return Ok(ExitCode::from(EXIT_NOTHING_ATTACHED));
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a command's stdout goes: gprobe's stdout, unless that carries the calls to
/// something other than a terminal (a pipe, a file), where the program's output would
/// corrupt them: then gprobe's stderr, so the program's output still shows.
fn child_stdout(format: Format, output_file: bool) -> ChildStdout {
    if output_file || format == Format::None || std::io::stdout().is_terminal() {
        ChildStdout::Inherit
    } else {
        ChildStdout::Stderr
    }
}

/// `gprobe check`'s report: each problem and note on a line, then the verdict.
/// `gprobe check`'s kernel section: each feature gprobe uses, available or missing and what
/// that costs.
fn write_kernel(
    k: &gprobe_agent::kernel::KernelFeatures,
    out: &mut dyn Write,
) -> std::io::Result<usize> {
    if let Some(why) = k.not_checked() {
        writeln!(out, "kernel {}: not checked: {why}", k.release)?;
        return Ok(0);
    }
    writeln!(out, "kernel {}:", k.release)?;
    for line in k.lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(0)
}

fn write_check(
    r: &check::Report,
    target: &check::Target,
    out: &mut dyn Write,
) -> std::io::Result<usize> {
    for p in &r.problems {
        writeln!(out, "error: {p}")?;
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let resolved = match target {
        check::Target::None => String::new(),
        check::Target::Binary(p) => format!(
            "; {} resolved in {}",
            plural(r.resolved, "probe"),
            printable(&p.to_string_lossy())
        ),
        check::Target::Pid(pid) => {
            format!(
                "; {} resolved in process {pid}",
                plural(r.resolved, "probe")
            )
        }
    };
    if r.problems.is_empty() {
        writeln!(
            out,
            "ok: {} ({}){resolved}",
            plural(r.specs, "ProbeSpec"),
            plural(r.probes, "probe")
        )?;
    } else {
        writeln!(
            out,
            "{} in {} ({}){resolved}",
            plural(r.problems.len(), "problem"),
            plural(r.specs, "ProbeSpec"),
            plural(r.probes, "probe")
        )?;
    }
    Ok(r.problems.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_and_wakeup_sizes_are_checked() {
        assert!(check_ring_size(1 << 20).is_ok());
        assert!(check_ring_size(3 << 20).is_err());
        assert!(check_ring_size(2048).is_err());
        assert!(check_wakeup_size(256 << 10, 1 << 20).is_ok());
        assert!(check_wakeup_size(8 << 10, 16 << 10).is_ok());
        let e = check_wakeup_size(256 << 10, 16 << 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most half of --ring-buffer-size"), "{e}");
    }
}
