//! A store that forwards every call of the public storage traits to another one (a decorator
//! of [`concepts::DbConnection`]), with a hook that decides the fate of each
//! write: let it through, refuse it without writing, or write it and then lose the reply
//! (an ambiguous commit: the caller sees an error although the write landed).
//!
//! The hook sees the write before it reaches the store, so it can count attempts or pick the
//! writes it fails; it sees each read too, which it may fail or count ([`WriteHook::read`]: a
//! store that cannot be reached); it is told of each write whose caller got a successful
//! reply ([`WriteHook::acknowledged`]), and it may lose or delay the wake-ups of waits
//! ([`WriteHook::wait`]). All but the first default to doing nothing, so a closure is a hook:
//!
//! ```
//! use concepts::DbError;
//! use std::sync::Arc;
//! use test_utils::forwarding::{Fault, ForwardingDb, Write};
//!
//! fn lose_every_outcome_reply(store: Arc<dyn concepts::DbConnection>) -> Arc<ForwardingDb> {
//!     ForwardingDb::new(store, |write: &Write<'_>| match write {
//!         Write::Outcome(_) => Fault::LoseReply(DbError::Connection("reply lost".into())),
//!         _ => Fault::Pass,
//!     })
//! }
//! # let _ = lose_every_outcome_reply;
//! ```

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest,
    CreateOutcome, CreateRequest, DbAwait, DbClient, DbConnection, DbError, DbExecutor,
    DbSchedules, DbTimers, DbWorkflow, DueBacklog, ExecutionEvent, ExecutionId, ExecutionLog,
    ExecutionSummary, ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetResponseEvent,
    JoinSetResponseEventOuter, ListExecutionsFilter, LockPendingRequest, Locked, LockedExecution,
    OutcomeWrite, Pagination, PruneOutcome, PruneRequest, Version,
    schedule::{
        ChangeScheduleRequest, CreateScheduleRequest, FireOutcome, FireSchedulesRequest,
        ScheduleChanged, ScheduleCreated, ScheduleName, ScheduleRow, Tick, TriggerScheduleRequest,
        Triggered,
    },
};
use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

/// A write on its way to the store, as the hook sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Write<'a> {
    /// A kind of write the hook has no name for (`create_schedule`, `change_schedule`,
    /// `trigger_schedule`).
    Other(&'a (dyn std::fmt::Debug + Sync)),
    /// `create`.
    Create(&'a CreateRequest),
    /// `create_locked`: the request and the lease it is created under.
    CreateLocked(&'a CreateRequest, &'a Locked),
    /// `create_batch`.
    CreateBatch(&'a [CreateRequest]),
    /// `append_batch`.
    AppendBatch(&'a AppendBatchRequest),
    /// `append_outcome`.
    Outcome(&'a OutcomeWrite),
    /// `append_outcomes`; once it is answered, each item it accepted is acknowledged on its
    /// own, as an [`Write::Outcome`].
    Outcomes(&'a [OutcomeWrite]),
    /// `append_response`.
    Response {
        /// When it arrives.
        now: DateTime<Utc>,
        /// The execution that receives it.
        execution_id: &'a ExecutionId,
        /// The response.
        response: &'a JoinSetResponseEvent,
    },
    /// `lock_pending`.
    LockPending(&'a LockPendingRequest),
    /// `cancel`.
    Cancel(&'a CancelRequest),
    /// `complete`.
    Complete(&'a CompleteRequest),
    /// `prune`.
    Prune(&'a PruneRequest),
    /// `fire_schedules`.
    FireSchedules(&'a FireSchedulesRequest),
}

/// What happens to one write.
#[derive(Debug, Clone)]
pub enum Fault {
    /// It reaches the store; the caller gets the store's answer.
    Pass,
    /// It never reaches the store; the caller gets this error (nothing was written).
    Refuse(DbError),
    /// It reaches the store; when the store accepted it, the caller gets this error instead
    /// of the answer (the write landed, its reply was lost). A write the store refused keeps
    /// the store's error.
    LoseReply(DbError),
}

/// A read on its way to the store, as the hook sees it ([`WriteHook::read`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Read<'a> {
    /// `get`.
    Get(&'a ExecutionId),
    /// `list_events`.
    ListEvents(&'a ExecutionId),
    /// `created_events`.
    CreatedEvents,
    /// `list_executions`.
    ListExecutions,
    /// `list_schedules` and `get_schedule`.
    ListSchedules,
    /// `schedule_ticks`.
    ScheduleTicks(&'a ScheduleName),
    /// `get_expired_timers`.
    ExpiredTimers,
    /// `wait_for_finished_result`: a read of the result, then (unless it is finished) a wait
    /// for the store's wake-up.
    FinishedResult {
        /// The execution awaited.
        execution_id: &'a ExecutionId,
        /// The longest wait (`None`: until it finishes).
        timeout: Option<Duration>,
    },
}

/// A wait on its way to the store, as the hook sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Wait<'a> {
    /// `wait_for_pending`.
    Pending {
        /// The functions waited for.
        ffqns: &'a [FunctionFqn],
        /// The longest wait.
        max_wait: Duration,
    },
    /// `subscribe_to_next_responses`.
    Responses {
        /// The execution whose responses are awaited.
        execution_id: &'a ExecutionId,
    },
}

/// What happens to the wake-up of one wait.
pub enum WaitFault {
    /// The store's wait, untouched.
    Pass,
    /// The notification is lost: `wait_for_pending` returns only after its `max_wait`, and
    /// `subscribe_to_next_responses` never returns (only its caller's own timeout ends it).
    Lose,
    /// The notification is late: once the store's wait returned, this future is awaited too.
    Late(Pin<Box<dyn Future<Output = ()> + Send>>),
}

impl std::fmt::Debug for WaitFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Pass => "Pass",
            Self::Lose => "Lose",
            Self::Late(_) => "Late",
        })
    }
}

/// Decides the fate of each write; any `Fn(&Write<'_>) -> Fault` is one.
pub trait WriteHook: Send + Sync + 'static {
    /// The fate of `write`, decided before it reaches the store.
    fn decide(&self, write: &Write<'_>) -> Fault;

    /// `write` reached the store and its caller got a successful reply: it was acknowledged.
    /// Nothing by default; a test keeps them to check that none is lost.
    fn acknowledged(&self, write: &Write<'_>) {
        let _ = write;
    }

    /// The fate of a read, decided before it reaches the store: `Err` answers it with that
    /// error instead (an unreachable store); `Ok(())`, the default, lets it through. A hook
    /// may count them too.
    fn read(&self, read: &Read<'_>) -> Result<(), DbError> {
        let _ = read;
        Ok(())
    }

    /// The fate of a wait's wake-up; [`WaitFault::Pass`] by default.
    fn wait(&self, wait: &Wait<'_>) -> WaitFault {
        let _ = wait;
        WaitFault::Pass
    }
}

impl<F> WriteHook for F
where
    F: Fn(&Write<'_>) -> Fault + Send + Sync + 'static,
{
    fn decide(&self, write: &Write<'_>) -> Fault {
        self(write)
    }
}

/// Forwards every call to `inner`; the hook decides each write's fate.
pub struct ForwardingDb {
    inner: Arc<dyn DbConnection>,
    hook: Box<dyn WriteHook>,
}

impl ForwardingDb {
    /// A store that forwards to `inner` under `hook`.
    #[must_use]
    pub fn new(inner: Arc<dyn DbConnection>, hook: impl WriteHook) -> Arc<Self> {
        Arc::new(Self {
            inner,
            hook: Box::new(hook),
        })
    }

    /// The store this one forwards to.
    #[must_use]
    pub fn inner(&self) -> &Arc<dyn DbConnection> {
        &self.inner
    }

    /// Runs `call`, the forwarded `write`, as the hook decides, and tells the hook when its
    /// caller gets a successful reply.
    async fn apply<T>(
        &self,
        write: Write<'_>,
        call: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        match self.hook.decide(&write) {
            Fault::Pass => {
                let reply = call.await?;
                self.hook.acknowledged(&write);
                Ok(reply)
            }
            Fault::Refuse(err) => Err(err),
            Fault::LoseReply(err) => {
                call.await?;
                Err(err)
            }
        }
    }

    /// Runs `wait`, the forwarded wait, as the hook decides; `lost` is what a lost
    /// notification leaves of it.
    async fn wait<T>(
        &self,
        what: Wait<'_>,
        wait: impl Future<Output = T>,
        lost: impl Future<Output = T>,
    ) -> T {
        match self.hook.wait(&what) {
            WaitFault::Pass => wait.await,
            WaitFault::Lose => lost.await,
            WaitFault::Late(late) => {
                let woken = wait.await;
                late.await;
                woken
            }
        }
    }
}

#[async_trait]
impl DbAwait for ForwardingDb {
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        self.hook.read(&Read::FinishedResult {
            execution_id,
            timeout,
        })?;
        self.inner
            .wait_for_finished_result(execution_id, timeout)
            .await
    }
}

#[async_trait]
impl DbExecutor for ForwardingDb {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        let copy = req.clone();
        (self.apply(Write::LockPending(&copy), self.inner.lock_pending(req))).await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        let copy = write.clone();
        (self.apply(Write::Outcome(&copy), self.inner.append_outcome(write))).await
    }

    // Passed through: only an executor's recovery from a lost lock calls it.
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

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        let what = Wait::Pending {
            ffqns: &ffqns,
            max_wait,
        };
        let wait = self
            .inner
            .wait_for_pending(pending_at_or_sooner, ffqns.clone(), max_wait);
        self.wait(what, wait, tokio::time::sleep(max_wait)).await;
    }
}

#[async_trait]
impl DbWorkflow for ForwardingDb {
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError> {
        let copy = req.clone();
        (self.apply(Write::AppendBatch(&copy), self.inner.append_batch(req))).await
    }

    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        let wait = self
            .inner
            .subscribe_to_next_responses(execution_id, start_idx);
        let what = Wait::Responses { execution_id };
        self.wait(what, wait, std::future::pending()).await
    }
}

#[async_trait]
impl DbTimers for ForwardingDb {
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        self.hook.read(&Read::ExpiredTimers)?;
        self.inner.get_expired_timers(at).await
    }

    async fn append_outcomes(
        &self,
        writes: Vec<OutcomeWrite>,
    ) -> Result<Vec<Result<Version, DbError>>, DbError> {
        let copy = writes.clone();
        let call = self.inner.append_outcomes(writes);
        let replies = self.apply(Write::Outcomes(&copy), call).await?;
        // Each item it accepted is an acknowledged outcome of its own.
        for (write, reply) in copy.iter().zip(&replies) {
            if reply.is_ok() {
                self.hook.acknowledged(&Write::Outcome(write));
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
        let copy = response.clone();
        let write = Write::Response {
            now,
            execution_id,
            response: &copy,
        };
        let call = self.inner.append_response(now, execution_id, response);
        self.apply(write, call).await
    }
}

#[async_trait]
impl DbClient for ForwardingDb {
    async fn create(&self, req: CreateRequest) -> Result<CreateOutcome, DbError> {
        let copy = req.clone();
        (self.apply(Write::Create(&copy), self.inner.create(req))).await
    }

    async fn create_locked(
        &self,
        req: CreateRequest,
        locked: Locked,
    ) -> Result<CreateOutcome, DbError> {
        let (copy, lease) = (req.clone(), locked.clone());
        let write = Write::CreateLocked(&copy, &lease);
        (self.apply(write, self.inner.create_locked(req, locked))).await
    }

    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        let copy = reqs.clone();
        (self.apply(Write::CreateBatch(&copy), self.inner.create_batch(reqs))).await
    }

    async fn cancel(&self, req: CancelRequest) -> Result<CancelOutcome, DbError> {
        let copy = req.clone();
        (self.apply(Write::Cancel(&copy), self.inner.cancel(req))).await
    }

    async fn complete(&self, req: CompleteRequest) -> Result<CompleteOutcome, DbError> {
        let copy = req.clone();
        (self.apply(Write::Complete(&copy), self.inner.complete(req))).await
    }

    async fn prune(&self, req: PruneRequest) -> Result<PruneOutcome, DbError> {
        let copy = req.clone();
        (self.apply(Write::Prune(&copy), self.inner.prune(req))).await
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        self.hook.read(&Read::Get(execution_id))?;
        self.inner.get(execution_id).await
    }

    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        self.hook.read(&Read::ListEvents(execution_id))?;
        self.inner.get_execution_event(execution_id, version).await
    }

    async fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        self.hook.read(&Read::CreatedEvents)?;
        self.inner.created_events(execution_ids).await
    }

    async fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        self.hook.read(&Read::ListEvents(execution_id))?;
        self.inner.list_events(execution_id, from, limit).await
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        self.hook.read(&Read::ListExecutions)?;
        self.inner.list_executions(filter, pagination).await
    }

    async fn due_backlog(
        &self,
        ffqn: &FunctionFqn,
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<DueBacklog, DbError> {
        self.inner.due_backlog(ffqn, at, limit).await
    }
}

#[async_trait]
impl DbSchedules for ForwardingDb {
    async fn create_schedule(
        &self,
        req: CreateScheduleRequest,
    ) -> Result<ScheduleCreated, DbError> {
        let copy = req.clone();
        (self.apply(Write::Other(&copy), self.inner.create_schedule(req))).await
    }

    async fn change_schedule(
        &self,
        req: ChangeScheduleRequest,
    ) -> Result<ScheduleChanged, DbError> {
        let copy = req.clone();
        (self.apply(Write::Other(&copy), self.inner.change_schedule(req))).await
    }

    async fn fire_schedules(&self, req: FireSchedulesRequest) -> Result<FireOutcome, DbError> {
        let copy = req.clone();
        (self.apply(Write::FireSchedules(&copy), self.inner.fire_schedules(req))).await
    }

    async fn trigger_schedule(&self, req: TriggerScheduleRequest) -> Result<Triggered, DbError> {
        let copy = req.clone();
        (self.apply(Write::Other(&copy), self.inner.trigger_schedule(req))).await
    }

    async fn get_schedule(&self, name: &ScheduleName) -> Result<ScheduleRow, DbError> {
        self.hook.read(&Read::ListSchedules)?;
        self.inner.get_schedule(name).await
    }

    async fn list_schedules(
        &self,
        after: Option<&ScheduleName>,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, DbError> {
        self.hook.read(&Read::ListSchedules)?;
        self.inner.list_schedules(after, limit).await
    }

    async fn schedule_ticks(
        &self,
        name: &ScheduleName,
        limit: usize,
    ) -> Result<Vec<Tick>, DbError> {
        self.hook.read(&Read::ScheduleTicks(name))?;
        self.inner.schedule_ticks(name, limit).await
    }
}

#[async_trait]
impl DbConnection for ForwardingDb {
    async fn close(&self) {
        self.inner.close().await;
    }
}
