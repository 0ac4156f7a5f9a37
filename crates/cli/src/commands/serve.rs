//! `stele serve`: run the demo's functions on a database until Ctrl-C or `SIGTERM`, so that
//! executions submitted by `stele submit` (or any other client) run; stopped, it drains: no new
//! work is taken, and the runs in flight get `--drain-timeout` to finish. With `--http ADDR` it
//! also serves the HTTP API of the `server` crate, which stops accepting when the drain
//! begins.

use super::{
    CliError, Exit, interrupted,
    node::{default_concurrency, demo_node, names, start},
    note,
    operate::parse_duration,
    with_store,
};
use ::node::{DrainReport, HumanDuration};
use cli::prometheus::PrometheusHandle;
use cli::{
    database::{DatabaseUrl, OpenMode},
    workload::DemoFunctions,
};
use server::ApiOptions;
use std::net::SocketAddr;
use timers_watcher::PrunerConfig;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// How many workers may run at once, over all executors [default: 8 per CPU core].
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(1, 10_000))]
    concurrency: Option<u32>,
    /// Run the retention task: remove the trees of top-level executions that finished longer
    /// ago than this (a whole number and ms, s, m, h or d, e.g. 7d). Without it nothing is
    /// removed.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    prune_older_than: Option<String>,
    /// How often the retention task runs.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1m",
        allow_hyphen_values = true,
        requires = "prune_older_than"
    )]
    prune_every: String,
    /// How many top-level executions one transaction of the retention task examines.
    #[arg(long, default_value_t = 1_000, value_name = "N", requires = "prune_older_than",
          allow_negative_numbers = true, value_parser = super::whole_number(1, 100_000))]
    prune_batch: u32,
    /// How long the runs in flight get to finish once Ctrl-C or SIGTERM stopped the node (no
    /// new work is taken meanwhile); runs still going then are left to their leases, which
    /// the next `stele serve` recovers. A second Ctrl-C or SIGTERM stops at once.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        allow_hyphen_values = true
    )]
    drain_timeout: String,
    /// Serve the web UI and the HTTP API (`/api/v1`: submit, list, show, events, wait,
    /// cancel, complete) on this address; `--http` alone serves on 127.0.0.1:8080, loopback
    /// only. An address other than loopback needs --http-token; without one, a loopback server
    /// answers only requests addressed to localhost or an IP address (no DNS rebinding).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = server::DEFAULT_ADDRESS)]
    http: Option<String>,
    /// Require `Authorization: Bearer TOKEN` on every HTTP request (needs --http; the
    /// variable may be exported whether --http is given or not).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "STELE_HTTP_TOKEN",
        hide_env_values = true
    )]
    http_token: Option<String>,
    /// Serve only the HTTP API's reads: every POST is refused (405).
    #[arg(long, requires = "http")]
    read_only: bool,
    /// Let a browser page of this origin call the HTTP API (scheme, host and port, as `https://ops.example.com`);
    /// repeat for more. Without it no CORS header is sent.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    http_cors: Vec<String>,
    /// Export the runs' spans as OTLP over HTTP to this collector (its base URL, e.g.
    /// http://127.0.0.1:4318; `/v1/traces` is added): each run is a span of the trace its
    /// submit was made in. Needs a `stele` built with the `otel` feature.
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// This node's name, kept across its restarts (e.g. the host's name): a `stele serve`
    /// started again under the same name takes back at once the executions its previous
    /// process was running (killed, or stopped past --drain-timeout) instead of waiting for
    /// their leases to expire. Give every process serving one database its own name.
    #[arg(long, value_name = "NAME")]
    identity: Option<String>,
}

impl ServeArgs {
    /// The collector given, if any (an empty value is none).
    pub fn otlp_endpoint(&self) -> Option<&str> {
        self.otlp_endpoint.as_deref().filter(|url| !url.is_empty())
    }
}

/// The process's recorder, once installed: its renderer and what the overview reads.
static METRICS: std::sync::OnceLock<Option<Installed>> = std::sync::OnceLock::new();

#[derive(Clone)]
struct Installed {
    handle: PrometheusHandle,
    recent: std::sync::Arc<::node::recent::Recent>,
}

/// How often the node samples its gauges and the recent counts are noted.
const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Installs the process's recorder once (`cli::prometheus::install`: histograms with buckets,
/// aggregatable across nodes, inside `node::recent::RecentRecorder`, which keeps the last
/// hour of finishes and retries for the overview). `None` when another recorder was installed
/// first.
fn installed() -> Option<Installed> {
    METRICS
        .get_or_init(|| match cli::prometheus::install() {
            Ok((handle, recent)) => Some(Installed { handle, recent }),
            Err(err) => {
                tracing::warn!("no metrics on /metrics: {err}");
                None
            }
        })
        .clone()
}

/// The text of `/metrics`.
fn metrics_text(installed: Option<&Installed>) -> server::MetricsText {
    let handle = installed.map(|installed| installed.handle.clone());
    server::MetricsText(std::sync::Arc::new(move || {
        handle
            .as_ref()
            .map(PrometheusHandle::render)
            .unwrap_or_default()
    }))
}

/// Notes the recent counts every [`SAMPLE_EVERY`] until the node stops
/// (`node::recent::Recent::upkeep`).
async fn upkeep(signal: ::node::ShutdownSignal) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
            () = signal.clone().fired() => return,
        }
        if let Some(Some(installed)) = METRICS.get() {
            installed.recent.upkeep();
        }
    }
}

/// The HTTP API's address and options, checked before anything starts.
impl ServeArgs {
    /// The address --http asks for, if it was given.
    #[cfg(test)]
    pub(crate) fn http_address(&self) -> Option<String> {
        self.http.clone()
    }
}

fn http_options(args: &ServeArgs) -> Result<Option<(SocketAddr, ApiOptions)>, CliError> {
    let Some(address) = args.http.as_deref() else {
        return Ok(None);
    };
    let address: SocketAddr = address.parse().map_err(|err| {
        super::bad_input(
            "--http address",
            format!("`{address}`: {err} (e.g. 127.0.0.1:8080)"),
        )
    })?;
    let token = args.http_token.clone().filter(|token| !token.is_empty());
    if token.is_none() && !address.ip().is_loopback() {
        return Err(CliError::new(
            Exit::Usage,
            format!(
                "refusing to serve the HTTP API on {address} without a token: anyone who can \
                 reach it could submit and cancel executions; pass --http-token TOKEN (or set \
                 STELE_HTTP_TOKEN), or serve on a loopback address such as 127.0.0.1:{}",
                address.port()
            ),
        ));
    }
    Ok(Some((
        address,
        ApiOptions {
            token,
            read_only: args.read_only,
            cors_origins: args.http_cors.clone(),
            ..ApiOptions::default()
        },
    )))
}

pub async fn run(url: &DatabaseUrl, args: ServeArgs) -> Result<(), CliError> {
    let retention = args
        .prune_older_than
        .as_deref()
        .map(|older_than| {
            Ok::<_, CliError>(PrunerConfig {
                retention: parse_duration("--prune-older-than", older_than)?,
                interval: parse_duration("--prune-every", &args.prune_every)?,
                batch: args.prune_batch as usize,
            })
        })
        .transpose()?;
    if let Some(config) = retention {
        config
            .validate()
            .map_err(|err| super::bad_input("--prune-every", err))?;
    }
    let drain_timeout = parse_duration("--drain-timeout", &args.drain_timeout)?;
    let http = http_options(&args)?;
    let concurrency = args
        .concurrency
        .map_or_else(default_concurrency, |n| n as usize);
    with_store(url, OpenMode::CreateAndWait, async |db| {
        // The signal handlers first: a signal after the note below stops cleanly.
        let stop = interrupted();
        let functions = DemoFunctions::new();
        let mut builder = demo_node(&db, &functions, concurrency);
        if let Some(config) = retention {
            builder = builder.pruner(config);
        }
        if let Some(identity) = &args.identity {
            builder = builder.identity(identity.clone());
        }
        let mut serving_http = String::new();
        if let Some((address, mut options)) = http {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|err| {
                    CliError::new(
                        Exit::Failure,
                        format!("cannot serve the HTTP API on {address}: {err}"),
                    )
                })?;
            let bound = listener.local_addr().unwrap_or(address);
            serving_http = format!(
                "; the web UI on http://{bound}/ and the HTTP API on http://{bound}/api/v1{}{}",
                if options.token.is_some() {
                    " (with a token)"
                } else {
                    ""
                },
                if options.read_only {
                    " (read-only)"
                } else {
                    ""
                },
            );
            let installed = installed();
            options.metrics = Some(metrics_text(installed.as_ref()));
            let ui_options = ui::UiOptions {
                recent: installed.map(|installed| installed.recent),
                ..ui::UiOptions::default()
            };
            builder = builder
                .sample_metrics(SAMPLE_EVERY)
                .background_service("metrics upkeep", |context| upkeep(context.signal))
                .background_service("http", ui::serve(listener, options, ui_options));
        }
        let node = start(builder)?;
        let pruning = match retention {
            Some(config) => format!(
                "the retention task removes trees finished more than {} ago, every {}",
                HumanDuration(config.retention),
                HumanDuration(config.interval)
            ),
            None => "no retention task (--prune-older-than starts one)".to_string(),
        };
        let identity = match &args.identity {
            Some(identity) => format!(" as {identity}"),
            None => String::new(),
        };
        note(&format!(
            "serving {url}{identity}: executors of {} (at most {concurrency} workers at once), \
             the timers watcher, {pruning}{serving_http}; Ctrl-C or SIGTERM stops",
            names(&functions).join(", "),
        ));
        stop.await;
        note(&format!(
            "stopping: no new work is taken; the runs in flight get up to {} to finish (Ctrl-C \
             again stops at once)",
            HumanDuration(drain_timeout)
        ));
        let again = interrupted();
        let message = tokio::select! {
            report = node.shutdown(drain_timeout) => drained(url, report),
            () = again => format!(
                "interrupted: stopped serving {url} at once on a second signal; executions that \
                 were running are taken up again by the next `stele serve` once their leases \
                 expire, or at once under the same --identity"
            ),
        };
        Err(CliError::new(Exit::Interrupted, message))
    })
    .await
}

/// The last line of a drained `serve`.
fn drained(url: &DatabaseUrl, report: DrainReport) -> String {
    format!(
        "interrupted: stopped serving {url}; runs in flight: {} finished, {} left (the next \
         `stele serve` takes up what was left once its lease expires, or at once under the \
         same --identity)",
        report.finished, report.left
    )
}
