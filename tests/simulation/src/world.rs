//! The harness: one seeded world of real executors, the timers watcher and clients over the
//! memory backend on a simulated clock, driven step by step.
//!
//! Every component runs as a future the harness owns and polls itself, one poll per step,
//! choosing which from the seed: the executor loops (the real `ExecTask`, one step at a time
//! through `ExecTask::lock_runs`, then the store's `wait_for_pending`), each run they lock
//! (the real worker and outcome write), the watcher loop (`timers_watcher::tick`, then a
//! sleep), and the clients' submissions (`workflow::Client`). Nothing is spawned on tokio: the
//! runtime is a current-thread one with its clock paused, which the harness moves together
//! with the `SimClock`, so no wall clock, thread or scheduler takes part in a schedule.

use crate::{
    faults::{Chaos, FaultKind, FaultSet, SimHook},
    invariants::{self, Broken, Invariant},
    rng::Rng,
    schedules,
    workers::{self, Behaviours, DOUBLE, FAN, NEST},
};
use concepts::{
    ClockFn, DbConnection, DbExecutor, ExecutionId, ExecutionIdTopLevel, ExecutionLog, FunctionFqn,
};
use executor::{ExecConfig, ExecTask, Worker};
use std::{
    cell::RefCell,
    collections::BTreeMap,
    future::Future,
    hash::{DefaultHasher, Hash, Hasher},
    pin::Pin,
    rc::Rc,
    sync::Arc,
    task::{Context, Waker},
    time::Duration,
};
use storage_memory::MemoryStore;
use test_utils::{SimClock, forwarding::ForwardingDb};
use tokio::sync::Semaphore;
use workflow::{Client, ClientError};

/// The lease of every executor.
pub const LEASE: Duration = Duration::from_secs(2);
/// How long an executor waits for work before it looks again.
const TICK_SLEEP: Duration = Duration::from_millis(500);
/// How often the watcher looks for expired timers, and its leeway.
const WATCHER_TICK: Duration = Duration::from_millis(250);
const WATCHER_LEEWAY: Duration = Duration::from_millis(100);
/// The executor processes ("nodes") of the world, each an activity and a workflow executor.
const NODES: usize = 2;
/// How far the clock moves in one step of the calm phase.
const CALM_TICK: Duration = Duration::from_millis(100);
/// The liveness bound: once faults stop, everything finishes within this simulated time.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(120);

/// What one run simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The seed: the schedule, the faults and the workers' behaviours all come from it.
    pub seed: u64,
    /// The steps with faults; then faults stop and the run goes on until all is finished.
    pub steps: u64,
    /// Top-level executions the clients submit.
    pub executions: u32,
    /// The faults that may be injected.
    pub faults: FaultSet,
}

impl Config {
    /// The default run of `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            steps: 300,
            executions: 5,
            faults: FaultSet::ALL,
        }
    }

    /// The command line that replays this run.
    #[must_use]
    pub fn replay_command(&self) -> String {
        let default = Self::new(self.seed);
        let mut line = format!("STELE_SEED={} cargo xtask simulate", self.seed);
        if self.steps != default.steps {
            line.push_str(&format!(" --steps {}", self.steps));
        }
        if self.executions != default.executions {
            line.push_str(&format!(" --executions {}", self.executions));
        }
        if self.faults != default.faults {
            line.push_str(&format!(" --faults {}", self.faults));
        }
        line
    }
}

/// A broken invariant, where it broke.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The run.
    pub config: Config,
    /// The step after which it was found (1-based; steps past `config.steps` are calm).
    pub step: u64,
    /// What broke.
    pub broken: Broken,
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Steps taken, calm ones included.
    pub steps: u64,
    /// Faults injected, per kind (in the order of `FaultKind::ALL`).
    pub injected: [u64; FaultKind::ALL.len()],
    /// Executions in the store at the end, children included.
    pub executions: u64,
    /// Executions the world's schedule fired.
    pub schedule_fires: u64,
    /// The first broken invariant, if any.
    pub violation: Option<Violation>,
    /// Each step, when the run was asked to record them.
    pub schedule: Vec<String>,
    /// A hash of the schedule's choices and of the final logs: equal for equal runs.
    pub fingerprint: u64,
}

/// Runs one simulation, recording its schedule when `record` is true.
///
/// # Panics
/// When the current-thread runtime cannot be built.
#[must_use]
pub fn run(config: &Config, record: bool) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(World::new(*config, record).run())
}

/// Who a task belongs to; killing a node drops its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Node(usize),
    Watcher,
    Client,
}

struct Task {
    owner: Owner,
    label: String,
    future: Pin<Box<dyn Future<Output = ()>>>,
}

type Spawned = Rc<RefCell<Vec<Task>>>;

struct World {
    config: Config,
    record: bool,
    schedule: Vec<String>,
    hasher: DefaultHasher,
    rng: Rng,
    clock: SimClock,
    memory: Arc<MemoryStore>,
    db: Arc<dyn DbConnection>,
    chaos: Arc<Chaos>,
    activities: Arc<dyn Worker>,
    workflows: Arc<dyn Worker>,
    tasks: Vec<Task>,
    spawned: Spawned,
    alive: [bool; NODES],
    submitted: u32,
    step: u64,
}

impl World {
    fn new(config: Config, record: bool) -> Self {
        let clock = SimClock::epoch();
        let chaos = Chaos::new(config.seed, config.faults, record);
        let memory = Arc::new(MemoryStore::new());
        let inner: Arc<dyn DbConnection> = memory.clone();
        let db: Arc<dyn DbConnection> = ForwardingDb::new(inner, SimHook(chaos.clone()));
        let behaviours = Behaviours::new(Rng::new(config.seed, 3), chaos.clone(), LEASE);
        let activities = workers::activities(behaviours, clock.clone()).expect("legal activities");
        let workflows = workers::workflows(db.clone(), clock.clone()).expect("legal workflows");
        Self {
            config,
            record,
            schedule: Vec::new(),
            hasher: DefaultHasher::new(),
            rng: Rng::new(config.seed, 1),
            clock,
            memory,
            db,
            chaos,
            activities: Arc::new(activities),
            workflows: Arc::new(workflows),
            tasks: Vec::new(),
            spawned: Spawned::default(),
            alive: [false; NODES],
            submitted: 0,
            step: 0,
        }
    }

    fn note(&mut self, what: impl FnOnce() -> String) {
        if self.record {
            let line = format!("{:>5} {}", self.step, what());
            self.schedule.push(line);
        }
    }

    async fn run(mut self) -> Outcome {
        let created = schedules::create(self.memory.as_ref(), self.clock.now()).await;
        created.expect("the memory store creates the world's schedule");
        for node in 0..NODES {
            self.start_node(node);
        }
        self.push(
            Owner::Watcher,
            "watcher".into(),
            watcher(self.db.clone(), self.clock.clone()),
        );
        let violation = match self.faulty_phase().await {
            Err(violation) => Some(violation),
            Ok(()) => self.calm_phase().await.err(),
        };
        let logs = invariants::logs(self.memory.as_ref())
            .await
            .unwrap_or_default();
        fingerprint_logs(&mut self.hasher, &logs);
        let schedule_fires = schedules::fires(self.memory.as_ref())
            .await
            .unwrap_or_default();
        Outcome {
            steps: self.step,
            injected: self.chaos.injected(),
            executions: logs.len() as u64,
            schedule_fires,
            violation,
            schedule: self.schedule,
            fingerprint: self.hasher.finish(),
        }
    }

    /// `config.steps` steps, each chosen from the seed, faults on.
    async fn faulty_phase(&mut self) -> Result<(), Violation> {
        while self.step < self.config.steps {
            self.step += 1;
            self.chaos.set_step(self.step);
            let choice = self.rng.below(100);
            choice.hash(&mut self.hasher);
            match choice {
                0..70 => self.poll_one(),
                70..86 => {
                    let by = Duration::from_millis(1 + self.rng.below(300));
                    self.advance(by).await;
                }
                86..92 => self.submit(),
                92..94 => self.kill_node(),
                94..97 => self.restart_node(),
                97..99 => self.jump_clock().await,
                _ => self.cancel(),
            }
            for note in self.chaos.take_notes() {
                self.note(|| note);
            }
            self.check().await?;
        }
        Ok(())
    }

    /// Faults off: every node up, every submission made, every task polled each step in a
    /// seeded order and the clock moved by `CALM_TICK`, until everything finished, or the
    /// liveness bound passed.
    async fn calm_phase(&mut self) -> Result<(), Violation> {
        self.chaos.calm();
        self.note(|| "faults stop".into());
        for node in 0..NODES {
            if !self.alive[node] {
                self.start_node(node);
            }
        }
        while self.submitted < self.config.executions {
            self.submit();
        }
        let calm_since = self.clock.now();
        loop {
            self.step += 1;
            self.chaos.set_step(self.step);
            let mut order: Vec<usize> = (0..self.tasks.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, self.rng.index(i + 1));
            }
            // Poll in that order; remove the finished ones afterwards (indexes stay valid).
            let mut done = vec![false; self.tasks.len()];
            for idx in order {
                done[idx] = self.poll(idx);
                if self.record {
                    let label = self.tasks[idx].label.clone();
                    self.note(|| format!("poll {label}{}", if done[idx] { ": done" } else { "" }));
                }
            }
            let mut done = done.into_iter();
            self.tasks.retain(|_| !done.next().unwrap_or(false));
            self.adopt_spawned();
            let logs = self.check().await?;
            let clients_done = self.tasks.iter().all(|task| task.owner != Owner::Client);
            if clients_done && invariants::all_finished(&logs) {
                self.note(|| "everything finished".into());
                return Ok(());
            }
            let waited = (self.clock.now() - calm_since).to_std().unwrap_or_default();
            if waited > LIVENESS_BOUND {
                let clients: Vec<&str> = (self.tasks.iter())
                    .filter(|task| task.owner == Owner::Client)
                    .map(|task| task.label.as_str())
                    .collect();
                let unfinished: Vec<String> = logs
                    .iter()
                    .filter(|(_, log)| {
                        !matches!(log.pending_state, concepts::PendingState::Finished { .. })
                    })
                    .map(|(id, log)| {
                        let events: Vec<_> =
                            log.events.iter().map(|e| e.event.variant_name()).collect();
                        format!("{id} {:?} after {events:?}", log.pending_state)
                    })
                    .collect();
                return Err(self.violation(Broken {
                    invariant: Invariant::Liveness,
                    detail: format!(
                        "{:?} after faults stopped, {} executions unfinished ({}) and {} \
                         client requests unanswered ({})",
                        LIVENESS_BOUND,
                        unfinished.len(),
                        unfinished.join("; "),
                        clients.len(),
                        clients.join("; ")
                    ),
                }));
            }
            self.advance(CALM_TICK).await;
        }
    }

    fn violation(&self, broken: Broken) -> Violation {
        Violation {
            config: self.config,
            step: self.step,
            broken,
        }
    }

    /// Checks every invariant but liveness; returns the logs.
    async fn check(&mut self) -> Result<BTreeMap<ExecutionId, ExecutionLog>, Violation> {
        let logs = match invariants::logs(self.memory.as_ref()).await {
            Ok(logs) => logs,
            Err(err) => return Err(self.violation(err.into())),
        };
        let checked = match invariants::check(&logs, &self.chaos.acks()) {
            Ok(()) => schedules::check(self.memory.as_ref(), &logs).await,
            Err(broken) => Err(broken),
        };
        match checked {
            Ok(()) => Ok(logs),
            Err(broken) => {
                self.note(|| format!("BROKEN: {}: {}", broken.invariant, broken.detail));
                Err(self.violation(broken))
            }
        }
    }

    fn push(&mut self, owner: Owner, label: String, future: impl Future<Output = ()> + 'static) {
        let future = Box::pin(tokio::task::unconstrained(future));
        self.tasks.push(Task {
            owner,
            label,
            future,
        });
    }

    /// Polls the task at `idx` once; true when it completed.
    fn poll(&mut self, idx: usize) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let ready = self.tasks[idx].future.as_mut().poll(&mut cx).is_ready();
        ready.hash(&mut self.hasher);
        ready
    }

    fn poll_one(&mut self) {
        if self.tasks.is_empty() {
            return;
        }
        let idx = self.rng.index(self.tasks.len());
        let ready = self.poll(idx);
        let label = self.tasks[idx].label.clone();
        self.note(|| format!("poll {label}{}", if ready { ": done" } else { "" }));
        if ready {
            self.tasks.remove(idx);
        }
        self.adopt_spawned();
    }

    fn adopt_spawned(&mut self) {
        let spawned = std::mem::take(&mut *self.spawned.borrow_mut());
        self.tasks.extend(spawned);
    }

    async fn advance(&mut self, by: Duration) {
        self.clock.move_time_forward_sync(by);
        tokio::time::advance(by).await;
        if self.record && by != CALM_TICK {
            self.note(|| format!("clock +{by:?}"));
        }
    }

    async fn jump_clock(&mut self) {
        // Drawn first, so that turning the fault off leaves the rest of the schedule as it was.
        let by = LEASE * (1 + u32::try_from(self.rng.below(3)).unwrap_or(0));
        if !self.config.faults.contains(FaultKind::ClockJump) {
            return;
        }
        self.chaos.count(FaultKind::ClockJump);
        self.note(|| format!("FAULT clock jumps +{by:?}"));
        self.clock.move_time_forward_sync(by);
        tokio::time::advance(by).await;
    }

    fn kill_node(&mut self) {
        let node = self.rng.index(NODES);
        if !self.config.faults.contains(FaultKind::ExecutorKilled) || !self.alive[node] {
            return;
        }
        self.chaos.count(FaultKind::ExecutorKilled);
        self.alive[node] = false;
        let before = self.tasks.len();
        self.tasks.retain(|task| task.owner != Owner::Node(node));
        let dropped = before - self.tasks.len();
        self.note(|| format!("FAULT node {node} killed ({dropped} tasks dropped)"));
    }

    fn restart_node(&mut self) {
        let node = self.rng.index(NODES);
        if !self.alive[node] {
            self.start_node(node);
        }
    }

    /// Starts node `node`: an activity executor and a workflow executor, fresh ids.
    fn start_node(&mut self, node: usize) {
        self.alive[node] = true;
        self.note(|| format!("node {node} starts"));
        for (name, worker) in [
            ("activities", self.activities.clone()),
            ("workflows", self.workflows.clone()),
        ] {
            let executor = executor_loop(
                worker,
                self.db.clone(),
                self.clock.clone(),
                self.spawned.clone(),
                node,
            );
            self.push(
                Owner::Node(node),
                format!("node {node} {name} executor"),
                executor,
            );
        }
        let scheduler = scheduler(self.db.clone(), self.clock.clone());
        self.push(
            Owner::Node(node),
            format!("node {node} scheduler"),
            scheduler,
        );
    }

    /// A client submits the next top-level execution (and retries it until it is accepted).
    fn submit(&mut self) {
        if self.submitted >= self.config.executions {
            return;
        }
        self.submitted += 1;
        let k = u64::from(self.submitted);
        let execution_id = self.top_level_id(k);
        let kind = self.rng.below(10);
        let n = 1 + self.rng.below(3);
        let function = match kind {
            0..4 => DOUBLE,
            4..8 => FAN,
            _ => NEST,
        };
        self.note(|| format!("client submits {}({n}) as {execution_id}", function.name()));
        let client = Client::new(self.db.clone(), self.clock.clone(), workers::component())
            .retries(2, Duration::from_millis(100));
        let label = format!("client {execution_id}");
        self.push(Owner::Client, label, async move {
            while client
                .submit_with_id(execution_id.clone(), &function, &n)
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
}

impl World {
    /// A client cancels one of the executions submitted so far (retrying a failed write).
    fn cancel(&mut self) {
        if self.submitted == 0 {
            return;
        }
        let k = 1 + self.rng.below(u64::from(self.submitted));
        let execution_id = self.top_level_id(k);
        self.note(|| format!("client cancels {execution_id}"));
        let client = Client::new(self.db.clone(), self.clock.clone(), workers::component());
        let label = format!("client cancel of {execution_id}");
        self.push(Owner::Client, label, async move {
            loop {
                match client.cancel(&execution_id, "simulated cancel").await {
                    // Not created yet (its submission failed so far): nothing to cancel.
                    Ok(_) | Err(ClientError::NotFound(_)) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
    }

    /// The id of the `k`-th top-level execution (from 1).
    fn top_level_id(&self, k: u64) -> ExecutionId {
        ExecutionId::from(ExecutionIdTopLevel::from_parts(
            946_684_800_000 + k,
            (u128::from(self.config.seed) & 0xFFFF_FFFF_FFFF) << 32 | u128::from(k),
        ))
    }
}

/// The loop of one executor, as `ExecTask`'s own loop runs it (take permits, lock, run,
/// wait for the next due execution), with its runs handed to the harness instead of spawned.
fn executor_loop(
    worker: Arc<dyn Worker>,
    db: Arc<dyn DbConnection>,
    clock: SimClock,
    spawned: Spawned,
    node: usize,
) -> impl Future<Output = ()> + 'static {
    let limiter = Arc::new(Semaphore::new(3));
    let ffqns: Arc<[FunctionFqn]> = worker.exported_functions().into();
    let config = ExecConfig {
        lock_expiry: LEASE,
        tick_sleep: TICK_SLEEP,
        batch_size: 3,
        component_id: workers::component(),
        task_limiter: Some(limiter.clone()),
    };
    let executor_db: Arc<dyn DbExecutor> = db.clone();
    let task = ExecTask::new(worker, config, clock.clone(), executor_db);
    async move {
        loop {
            // Wait for a free permit, as the real loop does (at most `tick_sleep`).
            if let Ok(Ok(permit)) = tokio::time::timeout(TICK_SLEEP, limiter.acquire()).await {
                drop(permit);
            } else {
                continue;
            }
            match task.lock_runs(clock.now()).await {
                Ok(runs) => {
                    for run in runs {
                        let label = format!("node {node} run {}", run.execution_id);
                        let future = Box::pin(tokio::task::unconstrained(run.future));
                        spawned.borrow_mut().push(Task {
                            owner: Owner::Node(node),
                            label,
                            future,
                        });
                    }
                    db.wait_for_pending(clock.now(), ffqns.clone(), TICK_SLEEP)
                        .await;
                }
                Err(_) => tokio::time::sleep(TICK_SLEEP).await,
            }
            // One iteration per poll at most: against the memory store every await of an
            // iteration may complete at once, and a loop that never returns `Pending` would
            // take the whole schedule (a spinning executor is then a liveness failure, not a
            // harness that hangs).
            YieldOnce(false).await;
        }
    }
}

/// Pending once: ends the harness's poll of the task that awaits it.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            std::task::Poll::Ready(())
        } else {
            self.0 = true;
            std::task::Poll::Pending
        }
    }
}

/// The watcher's loop: a tick, then a sleep.
async fn watcher(db: Arc<dyn DbConnection>, clock: SimClock) {
    loop {
        let _ = timers_watcher::tick(db.as_ref(), clock.now(), WATCHER_LEEWAY).await;
        tokio::time::sleep(WATCHER_TICK).await;
    }
}

/// A node's scheduler loop: a pass over the due schedules, then a sleep (the nodes race).
async fn scheduler(db: Arc<dyn DbConnection>, clock: SimClock) {
    loop {
        let _ = timers_watcher::fire_schedules(db.as_ref(), clock.now()).await;
        tokio::time::sleep(WATCHER_TICK).await;
    }
}

/// Hashes what the logs hold (event kinds and response counts per execution).
fn fingerprint_logs(hasher: &mut DefaultHasher, logs: &BTreeMap<ExecutionId, ExecutionLog>) {
    for (id, log) in logs {
        id.to_string().hash(hasher);
        for event in &log.events {
            event.event.variant_name().hash(hasher);
            event.created_at.timestamp_micros().hash(hasher);
        }
        log.responses.len().hash(hasher);
    }
}
