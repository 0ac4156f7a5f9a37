//! P2, the crash test: `durability-node` runs as a real child process over a few thousand
//! executions, is killed with SIGKILL at several points of its progress, and is started
//! again on the same store until everything is finished. Then, in the test process:
//!
//! - the store holds exactly N executions (none lost, none duplicated);
//! - every log has exactly one `Finished` event, it is the last one, its result is the
//!   execution's own parameter (no result went to the wrong execution), and the next version
//!   stays at it;
//! - every stored pending state equals `concepts::derive_pending_state` of its log;
//! - every execution the node acknowledged (a `finished <id>` line, printed only after a read
//!   of the store returned it finished) before a kill is finished in the crash image, i.e. in
//!   a copy of the files taken right after the kill, before any restart;
//! - every execution that was `Locked` when the node was killed was recovered by the timers
//!   watcher of the next node (a `TemporarilyTimedOut` event) and then finished;
//! - a restarted node resumes the executions, it never submits them again;
//! - SQLite: `PRAGMA integrity_check` is `ok` on every crash image and on the final file.
//!
//! A second test kills nodes while they submit, each on a fresh SQLite file: once right after
//! the `submitted` line, then at times bisected towards the moment the batch commits. Every
//! crash image must hold all N executions or none (the submission is one transaction), and a
//! restart on the committed one finishes them all.
//!
//! A third test runs workflows (`--workload workflow`: a fan-out to three children, a durable
//! sleep, a call) and kills their nodes at several points: every workflow must finish with the
//! result of an uninterrupted run, every child exist once, and every history have the expected
//! shape, no step recorded twice.
//!
//! PostgreSQL runs the kill/restart tests too when `STELE_TEST_POSTGRES_URL` names a server
//! (a fresh database per test); without it that test prints `SKIPPED: ...` and passes, except
//! under `CI=true`, where it fails.

mod common;

use common::{all_ids, assert_finished_once, assert_integrity, runtime, sibling};
use concepts::{ClockFn as _, DbClientExt as _};
use concepts::{
    DbConnection, ExecutionEventInner, ExecutionId, Json, PendingStateKind,
    SupportedFunctionReturnValue, Version, derive_pending_state,
};
use durability::{Line, flows};
use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};
use storage_postgres::PostgresStore;
use storage_sqlite::{SqliteConfig, SqlitePool};
use test_support::{
    postgres::{TestDatabase, TestServer},
    process::{Output, Processes},
};

/// Executions per test: enough that every kill lands in the middle of the work.
const EXECUTIONS: usize = 3_000;
/// The kill points, as fractions of the executions finished (cumulative over restarts).
const KILL_POINTS: [f64; 3] = [0.1, 0.5, 0.9];
/// The node's pace: 16 runs of 20 ms at once (at most 800 executions/s), so the last 10 %
/// take long enough to be cut short. Leases of 1.5 s and a 100 ms watcher tick (the node's
/// defaults) recover a killed node's work soon after a restart.
const NODE_ARGS: [&str; 8] = [
    "--concurrency",
    "16",
    "--work-ms",
    "20",
    "--poll-ms",
    "50",
    "--timeout-s",
    "120",
];
/// How many times the submission test kills a node while it submits, bisecting towards the
/// moment the batch commits.
const SUBMISSION_PROBES: usize = 6;
/// The longest a node may run before the test gives up on it.
const NODE_TIMEOUT: Duration = Duration::from_secs(150);

/// Where the store of a test lives.
enum Store {
    Sqlite {
        dir: tempfile::TempDir,
        path: PathBuf,
    },
    Postgres {
        dir: tempfile::TempDir,
        database: Box<TestDatabase>,
    },
}

impl Store {
    fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("stele.sqlite");
        Self::Sqlite { dir, path }
    }

    /// The `--database` argument of the node.
    fn url(&self) -> String {
        match self {
            Self::Sqlite { path, .. } => format!("sqlite://{}", path.display()),
            Self::Postgres { database, .. } => database.url.clone(),
        }
    }

    /// The SQLite file, for a SQLite store.
    fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Self::Sqlite { path, .. } => Some(path),
            Self::Postgres { .. } => None,
        }
    }

    /// Where the nodes' standard error goes.
    fn log_dir(&self) -> PathBuf {
        match self {
            Self::Sqlite { dir, .. } | Self::Postgres { dir, .. } => dir.path().to_path_buf(),
        }
    }

    /// Opens the store the node left behind. For SQLite, `path` may name a crash image.
    async fn open(&self, sqlite_path: Option<&Path>) -> Arc<dyn DbConnection> {
        match self {
            Self::Sqlite { path, .. } => {
                let path = sqlite_path.unwrap_or(path);
                Arc::new(
                    SqlitePool::open(SqliteConfig::new(path))
                        .await
                        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display())),
                )
            }
            Self::Postgres { database, .. } => Arc::new(
                PostgresStore::connect(database.config.clone())
                    .await
                    .unwrap_or_else(|e| {
                        panic!("connecting to test database {}: {e}", database.name())
                    }),
            ),
        }
    }

    /// What the store looks like right after a kill: for SQLite, a copy of the database file
    /// and its write-ahead log (so that the next node recovers the original itself), checked
    /// with `PRAGMA integrity_check`; for PostgreSQL, the database itself.
    fn crash_image(&self, label: &str) -> Option<(PathBuf, u64)> {
        let Self::Sqlite { dir, path } = self else {
            return None;
        };
        let image_dir = dir.path().join(label);
        std::fs::create_dir(&image_dir).expect("a crash image dir");
        let image = image_dir.join("stele.sqlite");
        std::fs::copy(path, &image).expect("copying the database file");
        let wal = sibling(path, "-wal");
        let wal_bytes = if wal.exists() {
            std::fs::copy(&wal, sibling(&image, "-wal")).expect("copying the write-ahead log")
        } else {
            0
        };
        assert_integrity(&image);
        Some((image, wal_bytes))
    }
}

/// A running node and the lines of its standard output.
struct Node {
    label: String,
    process: Processes,
    started: Instant,
}

/// What one node printed.
#[derive(Default)]
struct Printed {
    /// Its first line (`submitting N`, `resumed N`) and the lines that followed it before the
    /// first `finished` or `progress` (`submitted N`, `executor <id>`).
    submission: Vec<Line>,
    /// Every `finished <id>`.
    finished: Vec<ExecutionId>,
    /// The last `progress F/N`: F.
    progress: usize,
    /// The JSON summary, if it got that far.
    summary: Option<serde_json::Value>,
    /// When the test read the `submitting` line.
    submitting_at: Option<Instant>,
    /// When the test read the `submitted` line.
    submitted_at: Option<Instant>,
    /// When the test read the `executor` line, printed once the node started.
    started_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl Printed {
    fn take(&mut self, line: &str) {
        let line = Line::parse(line).unwrap_or_else(|e| panic!("the node printed {e}"));
        match line {
            Line::Finished(id) => self.finished.push(id),
            Line::Progress { finished, .. } => self.progress = finished,
            Line::Summary(summary) => self.summary = Some(summary),
            line => {
                match line {
                    Line::Submitting(_) => self.submitting_at = Some(Instant::now()),
                    Line::Submitted(_) => self.submitted_at = Some(Instant::now()),
                    Line::Executor(_) => self.started_at = Some(executor::Now.now()),
                    _ => {}
                }
                self.submission.push(line);
            }
        }
    }

    /// Whether the node began with `expected` (`Submitting` or `Resumed`, whatever its count).
    fn began_with(&self, expected: fn(&Line) -> bool) -> bool {
        self.submission.first().is_some_and(expected)
    }
}

impl Node {
    fn start(store: &Store, label: &str) -> Self {
        Self::start_with(store, label, EXECUTIONS, &NODE_ARGS)
    }

    /// A node over `executions` executions (workflows with `--workload workflow`), with `args`.
    fn start_with(store: &Store, label: &str, executions: usize, args: &[&str]) -> Self {
        let mut process = Processes::new(&store.log_dir());
        let mut command = common::node_command(&store.url(), executions);
        command.args(args);
        process.start(label, command);
        Self {
            label: label.to_string(),
            process,
            started: Instant::now(),
        }
    }

    /// Reads lines until `kill_when` holds, SIGKILLs the node, and returns everything it
    /// printed (lines still in the pipe included: they were printed before the kill).
    fn kill_when(mut self, kill_when: impl Fn(&Printed) -> bool) -> Printed {
        let mut printed = Printed::default();
        while !kill_when(&printed) {
            match self.next_line() {
                Some(line) => printed.take(&line),
                None => self.fail("exited before its kill point (make the work slower)"),
            }
        }
        self.kill(printed)
    }

    /// Reads lines until one starts with `prefix`, waits `delay`, SIGKILLs the node, and
    /// returns everything it printed.
    fn kill_after(mut self, prefix: &str, delay: Duration) -> Printed {
        let mut printed = Printed::default();
        loop {
            let Some(line) = self.next_line() else {
                self.fail(&format!("exited before printing `{prefix}`"))
            };
            printed.take(&line);
            if line.starts_with(prefix) {
                break;
            }
        }
        std::thread::sleep(delay);
        self.kill(printed)
    }

    /// SIGKILLs the node and adds the lines still in the pipe (printed before the kill).
    fn kill(mut self, mut printed: Printed) -> Printed {
        let status = self.process.kill(0);
        assert!(!status.success(), "{}: killed, yet it exited 0", self.label);
        while let Some((_, Output::Line(line))) = self.process.next(NODE_TIMEOUT) {
            printed.take(&line);
        }
        printed
    }

    /// Reads lines until the node exits; it must exit 0 with a summary.
    fn finish(mut self) -> Printed {
        let mut printed = Printed::default();
        while let Some(line) = self.next_line() {
            printed.take(&line);
        }
        let status = self.process.wait(0);
        if !status.success() {
            self.fail(&format!("exited with {status}"));
        }
        if printed.summary.is_none() {
            self.fail("exited without a summary");
        }
        printed
    }

    /// The next line, or `None` once the node closed its output.
    fn next_line(&mut self) -> Option<String> {
        let left = NODE_TIMEOUT.saturating_sub(self.started.elapsed());
        match self.process.next(left) {
            Some((_, Output::Line(line))) => Some(line),
            Some((_, Output::Closed)) => None,
            None => self.fail(&format!("still running after {NODE_TIMEOUT:?}")),
        }
    }

    fn fail(&mut self, what: &str) -> ! {
        let what = format!("{}: {what}", self.label);
        self.process.fail(&what)
    }
}

/// What a crash image holds.
struct CrashImage {
    executions: usize,
    locked: Vec<ExecutionId>,
    finished: usize,
    /// SQLite: the size of the write-ahead log the kill left.
    wal_bytes: u64,
}

/// Checks a store right after a kill (for SQLite, a copy of it: see [`Store::crash_image`]):
/// all or none of the executions, every acknowledged one finished. Returns what it found.
fn check_crash_image(
    runtime: &tokio::runtime::Runtime,
    store: &Store,
    label: &str,
    acknowledged: &HashSet<ExecutionId>,
) -> CrashImage {
    let image = store.crash_image(label);
    let wal_bytes = image.as_ref().map_or(0, |(_, bytes)| *bytes);
    let image = image.map(|(path, _)| path);
    runtime.block_on(read_crash_image(
        store,
        image.as_deref(),
        acknowledged,
        wal_bytes,
    ))
}

async fn read_crash_image(
    store: &Store,
    image: Option<&Path>,
    acknowledged: &HashSet<ExecutionId>,
    wal_bytes: u64,
) -> CrashImage {
    let db = store.open(image).await;
    let ids = all_ids(db.as_ref(), None).await;
    assert!(
        ids.is_empty() || ids.len() == EXECUTIONS,
        "the crash image holds {} executions: a submission is all or nothing",
        ids.len()
    );
    for id in acknowledged {
        let state = db
            .get(id)
            .await
            .unwrap_or_else(|e| panic!("{id} was acknowledged as finished before the kill: {e}"))
            .pending_state;
        assert!(
            state.is_finished(),
            "{id} was acknowledged as finished before the kill, but the crash image says {state:?}"
        );
    }
    let locked = all_ids(db.as_ref(), Some(PendingStateKind::Locked)).await;
    let finished = all_ids(db.as_ref(), Some(PendingStateKind::Finished))
        .await
        .len();
    db.close().await;
    CrashImage {
        executions: ids.len(),
        locked,
        finished,
        wal_bytes,
    }
}

/// The final checks, after the last node exited 0.
async fn check_final(
    store: &Store,
    acknowledged: &HashSet<ExecutionId>,
    locked_at_kills: &[ExecutionId],
) {
    let db = store.open(None).await;
    let ids = all_ids(db.as_ref(), None).await;
    let unique: HashSet<&ExecutionId> = ids.iter().collect();
    assert_eq!(ids.len(), EXECUTIONS, "executions in the store");
    assert_eq!(unique.len(), EXECUTIONS, "distinct executions in the store");
    let mut timed_out = HashSet::new();
    let mut events = 0;
    for id in &ids {
        let log = db.get(id).await.unwrap_or_else(|e| panic!("get {id}: {e}"));
        events += log.events.len();
        assert_finished_once(id, &log);
        let finished_version = u32::try_from(log.events.len() - 1).expect("a short log");
        assert_eq!(
            log.next_version,
            Version(finished_version),
            "{id}: the next version stays at Finished"
        );
        if log
            .events
            .iter()
            .any(|e| matches!(e.event, ExecutionEventInner::TemporarilyTimedOut { .. }))
        {
            timed_out.insert(id.clone());
        }
    }
    for id in acknowledged {
        assert!(unique.contains(id), "acknowledged {id} is not in the store");
    }
    for id in locked_at_kills {
        assert!(
            timed_out.contains(id),
            "{id} was locked by a killed node, yet no watcher timed it out"
        );
    }
    eprintln!(
        "final: {} executions, {events} events, all finished once; {} were timed out by a \
         watcher after a kill; {} acknowledgements held",
        ids.len(),
        timed_out.len(),
        acknowledged.len()
    );
    db.close().await;
}

/// Kills the node at every kill point and restarts it, then lets the last one finish and
/// checks everything.
fn kill_and_restart(store: &Store) {
    let started = Instant::now();
    let runtime = runtime();
    let mut acknowledged: HashSet<ExecutionId> = HashSet::new();
    let mut locked_at_kills = Vec::new();
    for (idx, point) in KILL_POINTS.iter().enumerate() {
        let label = format!("node-{idx}");
        let kill_at = (EXECUTIONS as f64 * point) as usize;
        let printed = Node::start(store, &label).kill_when(|p| p.progress >= kill_at);
        let (expected_start, began_so): (_, fn(&Line) -> bool) = if idx == 0 {
            ("submitting", |l| matches!(l, Line::Submitting(_)))
        } else {
            ("resumed", |l| matches!(l, Line::Resumed(_)))
        };
        assert!(
            printed.began_with(began_so),
            "{label} began with {:?}, expected `{expected_start} ...`",
            printed.submission
        );
        assert!(
            printed.progress < EXECUTIONS,
            "{label} finished everything before it was killed"
        );
        acknowledged.extend(printed.finished);
        let found = check_crash_image(&runtime, store, &format!("crash-{idx}"), &acknowledged);
        assert_eq!(
            found.executions, EXECUTIONS,
            "{label}: executions after the kill"
        );
        let sqlite = if store.sqlite_path().is_some() {
            format!(", {} bytes of WAL, integrity ok", found.wal_bytes)
        } else {
            String::new()
        };
        eprintln!(
            "{label}: killed at {} of {EXECUTIONS} finished (point {point}); the crash image \
             has {} finished, {} locked{sqlite}; {} acknowledged so far",
            printed.progress,
            found.finished,
            found.locked.len(),
            acknowledged.len()
        );
        locked_at_kills.extend(found.locked);
    }
    assert!(
        !locked_at_kills.is_empty(),
        "no kill interrupted a running execution: the test recovered nothing"
    );
    let last = Node::start(store, "node-last").finish();
    assert!(
        last.began_with(|l| matches!(l, Line::Resumed(_))),
        "the last node began with {:?}, expected `resumed ...`",
        last.submission
    );
    let summary = last.summary.expect("checked by finish");
    eprintln!("node-last: {summary}");
    assert_eq!(summary["finished"], EXECUTIONS, "the last node's summary");
    runtime.block_on(check_final(store, &acknowledged, &locked_at_kills));
    if let Some(path) = store.sqlite_path() {
        assert_integrity(path);
    }
    eprintln!("kill and restart: {:?} in all", started.elapsed());
}

#[test]
fn sqlite_kill_and_restart_loses_nothing() {
    let store = Store::sqlite();
    kill_and_restart(&store);
}

/// Starts a node on a fresh SQLite store, kills it `delay` after the line that starts with
/// `after`, and checks the crash image.
fn probe_submission(
    runtime: &tokio::runtime::Runtime,
    label: &str,
    after: &str,
    delay: Duration,
) -> (Store, Printed, CrashImage) {
    let store = Store::sqlite();
    let printed = Node::start(&store, label).kill_after(after, delay);
    assert!(
        printed.began_with(|l| matches!(l, Line::Submitting(_))),
        "{label} began with {:?}: the store was empty",
        printed.submission
    );
    let acknowledged = printed.finished.iter().cloned().collect();
    let found = check_crash_image(runtime, &store, label, &acknowledged);
    eprintln!(
        "{label}: killed {delay:?} after `{after}`: the crash image holds {} executions and \
         {} bytes of WAL, integrity ok",
        found.executions, found.wal_bytes
    );
    (store, printed, found)
}

#[test]
fn sqlite_kill_during_submission_is_all_or_nothing() {
    let runtime = runtime();
    // Killed after `submitted`: the batch committed. How long it took aims the other kills.
    let (store, printed, found) =
        probe_submission(&runtime, "submit-committed", "submitted", Duration::ZERO);
    assert_eq!(found.executions, EXECUTIONS, "killed after `submitted`");
    let took = printed
        .submitted_at
        .zip(printed.submitting_at)
        .map(|(submitted, submitting)| submitted - submitting)
        .expect("both lines were printed");
    // Bisect the kill time towards the commit: every probe runs on a fresh store and must
    // find all of the executions or none.
    let (mut before, mut after) = (Duration::ZERO, took + took / 2);
    let mut outcomes = (0, 0);
    for probe in 0..SUBMISSION_PROBES {
        let delay = (before + after) / 2;
        let label = format!("submit-{probe}");
        let (_, _, found) = probe_submission(&runtime, &label, "submitting", delay);
        if found.executions == EXECUTIONS {
            after = delay;
            outcomes.1 += 1;
        } else {
            before = delay;
            outcomes.0 += 1;
        }
    }
    eprintln!(
        "submission took {took:?} uninterrupted; of {SUBMISSION_PROBES} kills during it, {} \
         found nothing and {} found everything; the commit lies between {before:?} and \
         {after:?} after `submitting`",
        outcomes.0, outcomes.1
    );
    let acknowledged: HashSet<ExecutionId> = printed.finished.into_iter().collect();
    let last = Node::start(&store, "node-after").finish();
    assert!(
        last.began_with(|l| matches!(l, Line::Resumed(_))),
        "the restarted node began with {:?}, expected `resumed ...`",
        last.submission
    );
    runtime.block_on(check_final(&store, &acknowledged, &found.locked));
    assert_integrity(store.sqlite_path().expect("a SQLite store"));
}

#[test]
fn postgres_kill_and_restart_loses_nothing() {
    let Some(server) = TestServer::or_skip("postgres_kill_and_restart_loses_nothing") else {
        return;
    };
    let database = runtime().block_on(TestDatabase::create(&server));
    let store = Store::Postgres {
        dir: tempfile::tempdir().expect("a temp dir"),
        database: Box::new(database),
    };
    kill_and_restart(&store);
}

/// Workflows per workflow crash test; each has four children.
const WORKFLOWS: usize = 150;

/// The node's arguments for workflows: those of [`NODE_ARGS`] (16 workflows and 16 child
/// runs of 20 ms at once), and the workload.
fn workflow_args() -> Vec<&'static str> {
    [&NODE_ARGS[..], &["--workload", "workflow"]].concat()
}

/// Kills nodes running workflows at several points (mid fan-out, warm-waiting, finishing),
/// restarts them, and checks that every workflow finished as an uninterrupted run would.
fn workflows_kill_and_restart(store: &Store) {
    let started = Instant::now();
    for (idx, point) in KILL_POINTS.iter().enumerate() {
        let label = format!("workflow-node-{idx}");
        let kill_at = (WORKFLOWS as f64 * point) as usize;
        let printed = Node::start_with(store, &label, WORKFLOWS, &workflow_args())
            .kill_when(|p| p.progress >= kill_at);
        assert!(
            printed.progress < WORKFLOWS,
            "{label} finished everything before it was killed"
        );
        eprintln!(
            "{label}: killed at {} of {WORKFLOWS} workflows finished",
            printed.progress
        );
    }
    let last = Node::start_with(store, "workflow-node-last", WORKFLOWS, &workflow_args()).finish();
    eprintln!(
        "workflow-node-last: {}",
        last.summary.expect("checked by finish")
    );
    runtime().block_on(check_workflows(store));
    if let Some(path) = store.sqlite_path() {
        assert_integrity(path);
    }
    eprintln!(
        "workflows, kill and restart: {:?} in all",
        started.elapsed()
    );
}

/// Every workflow finished once with the result of an uninterrupted run, its history has the
/// expected shape (no step recorded twice or left out), its five responses arrived once each,
/// and every child exists once and finished.
async fn check_workflows(store: &Store) {
    let db = store.open(None).await;
    let all: Vec<ExecutionId> = db
        .list_all_executions(concepts::ListExecutionsFilter::default())
        .await
        .expect("list_executions")
        .into_iter()
        .map(|summary| summary.execution_id)
        .collect();
    let unique: HashSet<&ExecutionId> = all.iter().collect();
    assert_eq!(
        all.len(),
        WORKFLOWS * 5,
        "workflows and their four children each"
    );
    assert_eq!(unique.len(), all.len(), "every child was created once");
    let (mut replayed, mut runs_total) = (0, 0);
    for id in all.iter().filter(|id| id.is_top_level()) {
        let log = db.get(id).await.unwrap_or_else(|e| panic!("get {id}: {e}"));
        assert_finished_once_as_uninterrupted(id, &log);
        let shape: Vec<String> = log
            .events
            .iter()
            .filter_map(|e| match &e.event {
                ExecutionEventInner::HistoryEvent { event } => Some(flows::shape_of(event)),
                _ => None,
            })
            .collect();
        assert_eq!(
            shape,
            flows::EXPECTED_SHAPE,
            "{id}: a step recorded twice or left out"
        );
        let answered: HashSet<String> = log
            .responses
            .iter()
            .map(|r| format!("{:?}", r.event.event))
            .collect();
        assert_eq!(
            log.responses.len(),
            5,
            "{id}: four children and one delay answered"
        );
        assert_eq!(answered.len(), 5, "{id}: a response delivered twice");
        assert_eq!(
            Some(&log.pending_state),
            derive_pending_state(&log.events, &log.responses).as_ref(),
            "{id}: the stored pending state differs from its derivation"
        );
        let runs = log
            .events
            .iter()
            .filter(|e| matches!(e.event, ExecutionEventInner::Locked(_)))
            .count();
        runs_total += runs;
        if runs > 1 {
            replayed += 1;
        }
    }
    for id in all.iter().filter(|id| !id.is_top_level()) {
        let log = db.get(id).await.unwrap_or_else(|e| panic!("get {id}: {e}"));
        assert!(
            log.finished_result().is_some(),
            "child {id} is not finished"
        );
    }
    assert!(
        replayed > 0,
        "no workflow was interrupted: the test replayed nothing"
    );
    eprintln!(
        "final: {WORKFLOWS} workflows with {} children, all finished once with the expected \
         result; {replayed} were replayed after a kill or a cold wait ({runs_total} runs in all)",
        all.len() - WORKFLOWS
    );
    db.close().await;
}

#[test]
fn sqlite_workflows_killed_and_restarted_finish_as_uninterrupted() {
    workflows_kill_and_restart(&Store::sqlite());
}

#[test]
fn postgres_workflows_killed_and_restarted_finish_as_uninterrupted() {
    let Some(server) =
        TestServer::or_skip("postgres_workflows_killed_and_restarted_finish_as_uninterrupted")
    else {
        return;
    };
    let database = runtime().block_on(TestDatabase::create(&server));
    let store = Store::Postgres {
        dir: tempfile::tempdir().expect("a temp dir"),
        database: Box::new(database),
    };
    workflows_kill_and_restart(&store);
}

/// Workflows of version 1 in flight when their node is SIGKILLed, restarted with version 2
/// (`--workflow-version 2`, which changes the last call behind a patch): every workflow
/// finishes once, with the result its version defines: version 1's when its log went past
/// the patch's place before the restart (the replay answers `false`), version 2's, marker in
/// its log, when it reached that place under version 2. Both kinds occur: the node is killed
/// once the store holds an unfinished workflow past the patch's place (sleeping, or waiting
/// for its last call), read from the store after the kill, and each of those finishes under
/// version 2 with version 1's result. No execution is parked or failed.
#[test]
fn sqlite_workflows_of_version_1_killed_and_restarted_with_version_2_finish_as_their_version_defines()
 {
    let store = Store::sqlite();
    let rt = runtime();
    let version = |v: &'static str| [&workflow_args()[..], &["--workflow-version", v]].concat();
    // Opened once the node created the store, at the first check.
    let reader: std::cell::OnceCell<Arc<dyn DbConnection>> = std::cell::OnceCell::new();
    let past_the_patch = |reader: &std::cell::OnceCell<Arc<dyn DbConnection>>| {
        rt.block_on(async {
            if reader.get().is_none() {
                let _ = reader.set(store.open(None).await);
            }
            unfinished_past_the_patch(reader.get().expect("set above").as_ref()).await
        })
    };
    let killed = Node::start_with(&store, "version-1", WORKFLOWS, &version("1"))
        .kill_when(|p| p.progress >= WORKFLOWS / 3 && !past_the_patch(&reader).is_empty());
    assert!(
        killed.progress < WORKFLOWS,
        "version 1 finished everything before its kill"
    );
    // The node is dead: what the store holds now is what version 2 starts from.
    let recorded_by_version_1: HashSet<ExecutionId> = past_the_patch(&reader).into_iter().collect();
    assert!(
        !recorded_by_version_1.is_empty(),
        "the workflow seen past the patch's place finished before the kill landed"
    );
    if let Some(reader) = reader.get() {
        rt.block_on(reader.close());
    }
    let last = Node::start_with(&store, "version-2", WORKFLOWS, &version("2")).finish();
    eprintln!("version-2: {}", last.summary.expect("checked by finish"));
    rt.block_on(async {
        let db = store.open(None).await;
        let top_level = concepts::ListExecutionsFilter {
            top_level_only: true,
            ..concepts::ListExecutionsFilter::default()
        };
        let all = db.list_all_executions(top_level).await.expect("list");
        assert_eq!(all.len(), WORKFLOWS);
        let (mut first, mut second) = (0, 0);
        for summary in &all {
            let id = &summary.execution_id;
            let log = db.get(id).await.unwrap_or_else(|e| panic!("get {id}: {e}"));
            let Some(concepts::Created { params, .. }) =
                log.events.first().and_then(|e| e.event.created())
            else {
                panic!("{id}: the first event is not Created");
            };
            let index = params.0[0].as_u64().expect("the index");
            let shape = history_shape(&log.events);
            let marked = shape.get(8).map(String::as_str) == Some("Persist");
            let (expected_shape, expected_result) = if marked {
                second += 1;
                let mut shape = flows::EXPECTED_SHAPE.to_vec();
                shape.insert(8, "Persist");
                (shape, flows::expected_result_v2(index))
            } else {
                first += 1;
                (
                    flows::EXPECTED_SHAPE.to_vec(),
                    flows::expected_result(index),
                )
            };
            assert!(
                !(marked && recorded_by_version_1.contains(id)),
                "{id}: recorded past the patch's place by version 1, yet version 2 took its new \
                 branch"
            );
            assert_eq!(
                shape, expected_shape,
                "{id}: a step recorded twice or left out"
            );
            let finished = (log.events.iter())
                .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }))
                .count();
            assert_eq!(finished, 1, "{id}: Finished events");
            assert_eq!(
                log.finished_result(),
                Some(&Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(
                    Json(expected_result.into())
                ))),
                "{id}: not the result of its version (marker: {marked})"
            );
        }
        eprintln!(
            "versions: {first} finished with version 1's result ({} of them past the patch's \
             place and unfinished at the kill), {second} with version 2's",
            recorded_by_version_1.len()
        );
        assert!(second > 0, "no workflow took version 2's branch");
        db.close().await;
    });
}

/// The kinds of a log's history events, as [`flows::shape_of`] writes them.
fn history_shape(events: &[concepts::ExecutionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            ExecutionEventInner::HistoryEvent { event } => Some(flows::shape_of(event)),
            _ => None,
        })
        .collect()
}

/// The unfinished top-level workflows whose history goes past the patch's place (the
/// fan-out's eight events): version 2 must replay them with version 1's branch.
async fn unfinished_past_the_patch(db: &dyn DbConnection) -> Vec<ExecutionId> {
    let top_level = concepts::ListExecutionsFilter {
        top_level_only: true,
        ..concepts::ListExecutionsFilter::default()
    };
    let mut found = Vec::new();
    for summary in db.list_all_executions(top_level).await.expect("list") {
        let id = summary.execution_id;
        let log = db
            .get(&id)
            .await
            .unwrap_or_else(|e| panic!("get {id}: {e}"));
        if log.finished_result().is_none() && history_shape(&log.events).len() > 8 {
            found.push(id);
        }
    }
    found
}

/// Workflows of the identity test, 16 at a time: the kill finds most of them running.
const IDENTITY_WORKFLOWS: usize = 48;
/// The identity test's lease: long enough that a run resumed before it expired can only have
/// been taken back.
const IDENTITY_LEASE_MS: &str = "30000";

/// A node SIGKILLed while its workflows wait warm for their children, restarted under the
/// same `--identity`, takes back at once the children's leases (timed out, `take_back_leases`)
/// and the workflows their dead runs kept waiting (handed back once the children answered,
/// `take_back_warm_runs`): each workflow running at the kill is locked again within a second
/// of the restarted node's start, not after its 30 s lease, and every workflow finishes as an
/// uninterrupted run would. Without the identity (or before the fix) they wait out the dead
/// runs' deadlines, and the second bound fails.
#[test]
fn sqlite_a_node_restarted_under_its_identity_resumes_its_workflows_at_once() {
    let store = Store::sqlite();
    let args = [
        &workflow_args()[..],
        &[
            "--identity",
            "node-a",
            "--lock-expiry-ms",
            IDENTITY_LEASE_MS,
        ],
    ]
    .concat();
    let killed = Node::start_with(&store, "identity-node-0", IDENTITY_WORKFLOWS, &args)
        .kill_when(|p| p.progress >= IDENTITY_WORKFLOWS / 6);
    let killed_at = executor::Now.now();
    assert!(
        killed.progress < IDENTITY_WORKFLOWS,
        "finished before the kill"
    );
    let last = Node::start_with(&store, "identity-node-1", IDENTITY_WORKFLOWS, &args).finish();
    let restarted_at = last
        .started_at
        .expect("the restarted node printed its executor");

    let delays = runtime().block_on(async {
        let db = store.open(None).await;
        let mut delays = Vec::new();
        for id in all_ids(db.as_ref(), None).await {
            let log = db.get(&id).await.expect("get");
            let taken_back = log.events.iter().position(|event| {
                event.created_at >= killed_at
                    && matches!(
                        event.event,
                        ExecutionEventInner::TemporarilyTimedOut { .. }
                            | ExecutionEventInner::Unlocked { .. }
                    )
            });
            let relocked = taken_back.and_then(|at| {
                log.events[at..].iter().find_map(|event| match event.event {
                    ExecutionEventInner::Locked(_) => Some(event.created_at),
                    _ => None,
                })
            });
            if let (true, Some(relocked)) = (id.is_top_level(), relocked) {
                delays.push((relocked - restarted_at).to_std().unwrap_or_default());
            }
        }
        db.close().await;
        delays
    });
    let slowest = delays.iter().max().copied().unwrap_or_default();
    eprintln!(
        "identity: {} workflows taken back and locked again, the slowest {slowest:?} after the \
         restarted node started; the whole restart {} ms",
        delays.len(),
        last.summary.as_ref().expect("checked by finish")["elapsed_ms"]
    );
    assert!(!delays.is_empty(), "no workflow was running at the kill");
    assert!(
        slowest < Duration::from_secs(1),
        "a workflow resumed {slowest:?} after the restart"
    );
    runtime().block_on(check_identity_workflows(&store));
}

/// Every workflow of the identity test finished once, with the result of an uninterrupted
/// run.
async fn check_identity_workflows(store: &Store) {
    let db = store.open(None).await;
    let top_level = all_ids(db.as_ref(), None).await;
    let top_level: Vec<_> = top_level.iter().filter(|id| id.is_top_level()).collect();
    assert_eq!(top_level.len(), IDENTITY_WORKFLOWS);
    for id in top_level {
        let log = db.get(id).await.expect("get");
        assert_finished_once_as_uninterrupted(id, &log);
    }
    db.close().await;
}

/// The workflow `id` (its log `log`) finished once, with the result of an uninterrupted run.
fn assert_finished_once_as_uninterrupted(id: &ExecutionId, log: &concepts::ExecutionLog) {
    let Some(concepts::Created { params, .. }) = log.events.first().and_then(|e| e.event.created())
    else {
        panic!("{id}: the first event is not Created");
    };
    let index = params.0[0].as_u64().expect("the index");
    let finished = log
        .events
        .iter()
        .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }))
        .count();
    assert_eq!(finished, 1, "{id}: Finished events");
    assert_eq!(
        log.finished_result(),
        Some(&Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(
            Json(flows::expected_result(index).into())
        ))),
        "{id}: not the result of an uninterrupted run"
    );
}
