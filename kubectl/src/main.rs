//! `kubectl gprobe`: ad-hoc tracing in a cluster running gprobe (README, "kubectl gprobe").

mod access;
mod cli;
mod error;
mod output;
mod session;
mod spec;
mod stream;
mod target;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    // No log subscriber: what goes wrong is said once, as this command's error, not also
    // as the client library's log lines.
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubectl gprobe: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Trace(args) => session::trace(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubectl gprobe: {e}");
            ExitCode::FAILURE
        }
    }
}
