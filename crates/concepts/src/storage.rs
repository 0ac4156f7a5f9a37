//! The narrow storage traits every backend implements and the requests they take; their
//! portable error kinds are in `error.rs`.
//!
//! Every write is atomic: all of it commits, or none of it does. Storage never reads a clock;
//! every timestamp is passed in by the caller. Notifications (`wait_for_pending`,
//! `subscribe_to_next_responses`, `wait_for_finished_result`) are hints: every operation stays
//! correct if every wake-up is lost.

use crate::{
    Created,
    error::DbError,
    event::{
        ExecutionEvent, ExecutionEventInner, ExecutionMetadata, FinishedExecutionResult,
        HistoryEvent, JoinSetResponseEvent, JoinSetResponseEventOuter, Locked, Params, Version,
    },
    ids::{ComponentId, DelayId, ExecutionId, ExecutorId, FunctionFqn, JoinSetId},
    lifecycle::{
        CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest, CreateOutcome,
        PruneOutcome, PruneRequest,
    },
    outcome::OutcomeWrite,
    pending_state::PendingState,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, FireOutcome, FireSchedulesRequest,
        ScheduleChanged, ScheduleCreated, ScheduleName, ScheduleRow, Tick, TriggerScheduleRequest,
        Triggered,
    },
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::{sync::Arc, time::Duration};

mod append_batch;
mod listing;
pub use append_batch::{AppendBatchRequest, ChildAnswer, Lease};
pub use listing::{ExecutionSummary, ListExecutionsFilter, ListTerm, Pagination};

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
    /// The request as every backend stores it: its retry backoff in whole microseconds, so
    /// that what `get`, the state row and a hand-over show of it is the same on every backend.
    #[must_use]
    pub fn at_stored_precision(mut self) -> Self {
        self.truncate_to_stored_precision();
        self
    }

    /// Truncates what a store keeps at a coarser precision than the request's, in place (see
    /// [`CreateRequest::at_stored_precision`]): a request is large, and moving it is a copy.
    pub(crate) fn truncate_to_stored_precision(&mut self) {
        self.retry_exp_backoff = crate::truncate_duration_to_micros(self.retry_exp_backoff);
    }

    /// The `Created` event this request writes.
    #[must_use]
    pub fn to_created_event(&self) -> ExecutionEvent {
        ExecutionEvent {
            created_at: self.created_at,
            event: ExecutionEventInner::Created(Box::new(Created {
                ffqn: self.ffqn.clone(),
                params: self.params.clone(),
                parent: self.parent.clone(),
                scheduled_at: self.scheduled_at,
                retry_exp_backoff: self.retry_exp_backoff,
                max_retries: self.max_retries,
                component_id: self.component_id.clone(),
                metadata: self.metadata.clone(),
                scheduled_by: self.scheduled_by.clone(),
            })),
        }
    }

    /// The `Created` event this request writes, made of the request's own values.
    #[must_use]
    pub fn into_created_event(self) -> ExecutionEvent {
        // Destructured: a field added to the request must be given to the event or let go here.
        let Self {
            created_at,
            execution_id: _,
            ffqn,
            params,
            parent,
            scheduled_at,
            retry_exp_backoff,
            max_retries,
            component_id,
            metadata,
            scheduled_by,
        } = self;
        ExecutionEvent {
            created_at,
            event: ExecutionEventInner::Created(Box::new(Created {
                ffqn,
                params,
                parent,
                scheduled_at,
                retry_exp_backoff,
                max_retries,
                component_id,
                metadata,
                scheduled_by,
            })),
        }
    }
}

/// What `lock_pending` locks, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockPendingRequest {
    /// How many executions to lock at most.
    pub batch_size: usize,
    /// Only executions due at or before this time are locked.
    pub pending_at_or_sooner: DateTime<Utc>,
    /// Only executions of these functions are locked.
    pub ffqns: Arc<[FunctionFqn]>,
    /// The time of the lock: the `created_at` of every `Locked` event, and the time the
    /// locking rules are checked at.
    pub now: DateTime<Utc>,
    /// The component that runs the locked executions.
    pub component_id: ComponentId,
    /// The executor that takes the lease.
    pub executor_id: ExecutorId,
    /// When the lease expires; must be after `now`.
    pub lock_expires_at: DateTime<Utc>,
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
    /// When it was due, before this lock: its schedule, the end of a backoff or a sleep, or
    /// the arrival of a response.
    pub due_at: DateTime<Utc>,
}

/// A lease that expired, with what the watcher needs to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLock {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its function (the label of the watcher's metrics).
    pub ffqn: FunctionFqn,
    /// The executor that held the lease.
    pub executor_id: ExecutorId,
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
    /// How many events the log holds: the versions `0..next_version`, and once finished its
    /// `Finished` event, stored at `next_version` without advancing it.
    #[must_use]
    pub fn event_count(&self) -> u32 {
        self.next_version.0 + u32::from(self.pending_state.is_finished())
    }

    /// The `Created` event's fields, if the log is well formed.
    #[must_use]
    pub fn ffqn(&self) -> Option<&FunctionFqn> {
        Some(&self.events.first()?.event.created()?.ffqn)
    }

    /// The finished result, if finished.
    #[must_use]
    pub fn finished_result(&self) -> Option<&FinishedExecutionResult> {
        match self.events.last().map(|e| &e.event) {
            Some(ExecutionEventInner::Finished { result }) => Some(result),
            _ => None,
        }
    }

    /// The status the workflow set last (`WorkflowCtx::set_status`), if it set one.
    #[must_use]
    pub fn status(&self) -> Option<&crate::Json> {
        self.events
            .iter()
            .rev()
            .find_map(|event| match &event.event {
                ExecutionEventInner::HistoryEvent {
                    event:
                        crate::HistoryEvent::Persist {
                            value,
                            kind: crate::PersistKind::Status,
                        },
                } => Some(value),
                _ => None,
            })
    }

    /// Why and since when the execution is parked ([`crate::PARKED_UNTIL`]): the reason of
    /// the `Unlocked` event that parked it, and when it was written. `None` when it is not
    /// parked.
    #[must_use]
    pub fn parked(&self) -> Option<(&str, DateTime<Utc>)> {
        if !self.pending_state.is_parked() {
            return None;
        }
        self.events
            .iter()
            .rev()
            .find_map(|event| match &event.event {
                ExecutionEventInner::Unlocked { reason, .. } => {
                    Some((reason.as_str(), event.created_at))
                }
                _ => None,
            })
    }

    /// The write that makes the execution due at `now` again without using up a retry: an
    /// `Unlocked` event with `reason` at the version read, so that it is refused if anything
    /// was written since (a stale reader's write is harmless). How a restarted node hands back
    /// a warm wait of its previous process, and how a probe unparks an execution.
    #[must_use]
    pub fn unlock_now(&self, now: DateTime<Utc>, reason: String) -> crate::OutcomeWrite {
        let created = self.events.first().and_then(|event| event.event.created());
        let parent = created.and_then(|created| created.parent.as_ref());
        crate::OutcomeWrite::new(
            self.execution_id.clone(),
            self.next_version,
            now,
            ExecutionEventInner::Unlocked {
                backoff_expires_at: now,
                reason,
            },
            parent,
        )
    }
}

/// Waiting for an execution to finish: what clients need, and what a running worker needs to
/// learn that its execution was cancelled.
#[async_trait]
pub trait DbAwait: Send + Sync {
    /// The finished result: at once if finished, else when it finishes, else `Timeout` after
    /// `timeout` (`None` waits forever).
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError>;
}

/// What an executor needs from storage.
#[async_trait]
pub trait DbExecutor: DbAwait {
    /// Locks up to `req.batch_size` executions of `req.ffqns` that are due at
    /// `req.pending_at_or_sooner`, oldest `scheduled_at` first (ties by execution id), each with
    /// a fresh run id; all or nothing. Two callers never lock the same execution.
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError>;

    /// Records how a run ended: its event at the version the writer read and, when
    /// [`OutcomeWrite::parent_response`] is `Some`, the response to the parent, in one
    /// transaction. Returns the next version.
    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError>;

    /// Gives back what a `lock_pending` whose answer was lost may have locked (it failed with
    /// a retriable error: the write may have committed all the same): each execution still
    /// `Locked` by `executor_id` until exactly `lock_expires_at` gets an `Unlocked` event, due
    /// again at `now`, so that it runs without waiting for its lease to expire and without
    /// using up a retry. Returns how many were given back; none when the lock never committed.
    async fn unlock_lost(
        &self,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<usize, DbError>;

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
    /// Appends `req.events` in order at consecutive versions from `req.version` and creates
    /// `req.children`, all or nothing; returns the next version. An empty `events` is
    /// [`ValidationError::EmptyBatch`](crate::ValidationError::EmptyBatch); every created
    /// execution must be announced by an event of the batch (a `ChildExecutionRequest` for a
    /// child, a `Schedule` for a top-level execution).
    ///
    /// A lease extension is a batch of one `Locked` event by the same executor and run.
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError>;

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

    /// Records many outcome writes (the watcher's timeouts of expired leases) in one
    /// transaction, each as [`DbExecutor::append_outcome`] would, but each accepted or refused on
    /// its own: a write whose version moved on is refused alone and the others are recorded.
    /// Returns one result per write, in order; the outer error means nothing was written.
    /// An empty `writes` is
    /// [`ValidationError::EmptyBatch`](crate::ValidationError::EmptyBatch).
    async fn append_outcomes(
        &self,
        writes: Vec<OutcomeWrite>,
    ) -> Result<Vec<Result<Version, DbError>>, DbError>;

    /// Stores a response beside the log, arriving at `now`. A second response for the same
    /// delay id, or from the same child, to the same execution is a `Duplicate`.
    async fn append_response(
        &self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError>;
}

/// What clients (submitters, operators, inspection tools) need.
#[async_trait]
pub trait DbClient: DbAwait {
    /// Creates an execution (its next append carries version 1). Idempotent: when an
    /// execution with this id already exists with the same function, parameters and parent,
    /// nothing is written and the answer is [`CreateOutcome::AlreadyExisted`]; with another
    /// function, parameters or parent it is a
    /// [`DuplicateKind::ExecutionConflict`](crate::DuplicateKind::ExecutionConflict) naming
    /// what differs.
    async fn create(&self, req: CreateRequest) -> Result<CreateOutcome, DbError>;

    /// [`DbClient::create`] of a top-level execution due now, with `lease`, an executor's
    /// `Locked` event, appended at version 1 in the same transaction; that executor runs it once this
    /// answered [`CreateOutcome::Created`]. A repeat is answered as by `create`, without the
    /// lease (`docs/SEMANTICS.md` §4.2).
    async fn create_locked(
        &self,
        req: CreateRequest,
        lease: Locked,
    ) -> Result<CreateOutcome, DbError>;

    /// Creates many executions, all or nothing, each item idempotent as in
    /// [`DbClient::create`]: items that exist identically are skipped, one conflicting item
    /// refuses the whole batch.
    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError>;

    /// Cancels a not-yet-finished execution and every unfinished descendant, in one
    /// transaction with their parents' responses and the closing of their open delays.
    /// A finished execution is left alone: [`CancelOutcome::AlreadyFinished`].
    async fn cancel(&self, req: CancelRequest) -> Result<CancelOutcome, DbError>;

    /// Completes a stub execution (a durable promise) with a value, answering its parent in
    /// the same transaction. Completing it again with the same value is
    /// [`CompleteOutcome::AlreadyCompleted`]; with another value a
    /// [`DuplicateKind::Completion`](crate::DuplicateKind::Completion); an execution that is
    /// not a stub is refused.
    async fn complete(&self, req: CompleteRequest) -> Result<CompleteOutcome, DbError>;

    /// Deletes up to `req.limit` top-level executions that finished before
    /// `req.finished_before`, each with its whole tree (descendants, logs, responses, delays),
    /// each tree all or nothing; a tree with an unfinished member is kept.
    async fn prune(&self, req: PruneRequest) -> Result<PruneOutcome, DbError>;

    /// The whole log.
    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError>;

    /// One event.
    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError>;

    /// The `Created` event (version 0) of each of `execution_ids`, in their order, in one read
    /// where the store can: what a workflow's replay reads of its children. `NotFound` when
    /// one of them is not stored.
    async fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        let mut events = Vec::with_capacity(execution_ids.len());
        for execution_id in execution_ids {
            events.push(self.get_execution_event(execution_id, Version(0)).await?);
        }
        Ok(events)
    }

    /// Up to `limit` events of the log from `from` on, in version order; `NotFound` for an
    /// unknown execution.
    async fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError>;

    /// Executions that pass `filter`, newest first (by creation time, then id).
    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError>;

    /// The executions of `ffqn` due at `at` and not locked (`PendingAt`, scheduled at or
    /// before `at`): how many, counted up to `limit`, and when the oldest was due. One read of
    /// the index the locks read, in its order, of at most `limit + 1` rows: its cost is bounded
    /// however long the backlog is.
    async fn due_backlog(
        &self,
        ffqn: &FunctionFqn,
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<DueBacklog, DbError>;
}

/// What [`DbClient::due_backlog`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DueBacklog {
    /// How many executions are due, at most the limit asked.
    pub due: usize,
    /// True when more than the limit are due: `due` is a lower bound.
    pub more: bool,
    /// When the oldest was due (its `scheduled_at`, to the microsecond on the SQL backends),
    /// if any is.
    pub oldest_due_at: Option<DateTime<Utc>>,
}

impl DueBacklog {
    /// The backlog of a read of the due times, oldest first, of at most `limit + 1` rows.
    #[must_use]
    pub fn of_due_times(times: &[DateTime<Utc>], limit: usize) -> Self {
        Self {
            due: times.len().min(limit),
            more: times.len() > limit,
            oldest_due_at: times.first().copied(),
        }
    }
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
        self.list_executions_kept(filter, &mut |_| true).await
    }

    /// Every execution that matches `filter` and that `keep` keeps, newest first, read page
    /// by page (1,000 rows a page): only the kept rows are held in memory.
    async fn list_executions_kept(
        &self,
        filter: ListExecutionsFilter,
        keep: &mut (dyn for<'row> FnMut(&'row ExecutionSummary) -> bool + Send),
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        const PAGE: usize = 1_000;
        let mut kept = Vec::new();
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
            for row in page {
                if keep(&row) {
                    kept.push(row);
                }
            }
            if !full {
                return Ok(kept);
            }
        }
    }
}

impl<T: DbClient + ?Sized> DbClientExt for T {}

/// Schedules: their writes (each atomic with the executions it creates) and their reads
/// (`docs/SEMANTICS.md` §19).
#[async_trait]
pub trait DbSchedules: Send + Sync {
    /// Stores a new schedule, or answers `AlreadyExisted` for the same one again; another
    /// definition under the name is a
    /// [`DuplicateKind::ScheduleConflict`](crate::DuplicateKind::ScheduleConflict) naming what
    /// differs. Its first tick is the first one after `now`.
    async fn create_schedule(&self, req: CreateScheduleRequest)
    -> Result<ScheduleCreated, DbError>;

    /// Updates, pauses, resumes or deletes a schedule; `NotFound` for a name not stored.
    async fn change_schedule(&self, req: ChangeScheduleRequest)
    -> Result<ScheduleChanged, DbError>;

    /// One pass over the schedules due at `now`: each due tick fired as its execution (the id
    /// derived from the schedule and the tick), skipped, buffered or left for a cancellation
    /// as the overlap policy says, ticks before the catch-up window recorded as skipped. Two
    /// passes never fire one tick twice, whichever process runs them.
    async fn fire_schedules(&self, req: FireSchedulesRequest) -> Result<FireOutcome, DbError>;

    /// Fires a schedule now, or every tick of a past range (a backfill); `NotFound` for a name
    /// not stored.
    async fn trigger_schedule(&self, req: TriggerScheduleRequest) -> Result<Triggered, DbError>;

    /// The schedule `name`; `NotFound` when it is not stored.
    async fn get_schedule(&self, name: &ScheduleName) -> Result<ScheduleRow, DbError>;

    /// The schedules after `after` in name order, at most `limit`.
    async fn list_schedules(
        &self,
        after: Option<&ScheduleName>,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, DbError>;

    /// The last `limit` recorded ticks of `name` (the last [`TICKS_KEPT`] are kept), newest
    /// first.
    ///
    /// [`TICKS_KEPT`]: crate::kernel::TICKS_KEPT
    async fn schedule_ticks(&self, name: &ScheduleName, limit: usize)
    -> Result<Vec<Tick>, DbError>;
}

/// A whole storage backend: every trait above plus `close`.
///
/// Object-safe: a backend is shared as `Arc<dyn DbConnection>`, and can be upcast to any of
/// the narrow traits.
#[async_trait]
pub trait DbConnection: DbExecutor + DbWorkflow + DbTimers + DbClient + DbSchedules {
    /// Stops the store. Idempotent; every call afterwards returns [`DbError::Closed`].
    async fn close(&self);
}
