//! Mass lease expiry: a process that locked many executions dies, and every lease expires at
//! once. Measured: the time of the one watcher pass that times all of them out
//! (`timers_watcher::tick`, which writes them `LEASES_PER_WRITE` to a transaction), and, on a
//! second set of (at most 1,000) leases, the same leases timed out one `append_outcome` at a
//! time (what the watcher did before, one transaction and one commit per lease, awaited in
//! turn).

use anyhow::{Context, ensure};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, ComponentId, CreateRequest, DbConnection, ExecutionId, ExecutionMetadata, ExecutorId,
    ExpiredTimer, FunctionFqn, LockPendingRequest, add_saturating,
};
use executor::Now;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

/// What one measurement found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpiryFigures {
    /// Leases expired at once.
    pub(crate) leases: usize,
    /// Leases per second timed out by one watcher pass.
    pub(crate) batched_per_second: f64,
    /// Leases per second timed out one `append_outcome` at a time.
    pub(crate) one_by_one_per_second: f64,
}

const LEASE: Duration = Duration::from_secs(1);
/// How many leases the one-by-one rate is measured on, at most.
const ONE_BY_ONE_SAMPLE: usize = 1_000;

fn ffqn(name: &str) -> anyhow::Result<FunctionFqn> {
    Ok(format!("bench:expiry/ifc@1.0.0.{name}").parse()?)
}

/// Creates and locks `count` executions of `ffqn` at `now` (one lease each, all expiring at
/// `now + LEASE`), as a process that then dies.
async fn locked_leases(
    db: &dyn DbConnection,
    ffqn: &FunctionFqn,
    count: usize,
    now: DateTime<Utc>,
) -> anyhow::Result<()> {
    let component_id: ComponentId = "activity:bench".parse()?;
    let mut left = count;
    while left > 0 {
        let chunk = left.min(10_000);
        let requests = (0..chunk)
            .map(|_| CreateRequest {
                created_at: now,
                execution_id: ExecutionId::generate_at(now),
                ffqn: ffqn.clone(),
                params: serde_json::json!([]).into(),
                parent: None,
                scheduled_at: now,
                retry_exp_backoff: Duration::from_secs(1),
                max_retries: 3,
                component_id: component_id.clone(),
                metadata: ExecutionMetadata::default(),
                scheduled_by: None,
            })
            .collect();
        db.create_batch(requests).await.context("create_batch")?;
        left -= chunk;
    }
    let locked = db
        .lock_pending(LockPendingRequest {
            batch_size: count,
            pending_at_or_sooner: now,
            ffqns: Arc::from([ffqn.clone()]),
            now,
            component_id,
            executor_id: ExecutorId::generate_at(now),
            lock_expires_at: add_saturating(now, LEASE),
        })
        .await
        .context("lock_pending")?;
    ensure!(locked.len() == count, "locked {} of {count}", locked.len());
    Ok(())
}

/// Measures `leases` leases expiring at once on `db`, batched by the watcher and one by one.
pub(crate) async fn measure(
    db: Arc<dyn DbConnection>,
    leases: usize,
) -> anyhow::Result<ExpiryFigures> {
    let now = Now.now();
    let later = add_saturating(now, LEASE * 2);

    locked_leases(db.as_ref(), &ffqn("batched")?, leases, now).await?;
    let started = Instant::now();
    let progress = timers_watcher::tick(db.as_ref(), later, Duration::ZERO)
        .await
        .context("watcher tick")?;
    let batched = started.elapsed();
    ensure!(
        progress.expired_locks == leases,
        "the watcher timed out {} of {leases} leases",
        progress.expired_locks
    );

    // One commit per lease is slow: a sample of them is enough for its rate.
    let sample = leases.min(ONE_BY_ONE_SAMPLE);
    locked_leases(db.as_ref(), &ffqn("single")?, sample, now).await?;
    let started = Instant::now();
    let mut written = 0;
    for timer in db.get_expired_timers(later).await? {
        if let ExpiredTimer::Lock(lock) = timer {
            db.append_outcome(timers_watcher::expired_lock_write(&lock, later))
                .await
                .context("append_outcome")?;
            written += 1;
        }
    }
    let single = started.elapsed();
    ensure!(
        written == sample,
        "timed out {written} of {sample} one by one"
    );

    let rate = |count: usize, d: Duration| count as f64 / d.as_secs_f64();
    Ok(ExpiryFigures {
        leases,
        batched_per_second: rate(leases, batched),
        one_by_one_per_second: rate(sample, single),
    })
}

/// The targets-table rows of `figures` on `backend`: at least 25,000 leases/s on SQLite and
/// 10,000/s on PostgreSQL (issue 12), reported on memory; the one-by-one rate beside it.
pub(crate) fn rows(backend: &str, figures: &ExpiryFigures) -> Vec<crate::targets::Row> {
    use crate::targets::{Goal, Row};
    let goal = match backend {
        "sqlite" => Goal::AtLeast(25_000.0),
        "postgres" => Goal::AtLeast(10_000.0),
        _ => Goal::Report,
    };
    vec![
        Row::alone(
            format!(
                "mass lease expiry, {} leases, one watcher pass, leases/s",
                figures.leases
            ),
            figures.batched_per_second,
            "/s",
            goal,
        ),
        Row::alone(
            "mass lease expiry, one append_outcome per lease, leases/s",
            figures.one_by_one_per_second,
            "/s",
            Goal::Report,
        ),
    ]
}
