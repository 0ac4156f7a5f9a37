//! The executor's store handle, wrapped to count acknowledged `Finished` appends: completion
//! is observed exactly, not by polling.

use chrono::{DateTime, Utc};
use concepts::{
    DbAwait, DbConnection, DbError, DbExecutor, ExecutionEventInner, ExecutionId,
    FinishedExecutionResult, FunctionFqn, LockPendingRequest, LockedExecution, OutcomeWrite,
    Version,
};
use std::{
    io::Write as _,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};
use tokio::sync::Notify;

/// Forwards to the real store and counts acknowledged `Finished` appends.
pub(crate) struct CountingDb {
    inner: Arc<dyn DbConnection>,
    finished: AtomicUsize,
    target: usize,
    /// The count the waiter of [`CountingDb::reached`] waits for: reaching it notifies.
    wanted: AtomicUsize,
    done: Notify,
    /// Prints `finished <count>` on standard output after each counted append (a worker
    /// process reports to its parent this way).
    report: bool,
}

impl CountingDb {
    /// Counts up to `target`; with `report`, prints each new count.
    pub(crate) fn new(inner: Arc<dyn DbConnection>, target: usize, report: bool) -> Self {
        Self {
            inner,
            finished: AtomicUsize::new(0),
            target,
            wanted: AtomicUsize::new(target),
            done: Notify::new(),
            report,
        }
    }

    /// Acknowledged `Finished` appends so far.
    pub(crate) fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }

    /// Returns once `target` `Finished` appends were acknowledged.
    pub(crate) async fn reached_target(&self) {
        self.reached(self.target).await;
    }

    /// Returns once `count` `Finished` appends were acknowledged (at most the target); one
    /// waiter at a time.
    pub(crate) async fn reached(&self, count: usize) {
        let count = count.min(self.target);
        self.wanted.store(count, Ordering::SeqCst);
        loop {
            let notified = self.done.notified();
            if self.finished() >= count {
                return;
            }
            notified.await;
        }
    }

    /// Counts `result` when it acknowledges a `Finished` append (`finished`).
    fn count(&self, result: &Result<Version, DbError>, finished: bool) {
        if result.is_ok() && finished {
            let finished = self.finished.fetch_add(1, Ordering::SeqCst) + 1;
            if self.report {
                let mut stdout = std::io::stdout().lock();
                // The parent reads the count; should it be gone, nothing is left to tell.
                let _ = writeln!(stdout, "finished {finished}");
                let _ = stdout.flush();
            }
            if finished >= self.wanted.load(Ordering::SeqCst) {
                self.done.notify_waiters();
            }
        }
    }
}

#[async_trait::async_trait]
impl DbAwait for CountingDb {
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

#[async_trait::async_trait]
impl DbExecutor for CountingDb {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        self.inner.lock_pending(req).await
    }

    async fn unlock_lost(
        &self,
        executor_id: concepts::ExecutorId,
        lock_expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<usize, DbError> {
        self.inner
            .unlock_lost(executor_id, lock_expires_at, now)
            .await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        let finished = matches!(write.event, ExecutionEventInner::Finished { .. });
        let result = self.inner.append_outcome(write).await;
        self.count(&result, finished);
        result
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
