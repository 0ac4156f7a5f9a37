//! Test workers of the executor scenarios: scripted results, runs that hang until released,
//! a concurrency counter, a parent that awaits a child, and durable sleepers.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, ClockFn, ClosingStrategy, ComponentId, CreateRequest, DbConnection,
    DelayId, ExecutionEventInner, ExecutionId, FinishedExecutionError, FunctionFqn, HistoryEvent,
    JoinSetId, JoinSetRequest, JoinSetResponse, Json, PersistKind, SupportedFunctionReturnValue,
    add_saturating,
};
use executor::{FatalError, Worker, WorkerContext, WorkerError, WorkerResult};
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};
use test_utils::SimClock;
use tokio::sync::{Semaphore, mpsc};

/// One scripted outcome of a run; activity outcomes use the context's version.
#[derive(Debug, Clone)]
pub enum Step {
    /// Returns this value.
    Ok(Json),
    /// Traps with this reason and detail `Some("detail of <reason>")`.
    Trap(&'static str),
    /// Returns the function's error variant with this value.
    ReturnedError(Json),
    /// Times out by itself.
    Timeout,
    /// Gives up and leaves the timeout to the watcher.
    TimeoutHandledByWatcher,
    /// Hits a limit with this reason.
    LimitReached(&'static str),
    /// Fails fatally.
    Fatal(FatalError),
}

impl Step {
    /// The result this step reports for a run with `ctx`.
    #[must_use]
    pub fn result(&self, ctx: &WorkerContext) -> WorkerResult {
        let error = match self {
            Self::Ok(value) => {
                let value = SupportedFunctionReturnValue::InfallibleOrResultOk(value.clone());
                return WorkerResult::Ok(value, ctx.version);
            }
            Self::Trap(reason) => WorkerError::ActivityTrap {
                reason: (*reason).to_string(),
                detail: Some(format!("detail of {reason}")),
            },
            Self::ReturnedError(value) => WorkerError::ActivityReturnedError {
                value: value.clone(),
                detail: None,
            },
            Self::Timeout => WorkerError::TemporaryTimeout,
            Self::TimeoutHandledByWatcher => WorkerError::TemporaryTimeoutHandledByWatcher,
            Self::LimitReached(reason) => WorkerError::LimitReached {
                reason: (*reason).to_string(),
                version: ctx.version,
            },
            Self::Fatal(fatal) => WorkerError::FatalError(fatal.clone(), ctx.version),
        };
        WorkerResult::Err(error)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Run n (counting from 0, over all executions) reports `steps[n]`, or the last step once the
/// script is used up. Records every context it was given.
pub struct ScriptedWorker {
    ffqns: Vec<FunctionFqn>,
    steps: Vec<Step>,
    contexts: Mutex<Vec<WorkerContext>>,
    work: Option<(SimClock, Duration)>,
}

impl ScriptedWorker {
    /// A worker of `ffqn` that follows `steps` (at least one).
    #[must_use]
    pub fn new(ffqn: FunctionFqn, steps: Vec<Step>) -> Self {
        assert!(!steps.is_empty(), "a script needs at least one step");
        Self {
            ffqns: vec![ffqn],
            steps,
            contexts: Mutex::default(),
            work: None,
        }
    }

    /// Each run moves `clock` forward by `duration`, as if the work took that long.
    #[must_use]
    pub fn with_work_duration(mut self, clock: SimClock, duration: Duration) -> Self {
        self.work = Some((clock, duration));
        self
    }

    /// The contexts of the runs so far, in order.
    #[must_use]
    pub fn contexts(&self) -> Vec<WorkerContext> {
        lock(&self.contexts).clone()
    }
}

#[async_trait]
impl Worker for ScriptedWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let run = {
            let mut contexts = lock(&self.contexts);
            contexts.push(ctx.clone());
            contexts.len() - 1
        };
        if let Some((clock, duration)) = &self.work {
            clock.move_time_forward_sync(*duration);
        }
        self.steps[run.min(self.steps.len() - 1)].result(&ctx)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// Announces each run, then hangs until the test releases it, then returns `Ok` at the
/// context's version.
pub struct GatedWorker {
    ffqns: Vec<FunctionFqn>,
    started_tx: mpsc::UnboundedSender<WorkerContext>,
    started_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<WorkerContext>>,
    release: Semaphore,
}

impl GatedWorker {
    /// A worker of `ffqn`.
    #[must_use]
    pub fn new(ffqn: FunctionFqn) -> Self {
        let (started_tx, started_rx) = mpsc::unbounded_channel();
        Self {
            ffqns: vec![ffqn],
            started_tx,
            started_rx: tokio::sync::Mutex::new(started_rx),
            release: Semaphore::new(0),
        }
    }

    /// The context of the next run that started, waiting for it up to `safety`.
    ///
    /// # Panics
    /// When no run starts within `safety`.
    pub async fn next_started(&self, safety: Duration) -> WorkerContext {
        let mut started = self.started_rx.lock().await;
        tokio::time::timeout(safety, started.recv())
            .await
            .expect("a run starts")
            .expect("the worker keeps its sender")
    }

    /// Lets one hanging run return.
    pub fn release_one(&self) {
        self.release.add_permits(1);
    }
}

#[async_trait]
impl Worker for GatedWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let _ = self.started_tx.send(ctx.clone());
        match self.release.acquire().await {
            Ok(permit) => permit.forget(),
            Err(closed) => {
                return WorkerResult::Err(WorkerError::ActivityTrap {
                    reason: closed.to_string(),
                    detail: None,
                });
            }
        }
        WorkerResult::Ok(SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// Counts runs per execution and how many run at once; each run takes `hold` of real time
/// (the work a permit of the task limiter is held for), then returns `Ok`.
pub struct CountingWorker {
    ffqns: Vec<FunctionFqn>,
    hold: Duration,
    running: AtomicUsize,
    max_running: AtomicUsize,
    runs: Mutex<HashMap<ExecutionId, u32>>,
}

impl CountingWorker {
    /// A worker of `ffqn` whose runs take `hold`.
    #[must_use]
    pub fn new(ffqn: FunctionFqn, hold: Duration) -> Self {
        Self {
            ffqns: vec![ffqn],
            hold,
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            runs: Mutex::default(),
        }
    }

    /// The most runs that were in progress at the same time.
    #[must_use]
    pub fn max_running(&self) -> usize {
        self.max_running.load(Ordering::SeqCst)
    }

    /// How many times each execution ran.
    #[must_use]
    pub fn runs(&self) -> HashMap<ExecutionId, u32> {
        lock(&self.runs).clone()
    }
}

#[async_trait]
impl Worker for CountingWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(running, Ordering::SeqCst);
        *lock(&self.runs)
            .entry(ctx.execution_id.clone())
            .or_default() += 1;
        if !self.hold.is_zero() {
            tokio::time::sleep(self.hold).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        WorkerResult::Ok(SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// The join set the parent worker submits its child into.
///
/// # Panics
/// Never: the id is fixed and legal.
#[must_use]
pub fn child_join_set() -> JoinSetId {
    "n:child".parse().expect("legal join set id")
}

/// A workflow-style parent. Its first run opens a join set, creates one child of
/// `child_ffqn` in the same transaction, and gives up its run on `JoinNext` (returning
/// `DbUpdatedByWorker`). Its next run finds the child's response: a child's value becomes its
/// own; a child's error is unhandled (a fatal error carrying the root cause).
pub struct ParentWorker {
    ffqns: Vec<FunctionFqn>,
    child_ffqn: FunctionFqn,
    child_max_retries: u32,
    db: Arc<dyn DbConnection>,
    clock: SimClock,
}

impl ParentWorker {
    /// A parent of `ffqn` whose child runs `child_ffqn` with `child_max_retries`.
    #[must_use]
    pub fn new(
        ffqn: FunctionFqn,
        child_ffqn: FunctionFqn,
        child_max_retries: u32,
        db: Arc<dyn DbConnection>,
        clock: SimClock,
    ) -> Self {
        Self {
            ffqns: vec![ffqn],
            child_ffqn,
            child_max_retries,
            db,
            clock,
        }
    }

    /// The id of the child of `parent`.
    #[must_use]
    pub fn child_of(parent: &ExecutionId) -> ExecutionId {
        parent.next_level(&child_join_set(), 1)
    }

    async fn submit_child(&self, ctx: &WorkerContext) -> WorkerResult {
        let now = self.clock.now();
        let join_set_id = child_join_set();
        let child_execution_id = Self::child_of(&ctx.execution_id);
        let batch = history(vec![
            HistoryEvent::JoinSetCreate {
                join_set_id: join_set_id.clone(),
                closing_strategy: ClosingStrategy::Complete,
            },
            HistoryEvent::JoinSetRequest {
                join_set_id: join_set_id.clone(),
                request: JoinSetRequest::ChildExecutionRequest {
                    child_execution_id: child_execution_id.clone(),
                },
            },
            HistoryEvent::JoinNext {
                join_set_id: join_set_id.clone(),
                run_expires_at: now,
                closing: false,
            },
        ]);
        let child = CreateRequest {
            created_at: now,
            execution_id: child_execution_id,
            ffqn: self.child_ffqn.clone(),
            params: Json(serde_json::json!([])),
            parent: Some((ctx.execution_id.clone(), join_set_id)),
            scheduled_at: now,
            retry_exp_backoff: Duration::from_secs(1),
            max_retries: self.child_max_retries,
            component_id: test_component_id(),
            metadata: ctx.metadata.clone(),
            scheduled_by: None,
        };
        let req = AppendBatchRequest {
            execution_id: ctx.execution_id.clone(),
            version: ctx.version,
            now,
            events: batch,
            children: vec![child],
            leases: Vec::new(),
            answers: Vec::new(),
        };
        match self.db.append_batch(req).await {
            Ok(_) => WorkerResult::DbUpdatedByWorker,
            Err(err) => WorkerResult::Err(WorkerError::DbError(err)),
        }
    }
}

#[async_trait]
impl Worker for ParentWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let child_result = ctx
            .responses
            .iter()
            .find_map(|response| match &response.event.event {
                JoinSetResponse::ChildExecutionFinished {
                    child_execution_id,
                    result,
                    ..
                } if response.event.join_set_id == child_join_set() => {
                    Some((child_execution_id.clone(), result.clone()))
                }
                _ => None,
            });
        match child_result {
            Some((_, Ok(value))) => WorkerResult::Ok(value, ctx.version),
            Some((child_execution_id, Err(error))) => {
                let root_cause_id = match error {
                    FinishedExecutionError::UnhandledChildExecutionError {
                        root_cause_id, ..
                    } => root_cause_id,
                    _ => child_execution_id.clone(),
                };
                let fatal = FatalError::UnhandledChildExecutionError {
                    child_execution_id,
                    root_cause_id,
                };
                WorkerResult::Err(WorkerError::FatalError(fatal, ctx.version))
            }
            None if ctx.event_history.is_empty() => self.submit_child(&ctx).await,
            None => {
                let reason = "replayed before the child responded".to_string();
                let fatal = FatalError::NondeterminismDetected { reason };
                WorkerResult::Err(WorkerError::FatalError(fatal, ctx.version))
            }
        }
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// A durable sleeper. Its first run requests a delay of `sleep` in join set `o:sleep` and gives
/// up its run on `JoinNext`; its next run finds `DelayFinished` and returns `Ok`.
pub struct SleepingWorker {
    ffqns: Vec<FunctionFqn>,
    sleep: Duration,
    db: Arc<dyn DbConnection>,
    clock: SimClock,
}

impl SleepingWorker {
    /// A sleeper of `ffqn`.
    #[must_use]
    pub fn new(
        ffqn: FunctionFqn,
        sleep: Duration,
        db: Arc<dyn DbConnection>,
        clock: SimClock,
    ) -> Self {
        Self {
            ffqns: vec![ffqn],
            sleep,
            db,
            clock,
        }
    }

    /// The join set of the delay.
    ///
    /// # Panics
    /// Never: the id is fixed and legal.
    #[must_use]
    pub fn join_set() -> JoinSetId {
        "o:sleep".parse().expect("legal join set id")
    }

    /// When the delay requested at `now` expires.
    #[must_use]
    pub fn expires_at(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        add_saturating(now, self.sleep)
    }
}

#[async_trait]
impl Worker for SleepingWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let woke = ctx.responses.iter().any(|response| {
            response.event.join_set_id == Self::join_set()
                && matches!(response.event.event, JoinSetResponse::DelayFinished { .. })
        });
        if woke {
            return WorkerResult::Ok(SupportedFunctionReturnValue::None, ctx.version);
        }
        let now = self.clock.now();
        let join_set_id = Self::join_set();
        let batch = history(vec![
            HistoryEvent::JoinSetCreate {
                join_set_id: join_set_id.clone(),
                closing_strategy: ClosingStrategy::Complete,
            },
            HistoryEvent::JoinSetRequest {
                join_set_id: join_set_id.clone(),
                request: JoinSetRequest::DelayRequest {
                    delay_id: DelayId::generate_at(now),
                    expires_at: self.expires_at(now),
                },
            },
            HistoryEvent::JoinNext {
                join_set_id,
                run_expires_at: now,
                closing: false,
            },
        ]);
        let req = AppendBatchRequest {
            execution_id: ctx.execution_id.clone(),
            version: ctx.version,
            now,
            events: batch,
            children: Vec::new(),
            leases: Vec::new(),
            answers: Vec::new(),
        };
        match self.db.append_batch(req).await {
            Ok(_) => WorkerResult::DbUpdatedByWorker,
            Err(err) => WorkerResult::Err(WorkerError::DbError(err)),
        }
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// Records a `Persist` by itself and reports `DbUpdatedByWorker`.
pub struct PersistingWorker {
    ffqns: Vec<FunctionFqn>,
    db: Arc<dyn DbConnection>,
    clock: SimClock,
}

impl PersistingWorker {
    /// A worker of `ffqn`.
    #[must_use]
    pub fn new(ffqn: FunctionFqn, db: Arc<dyn DbConnection>, clock: SimClock) -> Self {
        Self {
            ffqns: vec![ffqn],
            db,
            clock,
        }
    }

    /// The event it appends.
    #[must_use]
    pub fn persisted() -> ExecutionEventInner {
        ExecutionEventInner::HistoryEvent {
            event: HistoryEvent::Persist {
                value: Json(serde_json::json!(7)),
                kind: PersistKind::Custom("lucky number".to_string()),
            },
        }
    }
}

#[async_trait]
impl Worker for PersistingWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let req = AppendBatchRequest {
            execution_id: ctx.execution_id.clone(),
            version: ctx.version,
            now: self.clock.now(),
            events: vec![Self::persisted()],
            children: Vec::new(),
            leases: Vec::new(),
            answers: Vec::new(),
        };
        match self.db.append_batch(req).await {
            Ok(_) => WorkerResult::DbUpdatedByWorker,
            Err(err) => WorkerResult::Err(WorkerError::DbError(err)),
        }
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

fn history(events: Vec<HistoryEvent>) -> Vec<ExecutionEventInner> {
    events
        .into_iter()
        .map(|event| ExecutionEventInner::HistoryEvent { event })
        .collect()
}

/// The component of the test executors and of the children the test workers create.
///
/// # Panics
/// Never: the id is fixed and legal.
#[must_use]
pub fn test_component_id() -> ComponentId {
    "activity:test".parse().expect("legal component id")
}
