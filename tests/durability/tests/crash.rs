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
//! sleep, a call) and kills their nodes at several points: every workflow must finish with
//! the result of an uninterrupted run, every child exist once, and every history have the
//! expected shape, no step recorded twice.
//!
//! PostgreSQL runs the kill/restart tests too when `STELE_TEST_POSTGRES_URL` names a server
//! (a fresh database per test); without it that test prints `SKIPPED: ...` and passes, except
//! under `CI=true`, where it fails.

use concepts::DbClientExt as _;
use concepts::{
    DbConnection, ExecutionEventInner, ExecutionId, HistoryEvent, Json, ListExecutionsFilter,
    PendingStateKind, SupportedFunctionReturnValue, Version, derive_pending_state,
};
use std::{
    collections::HashSet,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, mpsc},
    time::{Duration, Instant},
};
use storage_postgres::{PostgresConfig, PostgresStore, admin};
use storage_sqlite::{SqliteConfig, SqlitePool};

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
/// The variable that names the PostgreSQL test server.
const POSTGRES_URL_VAR: &str = "STELE_TEST_POSTGRES_URL";

/// Where the store of a test lives.
enum Store {
    Sqlite {
        dir: tempfile::TempDir,
        path: PathBuf,
    },
    Postgres {
        dir: tempfile::TempDir,
        server: Box<PostgresConfig>,
        url: String,
        name: String,
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
            Self::Postgres { url, .. } => url.clone(),
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
            Self::Postgres { server, name, .. } => Arc::new(
                PostgresStore::connect(server.with_database(name))
                    .await
                    .unwrap_or_else(|e| panic!("connecting to test database {name}: {e}")),
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

impl Drop for Store {
    fn drop(&mut self) {
        if let Self::Postgres { server, name, .. } = self {
            let (server, name) = (PostgresConfig::clone(server), name.clone());
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(admin::drop_database(&server, &name))
                    .map_err(|e| format!("cannot drop test database {name}: {e}"))
            })
            .join();
            if let Ok(Err(e)) = dropped {
                eprintln!("{e}");
            }
        }
    }
}

/// `path` with `suffix` appended to its file name (`x.sqlite` -> `x.sqlite-wal`).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// `PRAGMA integrity_check` must say `ok`; run with rusqlite directly, with no store open.
fn assert_integrity(path: &Path) {
    let conn = rusqlite::Connection::open(path)
        .unwrap_or_else(|e| panic!("opening {} with rusqlite: {e}", path.display()));
    let mut stmt = conn
        .prepare("PRAGMA integrity_check")
        .expect("preparing integrity_check");
    let rows: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .expect("running integrity_check")
        .collect::<Result<_, _>>()
        .expect("reading integrity_check");
    assert_eq!(
        rows,
        vec!["ok".to_string()],
        "integrity_check of {}",
        path.display()
    );
}

/// A running node and the lines of its standard output.
struct Node {
    label: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
    started: Instant,
}

/// What one node printed.
#[derive(Default)]
struct Printed {
    /// Its first line (`submitting N`, `resumed N`) and the line that followed a submission.
    submission: Vec<String>,
    /// Every `finished <id>`.
    finished: Vec<String>,
    /// The last `progress F/N`: F.
    progress: usize,
    /// The JSON summary, if it got that far.
    summary: Option<serde_json::Value>,
    /// When the test read the `submitting` line.
    submitting_at: Option<Instant>,
    /// When the test read the `submitted` line.
    submitted_at: Option<Instant>,
}

impl Printed {
    fn take(&mut self, line: &str) {
        if let Some(id) = line.strip_prefix("finished ") {
            self.finished.push(id.to_string());
        } else if let Some(progress) = line.strip_prefix("progress ") {
            let done = progress.split('/').next().unwrap_or_default();
            self.progress = done.parse().unwrap_or(self.progress);
        } else if line.starts_with('{') {
            self.summary = Some(serde_json::from_str(line).expect("the summary is JSON"));
        } else {
            if line.starts_with("submitting") {
                self.submitting_at = Some(Instant::now());
            } else if line.starts_with("submitted") {
                self.submitted_at = Some(Instant::now());
            }
            self.submission.push(line.to_string());
        }
    }
}

impl Node {
    fn start(store: &Store, label: &str) -> Self {
        Self::start_with(store, label, EXECUTIONS, &NODE_ARGS)
    }

    /// A node over `executions` executions (workflows with `--workload workflow`), with `args`.
    fn start_with(store: &Store, label: &str, executions: usize, args: &[&str]) -> Self {
        let stderr = store.log_dir().join(format!("{label}.stderr"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_durability-node"))
            .args(["run", "--database", &store.url()])
            .args(["--executions", &executions.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("a stderr file"))
            .spawn()
            .expect("starting durability-node");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            label: label.to_string(),
            child,
            lines,
            stderr,
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
        self.child.kill().expect("SIGKILL");
        let status = self.child.wait().expect("waiting for the killed node");
        assert!(!status.success(), "{}: killed, yet it exited 0", self.label);
        while let Ok(line) = self.lines.recv_timeout(NODE_TIMEOUT) {
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
        let status = self.child.wait().expect("waiting for the node");
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
        match self.lines.recv_timeout(left) {
            Ok(line) => Some(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                self.fail(&format!("still running after {NODE_TIMEOUT:?}"))
            }
        }
    }

    fn fail(&mut self, what: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        panic!("{}: {what}; its stderr:\n{stderr}", self.label)
    }
}

/// Every execution id in `state` (every one for `None`).
async fn all_ids(db: &dyn DbConnection, state: Option<PendingStateKind>) -> Vec<ExecutionId> {
    let filter = ListExecutionsFilter {
        state,
        ..ListExecutionsFilter::default()
    };
    db.list_all_executions(filter)
        .await
        .expect("list_executions")
        .into_iter()
        .map(|summary| summary.execution_id)
        .collect()
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
    acknowledged: &HashSet<String>,
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
    acknowledged: &HashSet<String>,
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
        let id: ExecutionId = id.parse().expect("the node prints execution ids");
        let state = db
            .get(&id)
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
    acknowledged: &HashSet<String>,
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
        let finished = log
            .events
            .iter()
            .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }))
            .count();
        assert_eq!(finished, 1, "{id}: Finished events in {log:#?}");
        let Some(ExecutionEventInner::Finished { result }) = log.events.last().map(|e| &e.event)
        else {
            panic!("{id}: the last event is not Finished: {log:#?}");
        };
        let Some(ExecutionEventInner::Created { params, .. }) =
            log.events.first().map(|e| &e.event)
        else {
            panic!("{id}: the first event is not Created: {log:#?}");
        };
        let expected = params.0.get(0).cloned().unwrap_or_default();
        assert_eq!(
            result,
            &Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
                expected
            ))),
            "{id}: the result is not the execution's own parameter"
        );
        let finished_version = u32::try_from(log.events.len() - 1).expect("a short log");
        assert_eq!(
            log.next_version,
            Version(finished_version),
            "{id}: the next version stays at Finished"
        );
        assert_eq!(
            Some(&log.pending_state),
            derive_pending_state(&log.events, &log.responses).as_ref(),
            "{id}: the stored pending state differs from its derivation"
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
        let id: ExecutionId = id.parse().expect("the node prints execution ids");
        assert!(
            unique.contains(&id),
            "acknowledged {id} is not in the store"
        );
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Kills the node at every kill point and restarts it, then lets the last one finish and
/// checks everything.
fn kill_and_restart(store: &Store) {
    let started = Instant::now();
    let runtime = runtime();
    let mut acknowledged: HashSet<String> = HashSet::new();
    let mut locked_at_kills = Vec::new();
    for (idx, point) in KILL_POINTS.iter().enumerate() {
        let label = format!("node-{idx}");
        let kill_at = (EXECUTIONS as f64 * point) as usize;
        let printed = Node::start(store, &label).kill_when(|p| p.progress >= kill_at);
        let expected_start = if idx == 0 { "submitting" } else { "resumed" };
        assert!(
            printed
                .submission
                .first()
                .is_some_and(|l| l.starts_with(expected_start)),
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
        last.submission
            .first()
            .is_some_and(|l| l.starts_with("resumed")),
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
        printed
            .submission
            .first()
            .is_some_and(|l| l.starts_with("submitting")),
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
    let acknowledged: HashSet<String> = printed.finished.into_iter().collect();
    let last = Node::start(&store, "node-after").finish();
    assert!(
        last.submission
            .first()
            .is_some_and(|l| l.starts_with("resumed")),
        "the restarted node began with {:?}, expected `resumed ...`",
        last.submission
    );
    runtime.block_on(check_final(&store, &acknowledged, &found.locked));
    assert_integrity(store.sqlite_path().expect("a SQLite store"));
}

/// A fresh database on the PostgreSQL test server, or `None` (after printing why) when no
/// server is configured outside CI.
#[expect(
    clippy::print_stdout,
    reason = "the skip line is read from the test's stdout"
)]
fn postgres_store(label: &str) -> Option<Store> {
    let Some(url) = std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty())
    else {
        let in_ci = std::env::var("CI").is_ok_and(|ci| ci == "true");
        assert!(
            !in_ci,
            "{POSTGRES_URL_VAR} is not set, and CI=true requires the PostgreSQL crash test to \
             run: start a server with `source .ci/postgres.sh && pg_start` first"
        );
        println!("SKIPPED: postgres: {POSTGRES_URL_VAR} is not set");
        return None;
    };
    let server = PostgresConfig::from_url(&url)
        .unwrap_or_else(|e| panic!("{POSTGRES_URL_VAR} does not parse: {e}"));
    let name = format!("stele_durability_{label}_{}", std::process::id());
    runtime()
        .block_on(admin::create_database(&server, &name))
        .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
    Some(Store::Postgres {
        dir: tempfile::tempdir().expect("a temp dir"),
        url: url_with_database(&url, &name),
        server: Box::new(server),
        name,
    })
}

#[test]
fn postgres_kill_and_restart_loses_nothing() {
    if let Some(store) = postgres_store("noop") {
        kill_and_restart(&store);
    }
}

/// Workflows per workflow crash test; each has four children.
const WORKFLOWS: usize = 150;
/// The node's arguments for workflows: those of [`NODE_ARGS`] (16 workflows and 16 child
/// runs of 20 ms at once), and the workload.
fn workflow_args() -> Vec<&'static str> {
    [&NODE_ARGS[..], &["--workload", "workflow"]].concat()
}
/// The history every workflow of `--workload workflow` records (`tests/durability/src/flows.rs`),
/// by event kind and join set.
const WORKFLOW_SHAPE: [&str; 14] = [
    "Persist",
    "JoinSetCreate n:children",
    "JoinSetRequest n:children",
    "JoinSetRequest n:children",
    "JoinSetRequest n:children",
    "JoinNext n:children",
    "JoinNext n:children",
    "JoinNext n:children",
    "JoinSetCreate o:2",
    "JoinSetRequest o:2",
    "JoinNext o:2",
    "JoinSetCreate o:3-noop",
    "JoinSetRequest o:3-noop",
    "JoinNext o:3-noop",
];

/// One history event as `<kind> <join set>`.
fn shape_of(event: &HistoryEvent) -> String {
    match event {
        HistoryEvent::Persist { .. } => "Persist".to_string(),
        HistoryEvent::JoinSetCreate { join_set_id, .. } => format!("JoinSetCreate {join_set_id}"),
        HistoryEvent::JoinSetRequest { join_set_id, .. } => {
            format!("JoinSetRequest {join_set_id}")
        }
        HistoryEvent::JoinNext { join_set_id, .. } => format!("JoinNext {join_set_id}"),
        HistoryEvent::Schedule { .. } => "Schedule".to_string(),
    }
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

/// Every workflow finished once with the result of an uninterrupted run, its history has
/// the expected shape (no step recorded twice), and every child exists once and finished
/// once, its response delivered once.
async fn check_workflows(store: &Store) {
    let db = store.open(None).await;
    let all = all_ids(db.as_ref(), None).await;
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
        let finished = log
            .events
            .iter()
            .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }))
            .count();
        assert_eq!(finished, 1, "{id}: Finished events");
        let Some(ExecutionEventInner::Created { params, .. }) =
            log.events.first().map(|e| &e.event)
        else {
            panic!("{id}: the first event is not Created");
        };
        let index = params.0[0].as_u64().expect("the index");
        let expected: u64 = (1..=3).map(|k| index * 10 + k).sum();
        assert_eq!(
            log.finished_result(),
            Some(&Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(
                Json(expected.into())
            ))),
            "{id}: not the result of an uninterrupted run"
        );
        let shape: Vec<String> = log
            .events
            .iter()
            .filter_map(|e| match &e.event {
                ExecutionEventInner::HistoryEvent { event } => Some(shape_of(event)),
                _ => None,
            })
            .collect();
        assert_eq!(
            shape, WORKFLOW_SHAPE,
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
        "final: {WORKFLOWS} workflows with {} children, all finished once with the expected result; {replayed} were replayed after a kill or a cold wait ({runs_total} runs in all)",
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
    if let Some(store) = postgres_store("workflows") {
        workflows_kill_and_restart(&store);
    }
}

/// `url` with its database replaced by `name` (query parameters kept).
fn url_with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let after_scheme = base.find("://").map_or(0, |at| at + 3);
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |at| after_scheme + at);
    format!("{}/{name}{query}", &base[..host_end])
}
