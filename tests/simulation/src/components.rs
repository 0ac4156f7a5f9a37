//! The components of a simulated world, each a future the harness polls itself: a node's
//! executor loops and the runs they lock, its timers watcher (a tick and a pass over the due
//! schedules) and its pruner; and the clients that submit, cancel and complete promises.
//! The watcher and the pruner are the engine's own loops (`timers_watcher::watcher_loop`,
//! `timers_watcher::pruner_loop`); the executor loop is `ExecTask`'s, one step at a time. What
//! the clients learn that the store does not hold (which completions and cancellations were
//! answered how) goes into the world's [`Records`].

use crate::workers::{self, DOUBLE, FAN, NEST, PROMISE, PROMISED};
use concepts::{
    CancelOutcome, ClockFn, CompleteOutcome, DbConnection, DbExecutor, ExecutionId, FunctionFqn,
};
use executor::{ExecConfig, ExecTask, LocalExecutors, Run, Worker};
use std::{
    cell::RefCell,
    collections::{BTreeSet, HashMap},
    future::Future,
    pin::Pin,
    rc::Rc,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};
use test_utils::SimClock;
use timers_watcher::{PrunerConfig, TimersWatcherConfig};
use tokio::sync::{Semaphore, watch};
use workflow::{Client, ClientError, Function};

/// The lease of every executor.
pub const LEASE: Duration = Duration::from_secs(2);
/// How long an executor waits for work before it looks again.
const TICK_SLEEP: Duration = Duration::from_millis(500);
/// How often the watcher looks for expired timers and due schedules, and its leeway.
const WATCHER_TICK: Duration = Duration::from_millis(250);
const WATCHER_LEEWAY: Duration = Duration::from_millis(100);
/// How long a finished tree is kept before the pruner deletes it.
pub const RETENTION: Duration = Duration::from_secs(1);
/// How often the pruner passes, and how many trees one `prune` call examines (small, so that
/// a pass takes several calls, between which it can be killed).
pub const PRUNE_INTERVAL: Duration = Duration::from_millis(500);
const PRUNE_BATCH: usize = 2;
/// The reason of every cancellation a client asks for.
pub const CANCEL_REASON: &str = "simulated cancel";
/// How long a client waits before it tries a failed request again.
const CLIENT_RETRY: Duration = Duration::from_millis(200);

/// Who a task belongs to; killing a node drops its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A node.
    Node(usize),
    /// The clients (never killed).
    Client,
}

/// What a task of a node is, so that its watcher or its pruner can be killed alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An executor loop, or a run it locked.
    Executor,
    /// The timers watcher, with its scheduler pass.
    Watcher,
    /// The pruner.
    Pruner,
    /// A client's request.
    Client,
}

/// A future of the world, with whom it belongs to.
pub struct Task {
    /// Its owner.
    pub owner: Owner,
    /// What it is.
    pub role: Role,
    /// Its name in schedules and tapes, unique among the live tasks.
    pub label: String,
    /// The future.
    pub future: Pin<Box<dyn Future<Output = ()>>>,
}

impl Task {
    /// A task of `future`, which the harness polls with a no-op waker.
    pub fn new(
        owner: Owner,
        role: Role,
        label: String,
        future: impl Future<Output = ()> + 'static,
    ) -> Self {
        Self {
            owner,
            role,
            label,
            future: Box::pin(tokio::task::unconstrained(future)),
        }
    }
}

/// Tasks created by other tasks (the runs an executor loop locks), adopted after each poll.
pub type Spawned = Rc<RefCell<Vec<Task>>>;

/// The runs of executions a node's workflows created locked under a lease of one of the
/// node's executors (`executor::LocalExecutors`), with the node, adopted after each poll
/// like [`Spawned`] (the executor hands them over from any thread, hence the mutex).
pub type Handed = Arc<Mutex<Vec<(usize, Run)>>>;

/// The tasks of the runs in `handed`, emptying it.
pub fn adopt_handed(handed: &Handed) -> Vec<Task> {
    let runs = std::mem::take(&mut *handed.lock().unwrap_or_else(PoisonError::into_inner));
    runs.into_iter()
        .map(|(node, run)| {
            let label = format!("node {node} run {} created locked", run.execution_id);
            Task::new(Owner::Node(node), Role::Executor, label, run.future)
        })
        .collect()
}

/// How the store answered one completion of a promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `Completed`: this request completed it.
    Completed,
    /// `AlreadyCompleted`: it held this value already.
    Repeated,
    /// `DifferentResult`: it holds another result, which the store described.
    Refused(String),
}

/// One completion of a promise and its answer.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The promise (a stub execution).
    pub promise: ExecutionId,
    /// The value the client sent.
    pub value: u64,
    /// The answer.
    pub answer: Answer,
}

/// One cancellation the store answered.
#[derive(Debug, Clone)]
pub struct CancelAck {
    /// The execution cancelled.
    pub target: ExecutionId,
    /// The answer.
    pub outcome: CancelOutcome,
    /// The members of its tree at the first check after the answer (all finished by then);
    /// no other may join it later.
    pub members: Option<BTreeSet<ExecutionId>>,
}

/// What the components learnt that the store does not hold.
#[derive(Debug, Default)]
pub struct Records {
    /// Completions of promises, in the order they were answered.
    pub completions: Vec<Completion>,
    /// Cancellations, in the order they were answered.
    pub cancels: Vec<CancelAck>,
    /// The top-level executions (by `k`) whose submission was answered.
    pub submitted: BTreeSet<u32>,
    /// Repeated submits refused as conflicts (each identical to the first).
    pub conflicts: Vec<String>,
    /// Completions answered `Completed`, `AlreadyCompleted`, and refused.
    pub answers: [u64; 3],
    /// Cancellations that finished the execution and at least one descendant.
    pub trees_cancelled: u64,
    /// Executions the cancellations finished.
    pub cancelled: u64,
}

/// Shared by the world and its components.
pub type Shared = Rc<RefCell<Records>>;

/// What the `k`-th top-level execution runs. Drawn from the seed alone, so that an execution
/// is the same whenever (and whether) it is submitted.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Its function.
    pub function: Function<u64, u64>,
    /// Its parameter (`workers::TRAP` makes a workflow panic).
    pub n: u64,
    /// For a workflow awaiting a promise, the value its clients mean to complete it with.
    pub meant: u64,
    /// Its retries: none for a quarter of them, so that a lease that expires finishes it at
    /// once (a workflow then finishes while its children run, and its tree is kept until
    /// they finish).
    pub retries: u32,
}

impl Workload {
    /// The `k`-th top-level execution of `seed`.
    #[must_use]
    pub fn of(seed: u64, k: u32) -> Self {
        let mut rng = crate::rng::Rng::new(seed, 1_000 + u64::from(k));
        let function = match rng.below(10) {
            0..3 => DOUBLE,
            3..6 => FAN,
            6..8 => NEST,
            _ => PROMISED,
        };
        Self {
            function,
            n: 1 + rng.below(4),
            meant: 1 + rng.below(1_000),
            retries: if rng.chance(250) { 0 } else { 2 },
        }
    }

    /// True for a workflow awaiting a promise.
    #[must_use]
    pub fn is_promised(&self) -> bool {
        self.function.name() == PROMISED.name()
    }
}

/// The loop of one executor, as `ExecTask`'s own loop runs it (take permits, lock, run,
/// wait for the next due execution), with its runs handed to the harness instead of spawned.
pub fn executor_loop(
    worker: Arc<dyn Worker>,
    db: Arc<dyn DbConnection>,
    clock: SimClock,
    spawned: Spawned,
    local: LocalExecutors,
    handed: Handed,
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
    let task = Arc::new(
        ExecTask::new(worker, config, clock.clone(), executor_db).with_local_executors(local),
    );
    // Registered while the loop lives: a kill of the node unregisters it.
    let served = task.serve_locally(move |run| {
        let mut handed = handed.lock().unwrap_or_else(PoisonError::into_inner);
        handed.push((node, run));
    });
    // How many runs of each execution this loop locked: a run whose lease expired may still
    // be running beside the next one, and each needs its own label.
    let mut locked: HashMap<ExecutionId, u32> = HashMap::new();
    async move {
        let _served = served;
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
                        let nth = locked.entry(run.execution_id.clone()).or_default();
                        *nth += 1;
                        let label = format!("node {node} run {} #{nth}", run.execution_id);
                        let task = Task::new(Owner::Node(node), Role::Executor, label, run.future);
                        spawned.borrow_mut().push(task);
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

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// A node's timers watcher: the loop `timers_watcher::spawn_new` spawns (a tick, a pass over
/// the due schedules, a sleep; the two nodes' watchers race).
pub fn watcher(
    db: Arc<dyn DbConnection>,
    clock: SimClock,
    closing: watch::Receiver<bool>,
) -> impl Future<Output = ()> + 'static {
    let config = TimersWatcherConfig {
        tick_sleep: WATCHER_TICK,
        leeway: WATCHER_LEEWAY,
    };
    timers_watcher::watcher_loop(db, config, clock, closing)
}

/// A node's pruner: the loop `timers_watcher::Pruner` spawns (every [`PRUNE_INTERVAL`] one
/// pass over the trees finished [`RETENTION`] ago, [`PRUNE_BATCH`] trees a `prune` call,
/// yielding between calls).
pub async fn pruner(db: Arc<dyn DbConnection>, clock: SimClock, closing: watch::Receiver<bool>) {
    let config = PrunerConfig {
        retention: RETENTION,
        interval: PRUNE_INTERVAL,
        batch: PRUNE_BATCH,
    };
    let valid = timers_watcher::pruner_loop(db, config, clock, closing).await;
    valid.expect("a pruner configuration that works");
}

/// A client that submits the `k`-th top-level execution until the store answers. The request
/// is the same every time: a refusal as a conflict is recorded (it breaks
/// `Invariant::SameSubmit`).
pub fn submit(
    client: Client<SimClock>,
    execution_id: ExecutionId,
    k: u32,
    work: Workload,
    records: Shared,
) -> impl Future<Output = ()> + 'static {
    let client = client.retries(work.retries, CLIENT_RETRY / 2);
    async move {
        loop {
            match (client.submit_with_id(execution_id.clone(), &work.function, &work.n)).await {
                Ok(_) => break,
                Err(err @ ClientError::Conflict { .. }) => {
                    let refused = format!("the repeated submit of {execution_id}: {err}");
                    records.borrow_mut().conflicts.push(refused);
                }
                Err(_) => {}
            }
            tokio::time::sleep(CLIENT_RETRY).await;
        }
        records.borrow_mut().submitted.insert(k);
    }
}

/// A client that cancels `target` until the store answers (an unknown execution, not
/// created yet, is nothing to cancel).
pub async fn cancel(client: Client<SimClock>, target: ExecutionId, records: Shared) {
    {
        loop {
            match client.cancel(&target, CANCEL_REASON).await {
                Ok(outcome) => {
                    let mut records = records.borrow_mut();
                    if let CancelOutcome::Cancelled { executions } = outcome {
                        records.cancelled += executions as u64;
                        records.trees_cancelled += u64::from(executions > 1);
                    }
                    records.cancels.push(CancelAck {
                        target,
                        outcome,
                        members: None,
                    });
                    break;
                }
                Err(ClientError::NotFound(_)) => break,
                Err(_) => tokio::time::sleep(CLIENT_RETRY).await,
            }
        }
    }
}

/// A client that completes the promise of `workflow` (the `k`-th top-level execution) with
/// `value` until the store answers. While the promise does not exist, it waits as long as its
/// workflow may still create it (its submission not answered yet, or it is unfinished).
pub async fn complete(
    client: Client<SimClock>,
    db: Arc<dyn DbConnection>,
    (workflow, k): (ExecutionId, u32),
    value: u64,
    records: Shared,
) {
    {
        let Ok(promise) = workflow::promise_id(&workflow, PROMISE) else {
            return;
        };
        loop {
            let answer = match client.complete(&promise, &value).await {
                Ok(CompleteOutcome::Completed) => Answer::Completed,
                Ok(CompleteOutcome::AlreadyCompleted) => Answer::Repeated,
                Err(ClientError::DifferentResult { existing, .. }) => Answer::Refused(existing),
                Err(ClientError::NoSuchPromise(_)) => {
                    // Until its submission is answered, the client may create the workflow
                    // (again, once it was pruned).
                    let submitted = records.borrow().submitted.contains(&k);
                    let may_come = match db.get(&workflow).await {
                        Ok(log) => !submitted || !log.pending_state.is_finished(),
                        Err(_) => !submitted,
                    };
                    if !may_come {
                        break;
                    }
                    tokio::time::sleep(CLIENT_RETRY).await;
                    continue;
                }
                Err(_) => {
                    tokio::time::sleep(CLIENT_RETRY).await;
                    continue;
                }
            };
            let mut records = records.borrow_mut();
            records.answers[match answer {
                Answer::Completed => 0,
                Answer::Repeated => 1,
                Answer::Refused(_) => 2,
            }] += 1;
            records.completions.push(Completion {
                promise,
                value,
                answer,
            });
            break;
        }
    }
}
