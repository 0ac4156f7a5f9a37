//! Workers that run typed functions: [`WorkflowWorker`] for workflows, [`ActivityWorker`] for
//! activities. Both are ordinary [`executor::Worker`]s, run by `executor::ExecTask` unchanged.

use crate::{
    ctx::{Clock, Shared, WorkflowCtx},
    driver::{NondeterminismPolicy, Outcome, Probed, RunLimits, drive},
    error::{RegistrationError, WorkflowError},
    function::Function,
    state::{ChildDefaults, RunState},
    store::RunStore,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, ComponentId, DbConnection, ExecutionEventInner, ExecutionId, ExecutionLog,
    ExecutionMetadata, FinishedExecutionResult, FunctionFqn, Json, SupportedFunctionReturnValue,
};
use executor::{Cancellation, FatalError, Probe, Worker, WorkerContext, WorkerError, WorkerResult};
use futures_util::future::BoxFuture;
use serde::{Serialize, de::DeserializeOwned};
use std::{collections::HashMap, future::Future, sync::Arc, sync::Mutex, time::Duration};

pub(crate) type StartWorkflow =
    dyn Fn(WorkflowCtx, Json) -> Result<BoxFuture<'static, Outcome>, String> + Send + Sync;

/// A registered workflow: how a run starts it, and the histogram of the events its runs
/// replay, registered at its first sample.
struct Registered {
    start: Arc<StartWorkflow>,
    replayed: std::sync::OnceLock<metrics::Histogram>,
}

pub(crate) fn register_name<P, R>(
    ffqns: &[FunctionFqn],
    function: &Function<P, R>,
) -> Result<FunctionFqn, RegistrationError> {
    let ffqn = function
        .ffqn()
        .map_err(|source| RegistrationError::InvalidName {
            name: function.name(),
            source,
        })?;
    if ffqns.contains(&ffqn) {
        return Err(RegistrationError::Duplicate(function.name()));
    }
    Ok(ffqn)
}

fn encode<T: Serialize>(value: T) -> Result<Json, String> {
    serde_json::to_value(value)
        .map(Json)
        .map_err(|err| err.to_string())
}

/// Runs workflows: `async fn(WorkflowCtx, P) -> Result<R, WorkflowError<E>>`.
///
/// Each run replays the execution's recorded history through the workflow's code, records
/// what comes after, and waits for responses warm (in memory, until shortly before the lease
/// ends) or cold (it gives up the run when the wait would outlast the lease).
pub struct WorkflowWorker<C: ClockFn> {
    db: Arc<dyn DbConnection>,
    clock: C,
    ffqns: Vec<FunctionFqn>,
    workflows: HashMap<FunctionFqn, Registered>,
    policy: NondeterminismPolicy,
    children: ChildDefaults,
    warm_margin: u32,
}

impl<C: ClockFn> WorkflowWorker<C> {
    /// A worker writing to `db`, reading time from `clock`. Children are created in component
    /// `activity:default` with 3 retries and a one-second first backoff until
    /// [`WorkflowWorker::child_settings`] says otherwise.
    ///
    /// # Panics
    /// Never: the default component id is legal.
    #[must_use]
    pub fn new(db: Arc<dyn DbConnection>, clock: C) -> Self {
        Self {
            db,
            clock,
            ffqns: Vec::new(),
            workflows: HashMap::new(),
            policy: NondeterminismPolicy::default(),
            children: ChildDefaults {
                component_id: ComponentId::new("activity", "default")
                    .expect("a legal component id"),
                max_retries: 3,
                retry_exp_backoff: Duration::from_secs(1),
            },
            warm_margin: 10,
        }
    }

    /// What a replay that diverges from the log leads to.
    #[must_use]
    pub fn nondeterminism_policy(mut self, policy: NondeterminismPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How the children of these workflows are created: their component, retries and first
    /// backoff.
    #[must_use]
    pub fn child_settings(
        mut self,
        component_id: ComponentId,
        max_retries: u32,
        retry_exp_backoff: Duration,
    ) -> Self {
        self.children = ChildDefaults {
            component_id,
            max_retries,
            retry_exp_backoff,
        };
        self
    }

    /// Registers the workflow `function` runs.
    ///
    /// # Errors
    /// The handle's name is illegal, or already registered on this worker.
    pub fn register<P, R, E, F, Fut>(
        mut self,
        function: &Function<P, R>,
        workflow: F,
    ) -> Result<Self, RegistrationError>
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        E: Serialize + Send + 'static,
        F: Fn(WorkflowCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, WorkflowError<E>>> + Send + 'static,
    {
        let ffqn = register_name(&self.ffqns, function)?;
        let start = workflow_start(workflow);
        self.ffqns.push(ffqn.clone());
        let registered = Registered {
            start: Arc::new(start),
            replayed: std::sync::OnceLock::new(),
        };
        self.workflows.insert(ffqn, registered);
        Ok(self)
    }

    fn limits(&self, ctx: &WorkerContext, start: DateTime<Utc>) -> RunLimits {
        let lease = (ctx.execution_deadline - start)
            .to_std()
            .unwrap_or_default();
        let margin = lease / self.warm_margin;
        RunLimits {
            version: ctx.version,
            deadline: ctx.execution_deadline,
            give_up_at: concepts::sub_saturating(ctx.execution_deadline, margin),
            wait_slice: Duration::from_secs(1),
            policy: self.policy,
        }
    }
}

/// Erases a typed workflow into the function the worker starts each run with: it decodes the
/// parameters, runs the workflow, closes its join sets and encodes its outcome.
pub(crate) fn workflow_start<P, R, E, F, Fut>(
    workflow: F,
) -> impl Fn(WorkflowCtx, Json) -> Result<BoxFuture<'static, Outcome>, String> + Send + Sync + 'static
where
    P: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    E: Serialize + Send + 'static,
    F: Fn(WorkflowCtx, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, WorkflowError<E>>> + Send + 'static,
{
    move |ctx: WorkflowCtx, params: Json| {
        let params = P::deserialize(&params.0).map_err(|err| err.to_string())?;
        let future = workflow(ctx.clone(), params);
        let run: BoxFuture<'static, Outcome> = Box::pin(async move {
            let returned = future.await;
            let unhandled = ctx.close_join_sets().await;
            if let Some(child) = unhandled {
                return unhandled_child(&child);
            }
            match returned {
                Ok(value) => encode(value).map_or_else(Outcome::Trap, Outcome::Value),
                Err(WorkflowError::Failed(err)) => {
                    encode(err).map_or_else(Outcome::Trap, Outcome::Failed)
                }
                Err(WorkflowError::Child(child)) => unhandled_child(&child),
            }
        });
        Ok(run)
    }
}

fn unhandled_child(child: &crate::error::ChildError) -> Outcome {
    Outcome::UnhandledChild {
        child_execution_id: child.child_execution_id.clone(),
        root_cause_id: child.root_cause_id().clone(),
    }
}

#[async_trait]
impl<C: ClockFn> Worker for WorkflowWorker<C> {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let Some(Registered { start, replayed }) = self.workflows.get(&ctx.ffqn) else {
            return WorkerResult::Err(WorkerError::TemporaryWorkflowTrap {
                reason: format!("no workflow {} is registered on this worker", ctx.ffqn),
                detail: None,
                version: ctx.version,
            });
        };
        if concepts::metrics::enabled() {
            // Registered at the first run that records: after the program installed its
            // recorder, which it does before it turns recording on.
            let histogram = replayed.get_or_init(|| {
                let function = ctx.ffqn.to_string();
                metrics::histogram!(concepts::metrics::EVENTS_REPLAYED, concepts::metrics::FUNCTION => function)
            });
            #[expect(clippy::cast_precision_loss, reason = "a count of events")]
            histogram.record(ctx.event_history.len() as f64);
        }
        let start = start.clone();
        let clock = self.clock.clone();
        let clock: Clock = Arc::new(move || clock.now());
        let limits = self.limits(&ctx, clock());
        let state = RunState::new(
            ctx.execution_id.clone(),
            ctx.run_id,
            ctx.metadata.clone(),
            self.children.clone(),
            ctx.event_history,
            ctx.responses,
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            clock,
        });
        let future = match start(WorkflowCtx::new(shared.clone()), ctx.params) {
            Ok(future) => future,
            Err(reason) => {
                let fatal = FatalError::ParamsParsingError {
                    reason: format!("{} expects other parameters: {reason}", ctx.ffqn),
                };
                return WorkerResult::Err(WorkerError::FatalError(fatal, ctx.version));
            }
        };
        let io = RunStore {
            db: self.db.clone(),
            execution_id: ctx.execution_id,
            cancellation: ctx.cancellation,
            local: ctx.local_executors,
            answers: tokio::sync::Mutex::default(),
        };
        let result = drive(shared, future, &io, limits).await;
        io.settle(result).await
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }

    /// Replays the parked execution's log through the code registered now, without a lease
    /// and without writing: it proceeds once the replay agrees with every recorded event it
    /// reaches (see [`NondeterminismPolicy::Park`]).
    async fn probe(&self, log: &ExecutionLog) -> Probe {
        let Some(concepts::Created { ffqn, params, .. }) =
            log.events.first().and_then(|event| event.event.created())
        else {
            return Probe::Stays("the log has no `Created` event".to_string());
        };
        let Some(start) = self
            .workflows
            .get(ffqn)
            .map(|registered| registered.start.clone())
        else {
            return Probe::Stays(format!("no workflow {ffqn} is registered on this worker"));
        };
        let history = crate::replay::history_of(&log.events);
        let requested = crate::state::child_requests(&history);
        let children = match crate::store::children_created(self.db.as_ref(), requested).await {
            Ok(children) => children,
            Err(err) => return Probe::Stays(format!("its children cannot be read: {err}")),
        };
        let probed = crate::replay::probe_log(
            start.as_ref(),
            log,
            history,
            params.clone(),
            children,
            self.children.clone(),
        );
        match probed {
            // Parameters this code cannot decode: a run finishes it with that error.
            Err(_) | Ok(Probed::Agrees) => Probe::Proceeds,
            Ok(Probed::Diverges(fault)) => match crate::replay::nondeterminism(log, fault) {
                crate::ReplayError::Nondeterminism { reason, .. } => Probe::Stays(reason),
                other => Probe::Stays(other.to_string()),
            },
        }
    }
}

/// The version of the `index`-th history event of `log`.
pub(crate) fn history_version(log: &ExecutionLog, index: usize) -> Option<concepts::Version> {
    let position = (log.events.iter().enumerate())
        .filter(|(_, event)| matches!(event.event, ExecutionEventInner::HistoryEvent { .. }))
        .nth(index)?
        .0;
    u32::try_from(position).ok().map(concepts::Version)
}

/// What an activity is told about its run.
#[derive(Debug, Clone)]
pub struct ActivityCtx {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The submitter's string map (trace context).
    pub metadata: ExecutionMetadata,
    /// Failed or timed-out attempts before this one: 0 on the first.
    pub attempt: u32,
    /// When the lease ends: work finished later may lose to the timers watcher.
    pub deadline: DateTime<Utc>,
    /// The executor's watch on the execution's end (see [`ActivityCtx::cancelled`]).
    pub cancellation: Cancellation,
}

impl ActivityCtx {
    /// Completes when the execution is finished by someone else while the activity runs
    /// (cancelled, or timed out by the watcher), with the result it was finished with: a long
    /// activity races its work against it and stops early. Whatever it returns afterwards is
    /// refused like any stale writer's write, and logged by the executor as a lost race.
    ///
    /// ```
    /// use workflow::ActivityCtx;
    /// # async fn download(_url: &str) -> Result<u64, String> { Ok(0) }
    /// async fn fetch(ctx: ActivityCtx, url: String) -> Result<u64, String> {
    ///     tokio::select! {
    ///         bytes = download(&url) => bytes,
    ///         finished = ctx.cancelled() => Err(format!("stopped: {finished:?}")),
    ///     }
    /// }
    /// # let _ = fetch;
    /// ```
    ///
    /// Nothing is asked of the store until the future is polled.
    pub fn cancelled(&self) -> impl Future<Output = FinishedExecutionResult> + Send + 'static {
        self.cancellation.cancelled(&self.execution_id)
    }
}

type StartActivity = dyn Fn(ActivityCtx, Json) -> Result<BoxFuture<'static, Result<Result<Json, Json>, String>>, String>
    + Send
    + Sync;

/// Runs activities: `async fn(ActivityCtx, P) -> Result<R, E>`.
///
/// `Ok` finishes the execution with the value. `Err(e)` is retried with backoff while retries
/// are left, and then finishes it with `e` as its `FallibleResultErr`. A panic is a trap,
/// retried while retries are left (the executor catches it).
#[derive(Default)]
pub struct ActivityWorker {
    ffqns: Vec<FunctionFqn>,
    activities: HashMap<FunctionFqn, Arc<StartActivity>>,
}

impl ActivityWorker {
    /// A worker with no activity yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the activity `function` runs.
    ///
    /// # Errors
    /// The handle's name is illegal, or already registered on this worker.
    pub fn register<P, R, E, F, Fut>(
        mut self,
        function: &Function<P, R>,
        activity: F,
    ) -> Result<Self, RegistrationError>
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        E: Serialize + Send + 'static,
        F: Fn(ActivityCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
    {
        let ffqn = register_name(&self.ffqns, function)?;
        let start = move |ctx: ActivityCtx, params: Json| {
            let params = P::deserialize(&params.0).map_err(|err| err.to_string())?;
            let future = activity(ctx, params);
            let run: BoxFuture<'static, _> = Box::pin(async move {
                match future.await {
                    Ok(value) => encode(value).map(Ok),
                    Err(err) => encode(err).map(Err),
                }
            });
            Ok(run)
        };
        self.ffqns.push(ffqn.clone());
        self.activities.insert(ffqn, Arc::new(start));
        Ok(self)
    }
}

#[async_trait]
impl Worker for ActivityWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let Some(start) = self.activities.get(&ctx.ffqn).cloned() else {
            return WorkerResult::Err(WorkerError::ActivityTrap {
                reason: format!("no activity {} is registered on this worker", ctx.ffqn),
                detail: None,
            });
        };
        let activity_ctx = ActivityCtx {
            execution_id: ctx.execution_id.clone(),
            metadata: ctx.metadata.clone(),
            attempt: ctx.temporary_event_count,
            deadline: ctx.execution_deadline,
            cancellation: ctx.cancellation,
        };
        let future = match start(activity_ctx, ctx.params) {
            Ok(future) => future,
            Err(reason) => {
                let fatal = FatalError::ParamsParsingError {
                    reason: format!("{} expects other parameters: {reason}", ctx.ffqn),
                };
                return WorkerResult::Err(WorkerError::FatalError(fatal, ctx.version));
            }
        };
        match future.await {
            Ok(Ok(value)) => WorkerResult::Ok(
                SupportedFunctionReturnValue::InfallibleOrResultOk(value),
                ctx.version,
            ),
            Ok(Err(value)) => WorkerResult::Err(WorkerError::ActivityReturnedError {
                value,
                detail: None,
            }),
            Err(reason) => {
                let fatal = FatalError::ResultParsingError {
                    reason: format!("{} returned a value that is not JSON: {reason}", ctx.ffqn),
                };
                WorkerResult::Err(WorkerError::FatalError(fatal, ctx.version))
            }
        }
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}
