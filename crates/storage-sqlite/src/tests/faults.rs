//! Faults of the file and of other connections (issue 11 §2 and §3): another connection
//! holding the write lock, a full disk in the middle of group commits, and what the callers
//! and the file look like afterwards.

use super::{create_request, id, integrity_check, t0};
use crate::{SqliteConfig, SqlitePool};
use concepts::{
    DbClient, DbConnection, DbError, DbErrorKind, DbExecutor, ExecutionEventInner, ExecutionId,
    ExecutorId, FunctionFqn, Json, LockPendingRequest, OutcomeWrite, PendingState, SchemaOptions,
    SupportedFunctionReturnValue, derive_pending_state,
};
use std::{path::Path, sync::Arc, time::Duration};

/// A busy timeout short enough that a writer that gave up after it would fail these tests.
const SHORT_BUSY: Duration = Duration::from_millis(10);

async fn open_with_busy_timeout(path: &Path, busy_timeout: Duration) -> SqlitePool {
    let mut config = SqliteConfig::new(path);
    config.busy_timeout = busy_timeout;
    SqlitePool::open(config).await.expect("the store opens")
}

/// A store with a busy timeout of [`SHORT_BUSY`], another connection holding the file's
/// write lock, and a create of execution 1 under way on the store.
async fn create_while_locked_elsewhere(
    path: &Path,
) -> (
    SqlitePool,
    rusqlite::Connection,
    tokio::task::JoinHandle<Result<concepts::CreateOutcome, DbError>>,
) {
    let store = open_with_busy_timeout(path, SHORT_BUSY).await;
    let other = rusqlite::Connection::open(path).expect("opens");
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("takes the lock");
    let writer = store.clone();
    let create = tokio::spawn(async move { writer.create(create_request(id(1), t0())).await });
    (store, other, create)
}

/// Another connection (another process, as far as SQLite can tell) holding the write lock
/// far longer than the busy timeout delays a write; it does not fail it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_for_another_connections_lock_past_the_busy_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, other, create) = create_while_locked_elsewhere(&dir.path().join("db.sqlite")).await;
    // Holds the lock for ten busy timeouts: a writer that gives up after one has failed.
    tokio::time::sleep(SHORT_BUSY * 10).await;
    assert!(
        !create.is_finished(),
        "the write cannot commit while the lock is held"
    );
    other.execute_batch("COMMIT").expect("releases the lock");
    create
        .await
        .expect("joins")
        .expect("the write commits once the lock is free");
    assert_eq!(store.get(&id(1)).await.expect("reads").events.len(), 1);
    store.close().await;
}

/// A repeated submit, identical or conflicting, is answered while another connection holds
/// the file's write lock: it reads, and never waits for the lock (a new one still does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_submit_is_answered_while_another_connection_holds_the_write_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open_with_busy_timeout(&path, SHORT_BUSY).await;
    store
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    let other = rusqlite::Connection::open(&path).expect("opens");
    other
        .execute_batch("BEGIN IMMEDIATE")
        .expect("takes the lock");
    // Bounded only so that a failure does not hang the suite: the lock is held throughout.
    let within = Duration::from_secs(30);
    let repeated = tokio::time::timeout(within, store.create(create_request(id(1), t0())))
        .await
        .expect("answered while the lock is held elsewhere")
        .expect("an identical repeat is accepted");
    assert!(
        matches!(repeated, concepts::CreateOutcome::AlreadyExisted { ref pending_state }
            if matches!(pending_state, PendingState::PendingAt { .. })),
        "{repeated:?}"
    );
    let mut differing = create_request(id(1), t0());
    differing.params = Json(serde_json::json!(["other"]));
    let err = tokio::time::timeout(within, store.create(differing))
        .await
        .expect("answered while the lock is held elsewhere")
        .expect_err("a differing repeat conflicts");
    assert!(err.to_string().contains("parameters"), "{err}");
    let writer = store.clone();
    let new = tokio::spawn(async move { writer.create(create_request(id(2), t0())).await });
    tokio::time::sleep(SHORT_BUSY * 10).await;
    assert!(
        !new.is_finished(),
        "a new execution waits for the write lock"
    );
    other.execute_batch("COMMIT").expect("releases the lock");
    let created = new
        .await
        .expect("joins")
        .expect("creates once the lock is free");
    assert_eq!(created, concepts::CreateOutcome::Created);
    store.close().await;
}

/// Closing a store whose writer waits for another connection's lock fails the queued writes
/// as `Closed` (they did not run) one busy timeout later, instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_while_the_lock_is_held_elsewhere_fails_the_queue_as_closed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, other, create) = create_while_locked_elsewhere(&dir.path().join("db.sqlite")).await;
    tokio::time::sleep(SHORT_BUSY * 3).await;
    store.close().await;
    let err = create.await.expect("joins").expect_err("never ran");
    assert!(matches!(err, DbError::Closed), "{err}");
    other.execute_batch("COMMIT").expect("releases the lock");
    let count: i64 = other
        .query_row("SELECT COUNT(*) FROM t_execution_state", [], |row| {
            row.get(0)
        })
        .expect("counts");
    assert_eq!(count, 0, "the write that failed left nothing behind");
}

/// What one execution's three writes (create, lock, finish) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reached {
    /// The create failed.
    Nothing,
    /// Created; the lock failed.
    Created,
    /// Locked; the `Finished` failed.
    Locked,
    /// Finished.
    Finished,
}

/// A parameter and a result of about 1.5 KB each, so that every execution needs pages.
fn payload(n: u128) -> Json {
    Json(serde_json::json!([format!("{n}:{}", "x".repeat(1500))]))
}

fn ffqn_of(n: u128) -> FunctionFqn {
    format!("ns:pkg/ifc.f{n}").parse().expect("a valid ffqn")
}

/// Creates, locks and finishes execution `n` (its own function, so that nothing else locks
/// it); stops at the first error, which it returns beside how far it got.
async fn create_lock_finish(store: SqlitePool, n: u128) -> (u128, Reached, Option<DbError>) {
    let mut req = create_request(id(n), t0());
    req.ffqn = ffqn_of(n);
    req.params = payload(n);
    if let Err(err) = store.create(req).await {
        return (n, Reached::Nothing, Some(err));
    }
    let lock = LockPendingRequest {
        batch_size: 1,
        pending_at_or_sooner: t0(),
        ffqns: Arc::from([ffqn_of(n)]),
        now: t0(),
        component_id: create_request(id(n), t0()).component_id,
        executor_id: ExecutorId::from_parts(1, 1),
        lock_expires_at: t0() + chrono::Duration::hours(1),
    };
    let locked = match store.lock_pending(lock).await {
        Ok(locked) => locked,
        Err(err) => return (n, Reached::Created, Some(err)),
    };
    assert_eq!(
        locked.len(),
        1,
        "execution {n} is locked by its own request"
    );
    let finished = ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(payload(
            n,
        ))),
    };
    let write = OutcomeWrite::new(id(n), locked[0].next_version, t0(), finished, None);
    match store.append_outcome(write).await {
        Ok(_) => (n, Reached::Finished, None),
        Err(err) => (n, Reached::Locked, Some(err)),
    }
}

/// Runs executions `range` at once, all three writes of each, and returns what each reached.
async fn wave(
    store: &SqlitePool,
    range: std::ops::Range<u128>,
) -> Vec<(u128, Reached, Option<DbError>)> {
    let mut tasks = tokio::task::JoinSet::new();
    for n in range {
        tasks.spawn(create_lock_finish(store.clone(), n));
    }
    let mut outcomes = Vec::new();
    while let Some(outcome) = tasks.join_next().await {
        outcomes.push(outcome.expect("a task of the wave"));
    }
    outcomes.sort_by_key(|(n, ..)| *n);
    outcomes
}

/// Every log's versions are dense (`0..n`, one event each), the stored next version is `n`
/// (the version of `Finished` once finished), no event lacks its execution; returns how many
/// executions are stored.
fn assert_versions_dense(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).expect("opens");
    let broken: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM t_execution_state AS s JOIN \
             (SELECT execution_id, COUNT(*) AS n, MIN(version) AS lo, MAX(version) AS hi \
              FROM t_event GROUP BY execution_id) AS e USING (execution_id) \
             WHERE e.lo <> 0 OR e.hi + 1 <> e.n \
             OR s.next_version <> (CASE WHEN s.state = 'Finished' THEN e.n - 1 ELSE e.n END)",
            [],
            |row| row.get(0),
        )
        .expect("checks versions");
    assert_eq!(broken, 0, "executions whose versions are not dense");
    let orphans: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM t_event AS e WHERE NOT EXISTS \
             (SELECT 1 FROM t_execution_state AS s WHERE s.execution_id = e.execution_id)",
            [],
            |row| row.get(0),
        )
        .expect("checks orphans");
    assert_eq!(orphans, 0, "events without their execution");
    conn.query_row("SELECT COUNT(*) FROM t_execution_state", [], |row| {
        row.get(0)
    })
    .expect("counts")
}

/// The store holds exactly what each execution's replies said: nothing of a failed write.
async fn assert_state_matches(store: &SqlitePool, n: u128, reached: Reached) {
    let execution_id: ExecutionId = id(n);
    let log = match store.get(&execution_id).await {
        Ok(log) => log,
        Err(err) => {
            assert_eq!(
                reached,
                Reached::Nothing,
                "{execution_id} is missing: {err}"
            );
            assert_eq!(err.kind(), DbErrorKind::NotFound, "{err}");
            return;
        }
    };
    let expected_events = match reached {
        Reached::Nothing => panic!("{execution_id}: its create failed, yet it is stored"),
        Reached::Created => 1,
        Reached::Locked => 2,
        Reached::Finished => 3,
    };
    assert_eq!(
        log.events.len(),
        expected_events,
        "{execution_id}: {log:#?}"
    );
    let finished = matches!(log.pending_state, PendingState::Finished { .. });
    assert_eq!(finished, reached == Reached::Finished, "{execution_id}");
    assert_eq!(
        Some(&log.pending_state),
        derive_pending_state(&log.events, &log.responses).as_ref(),
        "{execution_id}: the stored pending state differs from its derivation"
    );
}

/// Executions that ran before, under and after a fault, and what each reached.
type Outcomes = Vec<(u128, Reached, Option<DbError>)>;

/// The first executions, before the fault: all finish.
async fn before_the_fault(store: &SqlitePool) -> Outcomes {
    let outcomes = wave(store, 0..16).await;
    assert!(
        outcomes
            .iter()
            .all(|(_, reached, _)| *reached == Reached::Finished)
    );
    outcomes
}

/// Waves of 16 executions at once (48 writes sharing group commits) under the fault, until a
/// whole wave fails. Every failure is a backend error naming the file and saying `expected`
/// (or that a batched command's error rolled its transaction back). Returns the number of
/// errors that said `expected`, how many executions finished under the fault, and the first
/// such error's message.
async fn under_the_fault(
    store: &SqlitePool,
    path: &Path,
    expected: &str,
    outcomes: &mut Outcomes,
) -> (usize, usize, String) {
    let first = outcomes.len();
    let mut next = u128::try_from(first).expect("fits");
    let mut fault_errors = 0;
    let mut first_message = String::new();
    for _ in 0..40 {
        let outcomes_of_wave = wave(store, next..next + 16).await;
        next += 16;
        let all_failed = outcomes_of_wave
            .iter()
            .all(|(_, reached, _)| *reached == Reached::Nothing);
        for (_, _, err) in &outcomes_of_wave {
            let Some(err) = err else { continue };
            let message = err.to_string();
            assert_eq!(err.kind(), DbErrorKind::Backend, "{message}");
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(
                message.contains(expected) || message.contains("rolled back by an error"),
                "{message}"
            );
            if message.contains(expected) {
                fault_errors += 1;
                if first_message.is_empty() {
                    first_message = message;
                }
            }
        }
        outcomes.extend(outcomes_of_wave);
        if all_failed {
            break;
        }
    }
    assert!(fault_errors > 0, "no write failed with {expected}");
    let finished = outcomes[first..]
        .iter()
        .filter(|(_, reached, _)| *reached == Reached::Finished)
        .count();
    (fault_errors, finished, first_message)
}

/// Once the fault is gone: 16 more executions all finish; every execution holds exactly what
/// its callers were told, versions are dense, and `integrity_check` is `ok` before and after
/// `close`. Returns how many executions are stored.
async fn after_the_fault(store: &SqlitePool, path: &Path, outcomes: &mut Outcomes) -> usize {
    let next = u128::try_from(outcomes.len()).expect("fits");
    let after = wave(store, next..next + 16).await;
    assert!(
        after
            .iter()
            .all(|(_, reached, _)| *reached == Reached::Finished),
        "every write succeeds once the fault is gone: {after:?}"
    );
    outcomes.extend(after);
    for (n, reached, _) in outcomes.iter() {
        assert_state_matches(store, *n, *reached).await;
    }
    let stored = assert_versions_dense(path);
    let created = outcomes
        .iter()
        .filter(|(_, reached, _)| *reached != Reached::Nothing)
        .count();
    assert_eq!(stored, i64::try_from(created).expect("fits"));
    assert_eq!(integrity_check(path), "ok");
    store.close().await;
    assert_eq!(integrity_check(path), "ok");
    created
}

/// A full disk (the writer's `max_page_count` lowered to a few pages more than the file has)
/// in the middle of group commits: every failed write is a backend error naming the file and
/// saying "disk full" (or that a batched command's error rolled its transaction back), every
/// execution holds exactly the writes its callers were told committed, versions stay dense,
/// and once space is back the store takes every write again; `integrity_check` is `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_in_the_middle_of_group_commits_leaves_nothing_half_applied() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open_with_busy_timeout(&path, Duration::from_secs(5)).await;
    let mut outcomes = before_the_fault(&store).await;
    let pages: i64 = store
        .on_writer(|conn| conn.pragma_query_value(None, "page_count", |row| row.get(0)))
        .await
        .expect("reads page_count");
    let limited: i64 = store
        .on_writer(move |conn| {
            conn.pragma_update_and_check(None, "max_page_count", pages + 24, |row| row.get(0))
        })
        .await
        .expect("lowers max_page_count");
    assert_eq!(limited, pages + 24);
    let (errors, finished, message) =
        under_the_fault(&store, &path, "disk full", &mut outcomes).await;
    // Space is back.
    store
        .on_writer(|conn| conn.pragma_update(None, "max_page_count", 1_073_741_823))
        .await
        .expect("raises max_page_count");
    let created = after_the_fault(&store, &path, &mut outcomes).await;
    println!(
        "full disk: {} executions tried, {created} created, {finished} finished while full, \
         {errors} disk-full errors, the first: {message}",
        outcomes.len()
    );
}

/// Set in the child process that runs [`io_errors_child`] under a file-size limit.
const IO_CHILD: &str = "STELE_TEST_IO_ERRORS_CHILD";

/// Sets this process's soft `RLIMIT_FSIZE` (`unlimited` or a number of bytes) with `prlimit`;
/// a write past it fails with `EFBIG`, which SQLite reports as an I/O error.
fn set_file_size_limit(limit: &str) {
    let status = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--fsize={limit}:"))
        .status()
        .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit --fsize={limit}: {status}");
}

/// `path` with `suffix` appended to its file name (`x.sqlite` -> `x.sqlite-wal`).
fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    name.into()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |meta| meta.len())
}

/// I/O errors in the middle of group commits: writes past a file-size limit fail with `EFBIG`
/// (the WAL cannot grow), which SQLite reports as `SQLITE_IOERR_WRITE`. As with a full disk:
/// every failed write is a backend error naming the file, every execution holds exactly the
/// writes its callers were told committed, versions stay dense, the store takes every write
/// once the limit is lifted, and `integrity_check` is `ok`.
///
/// The limit is per process, so the test runs itself again as a child process (which ignores
/// `SIGXFSZ`, inherited from `sh`'s `trap`, so that a write past the limit fails instead of
/// killing it) and only the child lowers it.
#[test]
fn io_errors_in_the_middle_of_group_commits_leave_nothing_half_applied() {
    if std::env::var_os(IO_CHILD).is_some() {
        io_errors_child();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let name = "tests::faults::io_errors_in_the_middle_of_group_commits_leave_nothing_half_applied";
    let output = std::process::Command::new("sh")
        .args(["-c", "trap '' XFSZ; exec \"$0\" \"$@\""])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(IO_CHILD, "1")
        .output()
        .expect("the child test runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

fn io_errors_child() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("db.sqlite");
        let store = open_with_busy_timeout(&path, Duration::from_secs(5)).await;
        let mut outcomes = before_the_fault(&store).await;
        let wal = sibling(&path, "-wal");
        // Room for a few more group commits; the shared-memory index (32 KB) never grows here.
        let limit = file_len(&path).max(file_len(&wal)).max(32 * 1024) + 512 * 1024;
        set_file_size_limit(&limit.to_string());
        let (errors, finished, message) =
            under_the_fault(&store, &path, "I/O error", &mut outcomes).await;
        assert!(finished > 0, "the limit left no room for any commit");
        set_file_size_limit("unlimited");
        let created = after_the_fault(&store, &path, &mut outcomes).await;
        println!(
            "I/O errors: {} executions tried, {created} created, {finished} finished under the \
             limit, {errors} I/O errors, the first: {message}",
            outcomes.len()
        );
    });
}

/// What opening a raw copy of a running store's files gave.
#[derive(Debug, Default)]
struct CopyOutcomes {
    /// `integrity_check` ok and the store opened and listed its executions.
    sound: usize,
    /// A typed error naming the copy (at open, at the first read, or from `integrity_check`).
    refused: usize,
    /// Executions acknowledged as finished before the copy that a sound copy lacks (or holds
    /// unfinished): a raw copy is consistent at best, not complete.
    stale: usize,
    /// The first refusal's message.
    first_refusal: Option<String>,
}

/// Opens the raw copy at `copy`: either `integrity_check` is `ok` and the store opens and
/// reads, or every failure is a typed error naming the copy; never a panic.
async fn check_raw_copy(copy: &Path, acknowledged: &[u128], outcomes: &mut CopyOutcomes) {
    let named = |message: String, outcomes: &mut CopyOutcomes| {
        assert!(message.contains(&copy.display().to_string()), "{message}");
        outcomes.first_refusal.get_or_insert(message);
    };
    let integrity = rusqlite::Connection::open(copy).and_then(|conn| {
        conn.query_row("PRAGMA integrity_check", [], |row| row.get::<_, String>(0))
    });
    match SqlitePool::open(SqliteConfig::new(copy).existing_only()).await {
        Ok(store) => {
            let listed = store
                .list_executions(Default::default(), concepts::Pagination::default())
                .await;
            match (&integrity, listed) {
                (Ok(ok), Ok(_)) if ok == "ok" => {
                    outcomes.sound += 1;
                    for n in acknowledged {
                        let log = store.get(&id(*n)).await;
                        let done = log.is_ok_and(|log| {
                            matches!(log.pending_state, PendingState::Finished { .. })
                        });
                        outcomes.stale += usize::from(!done);
                    }
                }
                (_, Err(err)) => {
                    named(err.to_string(), outcomes);
                    outcomes.refused += 1;
                }
                // The damage is in pages the listing does not read: integrity_check said so.
                (_, Ok(_)) => {
                    outcomes.refused += 1;
                    let message = format!("integrity_check of {}: {integrity:?}", copy.display());
                    outcomes.first_refusal.get_or_insert(message);
                }
            }
            store.close().await;
        }
        Err(err) => {
            named(err.to_string(), outcomes);
            outcomes.refused += 1;
        }
    }
}

/// The file copied while writers run (as a backup tool would), with and without its `-wal`,
/// and [`SqlitePool::backup_to`] at the same moments. A raw copy opens with `integrity_check`
/// ok or is refused with a typed error naming it; a backup always opens, passes
/// `integrity_check`, and holds every execution finished before it began, each log
/// consistent. Checkpoints run often (`wal_autocheckpoint` of 16 pages), so the database
/// file and the WAL change under the copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_a_running_store_are_sound_or_refused_and_backups_are_complete() {
    const ROUNDS: usize = 12;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open_with_busy_timeout(&path, Duration::from_secs(5)).await;
    store
        .on_writer(|conn| conn.pragma_update(None, "wal_autocheckpoint", 16))
        .await
        .expect("sets wal_autocheckpoint");
    let (finished_tx, mut finished_rx) = tokio::sync::mpsc::unbounded_channel();
    // The writers run a wave of 8 executions per permit; each round grants three, waits for
    // the first, and copies while the other two run.
    let permits = Arc::new(tokio::sync::Semaphore::new(0));
    let writers = {
        let (store, permits) = (store.clone(), Arc::clone(&permits));
        tokio::spawn(async move {
            let mut next = 0;
            while let Ok(permit) = permits.acquire().await {
                permit.forget();
                for (n, reached, err) in wave(&store, next..next + 8).await {
                    assert_eq!(reached, Reached::Finished, "{n}: {err:?}");
                    let _ = finished_tx.send(n);
                }
                next += 8;
            }
        })
    };
    let mut finished = Vec::new();
    let mut raw = CopyOutcomes::default();
    let mut raw_with_wal = CopyOutcomes::default();
    for round in 0..ROUNDS {
        permits.add_permits(3);
        // Some executions finished since the last round.
        finished.push(finished_rx.recv().await.expect("the writers run"));
        while let Ok(n) = finished_rx.try_recv() {
            finished.push(n);
        }
        let acknowledged = finished.clone();
        let copy_dir = dir.path().join(format!("copy-{round}"));
        std::fs::create_dir(&copy_dir).expect("a copy dir");
        let db_only = copy_dir.join("db-only.sqlite");
        std::fs::copy(&path, &db_only).expect("copies the database file");
        let with_wal = copy_dir.join("with-wal.sqlite");
        std::fs::copy(&path, &with_wal).expect("copies the database file");
        if sibling(&path, "-wal").exists() {
            std::fs::copy(sibling(&path, "-wal"), sibling(&with_wal, "-wal")).expect("copies");
        }
        let backup = copy_dir.join("backup.sqlite");
        store.backup_to(&backup).await.expect("backs up");
        let err = store
            .backup_to(&backup)
            .await
            .expect_err("never overwrites");
        assert!(err.to_string().contains("exists"), "{err}");

        check_raw_copy(&db_only, &acknowledged, &mut raw).await;
        check_raw_copy(&with_wal, &acknowledged, &mut raw_with_wal).await;
        assert_eq!(integrity_check(&backup), "ok");
        let copy = SqlitePool::open(SqliteConfig::new(&backup).existing_only())
            .await
            .expect("a backup opens");
        for n in &acknowledged {
            assert_state_matches(&copy, *n, Reached::Finished).await;
        }
        copy.close().await;
        assert_versions_dense(&backup);
    }
    permits.close();
    writers.await.expect("the writers never failed");
    store.close().await;
    assert_eq!(integrity_check(&path), "ok");
    println!(
        "copies while running ({ROUNDS} rounds, {} executions finished meanwhile): database file \
         only {raw:?}, with its WAL {raw_with_wal:?}, backups complete {ROUNDS}",
        finished.len()
    );
}

/// A backup that cannot be written is a typed error naming the destination, and leaves no
/// file behind; a closed store refuses to back up.
#[tokio::test]
async fn a_backup_that_cannot_be_written_is_a_typed_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open_with_busy_timeout(&path, Duration::from_secs(5)).await;
    store
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    let dest = dir.path().join("missing-dir").join("backup.sqlite");
    let err = store.backup_to(&dest).await.expect_err("no such directory");
    assert_eq!(err.kind(), DbErrorKind::Backend, "{err}");
    assert!(
        err.to_string().contains(&dest.display().to_string()),
        "{err}"
    );
    assert!(!dest.exists());
    store.close().await;
    let dest = dir.path().join("backup.sqlite");
    let err = store.backup_to(&dest).await.expect_err("closed");
    assert!(matches!(err, DbError::Closed), "{err}");
    assert!(!dest.exists());
}
