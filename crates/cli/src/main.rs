//! `stele`: run a self-checking demo workload, and inspect executions and their event logs.
//!
//! See the `cli` library's crate documentation for the commands and the exit codes, and
//! `stele --help` / `stele <command> --help` for the options.

mod commands;

use clap::{Parser, error::ErrorKind};
use std::{process::ExitCode, time::Duration};

fn main() -> ExitCode {
    let cli = match commands::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(commands::Exit::Failure.code());
        }
    };
    let outcome = runtime.block_on(commands::run(cli));
    // Workers of an interrupted run may still sleep; do not wait for them.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if let Some(message) = err.message() {
                eprintln!("error: {message}");
            }
            ExitCode::from(err.exit().code())
        }
    }
}

/// Help and version go to stdout (exit 0) as clap prints them; every other parsing error is
/// one line on stderr and exit 2, like every bad input of `stele`.
fn usage_error(err: &clap::Error) -> ExitCode {
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => err.exit(),
        _ => {
            eprintln!("error: {}", commands::usage_error_line(err));
            ExitCode::from(commands::Exit::Usage.code())
        }
    }
}

/// Logs go to stderr; `RUST_LOG` chooses what (default: errors only, so that the expected
/// refusals of stale writes, which the executor logs as warnings, do not drown the demo).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
