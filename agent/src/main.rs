use anyhow::{Context, Result};
use clap::Parser;
use gprobe_agent::attach::LoadOptions;
use gprobe_agent::cli::{Cli, Command, OutputFormat};
use gprobe_agent::cluster::{self, AgentOptions};
use gprobe_agent::export::otlp::OtlpConfig;
use gprobe_agent::export::Format;
use gprobe_agent::local::{self, RunOptions};
use gprobe_agent::pipeline::PipelineOptions;
use std::io::IsTerminal;
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
        .enable_all()
        .build()?)
}

/// Exit status of `gprobe run` when no probe was ever attached.
const EXIT_NOTHING_ATTACHED: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // User errors are printed as their message and its causes, not as a Debug dump with a
    // backtrace (anyhow would print one with RUST_BACKTRACE=1).
    let result = init_logs(&cli.log_level).and_then(|_| run(cli.command));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Symbols {
            binary,
            pid,
            filter,
            verbose,
        } => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match (binary, pid) {
                (Some(b), _) => {
                    gprobe_agent::symbols::list(&b, filter.as_deref(), verbose, &mut out)?
                }
                (None, Some(p)) => {
                    gprobe_agent::symbols::list_pid(p, filter.as_deref(), verbose, &mut out)?
                }
                (None, None) => unreachable!("clap requires one"),
            };
            Ok(ExitCode::SUCCESS)
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
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            gprobe_agent::types::list(&path, filter.as_deref(), &mut out)?;
            Ok(ExitCode::SUCCESS)
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
                .context("the node name is needed: pass --node-name or set NODE_NAME (the chart sets it from spec.nodeName)")?;
            let otlp = OtlpConfig::from_flags_and_env(
                otlp.otlp_endpoint,
                otlp.otlp_protocol,
                otlp.metrics_interval,
            )
            .map_err(anyhow::Error::msg)?
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
                },
                container_poll: container_poll_interval,
                report_file,
                health_addr,
                duration,
            };
            let summary = runtime()?.block_on(cluster::run(opts, Box::new(std::io::stdout())))?;
            eprint!("{}", summary.summary().render());
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            specs,
            duration,
            output,
            otlp,
            ring_buffer_size,
            wakeup_size,
            poll_interval,
            summary_file,
            propagate_dry_run,
        } => {
            let format = format_of(output);
            let otlp = OtlpConfig::from_flags_and_env(
                otlp.otlp_endpoint,
                otlp.otlp_protocol,
                otlp.metrics_interval,
            )
            .map_err(anyhow::Error::msg)?;
            check_ring_size(ring_buffer_size)?;
            check_wakeup_size(wakeup_size, ring_buffer_size)?;
            let opts = RunOptions {
                spec_files: specs,
                duration,
                pipeline: PipelineOptions {
                    format,
                    otlp,
                    load: LoadOptions {
                        ring_buffer_bytes: ring_buffer_size as u32,
                        wakeup_bytes: wakeup_size,
                        propagate_dry_run,
                    },
                    poll_interval,
                },
            };
            let summary = runtime()?.block_on(local::run(opts, Box::new(std::io::stdout())))?;
            let report = summary.summary();
            eprint!("{}", report.render());
            if let Some(path) = summary_file {
                report
                    .write_file(&path)
                    .with_context(|| format!("writing --summary-file {}", path.display()))?;
            }
            if !summary.any_attached() {
                eprintln!(
                    "error: no probe was attached at any time: {}",
                    summary.why_nothing_attached()
                );
                return Ok(ExitCode::from(EXIT_NOTHING_ATTACHED));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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
