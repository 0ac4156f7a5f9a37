//! The lifecycle rows of the benchmark (issue 10): how many finished executions `prune`
//! removes per second (in the batches of `timers_watcher::prune_finished`, the pass the
//! `Pruner` and `stele executions prune` run), and one `cancel` of a parent with 10,000 unfinished children (its time,
//! and how many transactions it committed).

use crate::{FFQN, component_id, probe::Probe, run_noop};
use anyhow::{Context, ensure};
use chrono::{DateTime, TimeDelta, Utc};
use concepts::{
    AppendBatchRequest, CancelOutcome, CancelRequest, ClockFn, ClosingStrategy, CreateRequest,
    DbClientExt as _, DbConnection, ExecutionEventInner, ExecutionId, ExecutionMetadata,
    FunctionFqn, HistoryEvent, JoinSetId, JoinSetKind, JoinSetRequest, Json, ListExecutionsFilter,
    PendingStateKind, PruneRequest, Version,
};
use executor::Now;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

/// The parent of the cancelled tree: a function no executor of the benchmark runs.
const TREE: &str = "bench:lifecycle/flows.tree";

/// A time just after every execution finished so far: what `finished_before` is when a run
/// prunes everything.
fn after_everything() -> DateTime<Utc> {
    Now.now() + TimeDelta::milliseconds(1)
}

/// The prune rate of one backend.
pub(crate) struct PruneMeasurement {
    backend: String,
    /// The how-manieth prune pass on this store (1: its tables are fresh).
    pass: usize,
    executions: usize,
    batch: usize,
    calls: usize,
    took: Duration,
}

impl PruneMeasurement {
    /// The table's header.
    pub(crate) const HEADER: &str = "| backend | pass on the store | finished executions | prune limit | prune calls | time (s) | executions removed/s |\n|---|---:|---:|---:|---:|---:|---:|";

    /// The table's row.
    pub(crate) fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {:.3} | {:.0} |",
            self.backend,
            self.pass,
            self.executions,
            self.batch,
            self.calls,
            self.took.as_secs_f64(),
            self.executions as f64 / self.took.as_secs_f64()
        )
    }
}

/// Runs `executions` no-op executions to the end with the executor (`executor_batch` per
/// tick), then times `prune` of all of them, `batch` per call, and checks that the store is
/// empty afterwards; `pass` counts the runs on this store.
pub(crate) async fn prune_rate(
    backend: &str,
    pass: usize,
    db: &Arc<dyn DbConnection>,
    executions: usize,
    batch: usize,
    executor_batch: usize,
) -> anyhow::Result<PruneMeasurement> {
    eprintln!("  {backend}: running {executions} executions to the end ...");
    run_noop(backend, db, executions, executor_batch).await?;
    eprintln!("  {backend}: pruning them, {batch} per call ...");
    let finished_before = after_everything();
    let start = Instant::now();
    let total = timers_watcher::prune_finished(db.as_ref(), finished_before, batch)
        .await
        .with_context(|| format!("{backend}: prune"))?;
    let took = start.elapsed();
    ensure!(
        total.trees == executions && total.executions == executions && total.kept == 0,
        "{backend}: prune removed {} trees and {} executions and kept {}, expected {executions} \
         one-execution trees removed",
        total.trees,
        total.executions,
        total.kept
    );
    let left = db
        .list_all_executions(ListExecutionsFilter::default())
        .await?
        .len();
    ensure!(
        left == 0,
        "{backend}: {left} executions are left after prune"
    );
    Ok(PruneMeasurement {
        backend: backend.to_string(),
        pass,
        executions,
        batch,
        calls: total.batches,
        took,
    })
}

/// The cancellation of one tree.
pub(crate) struct CancelMeasurement {
    backend: String,
    executions: usize,
    took: Duration,
    transactions: String,
    prune: Duration,
}

impl CancelMeasurement {
    /// The table's header.
    pub(crate) const HEADER: &str = "| backend | executions in the tree | cancel calls | time (s) | cancelled executions/s | transactions | prune of the cancelled tree, one call (s) |\n|---|---:|---:|---:|---:|---|---:|";

    /// The table's row.
    pub(crate) fn row(&self) -> String {
        format!(
            "| {} | {} | 1 | {:.3} | {:.0} | {} | {:.3} |",
            self.backend,
            self.executions,
            self.took.as_secs_f64(),
            self.executions as f64 / self.took.as_secs_f64(),
            self.transactions,
            self.prune.as_secs_f64()
        )
    }
}

/// A request creating `execution_id` as a no-op execution, or a child of `parent`.
fn request(
    execution_id: ExecutionId,
    ffqn: FunctionFqn,
    parent: Option<(ExecutionId, JoinSetId)>,
    now: DateTime<Utc>,
) -> anyhow::Result<CreateRequest> {
    Ok(CreateRequest {
        created_at: now,
        execution_id,
        ffqn,
        params: Json(serde_json::json!([])),
        parent,
        scheduled_at: now,
        retry_exp_backoff: Duration::from_millis(100),
        max_retries: 3,
        component_id: component_id()?,
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    })
}

/// Creates a parent blocked on a join set of `children` pending children (one `append_batch`
/// that opens the join set, requests every child, creates them and awaits the first; child
/// `idx` is `parent.next_level(join set, idx)`); returns the parent.
async fn tree(db: &dyn DbConnection, children: u64) -> anyhow::Result<ExecutionId> {
    let now = Now.now();
    let parent = ExecutionId::generate_at(now);
    db.create(request(parent.clone(), TREE.parse()?, None, now)?)
        .await
        .context("creating the parent")?;
    let join_set_id = JoinSetId::new(JoinSetKind::Named, "tree")?;
    let history = |event| ExecutionEventInner::HistoryEvent { event };
    let mut events = Vec::new();
    events.push(history(HistoryEvent::JoinSetCreate {
        join_set_id: join_set_id.clone(),
        closing_strategy: ClosingStrategy::Complete,
    }));
    let mut requests = Vec::new();
    let ffqn: FunctionFqn = FFQN.parse()?;
    for idx in 1..=children {
        let child = parent.next_level(&join_set_id, idx);
        events.push(history(HistoryEvent::JoinSetRequest {
            join_set_id: join_set_id.clone(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: child.clone(),
            },
        }));
        requests.push(request(
            child,
            ffqn.clone(),
            Some((parent.clone(), join_set_id.clone())),
            now,
        )?);
    }
    events.push(history(HistoryEvent::JoinNext {
        join_set_id,
        run_expires_at: now,
        closing: false,
    }));
    db.append_batch(AppendBatchRequest {
        execution_id: parent.clone(),
        version: Version(1),
        now,
        events,
        children: requests,
        leases: Vec::new(),
        answers: Vec::new(),
    })
    .await
    .context("creating the children")?;
    Ok(parent)
}

/// What the probe's counters say about the transactions between `before` and `after`.
async fn transactions(
    probe: &Probe,
    root: &ExecutionId,
    before: Option<u64>,
    after: Option<u64>,
) -> anyhow::Result<String> {
    let delta = before.zip(after).map(|(b, a)| a.saturating_sub(b));
    Ok(match (probe, delta) {
        (Probe::Memory, _) | (_, None) => {
            "1 call (the memory store applies a write under one lock)".to_string()
        }
        (Probe::Sqlite { .. }, Some(commits)) => {
            format!("{commits} commit(s) (the wal-index change counter)")
        }
        (Probe::Postgres { .. }, Some(xids)) => {
            let (writers, rows) = probe.tree_writers(root).await?.unwrap_or_default();
            format!(
                "{writers} (distinct xmin of the {rows} state and response rows it wrote); {xids} \
                 transaction ids assigned during the call, the notification's included"
            )
        }
    })
}

/// Creates a parent with `children` unfinished children, times one `cancel` of it, reads how
/// many transactions it committed, checks that the whole tree finished, then times the
/// `prune` of the cancelled tree (one call).
pub(crate) async fn cancel_tree(
    backend: &str,
    db: &Arc<dyn DbConnection>,
    children: u64,
    probe: &Probe,
) -> anyhow::Result<CancelMeasurement> {
    eprintln!("  {backend}: creating a parent with {children} children ...");
    let root = tree(db.as_ref(), children).await?;
    let executions = usize::try_from(children)? + 1;
    let before = probe.commit_mark().await?;
    eprintln!("  {backend}: cancelling it ...");
    let start = Instant::now();
    let outcome = db
        .cancel(CancelRequest {
            execution_id: root.clone(),
            now: Now.now(),
            reason: "the benchmark cancels the tree".to_string(),
        })
        .await
        .context("cancel")?;
    let took = start.elapsed();
    let after = probe.commit_mark().await?;
    ensure!(
        outcome == CancelOutcome::Cancelled { executions },
        "{backend}: cancel answered {outcome:?}, expected {executions} executions cancelled"
    );
    let transactions = transactions(probe, &root, before, after).await?;
    let finished = db
        .list_all_executions(ListExecutionsFilter {
            state: Some(PendingStateKind::Finished),
            ..ListExecutionsFilter::default()
        })
        .await?
        .len();
    ensure!(
        finished == executions,
        "{backend}: {finished} executions are finished after the cancel, expected {executions}"
    );
    let start = Instant::now();
    let pruned = db
        .prune(PruneRequest {
            finished_before: after_everything(),
            limit: 1,
            after: None,
        })
        .await
        .context("prune of the cancelled tree")?;
    let prune = start.elapsed();
    ensure!(
        pruned.trees == 1 && pruned.executions == executions,
        "{backend}: the prune of the cancelled tree answered {pruned:?}, expected 1 tree of \
         {executions} executions"
    );
    Ok(CancelMeasurement {
        backend: backend.to_string(),
        executions,
        took,
        transactions,
        prune,
    })
}

/// The lifecycle section of the report: on a fresh store per backend, the prune rate, then
/// the cancellation of a tree and the prune of it.
pub(crate) async fn rows(
    args: &crate::Args,
    dir: &std::path::Path,
    sync: storage_sqlite::Synchronous,
    postgres_url: Option<&str>,
) -> anyhow::Result<String> {
    anyhow::ensure!(
        args.prune_batch.iter().all(|&batch| batch > 0),
        "--prune-batch: prune needs a limit of at least 1"
    );
    let mut prune_rows = Vec::new();
    let mut cancel_rows = Vec::new();
    for backend in &args.backends {
        let Some(store) = crate::Store::open(backend, dir, sync, postgres_url, "lifecycle").await?
        else {
            continue;
        };
        let label = match backend.as_str() {
            "sqlite" => format!("sqlite (synchronous={})", args.synchronous),
            other => other.to_string(),
        };
        eprintln!("measuring prune and cancel on {label} ...");
        let measured = async {
            let mut prunes = Vec::new();
            for (pass, &batch) in (1..).zip(&args.prune_batch) {
                let prune = prune_rate(
                    &label,
                    pass,
                    &store.db,
                    args.prune_executions,
                    batch,
                    args.batch_size,
                )
                .await?;
                prunes.push(prune.row());
            }
            let cancel = cancel_tree(&label, &store.db, args.cancel_children, &store.probe).await?;
            anyhow::Ok((prunes, cancel))
        }
        .await;
        store.finish().await?;
        let (prunes, cancel) = measured?;
        prune_rows.extend(prunes);
        cancel_rows.push(cancel.row());
    }
    let mut text = format!(
        "\nLifecycle (a fresh store per backend): {} no-op executions run to the end by one \
         executor, then removed by `prune` (at most `prune limit` top-level executions per call, \
         each call continuing from the previous one's `next`) until none is left; one such pass \
         per limit of `--prune-batch`, one after the other on the same store. Then a parent with \
         {} unfinished children (created as its children by one `append_batch`) cancelled by one \
         `cancel` call, and the cancelled tree removed by one `prune` call.\n\n{}\n",
        args.prune_executions,
        args.cancel_children,
        PruneMeasurement::HEADER
    );
    for row in prune_rows {
        text.push_str(&row);
        text.push('\n');
    }
    text.push('\n');
    text.push_str(CancelMeasurement::HEADER);
    text.push('\n');
    for row in cancel_rows {
        text.push_str(&row);
        text.push('\n');
    }
    Ok(text)
}
