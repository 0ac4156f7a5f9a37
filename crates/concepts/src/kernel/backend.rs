//! What a backend implements, [`Backend`], and the public storage traits written once on top
//! of it: every type that implements `Backend` is a [`DbConnection`], each write method of the
//! public traits being [`Backend::write`] of its write kind.

use super::{
    write::Forward,
    writes::{AppendOutcomes, AppendResponse, CreateBatch},
};
use crate::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest,
    CreateOutcome, CreateRequest, DbAwait, DbClient, DbConnection, DbError, DbExecutor, DbTimers,
    DbWorkflow, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredTimer,
    FinishedExecutionResult, FunctionFqn, JoinSetResponseEvent, JoinSetResponseEventOuter,
    ListExecutionsFilter, LockPendingRequest, LockedExecution, OutcomeWrite, Pagination,
    PruneOutcome, PruneRequest, Version,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::{future::Future, sync::Arc, time::Duration};

/// A storage backend: how it runs a write, its reads, its waits, and closing. Implement it
/// and the store is a [`DbConnection`]: the public traits' write methods are
/// [`Backend::write`] of their write kinds, the rest call the method of the same name.
///
/// A backend writes every kind of write the same way, with the kernel's steps
/// ([`Write`](super::Write)): the keys, the load under its own locking, the plan
/// ([`plan`](super::plan) or a [`GroupPlanner`](super::GroupPlanner)), the atomic persist,
/// the wake-ups after the commit. It knows no kind by name, so a new kind of write reaches
/// every backend without a change to any of them, unless it needs rows they do not store yet.
pub trait Backend: Send + Sync + 'static {
    /// Runs `write` and answers its reply once it committed, or the error that refused it
    /// (nothing written).
    fn write<W: Forward>(&self, write: W)
    -> impl Future<Output = Result<W::Reply, DbError>> + Send;

    /// [`DbExecutor::lock_pending`]: the [`LockPendingRequest`] write, whose grants the
    /// backend hands over with the histories read after its commit
    /// ([`hand_over`](super::hand_over)).
    fn lock_pending(
        &self,
        req: LockPendingRequest,
    ) -> impl Future<Output = Result<Vec<LockedExecution>, DbError>> + Send;

    /// [`DbExecutor::wait_for_pending`].
    fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) -> impl Future<Output = ()> + Send;

    /// [`DbWorkflow::subscribe_to_next_responses`].
    fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> impl Future<Output = Result<Vec<JoinSetResponseEventOuter>, DbError>> + Send;

    /// [`DbAwait::wait_for_finished_result`].
    fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<FinishedExecutionResult, DbError>> + Send;

    /// [`DbTimers::get_expired_timers`].
    fn get_expired_timers(
        &self,
        at: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<ExpiredTimer>, DbError>> + Send;

    /// [`DbClient::get`].
    fn get(
        &self,
        execution_id: &ExecutionId,
    ) -> impl Future<Output = Result<ExecutionLog, DbError>> + Send;

    /// [`DbClient::list_events`] (and, with a limit of one, `get_execution_event`).
    fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ExecutionEvent>, DbError>> + Send;

    /// [`DbClient::list_executions`].
    fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> impl Future<Output = Result<Vec<ExecutionSummary>, DbError>> + Send;

    /// [`DbConnection::close`].
    fn close(&self) -> impl Future<Output = ()> + Send;
}

#[async_trait]
impl<B: Backend> DbAwait for B {
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        Backend::wait_for_finished_result(self, execution_id, timeout).await
    }
}

#[async_trait]
impl<B: Backend> DbExecutor for B {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        Backend::lock_pending(self, req).await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        self.write(write).await
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        Backend::wait_for_pending(self, pending_at_or_sooner, ffqns, max_wait).await;
    }
}

#[async_trait]
impl<B: Backend> DbWorkflow for B {
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError> {
        self.write(req).await
    }

    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        Backend::subscribe_to_next_responses(self, execution_id, start_idx).await
    }
}

#[async_trait]
impl<B: Backend> DbTimers for B {
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        Backend::get_expired_timers(self, at).await
    }

    async fn append_outcomes(
        &self,
        writes: Vec<OutcomeWrite>,
    ) -> Result<Vec<Result<Version, DbError>>, DbError> {
        self.write(AppendOutcomes(writes)).await
    }

    async fn append_response(
        &self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        let execution_id = execution_id.clone();
        (self.write(AppendResponse {
            now,
            execution_id,
            response,
        }))
        .await
    }
}

#[async_trait]
impl<B: Backend> DbClient for B {
    async fn create(&self, req: CreateRequest) -> Result<CreateOutcome, DbError> {
        self.write(req).await
    }

    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        self.write(CreateBatch(reqs)).await
    }

    async fn cancel(&self, req: CancelRequest) -> Result<CancelOutcome, DbError> {
        self.write(req).await
    }

    async fn complete(&self, req: CompleteRequest) -> Result<CompleteOutcome, DbError> {
        self.write(req).await
    }

    async fn prune(&self, req: PruneRequest) -> Result<PruneOutcome, DbError> {
        self.write(req).await
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        Backend::get(self, execution_id).await
    }

    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        let event = Backend::list_events(self, execution_id, version, 1).await?;
        event.into_iter().next().ok_or_else(|| {
            DbError::NotFound(format!("event at version {version} of {execution_id}"))
        })
    }

    async fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        Backend::list_events(self, execution_id, from, limit).await
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        Backend::list_executions(self, filter, pagination).await
    }
}

#[async_trait]
impl<B: Backend> DbConnection for B {
    async fn close(&self) {
        Backend::close(self).await;
    }
}
