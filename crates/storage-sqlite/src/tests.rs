//! Unit tests of the SQLite backend: effective settings, migrations, typed open errors,
//! persistence across close and reopen, group commit (a failed command undone, the others kept).

use crate::{
    SqliteConfig, SqliteOpenError, SqlitePool, Synchronous,
    error::SqliteError,
    ops::WriteCtx,
    schema::{self, APPLICATION_ID},
    writer::{self, Command, FnCommand},
};
use chrono::{DateTime, TimeZone, Utc};
use concepts::{
    AppendBatchRequest, ComponentId, CreateOutcome, CreateRequest, DbAwait, DbClient, DbConnection,
    DbError, DbErrorKind, DbExecutor, DbTimers, DbWorkflow, DelayId, ExecutionEventInner,
    ExecutionId, ExecutionMetadata, ExecutorId, FunctionFqn, HistoryEvent, JoinSetId,
    JoinSetRequest, JoinSetResponse, JoinSetResponseEvent, Json, LockPendingRequest, PendingState,
    SchemaOptions, SchemaRefusal, SupportedFunctionReturnValue, Version,
    kernel::{WaiterCounts, WaiterHub, Write},
};
use std::{path::Path, sync::Arc, time::Duration};

mod checkpoint;
mod faults;
mod handover;
mod plans;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid date")
}

fn ffqn() -> FunctionFqn {
    "ns:pkg/ifc.fn".parse().expect("a valid ffqn")
}

fn create_request(execution_id: ExecutionId, at: DateTime<Utc>) -> CreateRequest {
    CreateRequest {
        created_at: at,
        execution_id,
        ffqn: ffqn(),
        params: Json(serde_json::json!([1, {"b": 2, "a": 1}])),
        parent: None,
        scheduled_at: at,
        retry_exp_backoff: Duration::from_millis(100),
        max_retries: 2,
        component_id: ComponentId::new("activity", "test").expect("a valid component id"),
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    }
}

fn id(n: u128) -> ExecutionId {
    concepts::ExecutionIdTopLevel::from_parts(1, n).into()
}

async fn open(path: &Path) -> SqlitePool {
    SqlitePool::open(SqliteConfig::new(path))
        .await
        .expect("the store opens")
}

fn pragma_i64(path: &Path, name: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).expect("opens");
    conn.pragma_query_value(None, name, |row| row.get(0))
        .expect("pragma reads")
}

#[tokio::test]
async fn effective_settings_are_read_back_from_the_connection() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    let settings = store.effective_settings().clone();
    assert_eq!(settings.journal_mode, "wal");
    assert_eq!(settings.synchronous, Synchronous::Full);
    assert_eq!(settings.busy_timeout, Duration::from_secs(5));
    assert_eq!(settings.schema_version, schema::current_version());
    store.close().await;

    // Another level is applied and reported as such; WAL is a property of the file.
    let path = dir.path().join("normal.sqlite");
    let store = SqlitePool::open(SqliteConfig::new(&path).with_synchronous(Synchronous::Normal))
        .await
        .expect("opens");
    assert_eq!(store.effective_settings().synchronous, Synchronous::Normal);
    assert_eq!(store.effective_settings().journal_mode, "wal");
    store.close().await;
    let conn = rusqlite::Connection::open(&path).expect("opens");
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .expect("reads");
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_fresh_file_gets_the_current_schema_and_our_application_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    open(&path).await.close().await;
    assert_eq!(
        pragma_i64(&path, "user_version"),
        i64::from(schema::current_version())
    );
    assert_eq!(
        pragma_i64(&path, "application_id"),
        i64::from(APPLICATION_ID)
    );
    // Opening again applies nothing and keeps the version.
    let store = open(&path).await;
    assert_eq!(
        store.effective_settings().schema_version,
        schema::current_version()
    );
    store.close().await;
}

fn history(event: HistoryEvent) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent { event }
}

fn join_next(join_set_id: &JoinSetId) -> ExecutionEventInner {
    history(HistoryEvent::JoinNext {
        join_set_id: join_set_id.clone(),
        run_expires_at: t0(),
        closing: false,
    })
}

fn delay_finished(join_set_id: &JoinSetId, delay_id: DelayId) -> JoinSetResponseEvent {
    JoinSetResponseEvent {
        join_set_id: join_set_id.clone(),
        event: JoinSetResponse::DelayFinished { delay_id },
    }
}

/// Takes a file of this build back to schema version `to`, as a build of that version would
/// have left it: the rows are the same, less what later migrations added.
fn downgrade(path: &Path, to: u32) {
    let conn = rusqlite::Connection::open(path).expect("opens");
    conn.execute_batch(
        "ALTER TABLE t_execution_state ADD COLUMN executor_id TEXT; \
         ALTER TABLE t_execution_state ADD COLUMN run_id TEXT; \
         ALTER TABLE t_execution_state ADD COLUMN join_set_id TEXT; \
         ALTER TABLE t_execution_state ADD COLUMN result_kind TEXT;",
    )
    .expect("drops version 10");
    conn.execute_batch("ALTER TABLE t_execution_state DROP COLUMN response_count;")
        .expect("drops version 8");
    conn.execute_batch(
        "DROP INDEX ux_response_idx; ALTER TABLE t_response DROP COLUMN idx; \
         CREATE INDEX ix_response_execution ON t_response (execution_id, id);",
    )
    .expect("drops version 7");
    conn.execute_batch("DROP TABLE t_schedule; DROP TABLE t_schedule_tick;")
        .expect("drops version 6");
    conn.execute_batch("DROP INDEX ix_state_unfinished; DROP INDEX ix_state_parent;")
        .expect("drops version 5");
    conn.execute_batch(
        "DROP INDEX ix_state_finished; ALTER TABLE t_execution_state DROP COLUMN finished_at;",
    )
    .expect("drops version 4");
    if to < 3 {
        conn.execute_batch(
            "DROP TABLE t_join_set; DROP INDEX ix_response_join_set; \
             ALTER TABLE t_response DROP COLUMN join_set_idx;",
        )
        .expect("drops version 3");
    }
    if to < 2 {
        conn.execute_batch("DROP INDEX ix_state_created")
            .expect("drops version 2");
    }
    conn.pragma_update(None, "user_version", to)
        .expect("sets the version");
}

/// `(join_set_id, join_next_count, response_count)` of every stored join set, in key order.
fn join_set_rows(path: &Path) -> Vec<(String, i64, i64)> {
    let conn = rusqlite::Connection::open(path).expect("opens");
    let mut stmt = conn
        .prepare("SELECT join_set_id, join_next_count, response_count FROM t_join_set ORDER BY 1")
        .expect("prepares");
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads")
}

/// The `join_set_idx` of every response, in arrival order.
fn join_set_idxs(path: &Path) -> Vec<Option<i64>> {
    let conn = rusqlite::Connection::open(path).expect("opens");
    let mut stmt = conn
        .prepare("SELECT join_set_idx FROM t_response ORDER BY id")
        .expect("prepares");
    stmt.query_map([], |row| row.get(0))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads")
}

/// The place of every response among its execution's, in arrival order.
fn response_idxs(path: &Path) -> Vec<Option<i64>> {
    let conn = rusqlite::Connection::open(path).expect("opens");
    let mut stmt = conn
        .prepare("SELECT idx FROM t_response ORDER BY id")
        .expect("prepares");
    stmt.query_map([], |row| row.get(0))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads")
}

/// A file at each older schema version migrates and keeps its data: a state row written by
/// version 1, and a join set with a consumed and an unconsumed response (behind a response of
/// another join set), whose counters and response indexes the migration to version 3 derives.
#[tokio::test]
async fn an_older_schema_is_migrated_and_keeps_its_data() {
    for from in [1, 2, 3] {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("db.sqlite");
        let join_set: JoinSetId = "n:children".parse().expect("valid");
        let other: JoinSetId = "o:other".parse().expect("valid");
        let delays: Vec<DelayId> = (0..3)
            .map(|i| DelayId::generate_at(t0() + chrono::TimeDelta::milliseconds(i)))
            .collect();
        let at = |secs| t0() + chrono::TimeDelta::seconds(secs);
        {
            let store = open(&path).await;
            store
                .create(create_request(id(8), t0()))
                .await
                .expect("creates");
            let version = Version(1);
            let mut events = vec![join_set_create(&join_set)];
            events.extend(delays.iter().map(|delay_id| {
                history(HistoryEvent::JoinSetRequest {
                    join_set_id: join_set.clone(),
                    request: JoinSetRequest::DelayRequest {
                        delay_id: *delay_id,
                        expires_at: at(60),
                    },
                })
            }));
            let version = store
                .append_batch(AppendBatchRequest::events(
                    id(8).clone(),
                    version,
                    t0(),
                    events,
                ))
                .await
                .expect("appends");
            let responses = [
                (other.clone(), DelayId::generate_at(t0())),
                (join_set.clone(), delays[0]),
                (join_set.clone(), delays[1]),
            ];
            for (secs, (join_set_id, delay_id)) in (0..).zip(responses) {
                store
                    .append_response(at(secs), &id(8), delay_finished(&join_set_id, delay_id))
                    .await
                    .expect("stores");
            }
            store
                .append_batch(AppendBatchRequest::events(
                    id(8).clone(),
                    version,
                    t0(),
                    vec![join_next(&join_set)],
                ))
                .await
                .expect("appends");
            store.close().await;
        }
        downgrade(&path, from);
        {
            let conn = rusqlite::Connection::open(&path).expect("opens");
            // A row written by version 1 of the schema.
            conn.execute(
                "INSERT INTO t_execution_state (execution_id, ffqn, component_id, next_version, \
                 state, pending_at, state_json, temporary_event_count, max_retries, \
                 retry_exp_backoff_us, is_top_level, created_at, scheduled_at) \
                 VALUES (?1, 'ns:pkg/ifc.fn', 'activity:test', 1, 'PendingAt', ?2, ?3, 0, 0, 0, 1, ?2, ?2)",
                rusqlite::params![
                    id(7).to_string(),
                    t0().timestamp_micros(),
                    serde_json::to_string(&PendingState::PendingAt { scheduled_at: t0() })
                        .expect("json"),
                ],
            )
            .expect("inserts");
        }
        assert_eq!(pragma_i64(&path, "user_version"), i64::from(from));
        let store = open(&path).await;
        assert_eq!(
            store.effective_settings().schema_version,
            schema::current_version()
        );
        let conn = rusqlite::Connection::open(&path).expect("opens");
        let has_index: bool = conn
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM sqlite_schema WHERE name = 'ix_state_created')",
                [],
                |row| row.get(0),
            )
            .expect("reads");
        assert!(has_index, "migration 2 created its index");
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('t_execution_state')")
            .and_then(|mut stmt| stmt.query_map([], |row| row.get(0))?.collect())
            .expect("reads the columns");
        for dropped in ["executor_id", "run_id", "join_set_id", "result_kind"] {
            assert!(
                !columns.iter().any(|c| c == dropped),
                "migration 10 dropped {dropped}"
            );
        }
        let pending = store
            .list_executions(
                concepts::ListExecutionsFilter {
                    state: Some(concepts::PendingStateKind::PendingAt),
                    ..Default::default()
                },
                concepts::Pagination::default(),
            )
            .await
            .expect("lists");
        let pending: Vec<_> = pending.into_iter().map(|s| s.execution_id).collect();
        assert_eq!(
            pending,
            [id(8).clone(), id(7).clone()],
            "both pending executions listed, newest first, the row of version 1 among them"
        );
        assert_eq!(
            store
                .get(&id(7))
                .await
                .expect("the old row is readable")
                .pending_state,
            PendingState::PendingAt { scheduled_at: t0() }
        );
        assert_eq!(
            join_set_rows(&path),
            vec![(join_set.to_string(), 1, 2), (other.to_string(), 0, 1)],
            "migration 3 counted the join sets from version {from}"
        );
        assert_eq!(join_set_idxs(&path), vec![Some(0), Some(0), Some(1)]);
        assert_eq!(response_idxs(&path), vec![Some(0), Some(1), Some(2)]);
        let counts: Vec<(String, i64)> = conn
            .prepare("SELECT execution_id, response_count FROM t_execution_state ORDER BY 1")
            .and_then(|mut stmt| {
                stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
                    .collect()
            })
            .expect("reads the response counts");
        assert_eq!(
            counts,
            vec![(id(7).to_string(), 0), (id(8).to_string(), 3)],
            "migration 8 counted the responses"
        );
        let from_third = store
            .subscribe_to_next_responses(&id(8), 2)
            .await
            .expect("reads");
        assert_eq!(
            from_third.iter().map(|r| &r.event).collect::<Vec<_>>(),
            vec![&delay_finished(&join_set, delays[1])],
            "migration 7 numbered the responses in arrival order"
        );

        // The next JoinNext consumes the join set's second response (of t0 + 2 s), the one
        // after that blocks, and the response that follows gets the next index and unblocks it.
        let log = store.get(&id(8)).await.expect("reads");
        assert_eq!(
            log.pending_state,
            PendingState::PendingAt {
                scheduled_at: at(1)
            }
        );
        let version = store
            .append_batch(AppendBatchRequest::events(
                id(8).clone(),
                log.next_version,
                t0(),
                vec![join_next(&join_set)],
            ))
            .await
            .expect("appends");
        let log = store.get(&id(8)).await.expect("reads");
        assert_eq!(
            log.pending_state,
            PendingState::PendingAt {
                scheduled_at: at(2)
            }
        );
        store
            .append_batch(AppendBatchRequest::events(
                id(8).clone(),
                version,
                t0(),
                vec![join_next(&join_set)],
            ))
            .await
            .expect("appends");
        let log = store.get(&id(8)).await.expect("reads");
        assert!(matches!(
            log.pending_state,
            PendingState::BlockedByJoinSet { .. }
        ));
        store
            .append_response(at(3), &id(8), delay_finished(&join_set, delays[2]))
            .await
            .expect("stores");
        let log = store.get(&id(8)).await.expect("reads");
        assert_eq!(
            log.pending_state,
            PendingState::PendingAt {
                scheduled_at: at(3)
            }
        );
        assert_eq!(
            join_set_idxs(&path),
            vec![Some(0), Some(0), Some(1), Some(2)]
        );
        assert_eq!(
            response_idxs(&path),
            vec![Some(0), Some(1), Some(2), Some(3)]
        );
        assert_eq!(
            join_set_rows(&path),
            vec![(join_set.to_string(), 3, 3), (other.to_string(), 0, 1)]
        );
        store.close().await;
    }
}

/// A file of version 8 stored a response that changed neither the log nor the state of its
/// execution without counting it on the row; the migration to version 9 counts it, and a
/// lock hands it over.
#[tokio::test]
async fn the_migration_to_version_9_counts_every_stored_response() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let join_set: JoinSetId = "o:timer".parse().expect("valid");
    {
        let store = open(&path).await;
        store
            .create(create_request(id(8), t0()))
            .await
            .expect("creates");
        for ms in 0..2 {
            let delay_id = DelayId::generate_at(t0() + chrono::TimeDelta::milliseconds(ms));
            store
                .append_response(t0(), &id(8), delay_finished(&join_set, delay_id))
                .await
                .expect("stores");
        }
        store.close().await;
    }
    let conn = rusqlite::Connection::open(&path).expect("opens");
    conn.execute_batch(
        "UPDATE t_execution_state SET response_count = 0; \
         ALTER TABLE t_execution_state ADD COLUMN executor_id TEXT; \
         ALTER TABLE t_execution_state ADD COLUMN run_id TEXT; \
         ALTER TABLE t_execution_state ADD COLUMN join_set_id TEXT; \
         ALTER TABLE t_execution_state ADD COLUMN result_kind TEXT; \
         PRAGMA user_version = 8;",
    )
    .expect("leaves the rows as version 8 did");
    drop(conn);
    let store = open(&path).await;
    let count: i64 = rusqlite::Connection::open(&path)
        .and_then(|conn| {
            conn.query_row("SELECT response_count FROM t_execution_state", [], |row| {
                row.get(0)
            })
        })
        .expect("reads the count");
    assert_eq!(count, 2, "migration 9 counted the responses");
    let locked = (store.lock_pending(handover::lock_request(1)).await).expect("locks");
    assert_eq!(locked.len(), 1);
    assert_eq!(locked[0].responses.len(), 2);
    store.close().await;
}

#[tokio::test]
async fn a_newer_schema_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    open(&path).await.close().await;
    {
        let conn = rusqlite::Connection::open(&path).expect("opens");
        conn.pragma_update(None, "user_version", schema::current_version() + 1)
            .expect("sets");
    }
    let err = SqlitePool::open(SqliteConfig::new(&path))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, SqliteOpenError::Schema { refusal: SchemaRefusal::TooNew { found, supported }, .. }
            if *found == schema::current_version() + 1 && *supported == schema::current_version()),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("newer build"), "{err}");
    assert_eq!(err.path(), path);
}

#[tokio::test]
async fn a_tool_that_asks_for_neither_creation_nor_migration_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.sqlite");
    let err = SqlitePool::open(SqliteConfig::new(&missing).existing_only())
        .await
        .expect_err("refused");
    assert!(matches!(err, SqliteOpenError::Open { .. }), "{err:?}");
    assert!(!missing.exists(), "no file created");

    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, "").expect("writes");
    let err = SqlitePool::open(SqliteConfig::new(&empty).existing_only())
        .await
        .expect_err("refused");
    assert!(
        matches!(
            err,
            SqliteOpenError::Schema {
                refusal: SchemaRefusal::NoSchema,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("is not a Stele database"), "{err}");
    assert_eq!(err.path(), empty);
    assert_eq!(pragma_i64(&empty, "user_version"), 0, "no schema created");

    let old = dir.path().join("old.sqlite");
    open(&old).await.close().await;
    downgrade(&old, 3);
    let err = SqlitePool::open(SqliteConfig::new(&old).existing_only().without_migrations())
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, SqliteOpenError::Schema { refusal: SchemaRefusal::TooOld { found: 3, current }, .. }
            if *current == schema::current_version()),
        "{err:?}"
    );
    assert_eq!(pragma_i64(&old, "user_version"), 3, "not migrated");

    // A current file opens, and a write-free open is still a whole store.
    let current = dir.path().join("current.sqlite");
    open(&current).await.close().await;
    let store = SqlitePool::open(
        SqliteConfig::new(&current)
            .existing_only()
            .without_migrations(),
    )
    .await
    .expect("opens");
    assert_eq!(
        store.effective_settings().schema_version,
        schema::current_version()
    );
    store.close().await;
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("garbage.sqlite");
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| u8::try_from(i % 251).unwrap_or(0))
        .collect();
    std::fs::write(&path, &garbage).expect("writes");
    let err = SqlitePool::open(SqliteConfig::new(&path))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, SqliteOpenError::NotADatabase { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).expect("reads"),
        garbage,
        "the file is untouched"
    );
    let db_err = DbError::from(err);
    assert_eq!(db_err.kind(), DbErrorKind::Backend);
    assert!(db_err.to_string().contains(&path.display().to_string()));
}

#[tokio::test]
async fn another_applications_database_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("other.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).expect("opens");
        conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
            .expect("creates");
    }
    let err = SqlitePool::open(SqliteConfig::new(&path))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, SqliteOpenError::ForeignDatabase { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );

    let path = dir.path().join("other-id.sqlite");
    {
        let conn = rusqlite::Connection::open(&path).expect("opens");
        conn.pragma_update(None, "application_id", 42)
            .expect("sets");
    }
    let err = SqlitePool::open(SqliteConfig::new(&path))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, SqliteOpenError::ForeignDatabase { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_unopenable_path_is_a_typed_error_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A regular file where a directory should be: no one, not even root, can create this.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, b"x").expect("writes");
    let path = blocker.join("db.sqlite");
    let err = SqlitePool::open(SqliteConfig::new(&path))
        .await
        .expect_err("refused");
    assert!(matches!(err, SqliteOpenError::Open { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );

    let missing = dir.path().join("missing-dir").join("db.sqlite");
    let err = SqlitePool::open(SqliteConfig::new(&missing))
        .await
        .expect_err("refused");
    assert!(matches!(err, SqliteOpenError::Open { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );

    // A directory in the file's place.
    let err = SqlitePool::open(SqliteConfig::new(dir.path()))
        .await
        .expect_err("refused");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
}

#[tokio::test]
async fn an_invalid_config_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = SqliteConfig::new(dir.path().join("db.sqlite"));
    config.max_commands_per_transaction = 0;
    let err = SqlitePool::open(config).await.expect_err("refused");
    assert!(
        matches!(err, SqliteOpenError::InvalidConfig { .. }),
        "{err:?}"
    );
    let err = SqlitePool::open(SqliteConfig::new(":memory:"))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, SqliteOpenError::InvalidConfig { .. }),
        "{err:?}"
    );
}

/// Writes executions in every state, closes, reopens, and compares everything.
#[tokio::test]
async fn close_and_reopen_keeps_every_log_response_and_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await;
    let component = ComponentId::new("activity", "test").expect("valid");
    let executor = ExecutorId::generate_at(t0());
    let later = t0() + chrono::TimeDelta::seconds(10);
    let ffqns: Arc<[FunctionFqn]> = Arc::from(vec![ffqn()]);

    // Pending in the future.
    let mut future = create_request(id(1), t0());
    future.scheduled_at = later;
    store.create(future).await.expect("creates");
    // Locked.
    store
        .create(create_request(id(2), t0()))
        .await
        .expect("creates");
    // Finished.
    store
        .create(create_request(id(3), t0()))
        .await
        .expect("creates");
    // Blocked by a join set, with a delay and a response from another join set.
    store
        .create(create_request(id(4), t0()))
        .await
        .expect("creates");
    let locked = store
        .lock_pending(LockPendingRequest {
            batch_size: 10,
            pending_at_or_sooner: t0(),
            ffqns,
            now: t0(),
            component_id: component.clone(),
            executor_id: executor,
            lock_expires_at: later,
        })
        .await
        .expect("locks");
    assert_eq!(locked.len(), 3);
    store
        .append_batch(AppendBatchRequest::events(
            id(3).clone(),
            Version(2),
            t0(),
            vec![ExecutionEventInner::Finished {
                result: Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
                    serde_json::json!({"z": 1, "a": 2}),
                ))),
            }],
        ))
        .await
        .expect("finishes");
    let join_set: JoinSetId = "n:sleep".parse().expect("valid");
    let delay_id = DelayId::generate_at(t0());
    store
        .append_batch(AppendBatchRequest::events(
            id(4).clone(),
            Version(2),
            t0(),
            vec![
                ExecutionEventInner::HistoryEvent {
                    event: HistoryEvent::JoinSetCreate {
                        join_set_id: join_set.clone(),
                        closing_strategy: concepts::ClosingStrategy::Complete,
                    },
                },
                ExecutionEventInner::HistoryEvent {
                    event: HistoryEvent::JoinSetRequest {
                        join_set_id: join_set.clone(),
                        request: JoinSetRequest::DelayRequest {
                            delay_id,
                            expires_at: later,
                        },
                    },
                },
                ExecutionEventInner::HistoryEvent {
                    event: HistoryEvent::JoinNext {
                        join_set_id: join_set.clone(),
                        run_expires_at: t0(),
                        closing: false,
                    },
                },
            ],
        ))
        .await
        .expect("appends");
    store
        .append_response(
            t0(),
            &id(4),
            JoinSetResponseEvent {
                join_set_id: "o:other".parse().expect("valid"),
                event: JoinSetResponse::DelayFinished {
                    delay_id: DelayId::generate_at(t0()),
                },
            },
        )
        .await
        .expect("stores");

    let ids = [id(1), id(2), id(3), id(4)];
    let mut before = Vec::new();
    for execution_id in &ids {
        before.push(store.get(execution_id).await.expect("reads"));
    }
    assert!(matches!(
        before[0].pending_state,
        PendingState::PendingAt { .. }
    ));
    assert!(matches!(
        before[1].pending_state,
        PendingState::Locked { .. }
    ));
    assert!(matches!(
        before[2].pending_state,
        PendingState::Finished { .. }
    ));
    assert!(matches!(
        before[3].pending_state,
        PendingState::BlockedByJoinSet { .. }
    ));
    let timers_before = store.get_expired_timers(later).await.expect("reads");
    assert_eq!(timers_before.len(), 2, "the lease of 2 and the delay of 4");
    store.close().await;

    let store = open(&path).await;
    for (execution_id, log) in ids.iter().zip(&before) {
        assert_eq!(&store.get(execution_id).await.expect("reads"), log);
    }
    assert_eq!(
        store.get_expired_timers(later).await.expect("reads"),
        timers_before
    );
    let summaries = store
        .list_executions(
            concepts::ListExecutionsFilter::default(),
            concepts::Pagination::default(),
        )
        .await
        .expect("lists");
    assert_eq!(summaries.len(), 4);
    store.close().await;
}

#[tokio::test]
async fn close_is_idempotent_releases_waiters_and_refuses_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    store
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.subscribe_to_next_responses(&id(1), 0).await })
    };
    let finished_waiter = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_for_finished_result(&id(1), None).await })
    };
    // Both waiters are registered before closing (they subscribe before their first read).
    let both = WaiterCounts {
        pending: 0,
        responses: 1,
        finished: 1,
    };
    for _ in 0..1000 {
        if concepts::kernel::Backend::waiter_counts(&store) == both {
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(concepts::kernel::Backend::waiter_counts(&store), both);
    store.close().await;
    store.close().await;
    let released = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("released");
    assert_eq!(
        released.expect("joins").expect_err("closed").kind(),
        DbErrorKind::Closed
    );
    let released = tokio::time::timeout(Duration::from_secs(10), finished_waiter)
        .await
        .expect("released");
    assert_eq!(
        released.expect("joins").expect_err("closed").kind(),
        DbErrorKind::Closed
    );
    assert_eq!(
        concepts::kernel::Backend::waiter_counts(&store),
        WaiterCounts::default(),
        "waiters that left are unregistered"
    );
    let err = store
        .create(create_request(id(2), t0()))
        .await
        .expect_err("closed");
    assert_eq!(err.kind(), DbErrorKind::Closed);
    let err = store.get(&id(1)).await.expect_err("closed");
    assert_eq!(err.kind(), DbErrorKind::Closed);
}

#[tokio::test]
async fn timed_out_waiters_leave_no_registration() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    store
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    let ffqns: Arc<[FunctionFqn]> = Arc::from(vec![
        "ns:pkg/ifc.other".parse::<FunctionFqn>().expect("valid"),
    ]);
    for _ in 0..20 {
        store
            .wait_for_pending(t0(), Arc::clone(&ffqns), Duration::from_millis(1))
            .await;
        let err = store
            .wait_for_finished_result(&id(1), Some(Duration::from_millis(1)))
            .await
            .expect_err("times out");
        assert_eq!(err.kind(), DbErrorKind::Timeout);
    }
    assert_eq!(
        concepts::kernel::Backend::waiter_counts(&store),
        WaiterCounts::default()
    );
    store.close().await;
}

/// Many concurrent writes share transactions; each keeps its own outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_keep_their_own_outcomes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    let mut tasks = Vec::new();
    for n in 0..200u128 {
        let store = store.clone();
        // Every id is created twice: exactly one of each pair creates it, the other finds it.
        tasks.push(tokio::spawn(async move {
            store.create(create_request(id(n / 2), t0())).await
        }));
    }
    let mut created = 0;
    let mut existed = 0;
    for task in tasks {
        match task
            .await
            .expect("joins")
            .expect("an identical create succeeds")
        {
            CreateOutcome::Created => created += 1,
            CreateOutcome::AlreadyExisted { .. } => existed += 1,
        }
    }
    assert_eq!((created, existed), (100, 100));
    for n in 0..100u128 {
        assert_eq!(store.get(&id(n)).await.expect("reads").events.len(), 1);
    }
    store.close().await;
}

/// Drives the writer loop over exactly these commands, as one batch.
fn run_commands(conn: rusqlite::Connection, path: &Path, commands: Vec<Box<dyn Command>>) {
    let (tx, rx) = tokio::sync::mpsc::channel(commands.len() + 1);
    for command in commands {
        assert!(tx.try_send(writer::Message::Command(command)).is_ok());
    }
    assert!(tx.try_send(writer::Message::Shutdown).is_ok());
    drop(tx);
    // The defaults: up to 1024 commands per transaction, a busy timeout of 5 s.
    writer::run(conn, &SqliteConfig::new(path), rx, &WaiterHub::new());
}

impl SqlitePool {
    /// Runs `op` on the writer connection, as a command of its own: how tests inject
    /// faults (a small `max_page_count`) into the store's own connection.
    pub(crate) async fn on_writer<T, F>(&self, op: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let op = move |ctx: &mut WriteCtx<'_>| op(ctx.conn).map_err(SqliteError::from);
        self.send(fn_command(op)).await
    }
}

/// A closure as a writer's operation: how the tests inject commands that fail or panic.
impl<R, F> writer::Op for F
where
    F: FnOnce(&mut WriteCtx<'_>) -> Result<R, SqliteError> + Send + 'static,
{
    type Output = R;
    fn run(self, ctx: &mut WriteCtx<'_>) -> Result<R, SqliteError> {
        self(ctx)
    }
    fn answer_from_read(&self, _: &rusqlite::Connection) -> Option<Result<R, SqliteError>> {
        None
    }
}

/// A writer command that runs `op` and replies with its outcome.
fn fn_command<T, F>(
    op: F,
) -> (
    Box<dyn Command>,
    tokio::sync::oneshot::Receiver<Result<T, DbError>>,
)
where
    T: Send + 'static,
    F: FnOnce(&mut WriteCtx<'_>) -> Result<T, SqliteError> + Send + 'static,
{
    FnCommand::boxed(op, |_, value| value)
}

/// Creates an execution inside a writer command, as `SqlitePool::create` does.
fn create(ctx: &mut WriteCtx<'_>, req: CreateRequest) -> Result<CreateOutcome, SqliteError> {
    let keys = req.keys()?;
    ctx.write(req, &keys)
}

/// A failing command in a group commit rolls back only its own writes.
#[test]
fn a_failing_command_rolls_back_only_itself() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let (conn, _) = schema::open_writer(&SqliteConfig::new(&path)).expect("opens");
    let (first, first_rx) =
        fn_command(|ctx: &mut WriteCtx<'_>| create(ctx, create_request(id(1), t0())));
    // Creates 2, then fails on a conflicting create of 1: its create of 2 must be rolled back.
    let (second, second_rx) = fn_command(|ctx: &mut WriteCtx<'_>| {
        create(ctx, create_request(id(2), t0()))?;
        let mut conflicting = create_request(id(1), t0());
        conflicting.ffqn = "ns:pkg/ifc.other".parse().expect("parses");
        create(ctx, conflicting)
    });
    let (third, third_rx) =
        fn_command(|ctx: &mut WriteCtx<'_>| create(ctx, create_request(id(3), t0())));
    run_commands(conn, &path, vec![first, second, third]);
    let conn = rusqlite::Connection::open(&path).expect("opens");
    assert_eq!(
        first_rx.blocking_recv().expect("replied").expect("ok"),
        CreateOutcome::Created
    );
    let err = second_rx
        .blocking_recv()
        .expect("replied")
        .expect_err("duplicate");
    assert_eq!(err.kind(), DbErrorKind::Duplicate);
    assert_eq!(
        third_rx.blocking_recv().expect("replied").expect("ok"),
        CreateOutcome::Created
    );
    assert_eq!(
        stored(&conn),
        (vec![id(1).to_string(), id(3).to_string()], 2)
    );
}

/// The ids of the stored executions in order, and how many events are stored.
fn stored(conn: &rusqlite::Connection) -> (Vec<String>, i64) {
    let ids = conn
        .prepare("SELECT execution_id FROM t_execution_state ORDER BY execution_id")
        .expect("prepares")
        .query_map([], |row| row.get(0))
        .expect("queries")
        .collect::<Result<_, _>>()
        .expect("reads");
    let events = conn
        .query_row("SELECT COUNT(*) FROM t_event", [], |row| row.get(0))
        .expect("reads");
    (ids, events)
}

/// A command that panics after writing is undone whole, and the commands before and after it
/// in the same group commit, those before persisted again in a new transaction.
#[test]
fn a_panicking_command_is_undone_and_the_others_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let (conn, _) = schema::open_writer(&SqliteConfig::new(&path)).expect("opens");
    let (first, first_rx) =
        fn_command(|ctx: &mut WriteCtx<'_>| create(ctx, create_request(id(1), t0())));
    let (second, second_rx) = fn_command(|ctx: &mut WriteCtx<'_>| {
        create(ctx, create_request(id(2), t0()))?;
        panic!("a bug in a command, after it wrote");
        #[expect(unreachable_code, reason = "the command's reply type")]
        Ok(CreateOutcome::Created)
    });
    let (third, third_rx) =
        fn_command(|ctx: &mut WriteCtx<'_>| create(ctx, create_request(id(3), t0())));
    run_commands(conn, &path, vec![first, second, third]);
    assert_eq!(
        first_rx.blocking_recv().expect("replied").expect("ok"),
        CreateOutcome::Created
    );
    let err: DbError = second_rx
        .blocking_recv()
        .expect("replied")
        .expect_err("panicked");
    assert!(err.to_string().contains("the write panicked"), "{err}");
    assert_eq!(
        third_rx.blocking_recv().expect("replied").expect("ok"),
        CreateOutcome::Created
    );
    let conn = rusqlite::Connection::open(&path).expect("opens");
    assert_eq!(
        stored(&conn),
        (vec![id(1).to_string(), id(3).to_string()], 2)
    );
}

#[tokio::test]
async fn a_second_delay_request_with_the_same_id_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("db.sqlite")).await;
    store
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    let join_set: JoinSetId = "n:j".parse().expect("valid");
    let delay_id = DelayId::generate_at(t0());
    let request = ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: join_set,
            request: JoinSetRequest::DelayRequest {
                delay_id,
                expires_at: t0(),
            },
        },
    };
    store
        .append_batch(AppendBatchRequest::events(
            id(1).clone(),
            Version(1),
            t0(),
            vec![request.clone()],
        ))
        .await
        .expect("appends");
    let err = store
        .append_batch(AppendBatchRequest::events(
            id(1).clone(),
            Version(2),
            t0(),
            vec![request],
        ))
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), DbErrorKind::Validation, "{err}");
    store.close().await;
}

/// A full disk (simulated with `max_page_count`) fails the write that hit it with an error
/// naming the file, and every reply agrees with what was committed.
#[test]
fn a_full_disk_is_a_typed_error_and_replies_match_what_committed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let (conn, _) = schema::open_writer(&SqliteConfig::new(&path)).expect("opens");
    let pages: i64 = conn
        .pragma_query_value(None, "page_count", |row| row.get(0))
        .expect("reads");
    conn.pragma_update(None, "max_page_count", pages + 8)
        .expect("sets");
    let mut commands = Vec::new();
    let mut receivers = Vec::new();
    for n in 0..7u128 {
        let mut req = create_request(id(n), t0());
        if n == 3 {
            // Far more than eight pages.
            req.params = Json(serde_json::json!(["x".repeat(1 << 20)]));
        }
        let (command, rx) = fn_command(move |ctx: &mut WriteCtx<'_>| create(ctx, req));
        commands.push(command);
        receivers.push((n, rx));
    }
    run_commands(conn, &path, commands);
    let mut acknowledged = Vec::new();
    for (n, rx) in receivers {
        match rx.blocking_recv().expect("replied") {
            Ok(_) => acknowledged.push(id(n).to_string()),
            Err(err) => {
                assert_eq!(err.kind(), DbErrorKind::Backend, "{err}");
                assert!(
                    err.to_string().contains(&path.display().to_string()),
                    "{err}"
                );
                if n == 3 {
                    assert!(err.to_string().contains("disk full"), "{err}");
                }
            }
        }
    }
    assert!(!acknowledged.contains(&id(3).to_string()));
    let conn = rusqlite::Connection::open(&path).expect("opens");
    let stored: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT execution_id FROM t_execution_state ORDER BY execution_id")
            .expect("prepares");
        stmt.query_map([], |row| row.get(0))
            .expect("queries")
            .collect::<Result<_, _>>()
            .expect("reads")
    };
    assert_eq!(
        stored, acknowledged,
        "exactly the acknowledged creates were committed"
    );
}

/// A file whose pages are damaged is refused with an error naming it, never a panic or an
/// empty store.
#[tokio::test]
async fn a_corrupt_file_is_a_typed_error_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await;
    let reqs = (0..300).map(|n| create_request(id(n), t0())).collect();
    store.create_batch(reqs).await.expect("creates");
    store.close().await;
    drop(store);
    let mut bytes = std::fs::read(&path).expect("reads");
    assert!(bytes.len() > 8192, "the data spans several pages");
    // Keep page 1 (the header and the schema), damage every other page.
    for (idx, byte) in bytes.iter_mut().enumerate().skip(4096) {
        *byte = u8::try_from(idx % 241).unwrap_or(0) ^ 0x5a;
    }
    std::fs::write(&path, &bytes).expect("writes");
    match SqlitePool::open(SqliteConfig::new(&path)).await {
        Err(err) => assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        ),
        Ok(store) => {
            let err = store.get(&id(1)).await.expect_err("the damage is reported");
            assert_eq!(err.kind(), DbErrorKind::Backend, "{err}");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
            store.close().await;
        }
    }
}

/// Dropping a store without `close`, after its runtime is gone, neither panics nor loses the
/// acknowledged writes.
#[test]
fn dropping_without_close_outside_a_runtime_is_safe() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let rt = runtime();
    let store = rt.block_on(open(&path));
    rt.block_on(store.create(create_request(id(1), t0())))
        .expect("creates");
    rt.block_on(store.get(&id(1)))
        .expect("reads, leaving an idle reader connection");
    drop(rt);
    drop(store);
    let rt = runtime();
    let store = rt.block_on(open(&path));
    assert_eq!(
        rt.block_on(store.get(&id(1))).expect("reads").events.len(),
        1
    );
    rt.block_on(store.close());
}

/// Two processes opening a fresh file at the same moment both succeed: the second one sees,
/// under the write lock, that the first already migrated, and applies nothing twice.
#[test]
fn concurrent_opens_of_a_fresh_file_migrate_once() {
    for round in 0..20 {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(format!("race-{round}.sqlite"));
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let openers: Vec<_> = (0..2)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    schema::open_writer(&SqliteConfig::new(&path)).map(|(_, settings)| settings)
                })
            })
            .collect();
        for opener in openers {
            let settings = opener
                .join()
                .expect("no panic")
                .unwrap_or_else(|err| panic!("round {round}: {err}"));
            assert_eq!(settings.schema_version, schema::current_version());
        }
    }
}

fn js(text: &str) -> JoinSetId {
    text.parse().expect("a valid join set id")
}

fn secs(n: i64) -> DateTime<Utc> {
    t0() + chrono::TimeDelta::seconds(n)
}

fn join_set_create(join_set_id: &JoinSetId) -> ExecutionEventInner {
    history(HistoryEvent::JoinSetCreate {
        join_set_id: join_set_id.clone(),
        closing_strategy: concepts::ClosingStrategy::Complete,
    })
}

fn child_request_event(join_set_id: &JoinSetId, child: &ExecutionId) -> ExecutionEventInner {
    history(HistoryEvent::JoinSetRequest {
        join_set_id: join_set_id.clone(),
        request: JoinSetRequest::ChildExecutionRequest {
            child_execution_id: child.clone(),
        },
    })
}

fn finished_ok() -> ExecutionEventInner {
    ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::None),
    }
}

/// A tree that leaves a row in every table: `root` (a join set, a child, a delay, both
/// answered and consumed) and its child (a join set and a delay of its own, answered and
/// consumed). The child finishes at `at`; the root too when `finish_root`. Returns
/// `[root, child]`.
async fn tree(
    store: &SqlitePool,
    root: ExecutionId,
    at: DateTime<Utc>,
    finish_root: bool,
) -> [ExecutionId; 2] {
    let (outer, inner) = (js("o:outer"), js("n:inner"));
    let child = root.next_level(&outer, 1);
    let ms = u64::try_from(at.timestamp_millis()).expect("after the epoch");
    let (root_delay, child_delay) = (DelayId::from_parts(ms, 1), DelayId::from_parts(ms, 2));
    let delay_request = |join_set: &JoinSetId, delay_id| {
        history(HistoryEvent::JoinSetRequest {
            join_set_id: join_set.clone(),
            request: JoinSetRequest::DelayRequest {
                delay_id,
                expires_at: at,
            },
        })
    };
    store
        .create(create_request(root.clone(), at))
        .await
        .expect("creates the root");
    let mut child_req = create_request(child.clone(), at);
    child_req.parent = Some((root.clone(), outer.clone()));
    child_req.scheduled_by = Some(root.clone());
    let events = vec![
        join_set_create(&outer),
        child_request_event(&outer, &child),
        delay_request(&outer, root_delay),
    ];
    let root_version = store
        .append_batch(AppendBatchRequest {
            children: vec![child_req],
            ..AppendBatchRequest::events(root.clone(), Version(1), at, events)
        })
        .await
        .expect("requests the child and a delay");
    let events = vec![join_set_create(&inner), delay_request(&inner, child_delay)];
    let child_version = store
        .append_batch(AppendBatchRequest::events(
            child.clone(),
            Version(1),
            at,
            events,
        ))
        .await
        .expect("the child requests a delay");
    store
        .append_response(at, &child, delay_finished(&inner, child_delay))
        .await
        .expect("answers the child's delay");
    let child_version = store
        .append_batch(AppendBatchRequest::events(
            child.clone(),
            child_version,
            at,
            vec![join_next(&inner)],
        ))
        .await
        .expect("the child consumes it");
    let parent = (root.clone(), outer.clone());
    store
        .append_outcome(concepts::OutcomeWrite::new(
            child.clone(),
            child_version,
            at,
            finished_ok(),
            Some(&parent),
        ))
        .await
        .expect("the child finishes");
    store
        .append_response(at, &root, delay_finished(&outer, root_delay))
        .await
        .expect("answers the root's delay");
    let root_version = store
        .append_batch(AppendBatchRequest::events(
            root.clone(),
            root_version,
            at,
            vec![join_next(&outer), join_next(&outer)],
        ))
        .await
        .expect("the root consumes both responses");
    if finish_root {
        store
            .append_outcome(concepts::OutcomeWrite::new(
                root.clone(),
                root_version,
                at,
                finished_ok(),
                None,
            ))
            .await
            .expect("the root finishes");
    }
    [root, child]
}

/// The tables that hold rows of an execution, keyed by `execution_id`.
const TABLES: [&str; 5] = [
    "t_execution_state",
    "t_event",
    "t_response",
    "t_join_set",
    "t_delay",
];

/// Per table, how many rows belong to `ids` (and, for `t_response`, how many name one of them
/// as the child that answered).
fn rows_of(path: &Path, ids: &[ExecutionId]) -> Vec<(&'static str, i64)> {
    let conn = rusqlite::Connection::open(path).expect("opens");
    let list = ids
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let count =
        |sql: String| -> i64 { conn.query_row(&sql, [], |row| row.get(0)).expect("counts") };
    let mut counts: Vec<_> = TABLES
        .iter()
        .map(|table| {
            let sql = format!("SELECT COUNT(*) FROM {table} WHERE execution_id IN ({list})");
            (*table, count(sql))
        })
        .collect();
    let sql = format!("SELECT COUNT(*) FROM t_response WHERE child_execution_id IN ({list})");
    counts.push(("t_response (as child)", count(sql)));
    counts
}

fn integrity_check(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).expect("opens");
    conn.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("checks")
}

fn prune_request(
    finished_before: DateTime<Utc>,
    limit: usize,
    after: Option<(DateTime<Utc>, ExecutionId)>,
) -> concepts::PruneRequest {
    concepts::PruneRequest {
        finished_before,
        limit,
        after,
    }
}

/// Prune deletes every row of a pruned tree from every table, in bounded batches that follow
/// the cursor, keeps the rows of everything else (a tree with an unfinished member, an
/// unfinished execution, a tree finished too late) and leaves a file that passes
/// `PRAGMA integrity_check`.
#[tokio::test]
async fn prune_leaves_no_row_of_a_pruned_tree_in_any_table() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await;
    let first = tree(&store, id(1), secs(1), true).await;
    let second = tree(&store, id(2), secs(3), true).await;
    // The root finishes, its child does not: the tree is kept.
    let kept_child = id(3).next_level(&js("o:outer"), 1);
    store
        .create(create_request(id(3), secs(2)))
        .await
        .expect("creates");
    let mut child_req = create_request(kept_child.clone(), secs(2));
    child_req.parent = Some((id(3), js("o:outer")));
    let events = vec![
        join_set_create(&js("o:outer")),
        child_request_event(&js("o:outer"), &kept_child),
    ];
    let version = store
        .append_batch(AppendBatchRequest {
            children: vec![child_req],
            ..AppendBatchRequest::events(id(3), Version(1), secs(2), events)
        })
        .await
        .expect("requests a child");
    store
        .append_outcome(concepts::OutcomeWrite::new(
            id(3),
            version,
            secs(2),
            finished_ok(),
            None,
        ))
        .await
        .expect("the root finishes before its child");
    let kept = [id(3), kept_child];
    let late = tree(&store, id(4), secs(10), true).await;
    store
        .create(create_request(id(5), secs(1)))
        .await
        .expect("creates an unfinished execution");
    for ids in [&first, &second, &late] {
        assert!(
            rows_of(&path, ids).iter().all(|(_, n)| *n > 0),
            "the tree has rows in every table: {:?}",
            rows_of(&path, ids)
        );
    }
    let untouched: Vec<ExecutionId> = kept.iter().chain(&late).cloned().chain([id(5)]).collect();
    let untouched_before = rows_of(&path, &untouched);
    // Two candidates in (finished_at, id) order: the first tree, then the kept one.
    let outcome = store
        .prune(prune_request(secs(5), 2, None))
        .await
        .expect("prunes");
    assert_eq!((outcome.trees, outcome.executions, outcome.kept), (1, 2, 1));
    assert_eq!(outcome.next, Some((secs(2), id(3))));
    let outcome = store
        .prune(prune_request(secs(5), 2, outcome.next))
        .await
        .expect("prunes");
    assert_eq!((outcome.trees, outcome.executions, outcome.kept), (1, 2, 0));
    assert_eq!(outcome.next, None, "fewer candidates than the limit");
    for ids in [&first, &second] {
        assert!(
            rows_of(&path, ids).iter().all(|(_, n)| *n == 0),
            "no row of a pruned tree is left: {:?}",
            rows_of(&path, ids)
        );
        for execution_id in ids {
            assert_eq!(
                store.get(execution_id).await.expect_err("pruned").kind(),
                DbErrorKind::NotFound
            );
        }
    }
    assert_eq!(rows_of(&path, &untouched), untouched_before);
    assert_eq!(integrity_check(&path), "ok");
    // Nothing is left to prune before the late tree.
    let outcome = store
        .prune(prune_request(secs(5), 10, None))
        .await
        .expect("prunes");
    assert_eq!((outcome.trees, outcome.kept), (0, 1));
    store.close().await;
    assert_eq!(integrity_check(&path), "ok");
}

/// A file of schema version 3 with finished executions migrates to version 4: each finished
/// execution's `finished_at` is its `Finished` event's time, the others have none, the logs
/// are unchanged, and prune finds the migrated rows through the new index.
#[tokio::test]
async fn a_version_3_file_migrates_to_the_current_version_and_keeps_its_data() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await;
    let finished = tree(&store, id(1), secs(1), true).await;
    let unfinished = tree(&store, id(2), secs(2), false).await;
    let mut logs = Vec::new();
    for execution_id in finished.iter().chain(&unfinished) {
        logs.push(store.get(execution_id).await.expect("reads"));
    }
    store.close().await;
    downgrade(&path, 3);
    assert_eq!(pragma_i64(&path, "user_version"), 3);

    let store = open(&path).await;
    assert_eq!(
        store.effective_settings().schema_version,
        schema::current_version()
    );
    for (execution_id, log) in finished.iter().chain(&unfinished).zip(&logs) {
        assert_eq!(&store.get(execution_id).await.expect("reads"), log);
    }
    let finished_at = |execution_id: &ExecutionId| -> Option<i64> {
        let conn = rusqlite::Connection::open(&path).expect("opens");
        conn.query_row(
            "SELECT finished_at FROM t_execution_state WHERE execution_id = ?1",
            [execution_id.as_str()],
            |row| row.get(0),
        )
        .expect("reads")
    };
    for execution_id in &finished {
        assert_eq!(finished_at(execution_id), Some(secs(1).timestamp_micros()));
    }
    assert_eq!(finished_at(&unfinished[0]), None);
    assert_eq!(
        finished_at(&unfinished[1]),
        Some(secs(2).timestamp_micros())
    );
    let outcome = store
        .prune(prune_request(secs(60), 10, None))
        .await
        .expect("prunes");
    assert_eq!((outcome.trees, outcome.executions, outcome.kept), (1, 2, 0));
    assert!(rows_of(&path, &finished).iter().all(|(_, n)| *n == 0));
    store.close().await;
    assert_eq!(integrity_check(&path), "ok");
}

/// The queries of prune and of a subtree read their indexes, never the whole table.
#[test]
fn prune_and_subtree_queries_use_their_indexes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let (conn, _) = schema::open_writer(&SqliteConfig::new(&path)).expect("opens");
    let plan = |sql: &str| -> String {
        let mut stmt = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("prepares");
        let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
        let details: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(nulls), |row| row.get(3))
            .expect("queries")
            .collect::<Result<_, _>>()
            .expect("reads");
        details.join("; ")
    };
    for with_cursor in [false, true] {
        let detail = plan(&crate::ops::prune_candidates_sql(with_cursor));
        assert!(detail.contains("USING INDEX ix_state_finished"), "{detail}");
        assert!(
            !detail.contains("TEMP B-TREE"),
            "sorted by the index: {detail}"
        );
    }
    let detail = plan(&crate::ops::subtree_sql());
    assert!(
        detail.contains("sqlite_autoindex_t_execution_state_1 (execution_id>? AND execution_id<?)"),
        "{detail}"
    );
}

/// Cancel closes the open delays of what it finishes: `t_delay` keeps them closed, and the
/// timers watcher is handed neither them nor a lease.
#[tokio::test]
async fn cancel_closes_the_open_delays_in_t_delay() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let store = open(&path).await;
    store
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    let join_set = js("n:j");
    let events = (1..=2u128)
        .map(|n| {
            history(HistoryEvent::JoinSetRequest {
                join_set_id: join_set.clone(),
                request: JoinSetRequest::DelayRequest {
                    delay_id: DelayId::from_parts(1, n),
                    expires_at: secs(1),
                },
            })
        })
        .collect();
    store
        .append_batch(AppendBatchRequest::events(id(1), Version(1), t0(), events))
        .await
        .expect("requests two delays");
    assert_eq!(
        store
            .get_expired_timers(secs(2))
            .await
            .expect("reads")
            .len(),
        2
    );
    let outcome = store
        .cancel(concepts::CancelRequest {
            execution_id: id(1),
            now: t0(),
            reason: "test".to_owned(),
        })
        .await
        .expect("cancels");
    assert_eq!(
        outcome,
        concepts::CancelOutcome::Cancelled { executions: 1 }
    );
    let conn = rusqlite::Connection::open(&path).expect("opens");
    let open: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM t_delay WHERE is_open = 1",
            [],
            |row| row.get(0),
        )
        .expect("counts");
    assert_eq!(open, 0);
    assert!(
        store
            .get_expired_timers(secs(2))
            .await
            .expect("reads")
            .is_empty()
    );
    store.close().await;
}

/// The writer keeps the row of a lease it took for the lease's outcome, which is then planned
/// without loading it; but a row another connection committed to since is loaded again: an
/// outcome whose row another store finished meanwhile loses its race, and the other store's
/// outcome stands.
#[tokio::test]
async fn a_known_row_another_connection_changed_is_loaded_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("known.db");
    let (a, b) = (open(&path).await, open(&path).await);
    let finished = |value: &str, version: Version| concepts::OutcomeWrite {
        execution_id: id(1),
        version,
        now: t0(),
        event: ExecutionEventInner::Finished {
            result: Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
                serde_json::json!(value),
            ))),
        },
        parent: None,
    };
    for (store, n) in [(&a, 1), (&a, 2)] {
        // The first lease's outcome comes from the store that took it; the second's from the
        // other store first.
        let execution_id = id(n);
        store
            .create(create_request(execution_id.clone(), t0()))
            .await
            .expect("created");
        let locked = (store.lock_pending(handover::lock_request(1)))
            .await
            .expect("locks")
            .remove(0);
        assert_eq!(locked.execution_id, execution_id);
        let outcome = |value| concepts::OutcomeWrite {
            execution_id: execution_id.clone(),
            ..finished(value, locked.next_version)
        };
        if n == 2 {
            b.append_outcome(outcome("b"))
                .await
                .expect("the other store's outcome");
            let err = (a.append_outcome(outcome("a")).await).expect_err("lost its race");
            assert!(concepts::is_lost_race(&err), "{err:?}");
        } else {
            a.append_outcome(outcome("a"))
                .await
                .expect("the lease's own outcome");
        }
        let expected = if n == 2 { "b" } else { "a" };
        let log = a.get(&execution_id).await.expect("stored");
        assert!(
            matches!(&log.events.last().expect("events").event,
                ExecutionEventInner::Finished { result: Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(v))) }
                if *v == serde_json::json!(expected)),
            "{log:?}"
        );
        assert_eq!(log.events.len(), 3, "created, locked, one finish: {log:?}");
    }
    a.close().await;
    b.close().await;
}

/// A lease taken and the execution cancelled in one transaction: the writer must not keep the
/// leased row for the lease's outcome, which, in the next transaction, loses its race
/// (`AlreadyFinished`) instead of failing on the log's primary key.
#[test]
fn a_lease_cancelled_in_the_same_transaction_is_not_kept_for_its_outcome() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let mut config = SqliteConfig::new(&path);
    config.max_commands_per_transaction = 3;
    let (conn, _) = schema::open_writer(&config).expect("opens");
    let (c1, _) = fn_command(|ctx: &mut WriteCtx<'_>| create(ctx, create_request(id(1), t0())));
    let (c2, lock_rx) = fn_command(|ctx: &mut WriteCtx<'_>| {
        let req = handover::lock_request(1);
        let keys = req.keys()?;
        ctx.write(req, &keys).map(|grants| grants.len())
    });
    let (c3, cancel_rx) = fn_command(|ctx: &mut WriteCtx<'_>| {
        let req = concepts::CancelRequest {
            execution_id: id(1),
            now: t0(),
            reason: "cancelled beside its lease".into(),
        };
        let keys = req.keys()?;
        ctx.write(req, &keys).map(|_| ())
    });
    // The next transaction (at most 3 commands per transaction).
    let (c4, outcome_rx) = fn_command(|ctx: &mut WriteCtx<'_>| {
        let req = concepts::OutcomeWrite {
            execution_id: id(1),
            version: Version(2),
            now: t0(),
            event: finished_ok(),
            parent: None,
        };
        let keys = req.keys()?;
        ctx.write(req, &keys)
    });
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    for command in [c1, c2, c3, c4] {
        assert!(tx.try_send(writer::Message::Command(command)).is_ok());
    }
    assert!(tx.try_send(writer::Message::Shutdown).is_ok());
    drop(tx);
    writer::run(conn, &config, rx, &WaiterHub::new());
    assert_eq!(lock_rx.blocking_recv().expect("replied").expect("locks"), 1);
    cancel_rx
        .blocking_recv()
        .expect("replied")
        .expect("cancels");
    let err = outcome_rx
        .blocking_recv()
        .expect("replied")
        .expect_err("the execution was cancelled");
    assert!(
        concepts::is_lost_race(&err),
        "expected AlreadyFinished, got {err:?}"
    );
}
