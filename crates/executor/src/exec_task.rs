//! The executor loop: take permits, lock due executions, run each worker in its own task,
//! record each outcome, wait for the next due execution.

use crate::{
    cancel::Cancellation,
    local::{LocalExecutors, Registered},
    mapping::RunInfo,
    worker::{Worker, WorkerContext, WorkerError, WorkerResult},
};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, ComponentId, DbError, DbExecutor, ExecutionId, ExecutorId, FunctionFqn,
    LockPendingRequest, LockedExecution, add_saturating, retry,
};
use futures_util::{FutureExt as _, StreamExt as _, future::BoxFuture, stream::FuturesUnordered};
use std::panic::AssertUnwindSafe;
use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, watch},
    task::{JoinError, JoinHandle},
};
use tracing::{Instrument, debug, info_span, warn};

/// How an executor works.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// How long a lease lasts; a worker's deadline is the lock time plus this.
    pub lock_expiry: Duration,
    /// The longest the loop waits for a due execution or a free permit before it looks again
    /// (real time). Notifications usually wake it much sooner.
    pub tick_sleep: Duration,
    /// How many executions one tick locks at most; 0 is treated as 1. Without a
    /// `task_limiter`, two batches bound the runs this executor has in flight (see there).
    pub batch_size: usize,
    /// The component this executor runs; written into every `Locked` event.
    pub component_id: ComponentId,
    /// Bounds the runs in flight (locked, running, or writing their outcome), possibly shared
    /// by several executors: each run holds one permit until its outcome is written, and a tick
    /// locks only as many executions as it took permits.
    ///
    /// `None` is a limiter of two batches (`2 × batch_size` permits) of this executor's own,
    /// and the loop locks only once a whole batch of them is free: while one batch runs and
    /// writes its outcomes, the next is locked, so the lock's commit and the outcomes' overlap
    /// instead of following each other; and an executor still takes leases only as fast as its
    /// runs end (one batch ahead of them at most), leaving the work it cannot keep up with
    /// pending for other executors. A limiter given here replaces that bound, and the loop
    /// locks as soon as one of its permits is free: to let one executor hold more (or fewer)
    /// runs, give it a limiter of its own of that size; to share one bound among several
    /// executors, give each the same limiter.
    pub task_limiter: Option<Arc<Semaphore>>,
}

/// The permits a tick took, one per execution it may lock, held as one: each run splits its
/// own off, and those left are given back at once when the tick drops them (taken or given
/// back one by one, a batch of 256 of which the lock used one cost about 500 operations on
/// the semaphore's lock).
#[derive(Default)]
struct Permits(Option<OwnedSemaphorePermit>);

impl Permits {
    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One permit, for one run.
    fn take_one(&mut self) -> Option<OwnedSemaphorePermit> {
        match &mut self.0 {
            Some(permits) if permits.num_permits() > 1 => permits.split(1),
            _ => self.0.take(),
        }
    }

    fn merge(&mut self, other: Self) {
        match (&mut self.0, other.0) {
            (Some(permits), Some(other)) => permits.merge(other),
            (mine, other) => *mine = mine.take().or(other),
        }
    }
}

/// The tasks of the runs the loop spawned that may still be running, shared by the loop and
/// its handle, so that a drain can await them and abort the rest. Bounded by the task
/// limiter: each time the loop adds a batch it drops the tasks that ended.
type RunTasks = Arc<Mutex<Vec<JoinHandle<()>>>>;

fn lock_tasks(tasks: &RunTasks) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
    // A panic while the lock is held cannot leave the list half-written: it is pushes only.
    tasks.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An executor: runs one [`Worker`]'s functions against a store.
///
/// The store is taken as `Arc<dyn DbExecutor>`, the narrow trait of what an executor needs;
/// a whole backend (`Arc<dyn DbConnection>`) coerces to it. Workflow-style workers that need
/// more hold their own handle to the store.
///
/// Use [`ExecTask::spawn_new`] in production, or [`ExecTask::new`] and [`ExecTask::tick`] to
/// drive it step by step in tests ([`ExecTask::lock_runs`] when the test polls the runs itself).
pub struct ExecTask<C: ClockFn> {
    worker: Arc<dyn Worker>,
    config: ExecConfig,
    clock: C,
    db: Arc<dyn DbExecutor>,
    executor_id: ExecutorId,
    ffqns: Arc<[FunctionFqn]>,
    /// The handles of its metrics, registered when it is made.
    meters: Arc<crate::metrics::Meters>,
    ticks: Arc<AtomicU64>,
    cancellation: Cancellation,
    /// The loop's runs, for [`ExecutorTaskHandle::drain`].
    runs: RunTasks,
    /// `config.task_limiter`, or this executor's own of two batches.
    limiter: Arc<Semaphore>,
    /// How many free permits a tick of the loop waits for: a batch with its own limiter, one
    /// with a given one.
    lock_at: u32,
    /// The executors of this process on the same store: the spawned loop registers this one
    /// there, and every run's worker is given it, to hand the executions it creates to them.
    local: LocalExecutors,
    /// The leases of `lock_pending` calls whose reply was lost, to give back.
    lost_locks: lost::LostLocks,
}

impl<C: ClockFn> ExecTask<C> {
    /// An executor with a fresh executor id, not running yet.
    #[must_use]
    pub fn new(
        worker: Arc<dyn Worker>,
        config: ExecConfig,
        clock: C,
        db: Arc<dyn DbExecutor>,
    ) -> Self {
        let executor_id = ExecutorId::generate_at(clock.now());
        let ffqns: Arc<[FunctionFqn]> = worker.exported_functions().into();
        let meters = Arc::new(crate::metrics::Meters::new(&config.component_id, &ffqns));
        let (limiter, lock_at) = match &config.task_limiter {
            Some(limiter) => (limiter.clone(), 1),
            None => {
                let bound = own_bound(config.batch_size);
                (Arc::new(Semaphore::new(bound)), own_lock_at(bound))
            }
        };
        Self {
            limiter,
            lock_at,
            worker,
            config,
            clock,
            cancellation: Cancellation::new(db.clone()),
            db,
            executor_id,
            ffqns,
            meters,
            ticks: Arc::default(),
            runs: RunTasks::default(),
            local: LocalExecutors::default(),
            lost_locks: lost::LostLocks::default(),
        }
    }

    /// The same executor in `local`, the executors of this process on the same store: while
    /// its loop runs ([`ExecTask::spawn`]), executions that workers of this process create
    /// under one of its leases ([`LocalExecutors::reserve`]) are run by it at once, and its
    /// own runs' workers are given `local` to do so ([`WorkerContext::local_executors`]). A
    /// node gives all its executors one.
    #[must_use]
    pub fn with_local_executors(mut self, local: LocalExecutors) -> Self {
        self.local = local;
        self
    }

    /// The same executor under `executor_id` instead of a fresh one: a node restarted under
    /// the same identity gives each executor the id it had, so that it finds the leases its
    /// previous process left (`timers_watcher::take_back_leases`).
    #[must_use]
    pub fn with_executor_id(mut self, executor_id: ExecutorId) -> Self {
        self.executor_id = executor_id;
        self
    }

    /// Creates an executor and spawns its loop on the current tokio runtime.
    #[must_use]
    pub fn spawn_new(
        worker: Arc<dyn Worker>,
        config: ExecConfig,
        clock: C,
        db: Arc<dyn DbExecutor>,
    ) -> ExecutorTaskHandle {
        Self::new(worker, config, clock, db).spawn()
    }

    /// Spawns the loop on the current tokio runtime. While it runs, the executor is registered
    /// in its [`LocalExecutors`] (see [`ExecTask::with_local_executors`]), and the runs it is
    /// handed there are spawned beside its own.
    #[must_use]
    pub fn spawn(self) -> ExecutorTaskHandle {
        let (closing_tx, closing_rx) = watch::channel(false);
        let executor_id = self.executor_id;
        let ticks = self.ticks.clone();
        let runs = self.runs.clone();
        let meters = self.meters.clone();
        let span = info_span!("executor", %executor_id, component_id = %self.config.component_id);
        let task = Arc::new(self);
        let registered = task.register_spawning();
        let join = tokio::spawn(task.run_loop(closing_rx, registered).instrument(span));
        ExecutorTaskHandle {
            executor_id,
            closing: closing_tx,
            join: Some(join),
            ticks,
            runs,
            meters,
        }
    }

    /// This executor's id, written into every `Locked` event.
    #[must_use]
    pub fn executor_id(&self) -> ExecutorId {
        self.executor_id
    }

    /// How many ticks (loop iterations, or calls of [`ExecTask::tick`]) started so far.
    #[must_use]
    pub fn tick_count(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// One manual tick at `executed_at`: takes the permits that are free right now (without
    /// waiting), locks up to that many due executions and spawns their workers.
    ///
    /// The returned [`ExecutionProgress`] lets a test await the workers and their writes.
    pub async fn tick(&self, executed_at: DateTime<Utc>) -> Result<ExecutionProgress, DbError> {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        let permits = take_free(&self.limiter, self.batch_size());
        self.lock_and_spawn(executed_at, permits).await
    }

    /// One step of a deterministic simulation at `executed_at`: as [`ExecTask::tick`], but each
    /// locked execution's run (the worker, then its outcome write) is returned as a future
    /// instead of being spawned. The caller polls the runs in the order it chooses, so one
    /// schedule is one exact interleaving; dropping a run stops it at its current await point,
    /// as a killed process would (its permit is released, its lease left to expire).
    pub async fn lock_runs(&self, executed_at: DateTime<Utc>) -> Result<Vec<Run>, DbError> {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        let permits = take_free(&self.limiter, self.batch_size());
        self.lock(executed_at, permits).await
    }

    fn batch_size(&self) -> usize {
        self.config.batch_size.max(1)
    }

    async fn run_loop(
        self: Arc<Self>,
        mut closing: watch::Receiver<bool>,
        // Unregistered when the loop ends, however it ends (an abort drops it too).
        registered: Registered,
    ) {
        let _registered = registered;
        debug!("executor started");
        loop {
            self.ticks.fetch_add(1, Ordering::Relaxed);
            let permits = tokio::select! {
                _ = closing.wait_for(|closing| *closing) => break,
                permits = self.wait_for_permits() => permits,
            };
            if permits.is_empty() {
                continue; // No permit was freed within `tick_sleep`: look again.
            }
            let locked = self.lock_and_track(self.clock.now(), permits).await;
            if let Err(err) = &locked {
                warn!("cannot lock pending executions: {err}");
            }
            if concepts::metrics::enabled() {
                // Sampled once a tick, not counted per run: the runs this loop spawned that
                // have not ended, and the permits left.
                let in_flight = {
                    let mut tasks = lock_tasks(&self.runs);
                    tasks.retain(|task| !task.is_finished());
                    tasks.len()
                };
                self.meters
                    .tick(in_flight, self.limiter.available_permits());
            }
            tokio::select! {
                _ = closing.wait_for(|closing| *closing) => break,
                () = self.wait_after_tick(locked.is_ok()) => {}
            }
        }
        debug!("executor stopped");
    }

    /// At least `lock_at` permits (and any more that are free, up to a batch), waiting up to
    /// `tick_sleep` for them; empty if they did not come.
    async fn wait_for_permits(&self) -> Permits {
        let limiter = &self.limiter;
        let wanted = limiter.clone().acquire_many_owned(self.lock_at);
        match tokio::time::timeout(self.config.tick_sleep, wanted).await {
            Ok(Ok(first)) => {
                let mut permits = Permits(Some(first));
                let more = self.batch_size().saturating_sub(permits.len());
                permits.merge(take_free(limiter, more));
                permits
            }
            Ok(Err(_closed)) => {
                warn!("the task limiter is closed; no worker can start");
                tokio::time::sleep(self.config.tick_sleep).await;
                Permits::default()
            }
            Err(_elapsed) => Permits::default(),
        }
    }

    /// Waits for the next due execution, or `tick_sleep` after a failed lock (the store may be
    /// down, and `wait_for_pending` of a failing store could return at once and spin).
    async fn wait_after_tick(&self, lock_succeeded: bool) {
        if lock_succeeded {
            let ffqns = self.ffqns.clone();
            self.db
                .wait_for_pending(self.clock.now(), ffqns, self.config.tick_sleep)
                .await;
        } else {
            tokio::time::sleep(self.config.tick_sleep).await;
        }
    }

    /// The loop's step: locks, spawns each run, and keeps its task for a drain.
    async fn lock_and_track(
        &self,
        executed_at: DateTime<Utc>,
        permits: Permits,
    ) -> Result<(), DbError> {
        let runs = self.lock(executed_at, permits).await?;
        if runs.is_empty() {
            return Ok(());
        }
        let spawned: Vec<_> = runs
            .into_iter()
            // Boxed (see `ExecTask::run`): the future is large, and tokio moves it several times.
            .map(|run| tokio::spawn(run.future))
            .collect();
        let mut tasks = lock_tasks(&self.runs);
        tasks.retain(|task| !task.is_finished());
        tasks.extend(spawned);
        Ok(())
    }

    async fn lock_and_spawn(
        &self,
        executed_at: DateTime<Utc>,
        permits: Permits,
    ) -> Result<ExecutionProgress, DbError> {
        let runs = self.lock(executed_at, permits).await?;
        let executions = runs
            .into_iter()
            // Boxed (see `ExecTask::run`): the future is large, and tokio moves it several times.
            .map(|run| (run.execution_id, tokio::spawn(run.future)))
            .collect();
        Ok(ExecutionProgress { executions })
    }

    /// Locks up to `permits.len()` due executions; each run holds one of the permits.
    async fn lock(
        &self,
        executed_at: DateTime<Utc>,
        mut permits: Permits,
    ) -> Result<Vec<Run>, DbError> {
        if permits.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db.as_ref();
        (self.lost_locks.give_back(db, self.executor_id, executed_at)).await?;
        let lock_expires_at = add_saturating(executed_at, self.config.lock_expiry);
        let locked = self
            .db
            .lock_pending(LockPendingRequest {
                batch_size: permits.len(),
                pending_at_or_sooner: executed_at,
                ffqns: self.ffqns.clone(),
                now: executed_at,
                component_id: self.config.component_id.clone(),
                executor_id: self.executor_id,
                lock_expires_at,
            })
            .await
            .inspect_err(|err| {
                if err.is_retriable() {
                    self.lost_locks.remember(lock_expires_at);
                }
            })?;
        let runs = locked
            .into_iter()
            .map(|locked| {
                let meters = self.meters.locked(&locked, executed_at);
                let permit = permits.take_one();
                Run {
                    execution_id: locked.execution_id.clone(),
                    future: self.run(locked, executed_at, permit, meters, None),
                }
            })
            .collect();
        Ok(runs) // Unused permits are released here.
    }

    /// The run of one locked execution: the worker, then its outcome write, or its `Finished`
    /// handed to `answer` while the parent's run listens ([`crate::local::Answer`]); the permit
    /// is held until then.
    fn run(
        &self,
        locked: LockedExecution,
        locked_at: DateTime<Utc>,
        // `None` only when the store locked more executions than it was asked for.
        permit: Option<OwnedSemaphorePermit>,
        meters: Option<Arc<crate::metrics::FunctionMeters>>,
        mut answer: Option<crate::local::Answer>,
    ) -> BoxFuture<'static, ()> {
        let run = RunInfo::from(&locked);
        let span = self.worker_span(&locked);
        let scheduled_at = locked.scheduled_at;
        let lock_expires_at = locked.locked_event.lock_expires_at;
        let ctx = WorkerContext {
            can_be_retried: retry::can_be_retried(locked.temporary_event_count, locked.max_retries),
            temporary_event_count: locked.temporary_event_count,
            execution_deadline: locked.locked_event.lock_expires_at,
            run_id: locked.locked_event.run_id,
            execution_id: locked.execution_id,
            metadata: locked.metadata,
            ffqn: locked.ffqn,
            params: locked.params,
            event_history: locked.event_history,
            responses: locked.responses,
            version: locked.next_version,
            worker_span: span.clone(),
            // One reference count; the store is asked only if the worker polls `cancelled()`.
            cancellation: self.cancellation.clone(),
            local_executors: self.local.clone(),
        };
        let worker = self.worker.clone();
        let db = self.db.clone();
        let clock = self.clock.clone();
        let task = async move {
            let result = run_catching_panics(worker.as_ref(), ctx).await;
            // The attempt's duration is read from the times it reads anyway: its lock's and
            // its outcome's (no clock read of its own).
            let now = clock.now();
            let ran = (locked_at, now);
            // Decided by a plain function, which hands back the write, its first attempt made:
            // a local of this block that is borrowed (the result) keeps its room in the future
            // across the write's await, and the run's task is allocated per execution. The
            // write is held here once and borrowed by the future awaiting it, not moved into
            // it.
            let mut end = end_of_run(
                db.as_ref(),
                result,
                &run,
                now,
                lock_expires_at,
                &mut answer,
                meters.as_ref(),
            );
            match &mut end {
                RunEnd::Write(writing, recorded) => {
                    let left = || outcome::lease_left(lock_expires_at, now);
                    if writing.finish(db.as_ref(), left).await
                        && let Some((meters, outcome)) = *recorded
                    {
                        meters.attempt(ran, outcome, scheduled_at);
                    }
                }
                RunEnd::Answered(recorded) => {
                    if let Some((meters, outcome)) = *recorded {
                        meters.attempt(ran, outcome, scheduled_at);
                    }
                }
                RunEnd::ByWorker => {
                    if let Some(meters) = &meters {
                        meters.attempt_by_worker(ran);
                    }
                }
                RunEnd::Nothing => {}
            }
            drop(permit);
        };
        Box::pin(task.instrument(span))
    }

    /// The span of one run. Tracing span names are static, so the function's name is the
    /// `otel.name` field, which OpenTelemetry exporters use as the span name. The stored
    /// `traceparent` is recorded as a field and becomes the span's parent through the
    /// program's installed propagation ([`concepts::trace`]), in whichever process runs it.
    fn worker_span(&self, locked: &LockedExecution) -> tracing::Span {
        let span = info_span!(
            parent: None,
            "worker",
            otel.name = %locked.ffqn,
            execution_id = %locked.execution_id,
            run_id = %locked.locked_event.run_id,
            ffqn = %locked.ffqn,
            executor_id = %self.executor_id,
            component_id = %self.config.component_id,
            traceparent = tracing::field::Empty,
        );
        // A span no subscriber wants records nothing: the metadata is not even looked up.
        if !span.is_disabled()
            && let Some(parent) = locked.metadata.trace_parent()
        {
            span.record("traceparent", parent.as_str());
            concepts::trace::adopt(&span, &parent);
        }
        span
    }
}

/// Runs the worker, turning a panic into an activity trap instead of a lost run.
///
/// The worker runs inside the task the executor spawned for it (one task per execution, not
/// two): the panic is caught at the future's poll, which is all `tokio::spawn` would add.
///
/// Not an `async fn`: the worker's future (boxed, holding the context) is made when this is
/// called, so the future returned holds that box alone, not the context a second time beside
/// it, and the run's task (its future is allocated once per execution) stays small.
fn run_catching_panics(
    worker: &dyn Worker,
    ctx: WorkerContext,
) -> impl Future<Output = WorkerResult> + Send + '_ {
    let run = AssertUnwindSafe(worker.run(ctx)).catch_unwind();
    async move {
        match run.await {
            Ok(result) => result,
            Err(payload) => trap(payload),
        }
    }
}

/// The activity trap of a worker's panic.
fn trap(payload: Box<dyn std::any::Any + Send>) -> WorkerResult {
    let reason = match payload.downcast::<String>() {
        Ok(message) => format!("worker panicked: {message}"),
        Err(payload) => match payload.downcast::<&str>() {
            Ok(message) => format!("worker panicked: {message}"),
            Err(_) => "worker panicked".to_string(),
        },
    };
    WorkerResult::Err(WorkerError::ActivityTrap {
        reason,
        detail: None,
    })
}

/// The permits of the limiter of an executor that was given none: two batches of
/// `batch_size` (0 counts as 1), within what a semaphore can hold.
fn own_bound(batch_size: usize) -> usize {
    batch_size
        .max(1)
        .saturating_mul(2)
        .min(Semaphore::MAX_PERMITS)
}

/// How many free permits of its own limiter of `bound` permits the loop waits for: half of
/// them (a batch), at least one.
fn own_lock_at(bound: usize) -> u32 {
    u32::try_from(bound / 2).unwrap_or(u32::MAX).max(1)
}

/// Up to `count` permits that are free right now, taken together.
fn take_free(limiter: &Arc<Semaphore>, count: usize) -> Permits {
    loop {
        let free = limiter.available_permits().min(count);
        let Ok(free @ 1..) = u32::try_from(free) else {
            return Permits::default();
        };
        match Arc::clone(limiter).try_acquire_many_owned(free) {
            Ok(permits) => return Permits(Some(permits)),
            // Another task took some since: look again.
            Err(TryAcquireError::NoPermits) => {}
            Err(TryAcquireError::Closed) => return Permits::default(),
        }
    }
}

/// One locked execution's run, not spawned: see [`ExecTask::lock_runs`].
pub struct Run {
    /// The locked execution.
    pub execution_id: ExecutionId,
    /// The worker, then its outcome write; it completes once the outcome was written (or the
    /// write given up).
    pub future: BoxFuture<'static, ()>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("execution_id", &self.execution_id)
            .finish_non_exhaustive()
    }
}

/// The executions one tick locked, with the tasks that run their workers and write their
/// outcomes.
#[derive(Debug, Default)]
pub struct ExecutionProgress {
    /// Each locked execution and its task.
    pub executions: Vec<(ExecutionId, JoinHandle<()>)>,
}

impl ExecutionProgress {
    /// The locked executions.
    #[must_use]
    pub fn execution_ids(&self) -> Vec<ExecutionId> {
        self.executions.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Waits until every worker ran and its outcome was written; returns the executions.
    pub async fn wait_for_tasks(self) -> Result<Vec<ExecutionId>, JoinError> {
        let mut ids = Vec::with_capacity(self.executions.len());
        for (id, task) in self.executions {
            task.await?;
            ids.push(id);
        }
        Ok(ids)
    }
}

/// A running executor loop.
///
/// [`ExecutorTaskHandle::drain`] stops it gracefully and waits for its runs until a
/// deadline; [`ExecutorTaskHandle::close`] stops only the loop, and the runs already spawned
/// go on in the background. Dropping the handle without either aborts the loop and logs a
/// warning; its runs go on as after `close`. A run that does not end (the process stops, or a
/// drain's deadline passes) leaves its lease to expire, and the timers watcher recovers it.
#[derive(Debug)]
pub struct ExecutorTaskHandle {
    executor_id: ExecutorId,
    closing: watch::Sender<bool>,
    join: Option<JoinHandle<()>>,
    ticks: Arc<AtomicU64>,
    runs: RunTasks,
    /// Its gauges, zeroed once it drained.
    meters: Arc<crate::metrics::Meters>,
}

/// What a drain did with the runs that were in flight when it began
/// ([`ExecutorTaskHandle::drain`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainOutcome {
    /// Runs that ended before the deadline: the worker returned and its outcome was written
    /// (or the write given up, see [`outcome_retry_pauses`]).
    pub finished: usize,
    /// Runs still going at the deadline, aborted at their next await point: each execution
    /// stays locked until its lease expires, and then the timers watcher (of this process or
    /// another) times it out, to be retried by whichever executor locks it next.
    pub left: usize,
}

impl ExecutorTaskHandle {
    /// Stops taking work and returns once the loop has ended (promptly: every wait of the loop
    /// is interrupted, a `lock_pending` in flight completes first). Runs already spawned keep
    /// running in the background and write their outcomes; nothing waits for them (see
    /// [`ExecutorTaskHandle::drain`]). Idempotent.
    pub async fn close(&mut self) {
        self.closing.send_replace(true);
        if let Some(join) = self.join.take()
            && let Err(err) = join.await
        {
            warn!(executor_id = %self.executor_id, "executor loop ended abnormally: {err}");
        }
    }

    /// A graceful stop: stops locking new executions at once, lets the runs in flight finish,
    /// their outcome writes included, until `timeout` has passed, then aborts the rest and
    /// returns how many ended and how many were left.
    ///
    /// An aborted run stops at its next await point and writes nothing more: its execution
    /// stays locked until the lease expires, and the timers watcher then times it out, to be
    /// retried by whichever executor locks it next (see [`DrainOutcome::left`]).
    ///
    /// The loop itself stops promptly; a `lock_pending` in flight when the drain begins
    /// completes first, and its runs are drained like the others, as are the runs that a
    /// reservation taken before the drain starts while it waits (a workflow's write in flight).
    /// Should that lock still be waiting for the store at the deadline, the loop is aborted
    /// with it: what it may have locked is counted in neither figure and is left to its lease.
    ///
    /// Runs that ended before the drain began are not counted. The deadline is measured on
    /// tokio's clock, so a test with paused time drains deterministically. Idempotent: a second
    /// drain (or one after [`ExecutorTaskHandle::close`]) drains what is still running.
    pub async fn drain(&mut self, timeout: Duration) -> DrainOutcome {
        let deadline = tokio::time::Instant::now() + timeout;
        lock_tasks(&self.runs).retain(|task| !task.is_finished());
        self.closing.send_replace(true);
        if let Some(mut join) = self.join.take() {
            match tokio::time::timeout_at(deadline, &mut join).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    warn!(executor_id = %self.executor_id, "executor loop ended abnormally: {err}");
                }
                Err(_elapsed) => {
                    join.abort();
                    let _ = join.await;
                    warn!(
                        executor_id = %self.executor_id,
                        "the executor loop had not stopped by the drain's deadline (a lock in \
                         flight, say); aborted, whatever it locked is left to its lease"
                    );
                }
            }
        }
        let mut running: FuturesUnordered<JoinHandle<()>> = FuturesUnordered::new();
        let mut finished = 0;
        let all_ended = async {
            // Runs handed over by a reservation taken before the loop ended (a workflow's
            // `append_batch` in flight) join the list while the drain waits: drain them too.
            loop {
                running.extend(std::mem::take(&mut *lock_tasks(&self.runs)));
                let Some(ended) = running.next().await else {
                    break;
                };
                finished += 1;
                if let Err(err) = ended {
                    warn!(executor_id = %self.executor_id, "a run ended abnormally: {err}");
                }
            }
        };
        let _ = tokio::time::timeout_at(deadline, all_ended).await;
        running.extend(std::mem::take(&mut *lock_tasks(&self.runs)));
        let left = running.len();
        for task in &running {
            task.abort();
        }
        // Each aborted run stops at its next await point; once every task has ended, nothing
        // of this executor writes any more.
        while running.next().await.is_some() {}
        if left > 0 {
            warn!(
                executor_id = %self.executor_id,
                "{left} runs did not end by the drain's deadline; their leases expire and the \
                 timers watcher recovers them"
            );
        }
        // Drained, it holds no run and starts none.
        self.meters.tick(0, 0);
        DrainOutcome { finished, left }
    }

    /// The executor's id.
    #[must_use]
    pub fn executor_id(&self) -> ExecutorId {
        self.executor_id
    }

    /// How many loop iterations started so far: a loop that waits properly ticks about once
    /// per batch of work or per `tick_sleep`, never in a tight spin.
    #[must_use]
    pub fn tick_count(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for ExecutorTaskHandle {
    fn drop(&mut self) {
        if let Some(join) = self.join.take() {
            if !join.is_finished() {
                warn!(executor_id = %self.executor_id, "executor dropped without `close`, aborting");
            }
            join.abort();
        }
    }
}

mod lost;
mod outcome;
mod served;
#[cfg(test)]
mod tests;

pub use outcome::{OUTCOME_WRITE_ATTEMPTS, outcome_retry_pauses, outcome_write_attempts};
use outcome::{RunEnd, end_of_run};
pub use served::LocallyServed;
