//! The schema, its versioned migrations, and opening the writer connection with the durable
//! settings checked by reading them back.

use crate::{EffectiveSettings, SqliteConfig, SqliteOpenError, Synchronous, error::is_busy};
use concepts::SchemaPolicy;
use rusqlite::{
    Connection, OpenFlags, Transaction, TransactionBehavior, config::DbConfig, types::FromSql,
};
use std::{path::Path, time::Duration};

/// `PRAGMA application_id` of a Stele database ("Stel" in ASCII), so that a SQLite file of
/// another application is recognised and refused.
pub(crate) const APPLICATION_ID: i32 = 0x5374_656c;

/// The migrations, in order: `MIGRATIONS[i]` moves a file from schema version `i` to `i + 1`.
/// `PRAGMA user_version` holds the version; a fresh file has 0.
pub(crate) const MIGRATIONS: &[&str] = &[
    // Version 1: the log, the state index, responses and open delays.
    r"
CREATE TABLE t_execution_state (
    execution_id          TEXT    NOT NULL PRIMARY KEY,
    ffqn                  TEXT    NOT NULL,
    component_id          TEXT    NOT NULL,
    next_version          INTEGER NOT NULL,
    state                 TEXT    NOT NULL,
    pending_at            INTEGER,
    lock_expires_at       INTEGER,
    executor_id           TEXT,
    run_id                TEXT,
    join_set_id           TEXT,
    result_kind           TEXT,
    state_json            TEXT    NOT NULL,
    temporary_event_count INTEGER NOT NULL,
    max_retries           INTEGER NOT NULL,
    retry_exp_backoff_us  INTEGER NOT NULL,
    parent_execution_id   TEXT,
    parent_join_set_id    TEXT,
    is_top_level          INTEGER NOT NULL,
    created_at            INTEGER NOT NULL,
    scheduled_at          INTEGER NOT NULL
);
CREATE INDEX ix_state_pending ON t_execution_state (ffqn, pending_at, execution_id)
    WHERE state = 'PendingAt';
CREATE INDEX ix_state_lock_expiry ON t_execution_state (lock_expires_at, execution_id)
    WHERE state = 'Locked';

CREATE TABLE t_event (
    execution_id TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    join_set_id  TEXT,
    event_json   TEXT    NOT NULL,
    PRIMARY KEY (execution_id, version)
);

CREATE TABLE t_response (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id       TEXT    NOT NULL,
    created_at         INTEGER NOT NULL,
    join_set_id        TEXT    NOT NULL,
    delay_id           TEXT,
    child_execution_id TEXT,
    response_json      TEXT    NOT NULL,
    CHECK ((delay_id IS NULL) <> (child_execution_id IS NULL))
);
CREATE INDEX ix_response_execution ON t_response (execution_id, id);
CREATE UNIQUE INDEX ux_response_delay ON t_response (execution_id, delay_id)
    WHERE delay_id IS NOT NULL;
CREATE UNIQUE INDEX ux_response_child ON t_response (execution_id, child_execution_id)
    WHERE child_execution_id IS NOT NULL;

CREATE TABLE t_delay (
    execution_id TEXT    NOT NULL,
    delay_id     TEXT    NOT NULL,
    join_set_id  TEXT    NOT NULL,
    expires_at   INTEGER NOT NULL,
    is_open      INTEGER NOT NULL,
    PRIMARY KEY (execution_id, delay_id)
);
CREATE INDEX ix_delay_expiry ON t_delay (expires_at, execution_id, delay_id)
    WHERE is_open = 1;
",
    // Version 2: newest-first listing for inspection tools.
    r"
CREATE INDEX ix_state_created ON t_execution_state (created_at, execution_id);
",
    // Version 3: join-set counters stored (not counted over the log per write) and each
    // response's index within its join set; both filled from the rows already stored.
    r"
CREATE TABLE t_join_set (
    execution_id    TEXT    NOT NULL,
    join_set_id     TEXT    NOT NULL,
    join_next_count INTEGER NOT NULL,
    response_count  INTEGER NOT NULL,
    PRIMARY KEY (execution_id, join_set_id)
) WITHOUT ROWID;
INSERT INTO t_join_set (execution_id, join_set_id, join_next_count, response_count)
SELECT execution_id, join_set_id, SUM(join_nexts), SUM(responses) FROM (
    SELECT execution_id, join_set_id, COUNT(*) AS join_nexts, 0 AS responses FROM t_event
        WHERE kind = 'JoinNext' GROUP BY execution_id, join_set_id
    UNION ALL
    SELECT execution_id, join_set_id, 0, COUNT(*) FROM t_response GROUP BY execution_id, join_set_id
) GROUP BY execution_id, join_set_id;
ALTER TABLE t_response ADD COLUMN join_set_idx INTEGER;
UPDATE t_response SET join_set_idx = numbered.idx FROM (
    SELECT id, ROW_NUMBER() OVER (PARTITION BY execution_id, join_set_id ORDER BY id) - 1 AS idx
    FROM t_response
) AS numbered WHERE numbered.id = t_response.id;
CREATE INDEX ix_response_join_set ON t_response (execution_id, join_set_id, join_set_idx);
",
    // Version 4: when each execution finished (the `created_at` of its `Finished` event, filled
    // from the stored log), and the index `prune` reads: top-level finished executions in
    // `(finished_at, execution_id)` order.
    r"
ALTER TABLE t_execution_state ADD COLUMN finished_at INTEGER;
UPDATE t_execution_state SET finished_at = (
    SELECT e.created_at FROM t_event AS e
    WHERE e.execution_id = t_execution_state.execution_id AND e.kind = 'Finished'
) WHERE state = 'Finished';
CREATE INDEX ix_state_finished ON t_execution_state (finished_at, execution_id)
    WHERE state = 'Finished' AND is_top_level = 1;
",
    // Version 5: the indexes of the listings by state and of a parent's children, newest first.
    // Finished executions, the bulk of a store, stay out of the first: a listing of them finds
    // its page in the creation index.
    r"
CREATE INDEX ix_state_unfinished ON t_execution_state (state, created_at, execution_id)
    WHERE state <> 'Finished';
CREATE INDEX ix_state_parent ON t_execution_state (parent_execution_id, created_at, execution_id)
    WHERE parent_execution_id IS NOT NULL;
",
    // Version 6: schedules (the row as JSON, beside its name and the due time a pass seeks)
    // and their recorded ticks.
    r"
CREATE TABLE t_schedule (
    name        TEXT NOT NULL PRIMARY KEY,
    next_due_at INTEGER,
    row_json    TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX ix_schedule_due ON t_schedule (next_due_at, name) WHERE next_due_at IS NOT NULL;
CREATE TABLE t_schedule_tick (
    name      TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    tick_json TEXT    NOT NULL,
    PRIMARY KEY (name, seq)
) WITHOUT ROWID;
",
    // Version 7: each response's place among its execution's responses, indexed, so that a
    // read from the n-th response seeks to it instead of stepping over the n before it.
    r"
ALTER TABLE t_response ADD COLUMN idx INTEGER;
UPDATE t_response SET idx = numbered.idx FROM (
    SELECT id, ROW_NUMBER() OVER (PARTITION BY execution_id ORDER BY id) - 1 AS idx
    FROM t_response
) AS numbered WHERE numbered.id = t_response.id;
DROP INDEX ix_response_execution;
CREATE UNIQUE INDEX ux_response_idx ON t_response (execution_id, idx);
",
    // Version 8: each execution's number of responses on its state row, filled from the stored
    // responses, so that a write can require the place its response takes (a child's answer
    // recorded by its parent's batch).
    r"
ALTER TABLE t_execution_state ADD COLUMN response_count INTEGER NOT NULL DEFAULT 0;
UPDATE t_execution_state SET response_count = (
    SELECT COUNT(*) FROM t_response AS r WHERE r.execution_id = t_execution_state.execution_id
) WHERE execution_id IN (SELECT execution_id FROM t_response);
",
    // Version 9: the response counts recounted. Before it, a response that changed neither
    // the log nor the state of its execution (one to a parent waiting for another join set)
    // was stored without counting on its row.
    r"
UPDATE t_execution_state SET response_count = (
    SELECT COUNT(*) FROM t_response AS r WHERE r.execution_id = t_execution_state.execution_id
) WHERE execution_id IN (SELECT execution_id FROM t_response);
",
    // Version 10: the unfinished executions indexed by creation under a condition a lease does
    // not change (`finished_at` is set once, when the execution finishes), so that each enters
    // the index once and leaves it once; a listing by state filters that range. And the four
    // columns nothing read (`executor_id`, `run_id`, `join_set_id`, `result_kind`: the state's
    // JSON holds them), dropped.
    r"
DROP INDEX ix_state_unfinished;
CREATE INDEX ix_state_unfinished ON t_execution_state (created_at, execution_id)
    WHERE finished_at IS NULL;
ALTER TABLE t_execution_state DROP COLUMN executor_id;
ALTER TABLE t_execution_state DROP COLUMN run_id;
ALTER TABLE t_execution_state DROP COLUMN join_set_id;
ALTER TABLE t_execution_state DROP COLUMN result_kind;
",
];

pub(crate) fn current_version() -> u32 {
    u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX)
}

/// Runs `op` again while SQLite reports the database busy, for up to `budget`.
///
/// Switching a fresh file to WAL needs the file to itself and SQLite does not call the busy
/// handler for it, so two processes opening one new file at once would otherwise see
/// "database is locked". Opening is a blocking step already, so a short sleep is fine here.
fn retry_while_busy<T>(
    budget: Duration,
    mut op: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let (mut waited, step) = (Duration::ZERO, Duration::from_millis(5));
    loop {
        match op() {
            Err(err) if is_busy(&err) && waited < budget => {
                std::thread::sleep(step);
                waited += step;
            }
            other => return other,
        }
    }
}

/// Opens the writer connection: checks the file is ours, enables WAL, sets `synchronous`,
/// migrates, and reads the effective settings back.
pub(crate) fn open_writer(
    config: &SqliteConfig,
) -> Result<(Connection, EffectiveSettings), SqliteOpenError> {
    validate_config(config)?;
    // Moved into the error that ends the open, if any.
    let path = config.path.clone();
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if config.schema.create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    // Under FULL and EXTRA each commit syncs the WAL, so its frames can reach the file as one
    // write (`sqlite_wal_batch`, which is correct only then); under NORMAL and OFF, SQLite's own.
    let opened = match config.synchronous {
        Synchronous::Full | Synchronous::Extra => sqlite_wal_batch::register()
            .map_err(|err| {
                let code = rusqlite::ffi::Error::new(err.0);
                rusqlite::Error::SqliteFailure(code, Some(err.to_string()))
            })
            .and_then(|vfs| Connection::open_with_flags_and_vfs(&path, flags, vfs)),
        Synchronous::Normal | Synchronous::Off => Connection::open_with_flags(&path, flags),
    };
    let conn = match opened {
        Ok(conn) => conn,
        Err(source) => return Err(SqliteOpenError::Open { path, source }),
    };
    let driver = |source| SqliteOpenError::from_driver(&config.path, source);
    conn.busy_timeout(config.busy_timeout).map_err(driver)?;
    conn.set_prepared_statement_cache_capacity(64);
    // A statement keeps the plan it was prepared with: without this, SQLite 3.53 prepares a
    // statement again at every run whose `LIMIT ?` is bound anew (it plans with the bound
    // limit), a quarter of an execution's instructions. No statement here relies on a bound
    // value to choose its index: the partial indexes' conditions are written out.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(driver)?;

    // The first read of the header: a file that is not a database fails here. The header and
    // the schema are read in one read transaction, so a migration committed by another process
    // in between cannot make a half-read file look foreign.
    let (application_id, found, schema_objects) =
        retry_while_busy(config.busy_timeout, || read_header(&conn)).map_err(driver)?;
    let current = current_version();
    if application_id != 0 && application_id != APPLICATION_ID {
        let detail = format!("application_id {application_id:#x}");
        return Err(SqliteOpenError::ForeignDatabase { path, detail });
    }
    if application_id == 0 && found == 0 && schema_objects > 0 {
        let detail = format!("{schema_objects} schema objects but no Stele schema version");
        return Err(SqliteOpenError::ForeignDatabase { path, detail });
    }
    if let Err(refusal) = config.schema.check(found, current, current) {
        return Err(SqliteOpenError::Schema { path, refusal });
    }

    let journal_mode: String = retry_while_busy(config.busy_timeout, || {
        conn.pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
    })
    .map_err(driver)?;
    if !journal_mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteOpenError::WalUnavailable { path, journal_mode });
    }
    // A larger page cache than the 2 MB default keeps the state index and recent events hot;
    // statement journals and temporary tables stay in memory, not in temp files.
    conn.pragma_update(None, "synchronous", config.synchronous.pragma_value())
        .and_then(|()| conn.pragma_update(None, "cache_size", -16_384))
        .and_then(|()| conn.pragma_update(None, "temp_store", "MEMORY"))
        .map_err(driver)?;

    migrate_to(&conn, &path, found, current)?;
    let (settings, reported) = read_settings(&conn).map_err(driver)?;
    if reported != config.synchronous.pragma_value() {
        let requested = config.synchronous;
        return Err(SqliteOpenError::SynchronousNotApplied {
            path,
            requested,
            reported,
        });
    }
    Ok((conn, settings))
}

fn validate_config(config: &SqliteConfig) -> Result<(), SqliteOpenError> {
    let invalid = |reason: &str| SqliteOpenError::InvalidConfig {
        path: config.path.clone(),
        reason: reason.to_string(),
    };
    if config.queue_capacity == 0 {
        return Err(invalid("queue_capacity must be at least 1"));
    }
    if config.max_commands_per_transaction == 0 {
        return Err(invalid("max_commands_per_transaction must be at least 1"));
    }
    if config.reader_pool_size == 0 {
        return Err(invalid("reader_pool_size must be at least 1"));
    }
    let as_str = config.path.to_string_lossy();
    if as_str.is_empty() || as_str == ":memory:" || as_str.starts_with("file:") {
        return Err(invalid(
            "the path must name a database file (in-memory and URI databases are not supported)",
        ));
    }
    Ok(())
}

fn pragma<T: FromSql>(conn: &Connection, name: &str) -> rusqlite::Result<T> {
    conn.pragma_query_value(None, name, |row| row.get(0))
}

/// `(application_id, user_version, number of schema objects)`, read in one transaction.
fn read_header(conn: &Connection) -> rusqlite::Result<(i32, u32, i64)> {
    let tx = conn.unchecked_transaction()?;
    let application_id = pragma(&tx, "application_id")?;
    let user_version = pragma(&tx, "user_version")?;
    let schema_objects =
        tx.query_row("SELECT COUNT(*) FROM sqlite_schema", [], |row| row.get(0))?;
    tx.finish()?;
    Ok((application_id, user_version, schema_objects))
}

/// Applies the migrations from `found_version` up to `target` in one transaction.
fn migrate_to(
    conn: &Connection,
    path: &Path,
    found_version: u32,
    target: u32,
) -> Result<(), SqliteOpenError> {
    if found_version >= target {
        return Ok(());
    }
    let driver = |source| SqliteOpenError::from_driver(path, source);
    // Rolled back when dropped on an error.
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate).map_err(driver)?;
    // Another process may have migrated between our first read and taking the write lock:
    // read the version again under the lock and apply only what is still missing.
    let found_version: u32 = pragma(&tx, "user_version").map_err(driver)?;
    // The opening checked the policy; only a newer schema can have appeared since.
    if let Err(refusal) = SchemaPolicy::default().check(found_version, target, target) {
        let path = path.to_path_buf();
        return Err(SqliteOpenError::Schema { path, refusal });
    }
    for (version, sql) in (1..=target)
        .zip(MIGRATIONS)
        .skip_while(|(v, _)| *v <= found_version)
    {
        tx.execute_batch(sql)
            .map_err(|source| SqliteOpenError::Migration {
                path: path.to_path_buf(),
                version,
                source,
            })?;
        tracing::info!(path = %path.display(), version, "applied schema migration");
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .and_then(|()| tx.pragma_update(None, "user_version", target))
        .and_then(|()| tx.commit())
        .map_err(driver)
}

/// The effective settings of a connection, and the `synchronous` level it reports.
fn read_settings(conn: &Connection) -> rusqlite::Result<(EffectiveSettings, i64)> {
    let journal_mode: String = pragma(conn, "journal_mode")?;
    let synchronous = pragma(conn, "synchronous")?;
    let busy_timeout_ms: i64 = pragma(conn, "busy_timeout")?;
    let settings = EffectiveSettings {
        journal_mode: journal_mode.to_ascii_lowercase(),
        synchronous: Synchronous::from_pragma_value(synchronous).unwrap_or(Synchronous::Off),
        busy_timeout: Duration::from_millis(u64::try_from(busy_timeout_ms).unwrap_or(0)),
        schema_version: pragma(conn, "user_version")?,
    };
    Ok((settings, synchronous))
}
