//! Many executor processes against one PostgreSQL database (SEMANTICS §4 notifications, §6
//! executor, §7 timers watcher, for a shared store).
//!
//! Four `durability-node --role executor` processes and one `--role watcher` process share a
//! fresh database. The test itself submits 5,000 executions, in 10 batches of 500, each once
//! the previous batch is finished and every executor has gone to sleep waiting for work; no
//! node submits anything (`--submit never`), so there is exactly one submission of each
//! execution. Once half of them are finished (right after the 6th batch is submitted), the
//! first executor is SIGKILLed as soon as it has locked some of that batch. Then:
//!
//! - every execution is finished exactly once: one `Finished` event, the last of its log,
//!   whose result is its own parameter; the stored pending state equals
//!   `concepts::derive_pending_state` of its log;
//! - every execution that the killed executor held locked at the kill (read once its database
//!   sessions are gone, so no commit of it is still in flight) was timed out by the watcher
//!   (`TemporarilyTimedOut`) and then locked and finished by a surviving executor (the
//!   `Locked` events' executor ids say who), and no other run of the killed executor was cut
//!   short;
//! - the survivors were woken by notifications, not by polling.
//!
//! # Why the last check proves notification wake-ups
//!
//! The executors run with a `tick_sleep` of 10 s, so polling alone would find new work up to
//! 10 s late. Each executor reports every `wait_for_pending` call (`--trace-waits`): when it
//! began and when it returned, before its `max_wait` ("early") or at it ("timeout"). Such a
//! call returns early for two reasons only: something was due when it looked (at once), or a
//! notification woke it. Before each batch, once everything submitted so far is finished (so
//! nothing is due), the test waits until it has seen every executor inside one
//! `wait_for_pending` for 200 ms (so that call did not return at once from finding something
//! due) with more than 5 s to go before its `max_wait`; only then does it submit. Every one of those waits must then
//! return early, after the submission began, and within 2 s of it: no poll can do that, only
//! the notification of the submission, sent by another process (the test) through PostgreSQL.
//! All 10 batches must pass it, with every executor alive at the time. Likewise the
//! executions recovered from the killed executor become due when the watcher process times
//! them out (the submissions use no retry backoff), and each must be locked by a survivor
//! within 2 s of its `TemporarilyTimedOut` event: survivors that are idle by then (the rest of
//! the batch takes about a second, the lease 1.5 s) could take up to 10 s if they only polled.
//!
//! Without `STELE_TEST_POSTGRES_URL` the test prints `SKIPPED: ...` and passes, except under
//! `CI=true`, where it fails.

mod common;

use common::{all_ids, assert_finished_once};
use concepts::{
    ClockFn, CreateRequest, DbConnection, ExecutionEventInner, ExecutionId, ExecutorId,
    ListExecutionsFilter, Pagination, PendingState, PendingStateKind,
};
use durability::{Line, Workload, wall_ms};
use executor::Now;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};
use storage_postgres::PostgresStore;
use test_support::{
    postgres::{TestDatabase, TestServer},
    process::{Output, Processes},
};

/// Executions in all.
const EXECUTIONS: usize = 5_000;
/// They are submitted in this many batches.
const BATCHES: usize = 10;
/// How many executor processes run.
const EXECUTORS: usize = 4;
/// The first executor is killed in this batch (0-based), i.e. once half are finished.
const KILL_BATCH: usize = 5;
/// The executors' `tick_sleep`: how late polling alone would find new work.
const EXECUTOR_TICK: Duration = Duration::from_secs(10);
/// A wake-up by notification must come this soon; a poll could take up to `EXECUTOR_TICK`.
const WAKE_BOUND: Duration = Duration::from_secs(2);
/// How long every executor must have been waiting before a batch is submitted.
const SETTLE: Duration = Duration::from_millis(200);
/// A wait with less than this left before its `max_wait` is not trusted to span a batch.
const MIN_WAIT_LEFT: Duration = Duration::from_secs(5);
/// The longest any one phase may take before the test gives up.
const PHASE_TIMEOUT: Duration = Duration::from_secs(60);

/// Arguments of every node (the lease is the node's default of 1.5 s).
const COMMON_ARGS: [&str; 6] = [
    "--submit",
    "never",
    "--poll-ms",
    "1000",
    "--timeout-s",
    "150",
];

/// One `wait_for_pending` call of an executor, as it reported it.
#[derive(Debug, Clone, Copy)]
struct Wait {
    start: i64,
    end: i64,
    early: bool,
}

/// What a node process printed so far (its process is the one of the same index in
/// [`Fleet::processes`]).
struct Node {
    executor: bool,
    /// From its `executor <id>` line.
    executor_id: Option<ExecutorId>,
    /// The `wait_for_pending` it is in, if any: its index in `waits` once it returns, and its
    /// start.
    open_wait: Option<(usize, i64)>,
    waits: Vec<Wait>,
    /// Its `locked <n>` lines so far.
    locked_lines: usize,
    summary: Option<serde_json::Value>,
}

impl Node {
    fn take(&mut self, line: &str) {
        match Line::parse(line).unwrap_or_else(|e| panic!("a node printed {e}")) {
            Line::Executor(id) => self.executor_id = Some(id),
            Line::Waiting { start } => self.open_wait = Some((self.waits.len(), start)),
            Line::Waited { start, end, early } => {
                self.open_wait = None;
                self.waits.push(Wait { start, end, early });
            }
            Line::Locked(_) => self.locked_lines += 1,
            Line::Summary(summary) => self.summary = Some(summary),
            _ => {}
        }
    }
}

/// The node processes and what each printed.
struct Fleet {
    nodes: Vec<Node>,
    processes: Processes,
    _dir: tempfile::TempDir,
    /// Set once the nodes may exit (everything is finished).
    exits_expected: bool,
}

impl Fleet {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        Self {
            nodes: Vec::new(),
            processes: Processes::new(dir.path()),
            _dir: dir,
            exits_expected: false,
        }
    }

    fn start(&mut self, label: &str, executor: bool, url: &str, args: &[&str]) {
        let mut command = common::node_command(url, EXECUTIONS);
        command.args(COMMON_ARGS).args(args);
        self.processes.start(label, command);
        self.nodes.push(Node {
            executor,
            executor_id: None,
            open_wait: None,
            waits: Vec::new(),
            locked_lines: 0,
            summary: None,
        });
    }

    /// Takes the lines that arrive within `wait`; false if none did.
    fn pump(&mut self, wait: Duration) -> bool {
        let mut next = self.processes.next(wait);
        if next.is_none() {
            return false;
        }
        while let Some((idx, output)) = next {
            if let Output::Line(line) = output {
                self.nodes[idx].take(&line);
            }
            next = self.processes.try_next();
        }
        true
    }

    fn alive(&self, idx: usize) -> bool {
        !self.processes.is_killed(idx)
    }

    /// Takes lines until `done` holds; fails after `PHASE_TIMEOUT`, or when a node that was
    /// not killed exits early (its standard error is shown).
    fn until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        loop {
            if done(self) {
                return;
            }
            if let Some(idx) = (0..self.nodes.len()).find(|&idx| {
                self.processes.is_closed(idx) && self.alive(idx) && !self.exits_expected
            }) {
                let label = self.processes.label(idx).to_string();
                self.fail(&format!("{label} exited while waiting for {what}"));
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "gave up after {PHASE_TIMEOUT:?} waiting for {what}"
                ));
            }
            self.pump(Duration::from_millis(20));
        }
    }

    fn executors(&self) -> impl Iterator<Item = (usize, &Node)> {
        self.nodes.iter().enumerate().filter(|(_, n)| n.executor)
    }

    /// The live executors.
    fn live_executors(&self) -> impl Iterator<Item = (usize, &Node)> {
        self.executors().filter(|(idx, _)| self.alive(*idx))
    }

    /// Kills every node and panics with `what` and the nodes' standard error.
    fn fail(&mut self, what: &str) -> ! {
        self.processes.fail(what)
    }
}

/// `url` with `params` appended to its query.
fn with_params(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// How many server sessions of `database` carry `application_name`.
async fn sessions(database: &TestDatabase, application_name: &str) -> i64 {
    database
        .with_client(async |client| {
            client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
                    &[&database.name(), &application_name],
                )
                .await
                .expect("reading pg_stat_activity")
                .get(0)
        })
        .await
}

/// Whether any execution is in `state` (one row is enough).
async fn any_in(db: &dyn DbConnection, state: PendingStateKind) -> bool {
    let filter = ListExecutionsFilter {
        state: Some(state),
        ..ListExecutionsFilter::default()
    };
    let page = db
        .list_executions(
            filter,
            Pagination {
                cursor: None,
                length: 1,
            },
        )
        .await
        .expect("list_executions");
    !page.is_empty()
}

/// True once `submitted` executions are finished: a cheap look for anything unfinished
/// first, then an exact count.
async fn all_finished(db: &dyn DbConnection, submitted: usize) -> bool {
    for state in [
        PendingStateKind::Locked,
        PendingStateKind::PendingAt,
        PendingStateKind::BlockedByJoinSet,
    ] {
        if any_in(db, state).await {
            return false;
        }
    }
    all_ids(db, Some(PendingStateKind::Finished)).await.len() == submitted
}

/// The requests of batch `batch`: `EXECUTIONS / BATCHES` executions due now (as any client
/// submits: nothing about the timing is staged), with no retry backoff.
fn batch_requests(batch: usize) -> Vec<CreateRequest> {
    let workload = Workload::new().expect("the node's workload");
    let size = EXECUTIONS / BATCHES;
    let now = Now.now();
    (batch * size..(batch + 1) * size)
        .map(|idx| workload.request(idx, now, Duration::ZERO, 10))
        .collect()
}

/// What the test saw of one batch's submission.
struct Submitted {
    /// Wall clock right before `create_batch`, and right after it returned.
    begin: i64,
    end: i64,
    /// The executors asleep in `wait_for_pending` at `begin`: (node index, (index of the wait,
    /// its start)).
    sleeping: Vec<(usize, (usize, i64))>,
}

/// Called once everything submitted so far is finished (nothing is due from then on): waits
/// until every live executor has been seen inside one `wait_for_pending` for `SETTLE` (so it
/// did not return at once from finding something due), with at least `MIN_WAIT_LEFT` to go
/// before its `max_wait`; returns those waits.
fn await_all_asleep(fleet: &mut Fleet, batch: usize) -> Vec<(usize, (usize, i64))> {
    let mut asleep_since: Option<Instant> = None;
    let mut sleeping = Vec::new();
    fleet.until(
        &format!("every executor asleep before batch {batch}"),
        |fleet| {
            let now = wall_ms();
            let min_start = now - (EXECUTOR_TICK - MIN_WAIT_LEFT).as_millis() as i64;
            let current: Option<Vec<(usize, (usize, i64))>> = fleet
                .live_executors()
                .map(|(idx, n)| {
                    n.open_wait
                        .filter(|(_, start)| *start >= min_start)
                        .map(|wait| (idx, wait))
                })
                .collect();
            match current {
                Some(current) if current == sleeping => {
                    asleep_since.is_some_and(|since| since.elapsed() >= SETTLE)
                }
                Some(current) => {
                    sleeping = current;
                    asleep_since = Some(Instant::now());
                    false
                }
                None => {
                    sleeping.clear();
                    asleep_since = None;
                    false
                }
            }
        },
    );
    sleeping
}

/// Every wait that was asleep at a batch's submission must have been woken early by it.
fn check_woken(fleet: &Fleet, batch: usize, submitted: &Submitted) -> Duration {
    let mut slowest = Duration::ZERO;
    for &(idx, (wait_idx, start)) in &submitted.sleeping {
        let node = &fleet.nodes[idx];
        let Some(wait) = node.waits.get(wait_idx) else {
            panic!(
                "batch {batch}: {} is still in the wait it began at {start} (the batch was \
                 submitted at {}): the submission did not wake it",
                fleet.processes.label(idx),
                submitted.begin
            );
        };
        let label = fleet.processes.label(idx);
        assert_eq!(
            wait.start, start,
            "{label}: the waits are reported in order",
        );
        assert!(
            wait.early,
            "batch {batch}: {}'s wait_for_pending, asleep since {start} when the batch was \
             submitted at {}, ran to its {EXECUTOR_TICK:?} max_wait (ended {}): it was not woken \
             by the submission's notification, only by polling",
            label, submitted.begin, wait.end
        );
        assert!(
            wait.end >= submitted.begin,
            "batch {batch}: {label}'s wait ended at {} before the submission at {}",
            wait.end,
            submitted.begin
        );
        let latency = Duration::from_millis((wait.end - submitted.begin).unsigned_abs());
        assert!(
            latency < WAKE_BOUND,
            "batch {batch}: {label} woke {latency:?} after the submission, no sooner than a poll",
        );
        slowest = slowest.max(latency);
    }
    slowest
}

/// The test's own store handle, on the same runtime for the whole test.
struct Checker {
    runtime: tokio::runtime::Runtime,
    db: Arc<dyn DbConnection>,
}

/// Kills the first executor as soon as it has locked some of the current batch, waits until
/// its sessions are gone from the server, and returns the executions it held locked then.
fn kill_first_executor(
    fleet: &mut Fleet,
    checker: &Checker,
    database: &TestDatabase,
) -> (ExecutorId, HashSet<ExecutionId>) {
    let victim = 0;
    let locked_before = fleet.nodes[victim].locked_lines;
    fleet.until("the first executor to lock part of the batch", |fleet| {
        fleet.nodes[victim].locked_lines > locked_before
    });
    let status = fleet.processes.kill(victim);
    assert!(!status.success(), "killed, yet it exited 0");
    let killed = fleet.nodes[victim]
        .executor_id
        .expect("the executor printed its id");
    // A commit it sent just before the kill may still be running on the server: read the
    // store only once every session of the process is gone.
    let application_name = application_name(victim);
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while checker
        .runtime
        .block_on(sessions(database, &application_name))
        > 0
    {
        assert!(
            Instant::now() < deadline,
            "the killed process's sessions are still on the server after {PHASE_TIMEOUT:?}"
        );
        fleet.pump(Duration::from_millis(20));
    }
    let held: HashSet<ExecutionId> = checker.runtime.block_on(async {
        let mut held = HashSet::new();
        for id in all_ids(checker.db.as_ref(), Some(PendingStateKind::Locked)).await {
            let state = checker.db.get(&id).await.expect("a state").pending_state;
            if let PendingState::Locked { executor_id, .. } = state
                && executor_id == killed
            {
                held.insert(id);
            }
        }
        held
    });
    assert!(
        !held.is_empty(),
        "the killed executor held no lock at the kill: nothing to recover"
    );
    eprintln!(
        "killed {} ({killed}) after it locked part of batch {KILL_BATCH}; it held {} executions",
        fleet.processes.label(victim),
        held.len()
    );
    (killed, held)
}

fn application_name(idx: usize) -> String {
    format!("stele_mp_node_{idx}")
}

/// The final checks of every log; returns the slowest recovery (timeout to the next lock).
fn check_logs(
    checker: &Checker,
    killed: ExecutorId,
    held: &HashSet<ExecutionId>,
    survivors: &HashSet<ExecutorId>,
) -> Duration {
    checker.runtime.block_on(async {
        let db = checker.db.as_ref();
        let ids = all_ids(db, None).await;
        let unique: HashSet<&ExecutionId> = ids.iter().collect();
        assert_eq!(ids.len(), EXECUTIONS, "executions in the store");
        assert_eq!(unique.len(), EXECUTIONS, "distinct executions in the store");
        let mut interrupted = HashSet::new();
        let mut slowest_recovery = Duration::ZERO;
        let mut runs_by: HashMap<ExecutorId, usize> = HashMap::new();
        for id in &ids {
            let log = db.get(id).await.unwrap_or_else(|e| panic!("get {id}: {e}"));
            assert_finished_once(id, &log);
            for (at, event) in log.events.iter().enumerate() {
                let ExecutionEventInner::Locked(locked) = &event.event else {
                    continue;
                };
                *runs_by.entry(locked.executor_id).or_default() += 1;
                let next = &log.events[at + 1].event;
                if locked.executor_id == killed
                    && !matches!(next, ExecutionEventInner::Finished { .. })
                {
                    interrupted.insert(id.clone());
                }
            }
            if !held.contains(id) {
                continue;
            }
            // Locked by the killed executor, timed out by the watcher, locked again by a
            // survivor, finished.
            let kinds: Vec<&str> = log.events.iter().map(|e| e.event.variant_name()).collect();
            let timed_out_at = log
                .events
                .iter()
                .position(|e| matches!(e.event, ExecutionEventInner::TemporarilyTimedOut { .. }))
                .unwrap_or_else(|| panic!("{id} was held by the killed executor, yet no watcher timed it out: {kinds:?}"));
            let Some(ExecutionEventInner::Locked(before)) =
                timed_out_at.checked_sub(1).map(|at| &log.events[at].event)
            else {
                panic!("{id}: the timeout does not follow a Locked: {kinds:?}");
            };
            assert_eq!(before.executor_id, killed, "{id}: whose lease timed out");
            let Some(ExecutionEventInner::Locked(after)) =
                log.events.get(timed_out_at + 1).map(|e| &e.event)
            else {
                panic!("{id}: nothing locked it after the timeout: {kinds:?}");
            };
            assert!(
                survivors.contains(&after.executor_id),
                "{id} was finished by {}, not by a surviving executor",
                after.executor_id
            );
            let recovery = (log.events[timed_out_at + 1].created_at
                - log.events[timed_out_at].created_at)
                .to_std()
                .unwrap_or_default();
            slowest_recovery = slowest_recovery.max(recovery);
        }
        assert_eq!(
            &interrupted, held,
            "the runs of the killed executor that did not finish are exactly those it held at \
             the kill"
        );
        for executor_id in runs_by.keys() {
            assert!(
                *executor_id == killed || survivors.contains(executor_id),
                "a Locked event names {executor_id}, which is none of the executors"
            );
        }
        eprintln!(
            "final: {} executions, all finished once; runs per executor: {:?}",
            ids.len(),
            runs_by.values().collect::<Vec<_>>()
        );
        slowest_recovery
    })
}

#[test]
fn postgres_executors_in_many_processes_share_the_work_and_wake_each_other() {
    let Some(server) = TestServer::or_skip(
        "postgres_executors_in_many_processes_share_the_work_and_wake_each_other",
    ) else {
        return;
    };
    let started = Instant::now();
    let runtime = common::runtime();
    let database = runtime.block_on(TestDatabase::create(&server));
    let mut test_config = database.config.clone();
    test_config.pool_size = 4;
    let db: Arc<dyn DbConnection> = Arc::new(
        runtime
            .block_on(PostgresStore::connect(test_config))
            .expect("the test's store"),
    );
    let checker = Checker { runtime, db };

    let mut fleet = Fleet::new();
    let executor_tick = EXECUTOR_TICK.as_millis().to_string();
    for idx in 0..EXECUTORS {
        let url = with_params(
            &database.url,
            &format!("pool_size=8&application_name={}", application_name(idx)),
        );
        fleet.start(
            &format!("executor-{idx}"),
            true,
            &url,
            &[
                "--role",
                "executor",
                "--executor-tick-ms",
                &executor_tick,
                "--trace-waits",
                "--concurrency",
                "16",
                "--batch-size",
                "16",
                "--work-ms",
                "20",
            ],
        );
    }
    let url = with_params(
        &database.url,
        &format!(
            "pool_size=4&application_name={}",
            application_name(EXECUTORS)
        ),
    );
    fleet.start(
        "watcher",
        false,
        &url,
        &[
            "--role",
            "watcher",
            "--tick-ms",
            "100",
            "--leeway-ms",
            "100",
        ],
    );
    fleet.until("every executor's id", |fleet| {
        fleet.executors().all(|(_, n)| n.executor_id.is_some())
    });

    let mut kill = None;
    let mut slowest_wake = Duration::ZERO;
    let work_started = Instant::now();
    for batch in 0..BATCHES {
        let sleeping = await_all_asleep(&mut fleet, batch);
        let begin = wall_ms();
        checker
            .runtime
            .block_on(checker.db.create_batch(batch_requests(batch)))
            .expect("submitting a batch");
        let submitted = Submitted {
            begin,
            end: wall_ms(),
            sleeping,
        };
        if batch == KILL_BATCH {
            kill = Some(kill_first_executor(&mut fleet, &checker, &database));
        }
        let expected = (batch + 1) * (EXECUTIONS / BATCHES);
        fleet.until(&format!("batch {batch} to finish"), |fleet| {
            fleet.pump(Duration::from_millis(30));
            checker
                .runtime
                .block_on(all_finished(checker.db.as_ref(), expected))
        });
        let wake = check_woken(&fleet, batch, &submitted);
        slowest_wake = slowest_wake.max(wake);
        eprintln!(
            "batch {batch}: {} asleep executors all woken, the last {wake:?} after the \
             submission (create_batch took {} ms); finished {:?} after the first submission",
            submitted.sleeping.len(),
            submitted.end - submitted.begin,
            work_started.elapsed()
        );
    }
    let work_took = work_started.elapsed();

    // Every node sees everything finished at its next poll and exits 0 with a summary.
    fleet.exits_expected = true;
    fleet.until("every node to exit", |fleet| {
        (0..fleet.nodes.len()).all(|idx| fleet.processes.is_closed(idx) || !fleet.alive(idx))
    });
    for idx in 0..fleet.nodes.len() {
        if !fleet.alive(idx) {
            continue;
        }
        let status = fleet.processes.wait(idx);
        let label = fleet.processes.label(idx);
        assert!(status.success(), "{label} exited with {status}");
        let summary = fleet.nodes[idx]
            .summary
            .as_ref()
            .unwrap_or_else(|| panic!("{label} printed no summary"));
        eprintln!("{label}: {summary}");
    }

    let (killed, held) = kill.expect("the kill batch ran");
    let survivors: HashSet<ExecutorId> = fleet
        .live_executors()
        .map(|(_, n)| n.executor_id.expect("an executor id"))
        .collect();
    assert_eq!(survivors.len(), EXECUTORS - 1, "surviving executors");
    let slowest_recovery = check_logs(&checker, killed, &held, &survivors);
    assert!(
        slowest_recovery < WAKE_BOUND,
        "a timed-out execution waited {slowest_recovery:?} for a survivor to lock it: polling, \
         not a wake-up by the watcher's notification"
    );
    eprintln!(
        "{EXECUTIONS} executions in {BATCHES} batches took {work_took:?} with an executor \
         tick_sleep of {EXECUTOR_TICK:?} (polling alone: at least ~{:?}); slowest wake-up \
         {slowest_wake:?}, slowest recovery of a killed run {slowest_recovery:?}; {:?} in all",
        EXECUTOR_TICK * (BATCHES as u32 - 1),
        started.elapsed()
    );
    checker.runtime.block_on(checker.db.close());
    drop(fleet);
    drop(database);
}
