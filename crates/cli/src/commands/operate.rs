//! `stele executions wait | cancel | complete | prune`: what an operator does to executions
//! after submitting them. None of them creates a database: `wait` only reads (and never
//! migrates), the others write to a database that already exists.

use super::{
    CliError, Exit, bad_input, interrupted, parse_execution_id, print, print_json, render,
    with_store,
};
use ::node::HumanDuration;
use chrono::{DateTime, Utc};
use cli::database::{DatabaseUrl, OpenMode};
use concepts::{
    CancelOutcome, CancelRequest, ClockFn as _, CompleteRequest, DbConnection, DbError,
    ExecutionId, FinishedExecutionResult, Json, ResultKind, SupportedFunctionReturnValue,
};
use executor::Now;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// The execution id.
    id: String,
    /// Give up after this long (exit 1): a whole number and ms, s, m, h or d, e.g. 30s
    /// [default: wait until it finishes, or Ctrl-C].
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    timeout: Option<String>,
    /// Print one JSON document (id, result kind, value, the whole result) instead of a line.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The execution id.
    id: String,
    /// Why, recorded in the result of every execution cancelled.
    #[arg(
        long,
        value_name = "TEXT",
        default_value = "cancelled with `stele executions cancel`"
    )]
    reason: String,
}

#[derive(Debug, clap::Args)]
pub struct CompleteArgs {
    /// The id of the promise: an execution of a stub function `stele:stub.<name>`.
    id: String,
    /// The value the promise resolves to, as JSON: `true`, `"text"`, `{"approved":true}`.
    #[arg(long = "json", value_name = "VALUE", allow_hyphen_values = true)]
    value: String,
}

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    /// Remove the trees of top-level executions that finished longer ago than this: a whole
    /// number and ms, s, m, h or d, e.g. 7d.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    older_than: String,
    /// How many top-level executions one transaction examines.
    #[arg(long, default_value_t = 1_000, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(1, 100_000))]
    batch: u32,
    /// Print the counts as one JSON document instead of a line.
    #[arg(long)]
    json: bool,
}

/// Parses a `DURATION` option (one line, exit 2, when malformed).
pub fn parse_duration(option: &str, text: &str) -> Result<Duration, CliError> {
    text.parse::<HumanDuration>()
        .map(Duration::from)
        .map_err(|err| bad_input(option, err))
}

/// The document of `wait --json`.
#[derive(Serialize)]
struct WaitDocument<'a> {
    execution_id: &'a ExecutionId,
    result_kind: ResultKind,
    /// The value it returned (`Ok` or the function's own `Err`), if any.
    value: Option<&'a Json>,
    result: &'a FinishedExecutionResult,
}

pub async fn wait(url: &DatabaseUrl, args: WaitArgs) -> Result<(), CliError> {
    let execution_id = parse_execution_id(&args.id)?;
    let timeout = args
        .timeout
        .as_deref()
        .map(|text| parse_duration("--timeout", text))
        .transpose()?;
    let result = with_store(url, OpenMode::Inspection, async |db| {
        tokio::select! {
            biased;
            () = interrupted() => Err(CliError::new(
                Exit::Interrupted,
                format!("interrupted while waiting for {execution_id}, which goes on running"),
            )),
            result = wait_until_finished(db.as_ref(), url, &execution_id, timeout) => result,
        }
    })
    .await?;
    if args.json {
        let value = match &result {
            Ok(
                SupportedFunctionReturnValue::InfallibleOrResultOk(value)
                | SupportedFunctionReturnValue::FallibleResultErr(value),
            ) => Some(value),
            _ => None,
        };
        return print_json(&WaitDocument {
            execution_id: &execution_id,
            result_kind: ResultKind::of(&result),
            value,
            result: &result,
        });
    }
    print(&format!("{}\n", render::result(&result)))
}

/// `node::wait_for_result` in slices of `node::DEFAULT_WAIT_SLICE`: woken by the store when
/// `stele serve` (another process) finishes the execution, and reading again after each slice.
async fn wait_until_finished(
    db: &dyn DbConnection,
    url: &DatabaseUrl,
    execution_id: &ExecutionId,
    timeout: Option<Duration>,
) -> Result<FinishedExecutionResult, CliError> {
    match ::node::wait_for_result(db, execution_id, timeout, ::node::DEFAULT_WAIT_SLICE).await {
        Ok(Some(result)) => Ok(result),
        Ok(None) => Err(CliError::new(
            Exit::Failure,
            format!(
                "{execution_id} did not finish within {} (it goes on; `stele executions show \
                 {execution_id}` shows where it is)",
                HumanDuration(timeout.unwrap_or_default())
            ),
        )),
        Err(DbError::NotFound(_)) => Err(CliError::no_execution(execution_id, url)),
        Err(err) => Err(CliError::db(format!("cannot wait for {execution_id}"), err)),
    }
}

pub async fn cancel(url: &DatabaseUrl, args: CancelArgs) -> Result<(), CliError> {
    let execution_id = parse_execution_id(&args.id)?;
    let request = CancelRequest {
        execution_id: execution_id.clone(),
        now: Now.now(),
        reason: args.reason,
    };
    let outcome = with_store(url, OpenMode::ExistingOnly, async |db| {
        db.cancel(request).await.map_err(|err| match err {
            DbError::NotFound(_) => CliError::no_execution(&execution_id, url),
            other => CliError::request(format!("cannot cancel {execution_id}"), other),
        })
    })
    .await?;
    let text = match &outcome {
        CancelOutcome::AlreadyFinished { result } => format!(
            "{}: {}\n",
            ::node::cancel_answer(&execution_id, &outcome),
            render::result(result)
        ),
        CancelOutcome::Cancelled { .. } => {
            format!("{}\n", ::node::cancel_answer(&execution_id, &outcome))
        }
    };
    print(&text)
}

pub async fn complete(url: &DatabaseUrl, args: CompleteArgs) -> Result<(), CliError> {
    let execution_id = parse_execution_id(&args.id)?;
    let value: serde_json::Value =
        serde_json::from_str(&args.value).map_err(|err| bad_input("--json value", err))?;
    let request = CompleteRequest {
        execution_id: execution_id.clone(),
        now: Now.now(),
        value: SupportedFunctionReturnValue::InfallibleOrResultOk(Json(value.clone())),
    };
    let outcome = with_store(url, OpenMode::ExistingOnly, async |db| {
        db.complete(request).await.map_err(|err| match err {
            DbError::NotFound(_) => CliError::no_execution(&execution_id, url),
            other => CliError::request(format!("cannot complete {execution_id}"), other),
        })
    })
    .await?;
    let text = format!(
        "{}\n",
        ::node::complete_answer(&execution_id, &outcome, &value)
    );
    print(&text)
}

/// The document of `prune --json`.
#[derive(Serialize)]
struct PruneDocument {
    /// The age limit: what finished before it was examined.
    finished_before: DateTime<Utc>,
    /// Trees removed (their top-level executions).
    trees: usize,
    /// Executions removed, top-level and descendants.
    executions: usize,
    /// Trees examined and kept because a member has not finished.
    kept: usize,
    /// Transactions run.
    batches: usize,
}

pub async fn prune(url: &DatabaseUrl, args: PruneArgs) -> Result<(), CliError> {
    let older_than = parse_duration("--older-than", &args.older_than)?;
    let finished_before = concepts::sub_saturating(Now.now(), older_than);
    let limit = args.batch as usize;
    let totals = with_store(url, OpenMode::ExistingOnly, async |db| {
        timers_watcher::prune_finished(db.as_ref(), finished_before, limit)
            .await
            .map_err(|err| CliError::db(format!("cannot prune {url}"), err))
    })
    .await?;
    if args.json {
        return print_json(&PruneDocument {
            finished_before,
            trees: totals.trees,
            executions: totals.executions,
            kept: totals.kept,
            batches: totals.batches,
        });
    }
    print(&format!(
        "removed {} ({} executions) that finished before {}; kept {} with an unfinished \
         member\n",
        trees(totals.trees),
        totals.executions,
        render::datetime(finished_before),
        trees(totals.kept),
    ))
}

fn trees(count: usize) -> String {
    if count == 1 {
        "1 tree".to_string()
    } else {
        format!("{count} trees")
    }
}
