use anyhow::{Context, Result};
use clap::Parser;
use gprobe_agent::attach::LoadOptions;
use gprobe_agent::cli::{Cli, Command, OutputFormat};
use gprobe_agent::export::otlp::OtlpConfig;
use gprobe_agent::export::Format;
use gprobe_agent::local::{self, RunOptions};
use std::io::IsTerminal;

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

fn main() -> Result<()> {
    let cli = Cli::parse();
    init_logs(&cli.log_level)?;
    match cli.command {
        Command::Symbols {
            binary,
            pid,
            filter,
            verbose,
        } => {
            let path = match (binary, pid) {
                (Some(b), _) => b,
                (None, Some(p)) => format!("/proc/{p}/exe").into(),
                (None, None) => unreachable!("clap requires one"),
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            gprobe_agent::symbols::list(&path, filter.as_deref(), verbose, &mut out)?;
            Ok(())
        }
        Command::Run {
            specs,
            duration,
            output,
            otlp_endpoint,
            otlp_protocol,
            metrics_interval,
            ring_buffer_size,
            wakeup_size,
            poll_interval,
        } => {
            let format = match output {
                Some(OutputFormat::Jsonl) => Format::Jsonl,
                Some(OutputFormat::Table) => Format::Table,
                Some(OutputFormat::None) => Format::None,
                None if std::io::stdout().is_terminal() => Format::Table,
                None => Format::Jsonl,
            };
            let otlp =
                OtlpConfig::from_flags_and_env(otlp_endpoint, otlp_protocol, metrics_interval)
                    .map_err(anyhow::Error::msg)?;
            anyhow::ensure!(
                ring_buffer_size.is_power_of_two() && ring_buffer_size >= 4096 && ring_buffer_size <= 1 << 30,
                "--ring-buffer-size must be a power of two between 4KiB and 1GiB, got {ring_buffer_size}"
            );
            let opts = RunOptions {
                spec_files: specs,
                duration,
                format,
                otlp,
                load: LoadOptions {
                    ring_buffer_bytes: ring_buffer_size as u32,
                    wakeup_bytes: wakeup_size,
                },
                poll_interval,
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let summary = rt.block_on(local::run(opts, Box::new(std::io::stdout())))?;
            eprint!("{}", summary.render());
            Ok(())
        }
    }
}
