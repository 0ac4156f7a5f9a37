//! E21: an executor without a task limiter bounds the runs it has in flight to two batches:
//! while its workers hang, further ticks lock nothing more, and once some return, a tick locks
//! only as many as returned.

use super::{Fixture, SAFETY, config, ffqn, tick, workers::GatedWorker};
use crate::StoreFactory;
use concepts::{ClockFn, ExecutionId, PendingState};
use std::sync::Arc;
use tokio::task::JoinSet;

/// E21: with `batch_size` 10, no task limiter and 35 due executions whose worker hangs until
/// released, four ticks lock 20 executions in all (two batches, at most one per tick); after
/// three runs return, the next tick locks three; once every run is released, every execution
/// finishes.
pub async fn e21_runs_in_flight_are_bounded_without_a_limiter<F: StoreFactory>(factory: &F) {
    const EXECUTIONS: usize = 35;
    let f = Fixture::new(factory).await;
    let config = config();
    assert!(config.task_limiter.is_none());
    let batch = config.batch_size;
    let bound = 2 * batch;
    let worker = Arc::new(GatedWorker::new(ffqn("e21")));
    let reqs: Vec<_> = (0..EXECUTIONS).map(|_| f.request(ffqn("e21"), 0)).collect();
    let ids: Vec<_> = reqs.iter().map(|req| req.execution_id.clone()).collect();
    f.db.create_batch(reqs).await.expect("create_batch");
    let exec = f.executor(worker.clone(), config);

    // Each in-flight run's task, answering its execution id once its outcome is written.
    let mut running = JoinSet::new();
    let mut in_flight = 0;
    for round in 0..4 {
        let progress = exec.tick(f.clock.now()).await.expect("tick");
        assert!(
            progress.executions.len() <= batch,
            "tick {round}: one batch at most"
        );
        in_flight += progress.executions.len();
        for (id, task) in progress.executions {
            running.spawn(async move {
                task.await.expect("the worker's task does not panic");
                id
            });
        }
        let locked = locked(&f, &ids).await;
        assert!(
            locked.len() <= bound,
            "tick {round}: {} executions locked at once, the bound is {bound}",
            locked.len()
        );
        assert_eq!(locked.len(), in_flight, "tick {round}");
    }
    assert_eq!(in_flight, bound, "the first tick fills every slot");
    for _ in 0..bound {
        worker.next_started(SAFETY).await;
    }

    for _ in 0..3 {
        worker.release_one();
    }
    for _ in 0..3 {
        let finished = tokio::time::timeout(SAFETY, running.join_next())
            .await
            .expect("a released run writes its outcome")
            .expect("a run is in flight")
            .expect("the awaiting task does not panic");
        assert!(matches!(
            f.state(&finished).await,
            PendingState::Finished { .. }
        ));
    }
    let progress = exec.tick(f.clock.now()).await.expect("tick");
    assert_eq!(
        progress.executions.len(),
        3,
        "a tick locks as many as there are free slots"
    );
    assert_eq!(locked(&f, &ids).await.len(), bound);

    // Release every run, present and future; the rest finish a batch at a time.
    for _ in 0..EXECUTIONS {
        worker.release_one();
    }
    tokio::time::timeout(SAFETY, progress.wait_for_tasks())
        .await
        .expect("released runs finish")
        .expect("worker tasks do not panic");
    tokio::time::timeout(SAFETY, running.join_all())
        .await
        .expect("released runs finish");
    loop {
        let locked = tick(&exec, f.clock.now()).await;
        assert!(locked.len() <= batch, "{} locked at once", locked.len());
        if locked.is_empty() {
            break;
        }
    }
    for id in &ids {
        assert!(
            matches!(f.state(id).await, PendingState::Finished { .. }),
            "{id} finished"
        );
    }
}

/// The executions of `ids` that are locked now.
async fn locked(f: &Fixture, ids: &[ExecutionId]) -> Vec<ExecutionId> {
    let mut locked = Vec::new();
    for id in ids {
        if matches!(f.state(id).await, PendingState::Locked { .. }) {
            locked.push(id.clone());
        }
    }
    locked
}
