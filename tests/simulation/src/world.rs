//! The harness: one seeded world of real executors, timers watchers, pruners and clients over
//! the memory backend on a simulated clock, driven step by step.
//!
//! Every component runs as a future the harness owns and polls itself (`crate::components`),
//! one poll per faulty step, the step's action drawn from the seed or read from a tape
//! (`crate::tape`). Nothing is spawned on tokio: the runtime is a current-thread one with its
//! clock paused, which the harness moves together with the `SimClock`, so no wall clock,
//! thread or scheduler takes part in a schedule.

use crate::{
    components::{
        self, Handed, LEASE, Owner, Records, Role, Shared, Spawned, Task, Workload, executor_loop,
    },
    faults::{Chaos, FaultKind, FaultSet, SimHook},
    history::{History, Seen},
    invariants::{self, Broken, Invariant},
    rng::Rng,
    schedules::{self, ScheduleState},
    tape::{Action, StepRecord, Tape},
    workers,
};
use concepts::{ClockFn, DbConnection, ExecutionId, ExecutionIdTopLevel, ExecutionLog};
use executor::{LocalExecutors, Worker};
use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::{DefaultHasher, Hash, Hasher},
    rc::Rc,
    sync::Arc,
    task::{Context, Waker},
    time::Duration,
};
use storage_memory::MemoryStore;
use test_utils::{SimClock, forwarding::ForwardingDb};
use tokio::sync::watch;
use workflow::Client;

/// The nodes of the world, each with an activity and a workflow executor, a watcher and a
/// pruner.
const NODES: usize = 2;
/// How far the clock moves in one step of the calm phase.
const CALM_TICK: Duration = Duration::from_millis(100);
/// The liveness bound: once faults stop, everything finishes within this simulated time.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(120);
/// Once faults stop, a tree due for pruning (`History::due_for_pruning`) is pruned within this
/// simulated time (the pruners pass every 500 ms, two trees a call, one call a step).
const RETENTION_BOUND: Duration = Duration::from_secs(5);

fn retention_bound() -> chrono::Duration {
    chrono::Duration::from_std(RETENTION_BOUND).unwrap_or_default()
}

/// What one run simulates, when its choices are drawn from the seed.
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
    /// The run (for a replayed tape: its seed, executions and faults, and its length).
    pub config: Config,
    /// The step after which it was found (1-based; steps past the faulty ones are calm).
    pub step: u64,
    /// What broke.
    pub broken: Broken,
}

/// What one run counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// What the checks saw: executions ever stored, pruned trees and executions, retired
    /// acknowledgements.
    pub seen: Seen,
    /// Executions the world's schedule fired.
    pub schedule_fires: u64,
    /// Ticks recorded as missed, each explained.
    pub schedule_missed: u64,
    /// Completions of promises answered `Completed`, `AlreadyCompleted` and refused.
    pub completions: [u64; 3],
    /// Cancellations that finished a tree (the execution and at least one descendant).
    pub trees_cancelled: u64,
    /// Executions the clients' cancellations finished.
    pub cancelled: u64,
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Steps taken, calm ones included.
    pub steps: u64,
    /// Faults injected, per kind (in the order of `FaultKind::ALL`).
    pub injected: [u64; FaultKind::ALL.len()],
    /// What it counted.
    pub counts: Counts,
    /// The first broken invariant, if any.
    pub violation: Option<Violation>,
    /// Each step, when the run was asked to record them.
    pub schedule: Vec<String>,
    /// A hash of the schedule's choices and of the final logs: equal for equal runs.
    pub fingerprint: u64,
    /// The choices of its faulty steps: replaying them is this run.
    pub tape: Tape,
    /// The steps of the tape that did nothing (an action whose task, node or execution was
    /// not there, and no fault).
    pub idle_steps: Vec<usize>,
}

/// Runs one simulation, its choices drawn from `config.seed`, recording its schedule when
/// `record` is true.
#[must_use]
pub fn run(config: &Config, record: bool) -> Outcome {
    simulate(World::new(*config, None, record))
}

/// Runs the simulation whose faulty steps are `tape`'s (its calm phase drawn from its seed).
#[must_use]
pub fn replay(tape: &Tape, record: bool) -> Outcome {
    let config = Config {
        seed: tape.seed,
        steps: tape.steps.len() as u64,
        executions: tape.executions,
        faults: tape.faults,
    };
    simulate(World::new(config, Some(tape.steps.clone()), record))
}

fn simulate(world: World) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(world.run())
}

/// What runs on a node.
#[derive(Debug, Clone, Copy, Default)]
struct Node {
    alive: bool,
    watcher: bool,
    pruner: bool,
}

struct World {
    config: Config,
    /// The tape replayed, if any.
    script: Option<Vec<StepRecord>>,
    /// The tape of this run.
    taped: Vec<StepRecord>,
    /// The steps of the tape that did nothing.
    idle_steps: Vec<usize>,
    record: bool,
    schedule: Vec<String>,
    hasher: DefaultHasher,
    /// The actions of the faulty steps, when drawn.
    rng: Rng,
    /// The order of the calm steps' polls.
    calm_rng: Rng,
    clock: SimClock,
    memory: Arc<MemoryStore>,
    db: Arc<dyn DbConnection>,
    chaos: Arc<Chaos>,
    activities: Arc<dyn Worker>,
    workflows: Arc<dyn Worker>,
    tasks: Vec<Task>,
    spawned: Spawned,
    /// Runs handed to executors by workflows' writes.
    handed: Handed,
    /// The executors of each node that its workflows' children are created locked by; a fresh
    /// one at each start of the node.
    local: [LocalExecutors; NODES],
    nodes: [Node; NODES],
    /// The top-level executions whose client was started.
    submitted: BTreeSet<u32>,
    /// How many requests of each kind the clients made, for their labels.
    requests: HashMap<String, u32>,
    records: Shared,
    /// What the watchers and pruners watch for closing: never set (they are killed).
    closing: watch::Sender<bool>,
    history: History,
    counts: Counts,
    step: u64,
}

impl World {
    fn new(config: Config, script: Option<Vec<StepRecord>>, record: bool) -> Self {
        let clock = SimClock::epoch();
        let chaos = Chaos::new(config.seed, config.faults, record);
        let memory = Arc::new(MemoryStore::new());
        let inner: Arc<dyn DbConnection> = memory.clone();
        let db: Arc<dyn DbConnection> = ForwardingDb::new(inner, SimHook(chaos.clone()));
        let activities =
            workers::activities(chaos.clone(), LEASE, clock.clone()).expect("legal activities");
        let workflows = workers::workflows(db.clone(), clock.clone()).expect("legal workflows");
        Self {
            config,
            script,
            taped: Vec::new(),
            idle_steps: Vec::new(),
            record,
            schedule: Vec::new(),
            hasher: DefaultHasher::new(),
            rng: Rng::new(config.seed, 1),
            calm_rng: Rng::new(config.seed, 5),
            clock,
            memory,
            db,
            chaos,
            activities: Arc::new(activities),
            workflows: Arc::new(workflows),
            tasks: Vec::new(),
            spawned: Spawned::default(),
            handed: Handed::default(),
            local: Default::default(),
            nodes: [Node::default(); NODES],
            submitted: BTreeSet::new(),
            requests: HashMap::new(),
            records: Rc::new(RefCell::new(Records::default())),
            closing: watch::Sender::new(false),
            history: History::default(),
            counts: Counts::default(),
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
            self.restart(node);
        }
        let violation = match self.faulty_phase().await {
            Err(violation) => Some(violation),
            Ok(()) => self.calm_phase().await.err(),
        };
        fingerprint_logs(&mut self.hasher, self.history.logs());
        let mut counts = self.counts;
        counts.seen = self.history.seen;
        counts.schedule_fires = schedules::fires(self.memory.as_ref())
            .await
            .unwrap_or_default();
        let records = self.records.borrow();
        counts.completions = records.answers;
        counts.trees_cancelled = records.trees_cancelled;
        counts.cancelled = records.cancelled;
        drop(records);
        Outcome {
            steps: self.step,
            injected: self.chaos.injected(),
            counts,
            violation,
            schedule: self.schedule,
            fingerprint: self.hasher.finish(),
            tape: Tape {
                seed: self.config.seed,
                executions: self.config.executions,
                faults: self.config.faults,
                steps: self.taped,
            },
            idle_steps: self.idle_steps,
        }
    }

    /// The faulty steps, each action drawn from the seed or read from the tape.
    async fn faulty_phase(&mut self) -> Result<(), Violation> {
        let steps = self
            .script
            .as_ref()
            .map_or(self.config.steps, |script| script.len() as u64);
        while self.step < steps {
            self.step += 1;
            let index = usize::try_from(self.step - 1).unwrap_or(usize::MAX);
            let (action, script) = match self.script.as_ref().and_then(|s| s.get(index)) {
                Some(record) => (record.action.clone(), Some(record.decisions.clone())),
                None => (self.draw_action(), None),
            };
            self.chaos.begin_step(self.step, script);
            action.hash(&mut self.hasher);
            let effective = self.apply(&action).await;
            let decisions = self.chaos.end_step();
            if !effective && decisions.is_empty() {
                self.idle_steps.push(index);
            }
            self.taped.push(StepRecord { action, decisions });
            for note in self.chaos.take_notes() {
                self.note(|| note);
            }
            self.check().await?;
        }
        Ok(())
    }

    /// Applies `action`; false when it did nothing (its task, node or execution was not
    /// there).
    async fn apply(&mut self, action: &Action) -> bool {
        match action {
            Action::Idle => false,
            Action::Poll(label) => self.poll_label(label),
            Action::Advance(by) => {
                self.advance(*by).await;
                true
            }
            Action::Submit(k) => self.submit(*k),
            Action::KillNode(node) => self.kill(*node, None),
            Action::KillWatcher(node) => self.kill(*node, Some(Role::Watcher)),
            Action::KillPruner(node) => self.kill(*node, Some(Role::Pruner)),
            Action::Restart(node) => self.restart(*node),
            Action::JumpClock(by) => {
                self.chaos.count(FaultKind::ClockJump);
                self.note(|| format!("FAULT clock jumps +{by:?}"));
                self.clock.move_time_forward_sync(*by);
                tokio::time::advance(*by).await;
                true
            }
            Action::Cancel(target) => {
                self.cancel(target.clone());
                true
            }
            Action::Complete { k, value } => self.complete(*k, *value),
        }
    }

    /// Faults off: every node and loop up, every submission made, every promise completed
    /// with its meant value, every task polled each step in a seeded order (the pruners
    /// first) and the clock moved by `CALM_TICK` (straight to the schedule's next tick when
    /// nothing else is left), until everything finished and the schedule ended, or the
    /// liveness bound passed.
    async fn calm_phase(&mut self) -> Result<(), Violation> {
        self.chaos.calm();
        self.note(|| "faults stop".into());
        for node in 0..NODES {
            self.restart(node);
        }
        for k in 1..=self.config.executions {
            self.submit(k);
        }
        for k in 1..=self.config.executions {
            let work = Workload::of(self.config.seed, k);
            if work.is_promised() {
                self.complete(k, work.meant);
            }
        }
        let calm_since = self.clock.now();
        loop {
            self.step += 1;
            self.chaos.begin_step(self.step, None);
            let mut order: Vec<usize> = (0..self.tasks.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, self.calm_rng.index(i + 1));
            }
            // The pruners first: what they remove is then compared with the logs of the last
            // step, before anything else changed them.
            order.sort_by_key(|idx| self.tasks[*idx].role != Role::Pruner);
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
            let schedule = self.check().await?;
            let clients_done = self.tasks.iter().all(|task| task.owner != Owner::Client);
            let all_finished = invariants::all_finished(self.history.logs());
            let now = self.clock.now();
            let due = self.history.due_for_pruning(now);
            if let Some((root, ready)) = due
                && now - ready.max(calm_since) > retention_bound()
            {
                let detail = format!(
                    "the tree of {root}, ready to be pruned at {ready}, is still stored at {now}"
                );
                return Err(self.violation(invariants::broken(Invariant::Retention, detail)));
            }
            if clients_done && all_finished && due.is_none() {
                if schedule.ended {
                    self.note(|| "everything finished".into());
                    let complete = schedules::check_complete(self.memory.as_ref()).await;
                    return complete.map_err(|broken| self.violation(broken));
                }
                // Nothing but the schedule left: the clock goes straight to its next tick.
                let next = (schedule.next_due_at)
                    .and_then(|at| (at - now).to_std().ok())
                    .unwrap_or(CALM_TICK);
                self.advance(next.max(CALM_TICK)).await;
                continue;
            }
            let waited = (now - calm_since).to_std().unwrap_or_default();
            if waited > LIVENESS_BOUND {
                return Err(self.liveness(schedule.ended));
            }
            self.advance(CALM_TICK).await;
        }
    }

    fn liveness(&self, ended: bool) -> Violation {
        let clients: Vec<&str> = (self.tasks.iter())
            .filter(|task| task.owner == Owner::Client)
            .map(|task| task.label.as_str())
            .collect();
        let unfinished: Vec<String> = (self.history.logs().iter())
            .filter(|(_, log)| !log.pending_state.is_finished())
            .map(|(id, log)| {
                let events: Vec<_> = log.events.iter().map(|e| e.event.variant_name()).collect();
                format!("{id} {:?} after {events:?}", log.pending_state)
            })
            .collect();
        self.violation(Broken {
            invariant: Invariant::Liveness,
            detail: format!(
                "{:?} after faults stopped, {} executions unfinished ({}), {} client requests \
                 unanswered ({}), the schedule {}",
                LIVENESS_BOUND,
                unfinished.len(),
                unfinished.join("; "),
                clients.len(),
                clients.join("; "),
                if ended { "ended" } else { "not ended" }
            ),
        })
    }

    fn violation(&self, broken: Broken) -> Violation {
        Violation {
            config: Config {
                steps: self.taped.len() as u64,
                ..self.config
            },
            step: self.step,
            broken,
        }
    }

    /// Checks every invariant but liveness; returns the state of the schedule.
    async fn check(&mut self) -> Result<ScheduleState, Violation> {
        let logs = match invariants::logs(self.memory.as_ref()).await {
            Ok(logs) => logs,
            Err(err) => return Err(self.violation(err.into())),
        };
        let now = self.clock.now();
        // Out of the cell while the checks run (no component runs meanwhile).
        let mut records = std::mem::take(&mut *self.records.borrow_mut());
        let checked = (self.history)
            .check(logs, &self.chaos, &mut records, self.memory.as_ref(), now)
            .await;
        *self.records.borrow_mut() = records;
        match checked {
            Ok(schedule) => {
                self.counts.schedule_missed = schedule.missed;
                Ok(schedule)
            }
            Err(broken) => {
                self.note(|| format!("BROKEN: {}: {}", broken.invariant, broken.detail));
                Err(self.violation(broken))
            }
        }
    }

    /// Polls the task at `idx` once; true when it completed.
    fn poll(&mut self, idx: usize) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let ready = self.tasks[idx].future.as_mut().poll(&mut cx).is_ready();
        ready.hash(&mut self.hasher);
        ready
    }

    fn poll_label(&mut self, label: &str) -> bool {
        let Some(idx) = self.tasks.iter().position(|task| task.label == label) else {
            self.note(|| format!("poll {label}: no such task"));
            return false;
        };
        let ready = self.poll(idx);
        self.note(|| format!("poll {label}{}", if ready { ": done" } else { "" }));
        if ready {
            self.tasks.remove(idx);
        }
        self.adopt_spawned();
        true
    }

    fn adopt_spawned(&mut self) {
        let spawned = std::mem::take(&mut *self.spawned.borrow_mut());
        self.tasks.extend(spawned);
        self.tasks.extend(components::adopt_handed(&self.handed));
    }

    async fn advance(&mut self, by: Duration) {
        self.clock.move_time_forward_sync(by);
        tokio::time::advance(by).await;
        if self.record && by != CALM_TICK {
            self.note(|| format!("clock +{by:?}"));
        }
    }

    /// Kills node `node` (`role` `None`), or its watcher or pruner alone.
    fn kill(&mut self, node: usize, role: Option<Role>) -> bool {
        let state = &mut self.nodes[node];
        let (kind, what) = match role {
            None if state.alive => {
                *state = Node::default();
                (FaultKind::NodeKilled, format!("node {node}"))
            }
            Some(Role::Watcher) if state.watcher => {
                state.watcher = false;
                (FaultKind::WatcherKilled, format!("node {node}'s watcher"))
            }
            Some(Role::Pruner) if state.pruner => {
                state.pruner = false;
                (FaultKind::PrunerKilled, format!("node {node}'s pruner"))
            }
            _ => return false,
        };
        self.chaos.count(kind);
        let before = self.tasks.len();
        self.tasks.retain(|task| {
            task.owner != Owner::Node(node) || role.is_some_and(|role| task.role != role)
        });
        let dropped = before - self.tasks.len();
        self.note(|| format!("FAULT {what} killed ({dropped} tasks dropped)"));
        true
    }

    /// Starts what is not running on node `node`: all of it when the node is dead (two
    /// executors with fresh ids, a watcher, a pruner), else its killed loops.
    fn restart(&mut self, node: usize) -> bool {
        let state = self.nodes[node];
        if !state.alive {
            self.note(|| format!("node {node} starts"));
            self.local[node] = LocalExecutors::new();
            for (name, worker) in [
                ("activities", self.activities.clone()),
                ("workflows", self.workflows.clone()),
            ] {
                let executor = executor_loop(
                    worker,
                    self.db.clone(),
                    self.clock.clone(),
                    self.spawned.clone(),
                    self.local[node].clone(),
                    Arc::clone(&self.handed),
                    node,
                );
                let label = format!("node {node} {name} executor");
                self.push(Owner::Node(node), Role::Executor, label, executor);
            }
        }
        if !state.watcher {
            self.note(|| format!("node {node}'s watcher starts"));
            let watcher = components::watcher(
                self.db.clone(),
                self.clock.clone(),
                self.closing.subscribe(),
            );
            let label = format!("node {node} watcher");
            self.push(Owner::Node(node), Role::Watcher, label, watcher);
        }
        if !state.pruner {
            self.note(|| format!("node {node}'s pruner starts"));
            let pruner = components::pruner(
                self.db.clone(),
                self.clock.clone(),
                self.closing.subscribe(),
            );
            let label = format!("node {node} pruner");
            self.push(Owner::Node(node), Role::Pruner, label, pruner);
        }
        self.nodes[node] = Node {
            alive: true,
            watcher: true,
            pruner: true,
        };
        !(state.alive && state.watcher && state.pruner)
    }

    fn push(
        &mut self,
        owner: Owner,
        role: Role,
        label: String,
        future: impl Future<Output = ()> + 'static,
    ) {
        self.tasks.push(Task::new(owner, role, label, future));
    }

    fn client(&self) -> Client<SimClock> {
        Client::new(self.db.clone(), self.clock.clone(), workers::component())
    }

    /// A label for the next request of `kind` (`client cancel E_…`), unique among the tasks.
    fn request_label(&mut self, kind: String) -> String {
        let nth = self.requests.entry(kind.clone()).or_default();
        *nth += 1;
        format!("{kind} #{nth}")
    }

    /// A client submits the `k`-th top-level execution (and retries until it is answered).
    fn submit(&mut self, k: u32) -> bool {
        if k == 0 || k > self.config.executions || !self.submitted.insert(k) {
            return false;
        }
        let execution_id = self.top_level_id(k);
        let work = Workload::of(self.config.seed, k);
        self.note(|| {
            let (name, n, retries) = (work.function.name(), work.n, work.retries);
            format!("client submits {name}({n}) as {execution_id}, {retries} retries")
        });
        let records = self.records.clone();
        // Every other submission is made beside a node's executors, as `node::submit` makes
        // it: created locked by one with a permit free and run at once (`create_locked`).
        let client = match k % 2 {
            0 => (self.client()).with_local_executors(self.local[k as usize % NODES].clone()),
            _ => self.client(),
        };
        let submit = components::submit(client, execution_id, k, work, records);
        self.push(
            Owner::Client,
            Role::Client,
            format!("client submit {k}"),
            submit,
        );
        true
    }

    /// A client cancels `target` with its unfinished descendants.
    fn cancel(&mut self, target: ExecutionId) {
        self.note(|| format!("client cancels {target}"));
        let label = self.request_label(format!("client cancel {target}"));
        let cancel = components::cancel(self.client(), target, self.records.clone());
        self.push(Owner::Client, Role::Client, label, cancel);
    }

    /// A client completes the promise of the `k`-th top-level execution with `value`.
    fn complete(&mut self, k: u32, value: u64) -> bool {
        if !self.submitted.contains(&k) || !Workload::of(self.config.seed, k).is_promised() {
            return false;
        }
        let workflow = self.top_level_id(k);
        self.note(|| format!("client completes the promise of {workflow} with {value}"));
        let label = self.request_label(format!("client complete {k}"));
        let complete = components::complete(
            self.client(),
            self.db.clone(),
            (workflow, k),
            value,
            self.records.clone(),
        );
        self.push(Owner::Client, Role::Client, label, complete);
        true
    }

    /// The id of the `k`-th top-level execution (from 1).
    fn top_level_id(&self, k: u32) -> ExecutionId {
        ExecutionId::from(ExecutionIdTopLevel::from_parts(
            946_684_800_000 + u64::from(k),
            (u128::from(self.config.seed) & 0xFFFF_FFFF_FFFF) << 32 | u128::from(k),
        ))
    }
}

mod draw;

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
