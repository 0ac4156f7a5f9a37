//! The narrow storage traits every backend implements, the requests they take, and the portable
//! error kinds they return.
//!
//! Every write is atomic: all of it commits, or none of it does. Storage never reads a clock;
//! every timestamp is passed in by the caller. Notifications (`wait_for_pending`,
//! `subscribe_to_next_responses`, `wait_for_finished_result`) are hints: every operation stays
//! correct if every wake-up is lost.

use crate::{
    event::{
        ExecutionEvent, ExecutionEventInner, ExecutionMetadata, FinishedExecutionResult,
        HistoryEvent, JoinSetResponseEvent, JoinSetResponseEventOuter, Locked, Params, Version,
    },
    ids::{ComponentId, DelayId, ExecutionId, ExecutorId, FunctionFqn, JoinSetId, RunId},
    pending_state::{PendingState, PendingStateKind},
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::{sync::Arc, time::Duration};

/// Why a request was refused by the execution model's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// Locking an execution that is not due yet.
    #[error("not yet pending: the execution is scheduled at {scheduled_at}")]
    NotYetPending {
        /// When it becomes due.
        scheduled_at: DateTime<Utc>,
    },
    /// Locking an execution that another executor or run holds (expired or not).
    #[error("already locked: another executor or run holds the lease")]
    AlreadyLocked,
    /// Locking an execution that waits for a join set response.
    #[error("not yet pending: the execution is blocked by join set {join_set_id}")]
    BlockedByJoinSet {
        /// The join set it waits on.
        join_set_id: JoinSetId,
    },
    /// Appending to a finished execution.
    #[error("already finished: a finished execution takes no more events")]
    AlreadyFinished,
    /// A lease that expires at or before the time it is taken.
    #[error("invalid expiry date: lease expiry {lock_expires_at} is not after {now}")]
    InvalidExpiryDate {
        /// The requested expiry.
        lock_expires_at: DateTime<Utc>,
        /// The time of the request.
        now: DateTime<Utc>,
    },
    /// `Created` passed to an append; only `create` writes it.
    #[error("`Created` can only be written by `create`, not appended")]
    CreatedEventAppended,
    /// A batch with nothing in it.
    #[error("empty batch: {0} needs at least one item")]
    EmptyBatch(&'static str),
    /// A request that is inconsistent in itself.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

/// What already existed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DuplicateKind {
    /// An execution with this id exists.
    #[error("execution {0} already exists")]
    Execution(ExecutionId),
    /// This execution already has a `DelayFinished` for this delay.
    #[error("execution {execution_id} already has a response for delay {delay_id}")]
    DelayResponse {
        /// The execution that received the response.
        execution_id: ExecutionId,
        /// The delay.
        delay_id: DelayId,
    },
    /// This execution already has a response from this child.
    #[error("execution {execution_id} already has a response from child {child_execution_id}")]
    ChildResponse {
        /// The execution that received the response.
        execution_id: ExecutionId,
        /// The child.
        child_execution_id: ExecutionId,
    },
}

/// A backend's own error, wrapped: the driver's message and whether retrying may help.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// What went wrong, with the context a person needs (a path, say).
    pub message: String,
    /// True when the same request may succeed if retried (a busy database, a serialization
    /// failure).
    pub retriable: bool,
    /// The driver's error.
    #[source]
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// The portable error kinds of every storage operation. Every backend maps its driver's errors
/// into these, so a caller (and the conformance suite) sees the same kind for the same
/// situation on every backend.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DbError {
    /// The execution (or event) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Optimistic concurrency: somebody appended first.
    #[error("version mismatch: appending at {appending_version}, expected {expected_version}")]
    VersionMismatch {
        /// The version the request carried.
        appending_version: Version,
        /// The version the log expects next.
        expected_version: Version,
    },
    /// The request breaks a rule of the execution model.
    #[error("validation failed: {0}")]
    Validation(#[from] ValidationError),
    /// Something unique already exists.
    #[error("duplicate: {0}")]
    Duplicate(#[from] DuplicateKind),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// A wait ran out of time.
    #[error("timed out waiting")]
    Timeout,
    /// The connection to the database was lost; the request may be retried once it returns.
    #[error("connection error: {0}")]
    Connection(String),
    /// Any other error of the backend.
    #[error("backend error: {0}")]
    Backend(#[from] BackendError),
}

/// The kind of a [`DbError`], for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, derive_more::Display)]
pub enum DbErrorKind {
    /// [`DbError::NotFound`].
    NotFound,
    /// [`DbError::VersionMismatch`].
    VersionMismatch,
    /// [`DbError::Validation`].
    Validation,
    /// [`DbError::Duplicate`].
    Duplicate,
    /// [`DbError::Closed`].
    Closed,
    /// [`DbError::Timeout`].
    Timeout,
    /// [`DbError::Connection`].
    Connection,
    /// [`DbError::Backend`].
    Backend,
}

impl DbError {
    /// The kind.
    #[must_use]
    pub fn kind(&self) -> DbErrorKind {
        match self {
            Self::NotFound(_) => DbErrorKind::NotFound,
            Self::VersionMismatch { .. } => DbErrorKind::VersionMismatch,
            Self::Validation(_) => DbErrorKind::Validation,
            Self::Duplicate(_) => DbErrorKind::Duplicate,
            Self::Closed => DbErrorKind::Closed,
            Self::Timeout => DbErrorKind::Timeout,
            Self::Connection(_) => DbErrorKind::Connection,
            Self::Backend(_) => DbErrorKind::Backend,
        }
    }

    /// The validation error, if this is one.
    #[must_use]
    pub fn as_validation(&self) -> Option<&ValidationError> {
        match self {
            Self::Validation(v) => Some(v),
            _ => None,
        }
    }

    /// True when retrying the same request later may succeed.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Connection(_) | Self::Timeout => true,
            Self::Backend(b) => b.retriable,
            _ => false,
        }
    }

    /// A `NotFound` for an execution.
    #[must_use]
    pub fn execution_not_found(execution_id: &ExecutionId) -> Self {
        Self::NotFound(format!("execution {execution_id}"))
    }
}

/// Everything `create` needs; becomes the `Created` event at version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// When it is written.
    pub created_at: DateTime<Utc>,
    /// The new execution's id.
    pub execution_id: ExecutionId,
    /// The function to run.
    pub ffqn: FunctionFqn,
    /// Its parameters.
    pub params: Params,
    /// For a child: its parent and join set.
    pub parent: Option<(ExecutionId, JoinSetId)>,
    /// When it becomes due.
    pub scheduled_at: DateTime<Utc>,
    /// The first retry's backoff.
    pub retry_exp_backoff: Duration,
    /// How many failures are retried.
    pub max_retries: u32,
    /// The component that runs it.
    pub component_id: ComponentId,
    /// The submitter's string map (trace context).
    pub metadata: ExecutionMetadata,
    /// The execution that scheduled it, if any.
    pub scheduled_by: Option<ExecutionId>,
}

impl CreateRequest {
    /// The `Created` event this request writes.
    #[must_use]
    pub fn to_created_event(&self) -> ExecutionEvent {
        ExecutionEvent {
            created_at: self.created_at,
            event: ExecutionEventInner::Created {
                ffqn: self.ffqn.clone(),
                params: self.params.clone(),
                parent: self.parent.clone(),
                scheduled_at: self.scheduled_at,
                retry_exp_backoff: self.retry_exp_backoff,
                max_retries: self.max_retries,
                component_id: self.component_id.clone(),
                metadata: self.metadata.clone(),
                scheduled_by: self.scheduled_by.clone(),
            },
        }
    }
}

/// Checks the request of `append_batch_create_new_execution`: the batch is not empty, and every
/// execution it creates is announced by an event of the same batch, a child by a `ChildExecutionRequest` in the join
/// set of its `parent` (which must be `execution_id`), a top-level execution by a `Schedule`.
/// Every backend calls this, so a creation that no log explains is refused everywhere alike.
pub fn validate_batch_create_new_execution(
    execution_id: &ExecutionId,
    batch: &[ExecutionEventInner],
    child_req: &[CreateRequest],
) -> Result<(), ValidationError> {
    if batch.is_empty() {
        return Err(ValidationError::EmptyBatch(
            "append_batch_create_new_execution",
        ));
    }
    for req in child_req {
        let announced =
            batch.iter().any(|event| {
                let ExecutionEventInner::HistoryEvent { event } = event else {
                    return false;
                };
                match (event, &req.parent) {
                    (
                        HistoryEvent::JoinSetRequest {
                            join_set_id,
                            request:
                                crate::event::JoinSetRequest::ChildExecutionRequest {
                                    child_execution_id,
                                },
                        },
                        Some((parent_id, parent_join_set)),
                    ) => {
                        *child_execution_id == req.execution_id
                            && parent_id == execution_id
                            && parent_join_set == join_set_id
                    }
                    (
                        HistoryEvent::Schedule {
                            execution_id: scheduled,
                            ..
                        },
                        None,
                    ) => *scheduled == req.execution_id,
                    _ => false,
                }
            });
        if !announced {
            return Err(ValidationError::InvalidRequest(format!(
                "execution {} is created by {execution_id} without a matching \
                 `ChildExecutionRequest` (for a child whose parent is {execution_id}) or \
                 `Schedule` (for a top-level execution) event in the same batch",
                req.execution_id
            )));
        }
    }
    Ok(())
}

/// One event to append, with its time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendRequest {
    /// When it is written.
    pub created_at: DateTime<Utc>,
    /// The event.
    pub event: ExecutionEventInner,
}

/// An execution locked by `lock_pending`: everything a worker needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedExecution {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The version after the `Locked` event (the next append carries it).
    pub next_version: Version,
    /// The submitter's string map.
    pub metadata: ExecutionMetadata,
    /// The lease.
    pub locked_event: Locked,
    /// The function.
    pub ffqn: FunctionFqn,
    /// Its parameters.
    pub params: Params,
    /// The history events recorded so far, in order.
    pub event_history: Vec<HistoryEvent>,
    /// The responses so far, in arrival order.
    pub responses: Vec<JoinSetResponseEventOuter>,
    /// When it was scheduled at creation.
    pub scheduled_at: DateTime<Utc>,
    /// The first retry's backoff.
    pub retry_exp_backoff: Duration,
    /// How many failures are retried.
    pub max_retries: u32,
    /// The parent and join set, for a child.
    pub parent: Option<(ExecutionId, JoinSetId)>,
    /// `TemporarilyFailed` + `TemporarilyTimedOut` events so far.
    pub temporary_event_count: u32,
}

/// A lease that expired, with what the watcher needs to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLock {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The version the watcher appends at.
    pub next_version: Version,
    /// `TemporarilyFailed` + `TemporarilyTimedOut` events so far.
    pub temporary_event_count: u32,
    /// How many failures are retried.
    pub max_retries: u32,
    /// The first retry's backoff.
    pub retry_exp_backoff: Duration,
    /// The parent and join set, for a child.
    pub parent: Option<(ExecutionId, JoinSetId)>,
    /// When the lease expired.
    pub lock_expires_at: DateTime<Utc>,
}

/// A durable sleep that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredDelay {
    /// The execution that sleeps.
    pub execution_id: ExecutionId,
    /// The join set of the delay.
    pub join_set_id: JoinSetId,
    /// The delay.
    pub delay_id: DelayId,
    /// When it expired.
    pub expires_at: DateTime<Utc>,
}

/// A timer that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpiredTimer {
    /// A lease.
    Lock(ExpiredLock),
    /// A durable sleep.
    Delay(ExpiredDelay),
}

/// An execution's whole log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionLog {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The events; `events[v]` is version `v`.
    pub events: Vec<ExecutionEvent>,
    /// The responses, in arrival order.
    pub responses: Vec<JoinSetResponseEventOuter>,
    /// The version the next append must carry.
    pub next_version: Version,
    /// The current pending state.
    pub pending_state: PendingState,
}

impl ExecutionLog {
    /// The `Created` event's fields, if the log is well formed.
    #[must_use]
    pub fn ffqn(&self) -> Option<&FunctionFqn> {
        match self.events.first().map(|e| &e.event) {
            Some(ExecutionEventInner::Created { ffqn, .. }) => Some(ffqn),
            _ => None,
        }
    }

    /// The finished result, if finished.
    #[must_use]
    pub fn finished_result(&self) -> Option<&FinishedExecutionResult> {
        match self.events.last().map(|e| &e.event) {
            Some(ExecutionEventInner::Finished { result }) => Some(result),
            _ => None,
        }
    }
}

/// One row of `list_executions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionSummary {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The function.
    pub ffqn: FunctionFqn,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was first scheduled.
    pub scheduled_at: DateTime<Utc>,
    /// The current pending state.
    pub pending_state: PendingState,
    /// The version the next append must carry.
    pub next_version: Version,
}

/// Filters of `list_executions`; `None` matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListExecutionsFilter {
    /// Only this function.
    pub ffqn: Option<FunctionFqn>,
    /// Only executions in this state.
    pub state: Option<PendingStateKind>,
    /// Only top-level executions.
    pub top_level_only: bool,
}

/// Pagination of `list_executions`: newest first (by creation time, then execution id,
/// descending), starting after `cursor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pagination {
    /// The last row of the previous page, as `(created_at, execution_id)`.
    pub cursor: Option<(DateTime<Utc>, ExecutionId)>,
    /// How many rows at most.
    pub length: usize,
}

impl Default for Pagination {
    fn default() -> Self {
        Self {
            cursor: None,
            length: 100,
        }
    }
}

/// What an executor needs from storage.
#[async_trait]
pub trait DbExecutor: Send + Sync {
    /// Locks up to `batch_size` executions of `ffqns` that are due at `pending_at_or_sooner`,
    /// oldest `scheduled_at` first (ties by execution id), each with a fresh run id; all or
    /// nothing. Two callers never lock the same execution.
    async fn lock_pending(
        &self,
        batch_size: usize,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        created_at: DateTime<Utc>,
        component_id: ComponentId,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
    ) -> Result<Vec<LockedExecution>, DbError>;

    /// Locks (or extends the lease of) one execution; returns its history and the next version.
    async fn lock(
        &self,
        created_at: DateTime<Utc>,
        component_id: ComponentId,
        execution_id: &ExecutionId,
        run_id: RunId,
        version: Version,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
    ) -> Result<(Vec<HistoryEvent>, Version), DbError>;

    /// Appends one event at `version`; returns the next version.
    async fn append(
        &self,
        execution_id: &ExecutionId,
        version: Version,
        req: AppendRequest,
    ) -> Result<Version, DbError>;

    /// A child's final events plus the response to its parent, in one transaction.
    async fn append_batch_respond_to_parent(
        &self,
        execution_id: &ExecutionId,
        created_at: DateTime<Utc>,
        batch: Vec<ExecutionEventInner>,
        version: Version,
        parent_execution_id: &ExecutionId,
        parent_response: JoinSetResponseEventOuter,
    ) -> Result<Version, DbError>;

    /// Returns at once if an execution of `ffqns` is due at `pending_at_or_sooner`; otherwise
    /// when a write makes one due, or after `max_wait`. Never loses a wake-up between its check
    /// and its subscription.
    ///
    /// `pending_at_or_sooner` is the caller's present, and it moves on with the time the call
    /// waits: a write that makes an execution due at `pending_at_or_sooner` plus the time
    /// waited so far wakes it. So work that another process submits "now", by its own clock,
    /// wakes an executor that went to sleep earlier.
    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    );
}

/// What a workflow-style worker needs beyond the executor's operations.
#[async_trait]
pub trait DbWorkflow: Send + Sync {
    /// Several events in order at consecutive versions from `version`; all or nothing.
    async fn append_batch(
        &self,
        created_at: DateTime<Utc>,
        batch: Vec<ExecutionEventInner>,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<Version, DbError>;

    /// The parent's events plus the creation of its children, in one transaction.
    async fn append_batch_create_new_execution(
        &self,
        created_at: DateTime<Utc>,
        batch: Vec<ExecutionEventInner>,
        execution_id: &ExecutionId,
        version: Version,
        child_req: Vec<CreateRequest>,
    ) -> Result<Version, DbError>;

    /// Responses from index `start_idx` on, at once if there are any, else when the next
    /// arrives.
    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError>;
}

/// What the timers watcher needs beyond the executor's operations.
#[async_trait]
pub trait DbTimers: Send + Sync {
    /// Every lease with `lock_expires_at <= at` and every open delay with `expires_at <= at`.
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError>;

    /// Stores a response beside the log. A second response for the same delay id, or from the
    /// same child, to the same execution is a `Duplicate`.
    async fn append_response(
        &self,
        created_at: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError>;
}

/// What clients (submitters, inspection tools) need.
#[async_trait]
pub trait DbClient: Send + Sync {
    /// Creates an execution; returns `Version(1)`. A duplicate id is a `Duplicate`.
    async fn create(&self, req: CreateRequest) -> Result<Version, DbError>;

    /// Creates many executions, all or nothing.
    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError>;

    /// The whole log.
    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError>;

    /// The current pending state.
    async fn get_pending_state(&self, execution_id: &ExecutionId) -> Result<PendingState, DbError>;

    /// One event.
    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError>;

    /// Executions, newest first.
    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError>;

    /// Events from `since` on, at most `max_length`.
    async fn list_execution_events(
        &self,
        execution_id: &ExecutionId,
        since: Version,
        max_length: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError>;

    /// The finished result: at once if finished, else when it finishes, else `Timeout` after
    /// `timeout` (`None` waits forever).
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError>;
}

/// Conveniences over [`DbClient`], for every client (blanket impl).
#[async_trait]
pub trait DbClientExt: DbClient {
    /// Every execution that matches `filter`, newest first, read page by page (1,000 rows a
    /// page). Meant for tools and tests: it holds the whole list in memory.
    async fn list_all_executions(
        &self,
        filter: ListExecutionsFilter,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        const PAGE: usize = 1_000;
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let page = self
                .list_executions(
                    filter.clone(),
                    Pagination {
                        cursor,
                        length: PAGE,
                    },
                )
                .await?;
            let full = page.len() == PAGE;
            cursor = page
                .last()
                .map(|last| (last.created_at, last.execution_id.clone()));
            all.extend(page);
            if !full {
                return Ok(all);
            }
        }
    }
}

impl<T: DbClient + ?Sized> DbClientExt for T {}

/// A whole storage backend: every trait above plus `close`.
///
/// Object-safe: a backend is shared as `Arc<dyn DbConnection>`, and can be upcast to any of
/// the narrow traits.
#[async_trait]
pub trait DbConnection: DbExecutor + DbWorkflow + DbTimers + DbClient {
    /// Stops the store. Idempotent; every call afterwards returns [`DbError::Closed`].
    async fn close(&self);
}
