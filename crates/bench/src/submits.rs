//! Single submits from many callers, as an application submits one execution per request from
//! many tasks at once: one executor (batch [`BATCH`], a task limiter of [`TASKS`]) already
//! running, then N no-op executions submitted one `create` each by [`TASKS`] tasks, timed from
//! the first submit to the last acknowledged `Finished` (the workload of Obelisk's peer bench).

use crate::{BenchWorker, Store, counting::CountingDb, multi, noop_requests};
use anyhow::Context;
use concepts::DbConnection;
use node::{ExecutorSettings, Node};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

/// The tasks that submit, and the executor's task limiter.
pub(crate) const TASKS: usize = 64;
/// How many executions the executor locks per tick.
pub(crate) const BATCH: usize = 64;

/// Executions per second from the first submit to the last acknowledged `Finished` of
/// `executions` single creates by [`TASKS`] tasks, with the executor started before them.
pub(crate) async fn measure(db: &Arc<dyn DbConnection>, executions: usize) -> anyhow::Result<f64> {
    let counting = Arc::new(CountingDb::new(db.clone(), executions, false));
    let settings = ExecutorSettings {
        lock_expiry: Duration::from_secs(60),
        tick_sleep: Duration::from_secs(1),
        batch_size: BATCH,
        component_id: Some(crate::component_id()?),
        concurrency: Some(TASKS),
    };
    let node = Node::builder(db.clone(), executor::Now)
        .without_timers_watcher()
        .worker_through(Arc::new(BenchWorker::new()?), settings, counting.clone())
        .start()?;
    let mut shares: Vec<Vec<_>> = (0..TASKS).map(|_| Vec::new()).collect();
    for (n, request) in noop_requests(executions)?.into_iter().enumerate() {
        shares[n % TASKS].push(request);
    }
    let start = Instant::now();
    let submitters: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let db = db.clone();
            tokio::spawn(async move {
                for request in share {
                    db.create(request).await.context("create")?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    let deadline = Duration::from_secs(600);
    let submitted = async {
        for submitter in submitters {
            submitter.await.context("a submitting task panicked")??;
        }
        let reached = tokio::time::timeout(deadline, counting.reached_target()).await;
        reached.with_context(|| format!("not every execution finished within {deadline:?}"))
    }
    .await;
    let elapsed = start.elapsed();
    node.shutdown(multi::STOP).await;
    submitted?;
    Ok(executions as f64 / elapsed.as_secs_f64())
}

/// The rate of [`measure`] on a fresh store of `store`'s kind, which is finished afterwards.
pub(crate) async fn measure_on(store: Store, executions: usize) -> anyhow::Result<f64> {
    let measured = measure(&store.db, executions).await;
    store.finish().await?;
    measured
}
