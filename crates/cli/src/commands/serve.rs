//! `stele serve`: run the demo's functions on a database until Ctrl-C or `SIGTERM`, so that
//! executions submitted by `stele submit` (or any other client) run.

use super::{
    CliError, Exit, interrupted,
    node::{Runtime, default_concurrency},
    note,
    operate::{parse_duration, prune_all},
    with_store,
};
use cli::{
    database::{DatabaseUrl, OpenMode},
    duration::HumanDuration,
    workload::DemoFunctions,
};
use concepts::{ClockFn as _, DbConnection};
use executor::Now;
use std::{sync::Arc, time::Duration};
use tokio::task::JoinHandle;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// How many workers may run at once, over all executors [default: 8 per CPU core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
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
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    prune_batch: u32,
}

/// The retention task's settings, as given on the command line.
#[derive(Debug, Clone, Copy)]
struct Retention {
    older_than: Duration,
    every: Duration,
    batch: u32,
}

pub async fn run(url: &DatabaseUrl, args: ServeArgs) -> Result<(), CliError> {
    let retention = args
        .prune_older_than
        .as_deref()
        .map(|older_than| {
            Ok::<_, CliError>(Retention {
                older_than: parse_duration("--prune-older-than", older_than)?,
                every: parse_duration("--prune-every", &args.prune_every)?,
                batch: args.prune_batch,
            })
        })
        .transpose()?;
    if retention.is_some_and(|retention| retention.every.is_zero()) {
        return Err(super::bad_input("--prune-every", "must be more than 0s"));
    }
    let concurrency = args
        .concurrency
        .map_or_else(default_concurrency, |n| n as usize);
    with_store(url, OpenMode::CreateIfMissing, async |db| {
        // The signal handlers first: a signal after the note below stops cleanly.
        let stop = interrupted();
        let functions = DemoFunctions::new();
        let mut runtime = Runtime::start(&db, &functions, concurrency);
        let retention_task = retention.map(|retention| spawn_retention(db.clone(), retention));
        let pruning = match retention {
            Some(retention) => format!(
                "the retention task removes trees finished more than {} ago, every {}",
                HumanDuration(retention.older_than),
                HumanDuration(retention.every)
            ),
            None => "no retention task (--prune-older-than starts one)".to_string(),
        };
        note(&format!(
            "serving {url}: executors of {} (at most {concurrency} workers at once), the timers \
             watcher, {pruning}; Ctrl-C or SIGTERM stops",
            runtime.functions.join(", "),
        ));
        stop.await;
        if let Some(task) = retention_task {
            task.abort();
        }
        runtime.close().await;
        Err(CliError::new(
            Exit::Interrupted,
            format!(
                "interrupted: stopped serving {url}; executions that were running are taken up \
                 again by the next `stele serve` once their leases expire"
            ),
        ))
    })
    .await
}

/// The retention task: every `every`, removes what finished more than `older_than` ago, in
/// transactions of `batch` top-level executions. A failed round is logged and tried again
/// at the next.
fn spawn_retention(db: Arc<dyn DbConnection>, retention: Retention) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let finished_before = concepts::sub_saturating(Now.now(), retention.older_than);
            match prune_all(db.as_ref(), finished_before, retention.batch as usize).await {
                Ok(totals) => tracing::info!(?totals, "retention"),
                Err(err) => tracing::warn!("the retention task cannot prune: {err}"),
            }
            tokio::time::sleep(retention.every).await;
        }
    })
}
