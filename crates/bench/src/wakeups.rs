//! Wake-ups across processes on SQLite: two stores opened on one file, as two processes
//! would (each its own writer connection, its own waiter hub). One store waits for an
//! execution's result (`wait_for_finished_result`, what a workflow's cancellation watch and a
//! client's wait use); the other finishes the execution (lock, then `Finished`), timed from
//! just before that write to the waiter's return. The waiting store hears the other's commit
//! only through its change detector (`PRAGMA data_version`, every 10 ms).

use anyhow::Context;
use concepts::{
    ClockFn, DbAwait, DbClient, DbExecutor, ExecutionEventInner, ExecutorId, Json,
    LockPendingRequest, OutcomeWrite, SupportedFunctionReturnValue,
};
use executor::Now;
use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};
use storage_sqlite::{SqliteConfig, SqlitePool, Synchronous};

/// What one measurement found, in milliseconds.
pub(crate) struct WakeupFigures {
    pub(crate) samples: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

/// Times `samples` wake-ups across two stores on one file in `dir`.
pub(crate) async fn measure(
    dir: &Path,
    sync: Synchronous,
    samples: usize,
) -> anyhow::Result<WakeupFigures> {
    anyhow::ensure!(samples > 0, "--wakeups: 0 samples");
    let path = dir.join("wakeups.db");
    let open = || async {
        SqlitePool::open(SqliteConfig::new(&path).with_synchronous(sync))
            .await
            .with_context(|| format!("opening {}", path.display()))
    };
    let (waiting, writing) = (open().await?, open().await?);
    let requests = crate::noop_requests(samples)?;
    let ffqns: Arc<[_]> = Arc::from([requests[0].ffqn.clone()]);
    let mut latencies = Vec::with_capacity(samples);
    for request in requests {
        let execution_id = request.execution_id.clone();
        writing.create(request).await.context("create")?;
        let waiter = {
            let (waiting, execution_id) = (waiting.clone(), execution_id.clone());
            tokio::spawn(async move {
                let result = waiting
                    .wait_for_finished_result(&execution_id, Some(Duration::from_secs(10)))
                    .await;
                (result, Instant::now())
            })
        };
        while concepts::kernel::Backend::waiter_counts(&waiting).finished == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let now = Now.now();
        let locked = writing
            .lock_pending(LockPendingRequest {
                batch_size: 1,
                pending_at_or_sooner: now,
                ffqns: ffqns.clone(),
                now,
                component_id: crate::component_id()?,
                executor_id: ExecutorId::generate_at(now),
                lock_expires_at: now + chrono::Duration::seconds(60),
            })
            .await
            .context("lock")?;
        let version = locked.first().context("the execution is due")?.next_version;
        let finished = ExecutionEventInner::Finished {
            result: Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
                serde_json::json!(null),
            ))),
        };
        let started = Instant::now();
        writing
            .append_outcome(OutcomeWrite::new(
                execution_id,
                version,
                now,
                finished,
                None,
            ))
            .await
            .context("finish")?;
        let (result, woken_at) = waiter.await.context("the waiter")?;
        let _finished = result.context("the waiter's result (a timeout: it was never woken)")?;
        latencies.push(woken_at.saturating_duration_since(started));
    }
    concepts::DbConnection::close(&waiting).await;
    concepts::DbConnection::close(&writing).await;
    latencies.sort_unstable();
    let at = |q: f64| {
        let rank = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len());
        latencies[rank - 1].as_secs_f64() * 1e3
    };
    Ok(WakeupFigures {
        samples,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    })
}

/// The targets-table rows: the median within 100 ms (issue 24), the p99 reported.
pub(crate) fn rows(figures: &WakeupFigures) -> Vec<crate::targets::Row> {
    use crate::targets::{Goal, Row};
    let figure = |q: &str| {
        format!(
            "a finish in another store on the file to its waiter's return, {} samples, {q}, ms",
            figures.samples
        )
    };
    vec![
        Row::alone(figure("p50"), figures.p50_ms, "ms", Goal::AtMost(100.0)),
        Row::alone(figure("p99"), figures.p99_ms, "ms", Goal::Report),
    ]
}
