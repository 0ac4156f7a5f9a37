//! `stele serve`: run the demo's functions on a database until Ctrl-C or `SIGTERM`, so that
//! executions submitted by `stele submit` (or any other client) run; stopped, it drains: no new
//! work is taken, and the runs in flight get `--drain-timeout` to finish.

use super::{
    CliError, Exit, interrupted,
    node::{default_concurrency, demo_node, names, start},
    note,
    operate::parse_duration,
    with_store,
};
use ::node::{DrainReport, HumanDuration};
use cli::{
    database::{DatabaseUrl, OpenMode},
    workload::DemoFunctions,
};
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
        let node = start(builder)?;
        let pruning = match retention {
            Some(config) => format!(
                "the retention task removes trees finished more than {} ago, every {}",
                HumanDuration(config.retention),
                HumanDuration(config.interval)
            ),
            None => "no retention task (--prune-older-than starts one)".to_string(),
        };
        note(&format!(
            "serving {url}: executors of {} (at most {concurrency} workers at once), the timers \
             watcher, {pruning}; Ctrl-C or SIGTERM stops",
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
                 expire"
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
         `stele serve` takes up what was left once its lease expires)",
        report.finished, report.left
    )
}
