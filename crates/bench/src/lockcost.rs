//! Lock cost against history length: an executor locks (and unlocks) 20 executions whose logs
//! are long every 100 ms, while a submitter creates one execution at a time; the submitter's
//! rate is compared with the same run over executions with short logs. A `lock_pending` that
//! read every history inside the write transaction would hold up every other write for as
//! long as the reading takes; one that reads the histories after the commit does not.

use anyhow::Context;
use concepts::{
    AppendBatchRequest, ClockFn, ComponentId, CreateRequest, DbConnection, ExecutionEventInner,
    ExecutionId, ExecutionMetadata, ExecutorId, FunctionFqn, HistoryEvent, LockPendingRequest,
    OutcomeWrite, PersistKind, add_saturating,
};
use executor::Now;
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

/// What one measurement found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockCostFigures {
    /// Events in each long log.
    pub(crate) history: usize,
    /// Creates/s of the submitter while the long logs are locked over and over.
    pub(crate) creates_long: f64,
    /// Creates/s of the submitter while the short logs are locked over and over.
    pub(crate) creates_short: f64,
}

/// Executions the locker cycles through, per kind.
const LOCKED: usize = 20;
/// How often the locker locks its executions (and unlocks them).
const LOCK_EVERY: Duration = Duration::from_millis(100);
/// How long the submitter runs beside each locker.
const WINDOW: Duration = Duration::from_secs(3);

fn component() -> anyhow::Result<ComponentId> {
    Ok("activity:bench".parse()?)
}

fn request(ffqn: &FunctionFqn) -> anyhow::Result<CreateRequest> {
    let now = Now.now();
    Ok(CreateRequest {
        created_at: now,
        execution_id: ExecutionId::generate_at(now),
        ffqn: ffqn.clone(),
        params: serde_json::json!([]).into(),
        parent: None,
        scheduled_at: now,
        retry_exp_backoff: Duration::from_secs(1),
        max_retries: 3,
        component_id: component()?,
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    })
}

fn lock_request(ffqn: &FunctionFqn) -> anyhow::Result<LockPendingRequest> {
    let now = Now.now();
    Ok(LockPendingRequest {
        batch_size: LOCKED,
        pending_at_or_sooner: now,
        ffqns: Arc::from([ffqn.clone()]),
        now,
        component_id: component()?,
        executor_id: ExecutorId::generate_at(now),
        lock_expires_at: add_saturating(now, Duration::from_secs(60)),
    })
}

/// Unlocks `locked` at once: due again immediately.
async fn unlock_all(
    db: &dyn DbConnection,
    locked: Vec<concepts::LockedExecution>,
) -> anyhow::Result<()> {
    for execution in locked {
        let now = Now.now();
        let event = ExecutionEventInner::Unlocked {
            backoff_expires_at: now,
            reason: "bench".to_string(),
        };
        let write = OutcomeWrite::new(
            execution.execution_id,
            execution.next_version,
            now,
            event,
            None,
        );
        db.append_outcome(write).await.context("unlock")?;
    }
    Ok(())
}

/// [`LOCKED`] executions of `ffqn`, each with `history` `Persist` events in its log.
async fn executions_with_history(
    db: &dyn DbConnection,
    ffqn: &FunctionFqn,
    history: usize,
) -> anyhow::Result<()> {
    let requests = (0..LOCKED)
        .map(|_| request(ffqn))
        .collect::<Result<_, _>>()?;
    db.create_batch(requests).await.context("create_batch")?;
    let locked = db.lock_pending(lock_request(ffqn)?).await.context("lock")?;
    let mut unlocked = Vec::with_capacity(locked.len());
    for execution in locked {
        let now = Now.now();
        let events = (0..history)
            .map(|n| ExecutionEventInner::HistoryEvent {
                event: HistoryEvent::Persist {
                    value: serde_json::json!({"step": n, "pad": "0123456789abcdef"}).into(),
                    kind: PersistKind::Custom("bench".to_string()),
                },
            })
            .collect();
        let next_version = db
            .append_batch(AppendBatchRequest {
                execution_id: execution.execution_id.clone(),
                version: execution.next_version,
                now,
                events,
                children: Vec::new(),
                leases: Vec::new(),
                answers: Vec::new(),
            })
            .await
            .context("append history")?;
        unlocked.push(concepts::LockedExecution {
            next_version,
            ..execution
        });
    }
    unlock_all(db, unlocked).await
}

/// The submitter's creates/s while a locker cycles through the executions of `ffqn`.
async fn creates_beside_locker(
    db: &Arc<dyn DbConnection>,
    ffqn: &FunctionFqn,
    submitted: &FunctionFqn,
) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let locker = {
        let (db, ffqn, stop) = (db.clone(), ffqn.clone(), stop.clone());
        tokio::spawn(async move {
            // Paced, so that both kinds lock as often and only the length of the logs differs.
            let mut pace = tokio::time::interval(LOCK_EVERY);
            while !stop.load(Ordering::Relaxed) {
                pace.tick().await;
                let locked = db.lock_pending(lock_request(&ffqn)?).await?;
                unlock_all(db.as_ref(), locked).await?;
            }
            anyhow::Ok(())
        })
    };
    let started = Instant::now();
    let mut created = 0_u32;
    while started.elapsed() < WINDOW {
        db.create(request(submitted)?).await.context("create")?;
        created += 1;
    }
    let rate = f64::from(created) / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    locker.await.context("the locker task")??;
    Ok(rate)
}

/// Measures the submitter's rate beside a locker of `history`-event logs and of 1-event logs.
pub(crate) async fn measure(
    db: Arc<dyn DbConnection>,
    history: usize,
) -> anyhow::Result<LockCostFigures> {
    let long: FunctionFqn = "bench:lock/ifc@1.0.0.long".parse()?;
    let short: FunctionFqn = "bench:lock/ifc@1.0.0.short".parse()?;
    let submitted: FunctionFqn = "bench:lock/ifc@1.0.0.submitted".parse()?;
    executions_with_history(db.as_ref(), &long, history).await?;
    executions_with_history(db.as_ref(), &short, 1).await?;
    // Alternated, so that a store that grows during the run favours neither.
    let short_1 = creates_beside_locker(&db, &short, &submitted).await?;
    let long_1 = creates_beside_locker(&db, &long, &submitted).await?;
    let long_2 = creates_beside_locker(&db, &long, &submitted).await?;
    let short_2 = creates_beside_locker(&db, &short, &submitted).await?;
    Ok(LockCostFigures {
        history,
        creates_long: f64::midpoint(long_1, long_2),
        creates_short: f64::midpoint(short_1, short_2),
    })
}

/// The targets-table row of `figures`: the ratio, which should be near 1.
pub(crate) fn row(figures: &LockCostFigures) -> crate::targets::Row {
    crate::targets::Row::against(
        format!(
            "creates/s beside a locker of {}-event logs",
            figures.history
        ),
        figures.creates_long,
        "/s",
        "the same beside a locker of 1-event logs",
        figures.creates_short,
        crate::targets::Goal::RatioAtLeast(0.8),
    )
}
