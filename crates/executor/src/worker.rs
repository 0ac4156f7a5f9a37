//! The worker contract: what a worker is given for one run ([`WorkerContext`]) and what it
//! reports back ([`WorkerResult`], [`WorkerError`], [`FatalError`]).

use crate::{cancel::Cancellation, local::LocalExecutors};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionId, ExecutionLog, ExecutionMetadata, FinishedExecutionError,
    FinishedExecutionResult, FunctionFqn, HistoryEvent, JoinSetResponseEventOuter, Json, Params,
    PermanentFailureKind, RunId, SupportedFunctionReturnValue, Version,
};

/// Runs the functions it exports, one execution at a time per call.
///
/// The executor calls [`Worker::run`] once per lock of an execution, in its own task, and turns
/// the returned [`WorkerResult`] into at most one write (see [`crate::map_worker_result`]).
/// Object safe: executors hold workers as `Arc<dyn Worker>`.
#[async_trait]
pub trait Worker: Send + Sync + 'static {
    /// Runs one execution until it finishes, fails, or gives up its run.
    async fn run(&self, ctx: WorkerContext) -> WorkerResult;

    /// The functions this worker runs; the executor locks executions of these only.
    fn exported_functions(&self) -> &[FunctionFqn];

    /// Whether an execution this worker parked ([`WorkerError::Parked`]) would get further if
    /// it ran now, judged from its `log` without a lease and without writing: [`Probe::Proceeds`]
    /// makes the prober ([`crate::unpark`]) unlock it, due at once. The default proceeds every
    /// time, so that a worker that parks without overriding this is simply run again at each
    /// probe; the workflow worker replays the log through its code and proceeds only once the
    /// replay no longer diverges.
    async fn probe(&self, log: &ExecutionLog) -> Probe {
        let _ = log;
        Probe::Proceeds
    }
}

/// What [`Worker::probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A run would get further now: unlock it.
    Proceeds,
    /// It would stop again, for this reason: leave it parked, write nothing.
    Stays(String),
}

/// Everything a worker is given for one run of one execution.
#[derive(Debug, Clone)]
pub struct WorkerContext {
    /// The execution.
    pub execution_id: ExecutionId,
    /// This run (a fresh one per lock).
    pub run_id: RunId,
    /// The submitter's string map (trace context).
    pub metadata: ExecutionMetadata,
    /// The function to run.
    pub ffqn: FunctionFqn,
    /// Its parameters.
    pub params: Params,
    /// The history recorded by earlier runs, in order (a workflow replays it).
    pub event_history: Vec<HistoryEvent>,
    /// The join set responses so far, in arrival order.
    pub responses: Vec<JoinSetResponseEventOuter>,
    /// The version the worker's next append must carry (the version after the `Locked` event).
    pub version: Version,
    /// When the lease expires: a result written after it may lose to the timers watcher.
    pub execution_deadline: DateTime<Utc>,
    /// True when a failure of this run will be retried.
    pub can_be_retried: bool,
    /// The failed or timed-out runs before this one (`TemporarilyFailed` and
    /// `TemporarilyTimedOut` events): 0 on the first attempt.
    pub temporary_event_count: u32,
    /// The span of this run; a worker that spawns its own tasks can enter it.
    pub worker_span: tracing::Span,
    /// Whether someone else finished the execution while this run works on it (see
    /// [`WorkerContext::cancelled`]).
    pub cancellation: Cancellation,
    /// The executors of this process on the same store: a worker that creates executions
    /// (a workflow's children) may create them under a lease of one of them and hand them
    /// over to run at once ([`LocalExecutors::reserve`]). Empty for a worker driven by hand.
    pub local_executors: LocalExecutors,
}

impl WorkerContext {
    /// Completes when the execution is finished by someone else while this run works on it
    /// (cancelled, or timed out by the watcher), with the result it was finished with.
    ///
    /// A long worker races its work against it and stops early:
    ///
    /// ```
    /// # use executor::{WorkerContext, WorkerError, WorkerResult};
    /// # async fn work() {}
    /// async fn run(ctx: WorkerContext) -> WorkerResult {
    ///     tokio::select! {
    ///         () = work() => WorkerResult::Ok(concepts::SupportedFunctionReturnValue::None, ctx.version),
    ///         // Whatever is returned now is refused and logged as a lost race.
    ///         _ = ctx.cancelled() => WorkerResult::Err(WorkerError::ActivityTrap {
    ///             reason: "cancelled".to_string(),
    ///             detail: None,
    ///         }),
    ///     }
    /// }
    /// # let _ = run;
    /// ```
    ///
    /// Nothing is asked of the store until the future is polled; see [`Cancellation`].
    pub fn cancelled(
        &self,
    ) -> impl std::future::Future<Output = FinishedExecutionResult> + Send + 'static {
        self.cancellation.cancelled(&self.execution_id)
    }
}

/// What a run ended with.
#[derive(Debug, Clone)]
pub enum WorkerResult {
    /// The function returned; `Finished(Ok(value))` is appended at the version.
    ///
    /// An activity passes the context's version; a workflow-style worker passes the version its
    /// own appends reached.
    Ok(SupportedFunctionReturnValue, Version),
    /// The worker wrote its own events (it gave up its run while awaiting a join set, say);
    /// the executor writes nothing.
    DbUpdatedByWorker,
    /// The run failed.
    Err(WorkerError),
}

/// How a run failed; each variant maps to one row of the executor's table.
///
/// Variants that activities produce carry no version: the executor appends at the context's
/// version. Variants that workflow-style workers produce carry the version they reached.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WorkerError {
    /// The worker gave up without writing; the lease will expire and the timers watcher acts.
    #[error("timed out; the timers watcher will act when the lease expires")]
    TemporaryTimeoutHandledByWatcher,
    /// The run timed out: `TemporarilyTimedOut`, or a permanent timeout without a retry left.
    #[error("timed out")]
    TemporaryTimeout,
    /// The activity trapped (panicked, failed).
    #[error("activity trap: {reason}")]
    ActivityTrap {
        /// The trap's message.
        reason: String,
        /// Extra detail (a backtrace, say).
        detail: Option<String>,
    },
    /// The activity returned its function's error variant.
    #[error("activity returned error: {value}")]
    ActivityReturnedError {
        /// The error value; the result of the execution when no retry is left.
        value: Json,
        /// Extra detail.
        detail: Option<String>,
    },
    /// A workflow trapped; retried like any failure (the fix may be a redeploy).
    #[error("workflow trap: {reason}")]
    TemporaryWorkflowTrap {
        /// The trap's message.
        reason: String,
        /// Extra detail.
        detail: Option<String>,
        /// The version the workflow's appends reached.
        version: Version,
    },
    /// The worker hit a limit (memory, concurrency); `Unlocked`, using up no retry.
    #[error("limit reached: {reason}")]
    LimitReached {
        /// Which limit.
        reason: String,
        /// The version the worker's appends reached.
        version: Version,
    },
    /// Running the execution again cannot get further until something changes (a workflow
    /// whose replay diverges from its log): it is parked, `Unlocked` until
    /// [`concepts::PARKED_UNTIL`] with the reason, one event however long it waits, using up
    /// no retry; the prober ([`crate::unpark`]) asks [`Worker::probe`] with a growing pause
    /// and unlocks it once it would proceed.
    #[error("parked: {reason}")]
    Parked {
        /// Why it cannot go on: written as the `Unlocked` event's reason, shown by `show`.
        reason: String,
        /// The version the worker's appends reached.
        version: Version,
    },
    /// An error no retry can fix; the execution finishes with it.
    #[error("fatal error: {0}")]
    FatalError(FatalError, Version),
    /// The worker could not reach the database; nothing is written and the lease expiry
    /// recovers the execution.
    #[error("database error: {0}")]
    DbError(DbError),
}

/// An error that finishes the execution at once, whatever its retries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FatalError {
    /// A child execution failed and the worker did not handle it.
    #[error("unhandled error of child execution {child_execution_id} (root cause {root_cause_id})")]
    UnhandledChildExecutionError {
        /// The child whose failure this is.
        child_execution_id: ExecutionId,
        /// The execution where the failure started.
        root_cause_id: ExecutionId,
    },
    /// The parameters could not be decoded into the function's arguments.
    #[error("cannot parse parameters: {reason}")]
    ParamsParsingError {
        /// Why.
        reason: String,
    },
    /// The function's output could not be encoded as its result.
    #[error("cannot parse result: {reason}")]
    ResultParsingError {
        /// Why.
        reason: String,
    },
    /// A workflow's replay diverged from its recorded history.
    #[error("nondeterminism detected: {reason}")]
    NondeterminismDetected {
        /// Where the replay diverged.
        reason: String,
    },
}

impl From<FatalError> for FinishedExecutionError {
    fn from(fatal: FatalError) -> Self {
        let reason_full = fatal.to_string();
        let (reason_inner, kind) = match fatal {
            FatalError::UnhandledChildExecutionError {
                child_execution_id,
                root_cause_id,
            } => {
                return FinishedExecutionError::UnhandledChildExecutionError {
                    child_execution_id,
                    root_cause_id,
                };
            }
            FatalError::ParamsParsingError { reason } => {
                (reason, PermanentFailureKind::ParamsParsingError)
            }
            FatalError::ResultParsingError { reason } => {
                (reason, PermanentFailureKind::ResultParsingError)
            }
            FatalError::NondeterminismDetected { reason } => {
                (reason, PermanentFailureKind::NondeterminismDetected)
            }
        };
        FinishedExecutionError::PermanentFailure {
            reason_inner,
            reason_full,
            kind,
            detail: None,
        }
    }
}
