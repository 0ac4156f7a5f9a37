//! The executor's store handle, wrapped to count acknowledged `Finished` appends: completion
//! is observed exactly, not by polling.

use chrono::{DateTime, Utc};
use concepts::{
    AppendRequest, ComponentId, DbConnection, DbError, DbExecutor, ExecutionEventInner,
    ExecutionId, ExecutorId, FunctionFqn, HistoryEvent, JoinSetResponseEventOuter, LockedExecution,
    RunId, Version,
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
        loop {
            let notified = self.done.notified();
            if self.finished() >= self.target {
                return;
            }
            notified.await;
        }
    }

    fn count(&self, result: &Result<Version, DbError>, event: &ExecutionEventInner) {
        if result.is_ok() && matches!(event, ExecutionEventInner::Finished { .. }) {
            let finished = self.finished.fetch_add(1, Ordering::SeqCst) + 1;
            if self.report {
                let mut stdout = std::io::stdout().lock();
                // The parent reads the count; should it be gone, nothing is left to tell.
                let _ = writeln!(stdout, "finished {finished}");
                let _ = stdout.flush();
            }
            if finished >= self.target {
                self.done.notify_waiters();
            }
        }
    }
}

#[async_trait::async_trait]
impl DbExecutor for CountingDb {
    async fn lock_pending(
        &self,
        batch_size: usize,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        created_at: DateTime<Utc>,
        component_id: ComponentId,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
    ) -> Result<Vec<LockedExecution>, DbError> {
        self.inner
            .lock_pending(
                batch_size,
                pending_at_or_sooner,
                ffqns,
                created_at,
                component_id,
                executor_id,
                lock_expires_at,
            )
            .await
    }

    async fn lock(
        &self,
        created_at: DateTime<Utc>,
        component_id: ComponentId,
        execution_id: &ExecutionId,
        run_id: RunId,
        version: Version,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
    ) -> Result<(Vec<HistoryEvent>, Version), DbError> {
        self.inner
            .lock(
                created_at,
                component_id,
                execution_id,
                run_id,
                version,
                executor_id,
                lock_expires_at,
            )
            .await
    }

    async fn append(
        &self,
        execution_id: &ExecutionId,
        version: Version,
        req: AppendRequest,
    ) -> Result<Version, DbError> {
        let event = req.event.clone();
        let result = self.inner.append(execution_id, version, req).await;
        self.count(&result, &event);
        result
    }

    async fn append_batch_respond_to_parent(
        &self,
        execution_id: &ExecutionId,
        created_at: DateTime<Utc>,
        batch: Vec<ExecutionEventInner>,
        version: Version,
        parent_execution_id: &ExecutionId,
        parent_response: JoinSetResponseEventOuter,
    ) -> Result<Version, DbError> {
        let last = batch.last().cloned();
        let result = self
            .inner
            .append_batch_respond_to_parent(
                execution_id,
                created_at,
                batch,
                version,
                parent_execution_id,
                parent_response,
            )
            .await;
        if let Some(last) = last {
            self.count(&result, &last);
        }
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
