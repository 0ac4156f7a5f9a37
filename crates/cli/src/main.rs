//! `stele`: run a self-checking demo workload, and inspect executions and their event logs.
//!
//! See the `cli` library's crate documentation for the commands and the exit codes, and
//! `stele --help` / `stele <command> --help` for the options.

mod commands;

use clap::error::ErrorKind;
use std::{process::ExitCode, time::Duration};

fn main() -> ExitCode {
    let cli = match commands::Cli::parse_args() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let traces = match init_tracing(cli.otlp_endpoint()) {
        Ok(traces) => traces,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(commands::Exit::Usage.code());
        }
    };
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
    finish_traces(traces);
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
/// With an OTLP endpoint (`stele serve --otlp-endpoint`, a build with the `otel` feature), the
/// spans of level INFO and above are exported too, whatever `RUST_LOG` says, and every run
/// joins the trace of its submit.
fn init_tracing(otlp_endpoint: Option<&str>) -> Result<Option<Traces>, String> {
    use tracing_subscriber::{Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _};
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let Some(endpoint) = otlp_endpoint else {
        let _ = tracing_subscriber::registry().with(logs).try_init();
        return Ok(None);
    };
    traces(endpoint, logs)
}

#[cfg(feature = "otel")]
type Traces = otel::Otlp;

#[cfg(not(feature = "otel"))]
type Traces = std::convert::Infallible;

#[cfg(feature = "otel")]
fn traces<L>(endpoint: &str, logs: L) -> Result<Option<Traces>, String>
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync,
{
    use tracing_subscriber::{Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _};
    otel::install_propagation();
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "stele".to_owned());
    let traces = otel::Otlp::new(endpoint, &service).map_err(|err| err.to_string())?;
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(
            traces
                .layer()
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        )
        .try_init();
    Ok(Some(traces))
}

#[cfg(not(feature = "otel"))]
fn traces<L>(endpoint: &str, _logs: L) -> Result<Option<Traces>, String> {
    Err(format!(
        "cannot export traces to {endpoint}: this `stele` was built without OpenTelemetry; \
         build it with `cargo build --release -p cli --features otel`, or unset \
         OTEL_EXPORTER_OTLP_ENDPOINT and leave out --otlp-endpoint"
    ))
}

/// Sends the spans still batched before the process exits.
fn finish_traces(traces: Option<Traces>) {
    #[cfg(feature = "otel")]
    if let Some(traces) = traces
        && let Err(err) = traces.shutdown()
    {
        eprintln!("warning: {err}");
    }
    #[cfg(not(feature = "otel"))]
    let _ = traces;
}
