//! [`NodeBuilder`]: what a node runs, collected, checked and started in one call.

use crate::{
    catalog::{Catalog, CatalogFunction, ExecutionDefaults},
    error::NodeError,
    node::{Background, BackgroundContext, ExecutorInfo, Node, RunningExecutor, ShutdownSignal},
    settings::{DEFAULT_WATCHER, ExecutorSettings, WorkerKind, pruner_config},
};
use concepts::{
    ClockFn, ComponentId, DbConnection, DbExecutor, ExecutorId, FunctionFqn, schedule::Definition,
};
use executor::{ExecConfig, ExecTask, LocalExecutors, Worker};
use futures_util::future::BoxFuture;
use serde::{Serialize, de::DeserializeOwned};
use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};
use timers_watcher::{Pruner, PrunerConfig, TimersWatcherConfig};
use tokio::sync::{Semaphore, watch};
use workflow::{
    ActivityCtx, ActivityWorker, Function, NondeterminismPolicy, WorkflowCtx, WorkflowError,
    WorkflowWorker,
};

/// A worker given to the builder, with its executor's settings and, if not the node's store,
/// the store its executor goes through.
struct WorkerEntry {
    kind: WorkerKind,
    worker: Arc<dyn Worker>,
    settings: ExecutorSettings,
    store: Option<Arc<dyn DbExecutor>>,
}

impl WorkerEntry {
    /// The component its executor writes into its `Locked` events.
    fn component_id(&self) -> ComponentId {
        self.settings
            .component_id
            .clone()
            .unwrap_or_else(|| self.kind.default_component())
    }
}

/// How the children of the node's own workflows are created.
#[derive(Debug, Clone)]
struct ChildSettings {
    component_id: ComponentId,
    max_retries: u32,
    retry_exp_backoff: Duration,
}

/// A background task given to [`NodeBuilder::background`] or
/// [`NodeBuilder::background_service`], not started yet.
type StartBackground<C> = Box<dyn FnOnce(BackgroundContext<C>) -> BoxFuture<'static, ()> + Send>;

/// What the node's catalog is built from, besides its workers.
#[derive(Debug, Clone, Default)]
struct CatalogParts {
    /// The checks of the typed registrations, by function (their settings are filled in by
    /// `start`, which knows each executor's component).
    typed: HashMap<FunctionFqn, CatalogFunction>,
    /// The retries of the node's functions' new executions, when not the default.
    retries: Option<(u32, Duration)>,
    /// Entries given whole, replacing the derived ones.
    described: Vec<CatalogFunction>,
    /// The settings of a function the node does not run.
    unknown: Option<ExecutionDefaults>,
}

/// Collects what a node runs; [`NodeBuilder::start`] checks it all and starts it. Made by
/// [`Node::builder`].
///
/// Every method takes and returns the builder, so a node is one chain; a mistake (a function
/// registered twice, say) is kept and returned by `start`, which then starts nothing.
pub struct NodeBuilder<C: ClockFn> {
    db: Arc<dyn DbConnection>,
    clock: C,
    activities: Option<ActivityWorker>,
    activity_settings: ExecutorSettings,
    workflows: Option<WorkflowWorker<C>>,
    workflow_settings: ExecutorSettings,
    children: Option<ChildSettings>,
    policy: Option<NondeterminismPolicy>,
    workers: Vec<WorkerEntry>,
    concurrency: Option<usize>,
    watcher: Option<TimersWatcherConfig>,
    pruner: Option<PrunerConfig>,
    background: Vec<(&'static str, StartBackground<C>)>,
    catalog: CatalogParts,
    /// Schedules the node keeps stored ([`NodeBuilder::schedule`]).
    schedules: Vec<Definition>,
    /// The node's name across restarts ([`NodeBuilder::identity`]).
    identity: Option<String>,
    /// The first mistake a method found; `start` returns it.
    error: Option<NodeError>,
}

impl<C: ClockFn> std::fmt::Debug for NodeBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("workers", &self.workers.len())
            .field("concurrency", &self.concurrency)
            .field("watcher", &self.watcher)
            .field("pruner", &self.pruner)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<C: ClockFn> NodeBuilder<C> {
    pub(crate) fn new(db: Arc<dyn DbConnection>, clock: C) -> Self {
        Self {
            db,
            clock,
            activities: None,
            activity_settings: ExecutorSettings::default(),
            workflows: None,
            workflow_settings: ExecutorSettings::default(),
            children: None,
            policy: None,
            workers: Vec::new(),
            concurrency: None,
            watcher: Some(DEFAULT_WATCHER),
            pruner: None,
            background: Vec::new(),
            catalog: CatalogParts::default(),
            schedules: Vec::new(),
            identity: None,
            error: None,
        }
    }

    /// Keeps the first mistake for `start`.
    fn fail(&mut self, error: NodeError) {
        self.error.get_or_insert(error);
    }

    /// Registers an activity, `async fn(ActivityCtx, P) -> Result<R, E>`, on the node's
    /// activity worker: one executor runs every activity registered this way, with the
    /// settings of [`NodeBuilder::activity_settings`].
    ///
    /// `Ok` finishes the execution with the value; `Err` is retried with backoff while retries
    /// are left, and then is the execution's error (see `workflow::ActivityWorker`).
    #[must_use]
    pub fn activity<P, R, E, F, Fut>(mut self, function: &Function<P, R>, activity: F) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        E: Serialize + Send + 'static,
        F: Fn(ActivityCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
    {
        let worker = self.activities.take().unwrap_or_default();
        match worker.register(function, activity) {
            Ok(worker) => self.activities = Some(worker),
            Err(err) => self.fail(err.into()),
        }
        self.record_params(function);
        self
    }

    /// Keeps the check of `function`'s parameters for the catalog.
    fn record_params<P: DeserializeOwned + 'static, R>(&mut self, function: &Function<P, R>) {
        if let Ok(ffqn) = function.ffqn() {
            let entry = CatalogFunction::new(ffqn.clone(), ExecutionDefaults::unknown_function())
                .params::<P>();
            self.catalog.typed.insert(ffqn, entry);
        }
    }

    /// Registers a workflow, `async fn(WorkflowCtx, P) -> Result<R, WorkflowError<E>>`, on
    /// the node's workflow worker (writing to the node's store, reading the node's clock): one
    /// executor runs every workflow registered this way, with the settings of
    /// [`NodeBuilder::workflow_settings`].
    #[must_use]
    pub fn workflow<P, R, E, F, Fut>(mut self, function: &Function<P, R>, workflow: F) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        E: Serialize + Send + 'static,
        F: Fn(WorkflowCtx, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, WorkflowError<E>>> + Send + 'static,
    {
        let worker = self
            .workflows
            .take()
            .unwrap_or_else(|| WorkflowWorker::new(self.db.clone(), self.clock.clone()));
        match worker.register(function, workflow) {
            Ok(worker) => self.workflows = Some(worker),
            Err(err) => self.fail(err.into()),
        }
        self.record_params(function);
        self
    }

    /// The settings of the executor of the node's activities (those of
    /// [`NodeBuilder::activity`]); [`ExecutorSettings::default`] until set.
    #[must_use]
    pub fn activity_settings(mut self, settings: ExecutorSettings) -> Self {
        self.activity_settings = settings;
        self
    }

    /// The settings of the executor of the node's workflows (those of
    /// [`NodeBuilder::workflow`]); [`ExecutorSettings::default`] until set.
    #[must_use]
    pub fn workflow_settings(mut self, settings: ExecutorSettings) -> Self {
        self.workflow_settings = settings;
        self
    }

    /// How the children the node's workflows submit are created: their component, retries
    /// and first backoff (`WorkflowWorker::child_settings`; `activity:default`, 3 retries and
    /// one second until set).
    #[must_use]
    pub fn child_settings(
        mut self,
        component_id: ComponentId,
        max_retries: u32,
        retry_exp_backoff: Duration,
    ) -> Self {
        self.children = Some(ChildSettings {
            component_id,
            max_retries,
            retry_exp_backoff,
        });
        self
    }

    /// What a replay of one of the node's workflows that diverges from its log leads to
    /// (`WorkflowWorker::nondeterminism_policy`).
    #[must_use]
    pub fn nondeterminism_policy(mut self, policy: NondeterminismPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Runs any other worker (a `WorkflowWorker` or `ActivityWorker` built by hand, a
    /// hand-written `executor::Worker`) with an executor of its own.
    #[must_use]
    pub fn worker(self, worker: Arc<dyn Worker>, settings: ExecutorSettings) -> Self {
        self.add_worker(worker, settings, None)
    }

    /// As [`NodeBuilder::worker`], but its executor locks and writes through `store` instead
    /// of the node's store: a wrapper of the node's store that watches what the executor does
    /// (the benchmark counts the acknowledged `Finished` appends this way, the crash tests
    /// trace each wait for due work).
    #[must_use]
    pub fn worker_through(
        self,
        worker: Arc<dyn Worker>,
        settings: ExecutorSettings,
        store: Arc<dyn DbExecutor>,
    ) -> Self {
        self.add_worker(worker, settings, Some(store))
    }

    fn add_worker(
        mut self,
        worker: Arc<dyn Worker>,
        settings: ExecutorSettings,
        store: Option<Arc<dyn DbExecutor>>,
    ) -> Self {
        let kind = WorkerKind::Other(self.workers.len() + 1);
        self.workers.push(WorkerEntry {
            kind,
            worker,
            settings,
            store,
        });
        self
    }

    /// Bounds the runs in flight over all the node's executors (locked, running or writing
    /// their outcome) with one shared limiter of `concurrency` permits; an executor whose
    /// [`ExecutorSettings::concurrency`] is set has its own bound instead.
    ///
    /// Without it, each executor bounds itself to two batches (`2 × batch_size`), the
    /// executor's own default, and locks a batch at a time. With it, an executor locks as soon
    /// as one permit is free. 0 is refused by `start`.
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// The timers watcher's settings ([`crate::DEFAULT_WATCHER`] until set). Without a watcher
    /// anywhere on the store, expired leases are never recovered and durable sleeps never end.
    #[must_use]
    pub fn timers_watcher(mut self, config: TimersWatcherConfig) -> Self {
        self.watcher = Some(config);
        self
    }

    /// Runs no timers watcher on this node: another process runs one on the same store.
    #[must_use]
    pub fn without_timers_watcher(mut self) -> Self {
        self.watcher = None;
        self
    }

    /// Runs the retention task: every minute it deletes the trees of top-level executions
    /// that finished more than `retention` ago, 1,000 to a transaction
    /// ([`crate::DEFAULT_PRUNE_INTERVAL`], [`crate::DEFAULT_PRUNE_BATCH`]). Without it (or
    /// [`NodeBuilder::pruner`]) nothing is deleted.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.pruner = Some(pruner_config(retention));
        self
    }

    /// Runs the retention task with these settings (`timers_watcher::Pruner`); a zero
    /// interval or batch is refused by `start`.
    #[must_use]
    pub fn pruner(mut self, config: PrunerConfig) -> Self {
        self.pruner = Some(config);
        self
    }

    /// Samples the gauges of due executions every `every` (`sampler`): per function it runs,
    /// how many executions are due and not locked, and how long the oldest has waited, for
    /// the metrics recorder the program installed.
    #[must_use]
    pub fn sample_metrics(self, every: Duration) -> Self {
        self.background_service("metrics sampler", move |context| {
            crate::sampler::run(context, every)
        })
    }

    /// Runs `task` beside the executors: `start` spawns `task(signal)`, and
    /// [`Node::shutdown`] fires the signal when it stops the executors, waits for the task
    /// until its deadline and aborts it then. A server is such a task: it stops accepting when
    /// the signal fires and finishes the requests it holds.
    #[must_use]
    pub fn background<F, Fut>(self, name: &'static str, task: F) -> Self
    where
        F: FnOnce(ShutdownSignal) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.background_service(name, move |context: BackgroundContext<C>| {
            task(context.signal)
        })
    }

    /// As [`NodeBuilder::background`], for a task that serves the node's clients: it gets
    /// the node's store, clock and [`Catalog`] with the signal ([`BackgroundContext`]). The
    /// HTTP server of the `server` crate is one.
    #[must_use]
    pub fn background_service<F, Fut>(mut self, name: &'static str, task: F) -> Self
    where
        F: FnOnce(BackgroundContext<C>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let start: StartBackground<C> = Box::new(move |context| Box::pin(task(context)));
        self.background.push((name, start));
        self
    }

    /// The retries of the executions submitted through the node's catalog
    /// ([`Node::catalog`]) of every function the node runs: 3, the first after one second,
    /// until set. [`NodeBuilder::describe`] sets them per function.
    #[must_use]
    pub fn new_execution_retries(mut self, max_retries: u32, retry_exp_backoff: Duration) -> Self {
        self.catalog.retries = Some((max_retries, retry_exp_backoff));
        self
    }

    /// The catalog's entry of one function the node runs, replacing the one derived from its
    /// registration (its component, retries and check of parameters): for a worker given to
    /// [`NodeBuilder::worker`] whose parameter type the node cannot see. `start` refuses an
    /// entry of a function the node does not run.
    #[must_use]
    pub fn describe(mut self, function: CatalogFunction) -> Self {
        self.catalog.described.push(function);
        self
    }

    /// How an execution of a function the node does not run is created when it is submitted
    /// through the node's catalog ([`ExecutionDefaults::unknown_function`] until set).
    #[must_use]
    pub fn unknown_functions(mut self, defaults: ExecutionDefaults) -> Self {
        self.catalog.unknown = Some(defaults);
        self
    }

    /// Keeps the schedule `definition` stored: once the node started, it is created if
    /// missing and updated to `definition` if it differs (the code that declares it is its
    /// source). Its function must be one the node runs, with parameters it takes: `start`
    /// refuses it otherwise. Its ticks fire on whichever node's timers watcher sees them first.
    #[must_use]
    pub fn schedule(mut self, definition: Definition) -> Self {
        self.schedules.push(definition);
        self
    }

    /// Names the node, `name` (a host name, `worker-1`), the same across its restarts: each
    /// executor's id derives from the name and its component, and at start the node takes
    /// back the leases its previous process left under that name (`kill -9`, a crash, a
    /// shutdown whose deadline passed): their executions are due at once, each counting a
    /// retry as a lease's expiry does, instead of waiting for the lease to run out. Without a
    /// name each start has fresh executor ids and a dead process's leases are waited out.
    ///
    /// Two processes running at once under one name take each other's leases at their starts:
    /// nothing is run twice at once (the version check fences every write), but the runs
    /// whose leases were taken are wasted and their retries used. Give each process its own.
    #[must_use]
    pub fn identity(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if name.trim().is_empty() {
            self.fail(NodeError::EmptyIdentity);
        }
        self.identity = Some(name);
        self
    }

    /// Checks the configuration and starts the node on the current tokio runtime: one executor
    /// per worker (the node's activities and workflows each count as one), the timers watcher
    /// unless left out, the retention task when one is set, the background tasks.
    ///
    /// # Errors
    /// The first mistake of the configuration ([`NodeError`]); nothing is started then.
    pub fn start(mut self) -> Result<Node, NodeError> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        let entries = self.entries();
        validate(
            &entries,
            self.concurrency,
            self.watcher.as_ref(),
            self.pruner.as_ref(),
        )?;
        if entries.is_empty()
            && self.watcher.is_none()
            && self.pruner.is_none()
            && self.background.is_empty()
        {
            return Err(NodeError::NothingToRun);
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(NodeError::NoRuntime);
        }
        // Its executors run the children its workflows create, and the executions submitted
        // through its catalog, at once when one of them has a permit free
        // (`executor::LocalExecutors`).
        let local = LocalExecutors::new();
        let catalog = build_catalog(&entries, std::mem::take(&mut self.catalog))?;
        let catalog = Arc::new(catalog.with_local_executors(local.clone()));
        let schedules = std::mem::take(&mut self.schedules)
            .into_iter()
            .map(|definition| {
                let settings =
                    crate::schedules::run_settings(&catalog, &definition).map_err(|source| {
                        NodeError::Schedule {
                            name: definition.name.clone(),
                            source,
                        }
                    })?;
                Ok((definition, settings))
            })
            .collect::<Result<Vec<_>, NodeError>>()?;
        if !schedules.is_empty() {
            self = self.background_service("schedules", move |context| {
                crate::schedules::keep(context.db, context.clock, schedules)
            });
        }
        let shared = self
            .concurrency
            .map(|permits| Arc::new(Semaphore::new(permits.min(Semaphore::MAX_PERMITS))));
        // Read before any executor locks: every lease of theirs is younger.
        let started_at = self.clock.now();
        let mut ordinals: HashMap<ComponentId, u64> = HashMap::new();
        let mut takebacks = Vec::new();
        let probed: Vec<Arc<dyn Worker>> =
            entries.iter().map(|entry| entry.worker.clone()).collect();
        let executors = entries
            .into_iter()
            .map(|entry| {
                let component_id = entry.component_id();
                let executor_id = self.identity.as_deref().map(|identity| {
                    let ordinal = ordinals.entry(component_id.clone()).or_default();
                    let id = crate::identity::executor_id(identity, &component_id, *ordinal);
                    *ordinal += 1;
                    takebacks.push(crate::identity::Takeback {
                        executor_id: id,
                        lock_expiry: entry.settings.lock_expiry,
                    });
                    id
                });
                self.spawn_executor(entry, component_id, executor_id, shared.as_ref(), &local)
            })
            .collect();
        let watcher = self
            .watcher
            .map(|config| timers_watcher::spawn_new(self.db.clone(), config, self.clock.clone()));
        let pruner = self
            .pruner
            .map(|config| Pruner::spawn_new(self.db.clone(), config, self.clock.clone()))
            .transpose()?;
        let (signal, receiver) = watch::channel(false);
        let background = self
            .background
            .into_iter()
            .map(|(name, start)| {
                let task = start(BackgroundContext {
                    signal: ShutdownSignal::new(receiver.clone()),
                    db: self.db.clone(),
                    clock: self.clock.clone(),
                    catalog: catalog.clone(),
                });
                Background::spawn(name, task)
            })
            .chain((!probed.is_empty()).then(|| {
                let signal = ShutdownSignal::new(receiver.clone());
                let probing =
                    crate::parked::keep_probing(self.db.clone(), self.clock.clone(), probed);
                Background::spawn(
                    "unpark",
                    Box::pin(async move {
                        tokio::select! {
                            () = probing => {}
                            () = signal.fired() => {}
                        }
                    }),
                )
            }))
            .chain((!takebacks.is_empty()).then(|| {
                let signal = ShutdownSignal::new(receiver.clone());
                let take_back = crate::identity::take_back(
                    self.db.clone(),
                    self.clock.clone(),
                    started_at,
                    takebacks,
                );
                Background::spawn(
                    "take back",
                    Box::pin(async move {
                        tokio::select! {
                            () = take_back => {}
                            () = signal.fired() => {}
                        }
                    }),
                )
            }))
            .collect();
        Ok(Node::new(
            executors, watcher, pruner, background, signal, catalog,
        ))
    }

    /// Every worker with its settings, the node's own first; the node's workflows get their
    /// child settings and policy here.
    fn entries(&mut self) -> Vec<WorkerEntry> {
        let mut entries = Vec::new();
        if let Some(activities) = self.activities.take() {
            entries.push(WorkerEntry {
                kind: WorkerKind::Activities,
                worker: Arc::new(activities),
                settings: self.activity_settings.clone(),
                store: None,
            });
        }
        if let Some(mut workflows) = self.workflows.take() {
            if let Some(children) = self.children.take() {
                workflows = workflows.child_settings(
                    children.component_id,
                    children.max_retries,
                    children.retry_exp_backoff,
                );
            }
            if let Some(policy) = self.policy {
                workflows = workflows.nondeterminism_policy(policy);
            }
            entries.push(WorkerEntry {
                kind: WorkerKind::Workflows,
                worker: Arc::new(workflows),
                settings: self.workflow_settings.clone(),
                store: None,
            });
        }
        entries.append(&mut self.workers);
        entries
    }

    fn spawn_executor(
        &self,
        entry: WorkerEntry,
        component_id: ComponentId,
        executor_id: Option<ExecutorId>,
        shared: Option<&Arc<Semaphore>>,
        local: &LocalExecutors,
    ) -> RunningExecutor {
        let settings = entry.settings;
        let task_limiter = match settings.concurrency {
            Some(own) => Some(Arc::new(Semaphore::new(own.min(Semaphore::MAX_PERMITS)))),
            None => shared.cloned(),
        };
        let functions = entry.worker.exported_functions().to_vec();
        let config = ExecConfig {
            lock_expiry: settings.lock_expiry,
            tick_sleep: settings.tick_sleep,
            batch_size: settings.batch_size,
            component_id: component_id.clone(),
            task_limiter,
        };
        let store = entry.store.unwrap_or_else(|| self.db.clone());
        let mut task = ExecTask::new(entry.worker, config, self.clock.clone(), store)
            .with_local_executors(local.clone());
        if let Some(executor_id) = executor_id {
            task = task.with_executor_id(executor_id);
        }
        let handle = task.spawn();
        RunningExecutor {
            info: ExecutorInfo {
                executor_id: handle.executor_id(),
                component_id,
                functions,
            },
            handle,
        }
    }
}

/// The node's catalog: every function of every worker with its executor's component, the
/// typed registrations' checks, then the entries given whole.
fn build_catalog(entries: &[WorkerEntry], mut parts: CatalogParts) -> Result<Catalog, NodeError> {
    let mut catalog = Catalog::new();
    if let Some(unknown) = parts.unknown {
        catalog = catalog.unknown_functions(unknown);
    }
    for entry in entries {
        let component_id = entry.component_id();
        let mut defaults = ExecutionDefaults::new(component_id);
        if let Some((max_retries, retry_exp_backoff)) = parts.retries {
            defaults.max_retries = max_retries;
            defaults.retry_exp_backoff = retry_exp_backoff;
        }
        for ffqn in entry.worker.exported_functions() {
            let function = parts
                .typed
                .remove(ffqn)
                .unwrap_or_else(|| CatalogFunction::new(ffqn.clone(), defaults.clone()));
            catalog.insert(function.with_defaults(defaults.clone()));
        }
    }
    for function in parts.described {
        if catalog.get(function.ffqn()).is_none() {
            return Err(NodeError::DescribedFunctionNotRun {
                function: function.ffqn().to_string(),
            });
        }
        catalog.insert(function);
    }
    Ok(catalog)
}

/// Every check of `start` that needs nothing started.
fn validate(
    entries: &[WorkerEntry],
    concurrency: Option<usize>,
    watcher: Option<&TimersWatcherConfig>,
    pruner: Option<&PrunerConfig>,
) -> Result<(), NodeError> {
    if concurrency == Some(0) {
        return Err(NodeError::ZeroConcurrency);
    }
    let mut seen: HashMap<&FunctionFqn, WorkerKind> = HashMap::new();
    for entry in entries {
        let settings = &entry.settings;
        let component_id = entry.component_id();
        let worker = || entry.kind.describe(&component_id);
        if settings.lock_expiry.is_zero() {
            return Err(NodeError::ZeroLockExpiry { worker: worker() });
        }
        if settings.batch_size == 0 {
            return Err(NodeError::ZeroBatchSize { worker: worker() });
        }
        if settings.tick_sleep.is_zero() {
            return Err(NodeError::ZeroTickSleep { worker: worker() });
        }
        if settings.concurrency == Some(0) {
            return Err(NodeError::ZeroWorkerConcurrency { worker: worker() });
        }
        let functions = entry.worker.exported_functions();
        if functions.is_empty() {
            return Err(NodeError::NoFunctions { worker: worker() });
        }
        for function in functions {
            if seen.insert(function, entry.kind).is_some() {
                return Err(NodeError::DuplicateFunction {
                    function: function.to_string(),
                });
            }
        }
    }
    if watcher.is_some_and(|config| config.tick_sleep.is_zero()) {
        return Err(NodeError::ZeroWatcherTick);
    }
    if let Some(config) = pruner {
        config.validate()?;
    }
    Ok(())
}
