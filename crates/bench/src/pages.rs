//! The UI's execution page rows: the server time of `GET /executions/{id}` (the page reads the
//! whole log once, renders its timeline, its join sets, the first 200 events and the first 100
//! children of its tree) for an execution with a long log and for a parent of many children,
//! on the stored-history store (after its measured runs, beside its million finished
//! executions), over HTTP ([`crate::http::Served::execution_page_ms`]).
//!
//! Both are written straight through the store's API, in batches:
//!
//! - the long log: `Created`, `Locked`, `Persist` events appended 1,000 to an `append_batch`,
//!   then `Finished`: `events` events in all;
//! - the parent: one `append_batch` that opens a join set, requests every child (a
//!   `ChildExecutionRequest` each), creates the children (`parent.n:fan_<k>`) and awaits the
//!   first; then every child is locked with one `lock_pending` and finished, its response
//!   written to the parent in the same transaction, 1,000 to an `append_outcomes`: a parent
//!   with `children` finished children and as many responses.

use anyhow::{Context, ensure};
use concepts::{
    AppendBatchRequest, ClockFn, ClosingStrategy, CreateRequest, DbConnection, ExecutionEventInner,
    ExecutionId, ExecutionMetadata, FunctionFqn, HistoryEvent, JoinSetId, JoinSetKind,
    JoinSetRequest, Json, LockPendingRequest, OutcomeWrite, PersistKind,
    SupportedFunctionReturnValue, Version, add_saturating,
};
use executor::Now;
use std::{sync::Arc, time::Duration};

/// The long log's function (no executor of the benchmark runs it).
const LONG: &str = "bench:ui/pages.long";
/// The parent's function (no executor of the benchmark runs it).
const PARENT: &str = "bench:ui/pages.parent";
/// The children's function (no executor of the benchmark runs it).
const CHILD: &str = "bench:ui/pages.child";
/// Events per `append_batch` of the long log, outcomes per `append_outcomes`.
const BATCH: usize = 1_000;

/// The measured pages, ms.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PageFigures {
    /// Events in the long log, and its page's median time.
    pub(crate) events: Option<(usize, f64)>,
    /// The parent's children, and its page's median time.
    pub(crate) children: Option<(usize, f64)>,
}

fn request(
    ffqn: &str,
    execution_id: ExecutionId,
    parent: Option<(ExecutionId, JoinSetId)>,
) -> anyhow::Result<CreateRequest> {
    let now = Now.now();
    Ok(CreateRequest {
        created_at: now,
        execution_id,
        ffqn: ffqn.parse()?,
        params: Json(serde_json::json!([{"order": 42, "items": ["a", "b", "c"]}])),
        parent,
        scheduled_at: now,
        retry_exp_backoff: Duration::from_millis(100),
        max_retries: 3,
        component_id: crate::component_id()?,
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    })
}

/// Locks up to `count` due executions of `ffqn`.
async fn lock(
    db: &dyn DbConnection,
    ffqn: &str,
    count: usize,
) -> anyhow::Result<Vec<concepts::LockedExecution>> {
    let now = Now.now();
    let ffqns: Arc<[FunctionFqn]> = Arc::from([ffqn.parse()?]);
    let locked = db
        .lock_pending(LockPendingRequest {
            batch_size: count,
            pending_at_or_sooner: now,
            ffqns,
            now,
            component_id: crate::component_id()?,
            executor_id: concepts::ExecutorId::generate_at(now),
            lock_expires_at: add_saturating(now, Duration::from_secs(600)),
        })
        .await
        .context("lock_pending")?;
    ensure!(
        locked.len() == count,
        "locked {} of {count} {ffqn}",
        locked.len()
    );
    Ok(locked)
}

fn finished() -> ExecutionEventInner {
    ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::None),
    }
}

/// A finished execution whose log holds `events` events (at least 3); returns its id.
async fn long_log(db: &dyn DbConnection, events: usize) -> anyhow::Result<ExecutionId> {
    ensure!(
        events >= 3,
        "a long log has at least 3 events, not {events}"
    );
    let id = ExecutionId::generate_at(Now.now());
    db.create(request(LONG, id.clone(), None)?)
        .await
        .context("creating the long log")?;
    let locked = lock(db, LONG, 1).await?;
    let mut version = locked[0].next_version;
    let persisted: Vec<usize> = (0..events - 3).collect();
    for chunk in persisted.chunks(BATCH) {
        let batch = chunk
            .iter()
            .map(|step| ExecutionEventInner::HistoryEvent {
                event: HistoryEvent::Persist {
                    value: Json(serde_json::json!({"step": step, "pad": "0123456789abcdef"})),
                    kind: PersistKind::Custom("bench".to_string()),
                },
            })
            .collect();
        version = db
            .append_batch(AppendBatchRequest {
                execution_id: id.clone(),
                version,
                now: Now.now(),
                events: batch,
                children: Vec::new(),
                leases: Vec::new(),
                answers: Vec::new(),
            })
            .await
            .context("appending the long log")?;
    }
    db.append_outcome(OutcomeWrite::new(
        id.clone(),
        version,
        Now.now(),
        finished(),
        None,
    ))
    .await
    .context("finishing the long log")?;
    let written = db.get(&id).await?.events.len();
    ensure!(
        written == events,
        "the long log has {written} events, not {events}"
    );
    Ok(id)
}

/// A parent blocked on one join set of `children` finished children, each of whose
/// responses it holds; returns its id.
async fn fan_out(db: &dyn DbConnection, children: usize) -> anyhow::Result<ExecutionId> {
    let parent = ExecutionId::generate_at(Now.now());
    db.create(request(PARENT, parent.clone(), None)?)
        .await
        .context("creating the parent")?;
    let join_set_id = JoinSetId::new(JoinSetKind::Named, "fan")?;
    let history = |event| ExecutionEventInner::HistoryEvent { event };
    let mut events = vec![history(HistoryEvent::JoinSetCreate {
        join_set_id: join_set_id.clone(),
        closing_strategy: ClosingStrategy::Complete,
    })];
    let mut requests = Vec::with_capacity(children);
    for idx in 1..=u64::try_from(children)? {
        let child = parent.next_level(&join_set_id, idx);
        events.push(history(HistoryEvent::JoinSetRequest {
            join_set_id: join_set_id.clone(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: child.clone(),
            },
        }));
        requests.push(request(
            CHILD,
            child,
            Some((parent.clone(), join_set_id.clone())),
        )?);
    }
    events.push(history(HistoryEvent::JoinNext {
        join_set_id,
        run_expires_at: Now.now(),
        closing: false,
    }));
    db.append_batch(AppendBatchRequest {
        execution_id: parent.clone(),
        version: Version(1),
        now: Now.now(),
        events,
        children: requests,
        leases: Vec::new(),
        answers: Vec::new(),
    })
    .await
    .context("creating the children")?;
    let writes: Vec<OutcomeWrite> = lock(db, CHILD, children)
        .await?
        .into_iter()
        .map(|child| {
            OutcomeWrite::new(
                child.execution_id,
                child.next_version,
                Now.now(),
                finished(),
                child.parent.as_ref(),
            )
        })
        .collect();
    for batch in writes.chunks(BATCH) {
        let results = db.append_outcomes(batch.to_vec()).await?;
        ensure!(results.iter().all(Result::is_ok), "a Finished was refused");
    }
    Ok(parent)
}

/// Writes the long log (`events`, 0 skips it) and the parent (`children`, 0 skips it) into
/// `db`, then times their pages on `served`.
pub(crate) async fn measure(
    backend: &str,
    db: &dyn DbConnection,
    served: &crate::http::Served,
    events: usize,
    children: usize,
) -> anyhow::Result<PageFigures> {
    let mut figures = PageFigures::default();
    if events > 0 {
        eprintln!("  {backend}: the page of an execution with {events} events ...");
        let id = long_log(db, events).await?.to_string();
        // More than a page of events: the table links to the later ones.
        let ms = served.execution_page_ms(&id, "Later events").await?;
        figures.events = Some((events, ms));
    }
    if children > 0 {
        eprintln!("  {backend}: the page of a parent of {children} children ...");
        let id = fan_out(db, children).await?.to_string();
        // More than a page of children: the tree links to the next one.
        let ms = served.execution_page_ms(&id, "More children").await?;
        figures.children = Some((children, ms));
    }
    Ok(figures)
}

/// The targets-table rows of `figures`: a page's server time stays under 200 ms.
pub(crate) fn rows(figures: &PageFigures) -> Vec<crate::targets::Row> {
    use crate::targets::{Goal, Row};
    let row = |what: String, ms: f64| {
        Row::alone(
            format!(
                "UI execution page, {what}, ms (median of {})",
                crate::http::EXECUTION_PAGES
            ),
            ms,
            "ms",
            Goal::AtMost(200.0),
        )
    };
    let mut rows = Vec::new();
    if let Some((events, ms)) = figures.events {
        rows.push(row(format!("{} events", thousands(events)), ms));
    }
    if let Some((children, ms)) = figures.children {
        rows.push(row(format!("{} children", thousands(children)), ms));
    }
    rows
}

/// `20000` as `20,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
