//! E20: a store that fails an outcome write with a retriable error (a busy database, a lost
//! connection) does not cost the run its lease: the executor writes it again, with backoff, a
//! bounded number of times, and never retries an error that retrying cannot cure.

use super::{Fixture, config, ffqn, finished, json_value, ok, tick};
use crate::StoreFactory;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, DbAwait, DbError, DbExecutor, ExecutionId, FinishedExecutionResult, FunctionFqn,
    LockPendingRequest, LockedExecution, OutcomeWrite, PendingState, Version,
};
use executor::OUTCOME_WRITE_ATTEMPTS;
use serde_json::json;
use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use super::workers::{ScriptedWorker, Step};

/// Forwards to a store, but answers the first `failures` outcome writes with `error` without
/// writing them, and counts every outcome write it is asked for.
struct FailingOutcomes {
    inner: Arc<dyn DbExecutor>,
    failures: AtomicU32,
    error: Mutex<DbError>,
    attempts: AtomicU32,
}

impl FailingOutcomes {
    fn new(inner: Arc<dyn DbExecutor>, failures: u32, error: DbError) -> Arc<Self> {
        Arc::new(Self {
            inner,
            failures: AtomicU32::new(failures),
            error: Mutex::new(error),
            attempts: AtomicU32::new(0),
        })
    }
}

#[async_trait]
impl DbAwait for FailingOutcomes {
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        self.inner
            .wait_for_finished_result(execution_id, timeout)
            .await
    }
}

#[async_trait]
impl DbExecutor for FailingOutcomes {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        self.inner.lock_pending(req).await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let failing = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(self.error.lock().expect("not poisoned").clone());
        }
        self.inner.append_outcome(write).await
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        self.inner
            .wait_for_pending(pending_at_or_sooner, ffqns, max_wait)
            .await;
    }
}

/// E20: two retriable failures of a `Finished` are written through on the third attempt; a
/// retriable failure that lasts is given up after `OUTCOME_WRITE_ATTEMPTS` attempts and a
/// non-retriable one after one, both leaving the lease to the watcher.
pub async fn e20_retriable_outcome_write_is_retried<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let value = json_value(json!({"done": true}));
    let run = |failures: u32, error: DbError| {
        let store = FailingOutcomes::new(f.db.clone(), failures, error);
        let worker = Arc::new(ScriptedWorker::new(
            ffqn("e20"),
            vec![Step::Ok(value.clone())],
        ));
        let exec = executor::ExecTask::new(worker, config(), f.clock.clone(), store.clone());
        (store, exec)
    };

    let transient = || DbError::Connection("injected: the connection was reset".to_string());
    let execution_id = f.create(f.request(ffqn("e20"), 3)).await;
    let (store, exec) = run(2, transient());
    assert_eq!(tick(&exec, f.clock.now()).await, vec![execution_id.clone()]);
    assert_eq!(
        store.attempts.load(Ordering::SeqCst),
        3,
        "two failures, then the write"
    );
    assert_eq!(f.last_event(&execution_id).await, finished(ok(&value)));

    let lasting = f.create(f.request(ffqn("e20"), 3)).await;
    let (store, exec) = run(u32::MAX, transient());
    assert_eq!(tick(&exec, f.clock.now()).await, vec![lasting.clone()]);
    assert_eq!(
        store.attempts.load(Ordering::SeqCst),
        OUTCOME_WRITE_ATTEMPTS
    );
    assert!(
        matches!(f.state(&lasting).await, PendingState::Locked { .. }),
        "a write that never went through leaves the lease to the watcher"
    );

    let refused = f.create(f.request(ffqn("e20"), 3)).await;
    let (store, exec) = run(u32::MAX, DbError::NotFound("injected".to_string()));
    assert_eq!(tick(&exec, f.clock.now()).await, vec![refused.clone()]);
    assert_eq!(
        store.attempts.load(Ordering::SeqCst),
        1,
        "retrying cannot cure it"
    );
    assert!(matches!(
        f.state(&refused).await,
        PendingState::Locked { .. }
    ));
}
