//! What a backend implements, [`Backend`], and the public storage traits written once on top
//! of it: every type that implements `Backend` is a [`DbConnection`], each write method of the
//! public traits being [`Backend::write`] of its write kind.

use super::{
    snapshot::{ExecutionRow, FastHash},
    waiters::WaiterHub,
    write::Write,
    writes::{AppendOutcomes, AppendResponse, CreateBatch, CreateLocked},
};
use crate::metrics as m;
use crate::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest,
    CreateOutcome, CreateRequest, DbAwait, DbClient, DbConnection, DbError, DbExecutor,
    DbSchedules, DbTimers, DbWorkflow, DueBacklog, ExecutionEvent, ExecutionEventInner,
    ExecutionId, ExecutionLog, ExecutionSummary, ExecutorId, ExpiredDelay, ExpiredTimer,
    FinishedExecutionResult, FunctionFqn, JoinSetResponseEvent, JoinSetResponseEventOuter,
    ListExecutionsFilter, LockPendingRequest, Locked, LockedExecution, OutcomeWrite, Pagination,
    PendingState, PruneOutcome, PruneRequest, Version,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, FireOutcome, FireSchedulesRequest,
        ScheduleChanged, ScheduleCreated, ScheduleName, ScheduleRow, Tick, TriggerScheduleRequest,
        Triggered,
    },
};
use ::metrics::{Counter, Histogram, counter, histogram};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, OnceLock, PoisonError, RwLock},
    time::Duration,
};

/// The handles of one operation's metrics.
struct OperationMeters {
    duration: Histogram,
    fenced: Counter,
    /// Not retriable, retriable.
    errors: [Counter; 2],
}

/// One operation's handles, registered at its first write once recording is on: a program
/// installs its recorder before it turns recording on (`concepts::metrics::describe`), and
/// keeps it.
struct Operation {
    name: &'static str,
    meters: OnceLock<OperationMeters>,
}

impl Operation {
    const fn new(name: &'static str) -> Self {
        Self {
            name,
            meters: OnceLock::new(),
        }
    }

    /// Its handles.
    fn meters(&self) -> &OperationMeters {
        let name = self.name;
        self.meters.get_or_init(|| {
            OperationMeters {
            duration: histogram!(m::STORE_WRITE_DURATION, m::OPERATION => name),
            fenced: counter!(m::FENCED_WRITES, m::OPERATION => name),
            errors: ["false", "true"].map(|retriable| {
                counter!(m::STORE_ERRORS, m::OPERATION => name, m::RETRIABLE => retriable)
            }),
        }
        })
    }
}

static CREATE: Operation = Operation::new("create");
static CREATE_LOCKED: Operation = Operation::new("create_locked");
static CREATE_BATCH: Operation = Operation::new("create_batch");
static LOCK_PENDING: Operation = Operation::new("lock_pending");
static APPEND_OUTCOME: Operation = Operation::new("append_outcome");
static APPEND_BATCH: Operation = Operation::new("append_batch");
static APPEND_OUTCOMES: Operation = Operation::new("append_outcomes");
static APPEND_RESPONSE: Operation = Operation::new("append_response");
static CANCEL: Operation = Operation::new("cancel");
static COMPLETE: Operation = Operation::new("complete");
static PRUNE: Operation = Operation::new("prune");
static SCHEDULE: Operation = Operation::new("schedule");
static FIRE_SCHEDULES: Operation = Operation::new("fire_schedules");

/// Records one write of `operation`: its duration, and its failure when the store failed it
/// or it came too late (the version check, or the execution's end, fenced it); a refusal of
/// the model is an answer, not counted. Measured with the metrics' own clock, which decides
/// nothing: the model's time is the request's.
async fn metered<T>(
    operation: &Operation,
    write: impl Future<Output = Result<T, DbError>>,
) -> Result<T, DbError> {
    if !m::enabled() {
        return write.await;
    }
    let clock = m::write_clock();
    let started = clock.raw();
    let result = write.await;
    let meters = operation.meters();
    #[expect(clippy::cast_precision_loss, reason = "nanoseconds of one write")]
    let seconds = clock.delta_as_nanos(started, clock.raw()) as f64 / 1e9;
    meters.duration.record(seconds);
    if let Err(err) = &result {
        failed(meters, err);
    }
    result
}

/// Counts `err` of a write, if it is the store's or a fence.
fn failed(meters: &OperationMeters, err: &DbError) {
    match err {
        // A late writer: the log moved on past its version, or the execution finished.
        _ if crate::is_lost_race(err) => meters.fenced.increment(1),
        DbError::Closed | DbError::Timeout | DbError::Connection(_) | DbError::Backend(_) => {
            meters.errors[usize::from(err.is_retriable())].increment(1);
        }
        DbError::NotFound(_)
        | DbError::VersionMismatch { .. }
        | DbError::Validation(_)
        | DbError::Duplicate(_) => {}
    }
}

/// The counters of executions created, per function, registered at their first count: found
/// under a read lock, registered under the write lock.
static CREATED: RwLock<Option<HashMap<FunctionFqn, Counter, FastHash>>> = RwLock::new(None);

/// The runs of one function in `functions` (a batch is mostly runs of one function), each
/// with its length: what [`count_created`] counts once the write committed. Empty while
/// recording is off, so that nothing is cloned then.
fn runs<'a>(functions: impl Iterator<Item = &'a FunctionFqn>) -> Vec<(FunctionFqn, usize)> {
    if !m::enabled() {
        return Vec::new();
    }
    let mut functions = functions.peekable();
    let mut runs = Vec::new();
    while let Some(function) = functions.next() {
        let mut count = 1;
        while functions.next_if(|next| *next == function).is_some() {
            count += 1;
        }
        runs.push((function.clone(), count));
    }
    runs
}

/// Counts executions created: `count` of each function.
fn count_created(created: &[(FunctionFqn, usize)]) {
    if created.is_empty() || !m::enabled() {
        return;
    }
    for (function, count) in created {
        let count = u64::try_from(*count).unwrap_or(u64::MAX);
        {
            let counters = CREATED.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(counter) = counters
                .as_ref()
                .and_then(|counters| counters.get(function))
            {
                counter.increment(count);
                continue;
            }
        }
        let mut counters = CREATED.write().unwrap_or_else(PoisonError::into_inner);
        (counters.get_or_insert_default().entry(function.clone()))
            .or_insert_with(|| counter!(m::EXECUTIONS_CREATED, m::FUNCTION => function.to_string()))
            .increment(count);
    }
}

/// A storage backend: how it runs a write, its reads, its [`WaiterHub`], and closing.
/// Implement it and the store is a [`DbConnection`]: the public traits' write methods are
/// [`Backend::write`] of their write kinds; the three waits are written here once, on the
/// backend's hub and its check reads ([`Backend::due_times`], [`Backend::responses`],
/// [`Backend::finished_result`]); `get_expired_timers` and `due_backlog` are made here from the
/// backend's rows ([`Backend::expired`], [`Backend::due_times`]); the other reads call the
/// method of the same name.
///
/// A backend writes every kind of write the same way, with the kernel's steps
/// ([`Write`]): the keys, the load under its own locking, the plan
/// ([`plan`](super::plan) or a [`GroupPlanner`](super::GroupPlanner)), the atomic persist,
/// the wake-ups after the commit. It knows no kind by name, so a new kind of write reaches
/// every backend without a change to any of them, unless it needs rows they do not store yet.
pub trait Backend: Send + Sync + 'static {
    /// Runs `write` and answers its reply once it committed, or the error that refused it
    /// (nothing written).
    fn write<W: Write>(&self, write: W) -> impl Future<Output = Result<W::Reply, DbError>> + Send;

    /// [`DbExecutor::lock_pending`]: the [`LockPendingRequest`] write, whose grants the
    /// backend hands over with the histories read after its commit
    /// ([`hand_over`](super::hand_over)).
    fn lock_pending(
        &self,
        req: LockPendingRequest,
    ) -> impl Future<Output = Result<Vec<LockedExecution>, DbError>> + Send;

    /// The store's waiters: the kernel's waits register there, and the backend delivers each
    /// committed write's wake-ups to it.
    fn hub(&self) -> &WaiterHub;

    /// The number of registered waiters of each kind (they are removed when their callers
    /// leave; this lets tests check that nothing only grows).
    fn waiter_counts(&self) -> super::WaiterCounts {
        self.hub().counts()
    }

    /// The responses of `execution_id` from index `start_idx` on, in arrival order, from one
    /// snapshot; `NotFound` for an unknown execution: the check of
    /// [`DbWorkflow::subscribe_to_next_responses`].
    fn responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> impl Future<Output = Result<Vec<JoinSetResponseEventOuter>, DbError>> + Send;

    /// The result of `execution_id` if it finished (its `Finished` event); `NotFound` for an
    /// unknown execution: the check of [`DbAwait::wait_for_finished_result`].
    fn finished_result(
        &self,
        execution_id: &ExecutionId,
    ) -> impl Future<Output = Result<Option<FinishedExecutionResult>, DbError>> + Send;

    /// The state rows of the leases that expired at or before `at`, and the open delays that
    /// did, from one snapshot, in any order: [`expired_timers`](super::expired_timers) makes them
    /// [`DbTimers::get_expired_timers`]'s answer.
    fn expired(
        &self,
        at: DateTime<Utc>,
    ) -> impl Future<Output = Result<(Vec<ExecutionRow>, Vec<ExpiredDelay>), DbError>> + Send;

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

    /// [`DbClient::created_events`]: the stored `Created` events of `execution_ids` with their
    /// ids, in any order (one read); the kernel orders them and names a missing one.
    fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> impl Future<Output = Result<Vec<(ExecutionId, ExecutionEvent)>, DbError>> + Send;

    /// [`DbClient::list_executions`].
    fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> impl Future<Output = Result<Vec<ExecutionSummary>, DbError>> + Send;

    /// The `scheduled_at` of the first `limit` executions of `ffqns` pending and due at `at`,
    /// oldest first (ties by id), read in the order of the index the locks read: what
    /// [`DbClient::due_backlog`] counts ([`DueBacklog::of_due_times`]), and, with a limit of
    /// one, the check of [`DbExecutor::wait_for_pending`] (to the microsecond on the SQL
    /// backends: a spurious find only makes a waiter look again).
    fn due_times(
        &self,
        ffqns: &[FunctionFqn],
        at: DateTime<Utc>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DateTime<Utc>>, DbError>> + Send;

    /// The schedules from `from` on (`from` too, if stored), in name order, at most `limit`:
    /// [`DbSchedules::list_schedules`] and [`DbSchedules::get_schedule`].
    fn list_schedules(
        &self,
        from: Option<&ScheduleName>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ScheduleRow>, DbError>> + Send;

    /// [`DbSchedules::schedule_ticks`].
    fn schedule_ticks(
        &self,
        name: &ScheduleName,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Tick>, DbError>> + Send;

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
        let check = || async move { self.finished_result(execution_id).await };
        (self.hub())
            .wait_for_finished(execution_id, timeout, check)
            .await
    }
}

#[async_trait]
impl<B: Backend> DbExecutor for B {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        metered(&LOCK_PENDING, Backend::lock_pending(self, req)).await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        // Awaited where it was made when nothing is measured (one per run): handed to
        // `metered`, the write's future, which holds the outcome, is copied into its future.
        let writing = self.write(write);
        if !m::enabled() {
            return writing.await;
        }
        metered(&APPEND_OUTCOME, writing).await
    }

    /// The leases come from the watcher's read of those that end by `lock_expires_at`: it is
    /// called only after a lost answer, and a lease is found by its end without an index of
    /// its own.
    async fn unlock_lost(
        &self,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<usize, DbError> {
        let (leases, _) = self.expired(lock_expires_at).await?;
        let lost = leases.into_iter().filter(|row| {
            matches!(row.state.pending_state, PendingState::Locked {
                executor_id: held_by, lock_expires_at: ends, ..
            } if held_by == executor_id && ends == lock_expires_at)
        });
        let unlocked = || ExecutionEventInner::Unlocked {
            backoff_expires_at: now,
            reason: "the answer of the lock was lost; given back to run again".to_owned(),
        };
        let writes: Vec<_> = lost
            .map(|row| {
                let version = row.state.next_version;
                OutcomeWrite::new(row.execution_id, version, now, unlocked(), None)
            })
            .collect();
        if writes.is_empty() {
            return Ok(0);
        }
        // Each is fenced by its version: one that moved on meanwhile is left as it is.
        let results = self.write(AppendOutcomes(writes)).await?;
        Ok(results.iter().filter(|result| result.is_ok()).count())
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        let is_due =
            async { Ok(!(self.due_times(&ffqns, pending_at_or_sooner, 1).await?).is_empty()) };
        (self.hub())
            .wait_for_pending(pending_at_or_sooner, Arc::clone(&ffqns), max_wait, is_due)
            .await;
    }
}

#[async_trait]
impl<B: Backend> DbWorkflow for B {
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError> {
        // Their functions, not the requests (params and all), are kept to count them after.
        let created = runs(req.children.iter().map(|child| &child.ffqn));
        let version = metered(&APPEND_BATCH, self.write(req)).await?;
        count_created(&created);
        Ok(version)
    }

    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        let check = || async move {
            let responses = self.responses(execution_id, start_idx).await?;
            Ok((!responses.is_empty()).then_some(responses))
        };
        (self.hub())
            .wait_for_responses(execution_id, start_idx, check)
            .await
    }
}

#[async_trait]
impl<B: Backend> DbTimers for B {
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        let (locks, delays) = self.expired(at).await?;
        super::expired_timers(at, locks, delays)
    }

    async fn append_outcomes(
        &self,
        writes: Vec<OutcomeWrite>,
    ) -> Result<Vec<Result<Version, DbError>>, DbError> {
        let replies = metered(&APPEND_OUTCOMES, self.write(AppendOutcomes(writes))).await?;
        if m::enabled() {
            let meters = APPEND_OUTCOMES.meters();
            for err in replies.iter().filter_map(|reply| reply.as_ref().err()) {
                failed(meters, err);
            }
        }
        Ok(replies)
    }

    async fn append_response(
        &self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        let execution_id = execution_id.clone();
        let write = self.write(AppendResponse {
            now,
            execution_id,
            response,
        });
        metered(&APPEND_RESPONSE, write).await
    }
}

#[async_trait]
impl<B: Backend> DbClient for B {
    async fn create(&self, req: CreateRequest) -> Result<CreateOutcome, DbError> {
        let created = runs(std::iter::once(&req.ffqn));
        let outcome = metered(&CREATE, self.write(req)).await?;
        if matches!(outcome, CreateOutcome::Created) {
            count_created(&created);
        }
        Ok(outcome)
    }

    async fn create_locked(
        &self,
        request: CreateRequest,
        locked: Locked,
    ) -> Result<CreateOutcome, DbError> {
        let created = runs(std::iter::once(&request.ffqn));
        let write = self.write(CreateLocked { request, locked });
        let outcome = metered(&CREATE_LOCKED, write).await?;
        if matches!(outcome, CreateOutcome::Created) {
            count_created(&created);
        }
        Ok(outcome)
    }

    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        let created = runs(reqs.iter().map(|req| &req.ffqn));
        metered(&CREATE_BATCH, self.write(CreateBatch(reqs))).await?;
        count_created(&created);
        Ok(())
    }

    async fn cancel(&self, req: CancelRequest) -> Result<CancelOutcome, DbError> {
        let outcome = metered(&CANCEL, self.write(req)).await?;
        if let CancelOutcome::Cancelled { executions } = &outcome
            && m::enabled()
        {
            counter!(m::EXECUTIONS_CANCELLED).increment(u64::try_from(*executions).unwrap_or(0));
        }
        Ok(outcome)
    }

    async fn complete(&self, req: CompleteRequest) -> Result<CompleteOutcome, DbError> {
        metered(&COMPLETE, self.write(req)).await
    }

    async fn prune(&self, req: PruneRequest) -> Result<PruneOutcome, DbError> {
        metered(&PRUNE, self.write(req)).await
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

    async fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        let found: std::collections::HashMap<ExecutionId, ExecutionEvent> =
            Backend::created_events(self, execution_ids)
                .await?
                .into_iter()
                .collect();
        execution_ids
            .iter()
            .map(|id| (found.get(id).cloned()).ok_or_else(|| DbError::execution_not_found(id)))
            .collect()
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

    async fn due_backlog(
        &self,
        ffqn: &FunctionFqn,
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<DueBacklog, DbError> {
        let ffqns = std::slice::from_ref(ffqn);
        let due = self.due_times(ffqns, at, limit.saturating_add(1)).await?;
        Ok(DueBacklog::of_due_times(&due, limit))
    }
}

#[async_trait]
impl<B: Backend> DbSchedules for B {
    async fn create_schedule(
        &self,
        req: CreateScheduleRequest,
    ) -> Result<ScheduleCreated, DbError> {
        metered(&SCHEDULE, self.write(req)).await
    }

    async fn change_schedule(
        &self,
        req: ChangeScheduleRequest,
    ) -> Result<ScheduleChanged, DbError> {
        metered(&SCHEDULE, self.write(req)).await
    }

    async fn fire_schedules(&self, req: FireSchedulesRequest) -> Result<FireOutcome, DbError> {
        let outcome = metered(&FIRE_SCHEDULES, self.write(req)).await?;
        count_created(&outcome.functions);
        Ok(outcome)
    }

    async fn trigger_schedule(&self, req: TriggerScheduleRequest) -> Result<Triggered, DbError> {
        let triggered = metered(&SCHEDULE, self.write(req)).await?;
        count_created(&triggered.functions);
        Ok(triggered)
    }

    async fn get_schedule(&self, name: &ScheduleName) -> Result<ScheduleRow, DbError> {
        let found = Backend::list_schedules(self, Some(name), 1).await?;
        (found.into_iter().find(|row| row.name() == name))
            .ok_or_else(|| DbError::NotFound(format!("schedule {name}")))
    }

    async fn list_schedules(
        &self,
        after: Option<&ScheduleName>,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, DbError> {
        let mut rows = Backend::list_schedules(self, after, limit.saturating_add(1)).await?;
        // From `after` on, without it.
        if after.is_some_and(|after| rows.first().is_some_and(|row| row.name() == after)) {
            rows.remove(0);
        }
        rows.truncate(limit);
        Ok(rows)
    }

    async fn schedule_ticks(
        &self,
        name: &ScheduleName,
        limit: usize,
    ) -> Result<Vec<Tick>, DbError> {
        Backend::schedule_ticks(self, name, limit).await
    }
}

#[async_trait]
impl<B: Backend> DbConnection for B {
    async fn close(&self) {
        Backend::close(self).await;
    }
}
