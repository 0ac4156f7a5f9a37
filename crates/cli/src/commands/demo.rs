//! `stele demo`: submit the demo workload (or resume the one in the database), run it to the
//! end with live progress, and print a summary computed from the logs.

use super::{
    CliError, Exit, interrupted,
    node::{default_concurrency, demo_node, start},
    note, print, print_json, render, with_store,
};
use cli::{
    database::{DatabaseUrl, OpenMode},
    report::{self, StateCounts, Summary},
    workload::{self, DemoFunctions},
};
use concepts::DbClientExt as _;
use concepts::{ClockFn, DbConnection, ListExecutionsFilter, PendingStateKind};
use executor::Now;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::{
    fmt::Write as _,
    sync::Arc,
    time::{Duration, Instant},
};

/// How often progress is read from the store, at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How many top-level executions to submit (ignored when resuming).
    #[arg(long, default_value_t = 200, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(1, 100_000))]
    executions: u32,
    /// How many workers may run at once, over all executors [default: 8 per CPU core].
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = super::whole_number(1, 10_000))]
    concurrency: Option<u32>,
    /// Print the summary as one JSON document (progress and notes stay on stderr).
    #[arg(long)]
    json: bool,
}

/// What this invocation did with the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    /// Submitted a new workload and ran it.
    New,
    /// Found an unfinished workload and ran it to the end.
    Resumed,
    /// Found a finished workload; ran nothing.
    AlreadyFinished,
}

/// What this invocation ran.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct RunStats {
    elapsed_seconds: f64,
    /// Executions that finished while this invocation ran.
    finished: u64,
    executions_per_second: f64,
}

/// The demo's report: what this invocation did, and the workload's summary.
#[derive(Debug, Serialize)]
struct DemoReport {
    database: String,
    mode: Mode,
    submitted: u64,
    this_run: Option<RunStats>,
    workload: Summary,
}

pub async fn run(url: &DatabaseUrl, args: DemoArgs) -> Result<(), CliError> {
    with_store(url, OpenMode::CreateIfMissing, async |db| {
        run_demo(url, &args, db).await
    })
    .await
}

fn db_error(context: &str) -> impl FnOnce(concepts::DbError) -> CliError + '_ {
    move |err| CliError::db(context.to_string(), err)
}

async fn run_demo(
    url: &DatabaseUrl,
    args: &DemoArgs,
    db: Arc<dyn DbConnection>,
) -> Result<(), CliError> {
    let functions = DemoFunctions::new();
    check_functions(db.as_ref(), &functions, url).await?;
    let before = report::count_states(db.as_ref())
        .await
        .map_err(db_error("cannot read the workload"))?;
    let mut submitted = 0;
    let mode = if before.total() == 0 {
        let batch = workload::workload(&functions, args.executions as usize, Now.now());
        submitted = batch.len() as u64;
        db.create_batch(batch)
            .await
            .map_err(db_error("cannot submit the workload"))?;
        note(&format!(
            "submitted {submitted} executions to {url} in one batch (flaky, slow, fanout, sleeper)"
        ));
        Mode::New
    } else if before.all_finished() {
        note(&format!(
            "the workload in {url} is already finished ({} executions); nothing to run \
             (remove the database to start a new one)",
            before.total()
        ));
        Mode::AlreadyFinished
    } else {
        note(&format!(
            "resuming the unfinished workload in {url}: {} of {} executions not finished; \
             nothing new submitted",
            before.total() - before.finished,
            before.total()
        ));
        Mode::Resumed
    };

    let this_run = if mode == Mode::AlreadyFinished {
        None
    } else {
        let concurrency = args
            .concurrency
            .map_or_else(default_concurrency, |n| n as usize);
        let started = Instant::now();
        let node = start(demo_node(&db, &functions, concurrency))?;
        let outcome = watch_progress(db.as_ref(), before.finished, started).await;
        // Finished, nothing is running any more; interrupted, the runs in flight are left to
        // their leases at once, as a crash would leave them, and the next run resumes them.
        node.shutdown(Duration::ZERO).await;
        let after = outcome?;
        let elapsed = started.elapsed().as_secs_f64();
        let finished = after.finished - before.finished;
        #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
        let rate = if elapsed > 0.0 {
            finished as f64 / elapsed
        } else {
            0.0
        };
        Some(RunStats {
            elapsed_seconds: elapsed,
            finished,
            executions_per_second: rate,
        })
    };

    let logs = report::load_logs(db.as_ref())
        .await
        .map_err(db_error("cannot read the event logs"))?;
    let report = DemoReport {
        database: url.to_string(),
        mode,
        submitted,
        this_run,
        workload: report::summarize(&logs),
    };
    if args.json {
        print_json(&report)?;
    } else {
        print(&human_report(&report, &functions))?;
    }
    let check = &report.workload.exactly_once;
    if check.holds() {
        Ok(())
    } else {
        Err(CliError::new(
            Exit::Failure,
            format!("the exactly-once check failed: {check:?}"),
        ))
    }
}

/// Refuses a database whose unfinished executions include functions the demo cannot run:
/// it would wait for them forever.
async fn check_functions(
    db: &dyn DbConnection,
    functions: &DemoFunctions,
    url: &DatabaseUrl,
) -> Result<(), CliError> {
    let all = db
        .list_all_executions(ListExecutionsFilter::default())
        .await
        .map_err(db_error("cannot read the workload"))?;
    let foreign = all.iter().find(|execution| {
        execution.pending_state.kind() != PendingStateKind::Finished
            && functions.by_ffqn(&execution.ffqn).is_none()
    });
    match foreign {
        Some(execution) => Err(CliError::new(
            Exit::Usage,
            format!(
                "{url} holds unfinished executions of {} (e.g. {}), which the demo does not run; \
                 use a new database for the demo",
                execution.ffqn, execution.execution_id
            ),
        )),
        None => Ok(()),
    }
}

/// Shows progress until every execution finished, or until Ctrl-C / `SIGTERM`.
async fn watch_progress(
    db: &dyn DbConnection,
    finished_before: u64,
    started: Instant,
) -> Result<StateCounts, CliError> {
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr_with_hz(8));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {elapsed:>4} [{bar:28}] {pos}/{len} finished  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let interrupted = interrupted();
    tokio::pin!(interrupted);
    let outcome = loop {
        let reading = Instant::now();
        let counts = match report::count_states(db).await {
            Ok(counts) => counts,
            Err(err) => break Err(CliError::db("cannot read the progress", err)),
        };
        bar.set_length(counts.total());
        bar.set_position(counts.finished);
        bar.set_message(progress_message(&counts, finished_before, started));
        if counts.all_finished() {
            break Ok(counts);
        }
        tokio::select! {
            () = &mut interrupted => {
                break Err(CliError::new(
                    Exit::Interrupted,
                    format!(
                        "interrupted with {} of {} executions finished; run the same command \
                         again to resume",
                        counts.finished,
                        counts.total()
                    ),
                ));
            }
            // A large workload takes longer to count: keep the counting to a fifth of the time.
            () = tokio::time::sleep(PROGRESS_EVERY.max(reading.elapsed() * 4)) => {}
        }
    };
    bar.finish_and_clear();
    outcome
}

fn progress_message(counts: &StateCounts, finished_before: u64, started: Instant) -> String {
    let elapsed = started.elapsed().as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
    let rate = (counts.finished.saturating_sub(finished_before)) as f64 / elapsed.max(0.001);
    format!(
        "pending {} · running {} · retrying {} · blocked {} · {rate:.1} exec/s",
        counts.pending, counts.running, counts.retrying, counts.blocked
    )
}

/// The human form of the report.
fn human_report(report: &DemoReport, functions: &DemoFunctions) -> String {
    let summary = &report.workload;
    let mut text = String::new();
    let how = match report.mode {
        Mode::New => format!("new workload, {} submitted", report.submitted),
        Mode::Resumed => "resumed an unfinished workload".to_string(),
        Mode::AlreadyFinished => "already finished, nothing run".to_string(),
    };
    let _ = writeln!(text, "Workload in {} ({how})", report.database);
    let _ = writeln!(
        text,
        "  executions   {} ({} top-level, {} children of fanout)",
        summary.executions, summary.top_level, summary.children
    );

    let kinds: Vec<&String> = summary.outcomes.keys().collect();
    let mut header = vec!["FUNCTION".to_string()];
    header.extend(kinds.iter().map(|kind| (*kind).clone()));
    header.push("TOTAL".to_string());
    let mut table = render::table(header);
    for (ffqn, outcomes) in &summary.outcomes_by_function {
        let name = ffqn
            .parse()
            .ok()
            .and_then(|ffqn| functions.by_ffqn(&ffqn))
            .map_or_else(|| ffqn.clone(), |function| function.name.to_string());
        let mut row = vec![name];
        row.extend(
            kinds
                .iter()
                .map(|kind| outcomes.get(*kind).copied().unwrap_or(0).to_string()),
        );
        row.push(outcomes.values().sum::<u64>().to_string());
        table.add_row(row);
    }
    let mut total = vec!["total".to_string()];
    total.extend(kinds.iter().map(|kind| summary.outcomes[*kind].to_string()));
    total.push(summary.finished.to_string());
    table.add_row(total);
    let _ = writeln!(
        text,
        "\nOutcomes by function and result kind:\n{}",
        render::finish(&table)
    );

    let _ = writeln!(
        text,
        "  retries      {} (TemporarilyFailed events: failed attempts retried with backoff)",
        summary.retries
    );
    let _ = writeln!(
        text,
        "  timeouts     {} (TemporarilyTimedOut events: leases the watcher expired)",
        summary.timeouts
    );
    if let Some(latency) = &summary.latency {
        let _ = writeln!(
            text,
            "  latency      p50 {}, p99 {}, max {} (top-level, finished - created)",
            render::millis(latency.p50_ms),
            render::millis(latency.p99_ms),
            render::millis(latency.max_ms)
        );
    }
    match &report.this_run {
        Some(run) => {
            let _ = writeln!(
                text,
                "  throughput   {:.1} executions/s ({} finished in {:.1} s by this run)",
                run.executions_per_second, run.finished, run.elapsed_seconds
            );
        }
        None => {
            #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
            let rate = summary.finished as f64 / summary.span_seconds.max(0.001);
            let _ = writeln!(
                text,
                "  throughput   {rate:.1} executions/s ({} finished within {:.1} s of the first \
                 submission)",
                summary.finished, summary.span_seconds
            );
        }
    }
    let check = &summary.exactly_once;
    let verdict = if check.holds() { "OK" } else { "FAILED" };
    let _ = writeln!(
        text,
        "  exactly once {verdict}: {} of {} executions finished exactly once \
         ({} unfinished, {} finished more than once)",
        check.finished_once, summary.executions, check.not_finished, check.finished_more_than_once,
    );
    let _ = writeln!(
        text,
        "               {} of {} child results reached their parent exactly once \
         ({} missing, {} duplicated)",
        check.child_results_delivered_once,
        summary.children,
        check.child_results_missing,
        check.child_results_duplicated,
    );
    text
}
