//! The embedded migrations and the guarded migration run at start.

use crate::error::{PostgresError, map_pg_error};
use deadpool_postgres::Object;

/// The advisory lock key that serializes migrations of one database ("STELEMIG").
const MIGRATION_LOCK_KEY: i64 = 0x5354_454C_454D_4947;

/// One migration: its version (consecutive from 1), a description and its SQL.
struct Migration {
    version: i64,
    description: &'static str,
    sql: &'static str,
}

/// Every migration this binary knows, in order.
const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    description: "executions, events, responses, join set counters, delays",
    sql: SCHEMA_V1,
}];

/// The newest schema version this binary knows (the number of embedded migrations).
pub const SCHEMA_VERSION: i64 = 1;

/// Version 1. Timestamps are `BIGINT` microseconds since the Unix epoch (a `*_ns` column keeps
/// the sub-microsecond remainder where the exact value is reported back); ids are `TEXT
/// COLLATE "C"` so that they order byte-wise like `ExecutionId`'s `Ord`; events and responses
/// are JSON text (not `JSONB`, which would reorder object keys).
const SCHEMA_V1: &str = r#"
CREATE TABLE t_execution (
    execution_id          TEXT COLLATE "C" PRIMARY KEY,
    ffqn                  TEXT COLLATE "C" NOT NULL,
    created_at            BIGINT NOT NULL,
    created_at_ns         SMALLINT NOT NULL,
    scheduled_at          BIGINT NOT NULL,
    scheduled_at_ns       SMALLINT NOT NULL,
    is_top_level          BOOLEAN NOT NULL,
    next_version          BIGINT NOT NULL,
    -- 0 PendingAt, 1 Locked, 2 BlockedByJoinSet, 3 Finished
    state_kind            SMALLINT NOT NULL,
    -- set only in PendingAt: the time it is due
    pending_at            BIGINT NULL,
    -- set only in Locked: the lease expiry
    lock_expires_at       BIGINT NULL,
    -- the exact pending state (serde JSON of concepts::PendingState)
    state_json            TEXT NOT NULL,
    temporary_event_count BIGINT NOT NULL,
    -- responses so far; the next response gets this index
    response_count        BIGINT NOT NULL,
    max_retries           BIGINT NOT NULL,
    retry_exp_backoff_ns  BIGINT NOT NULL,
    parent_execution_id   TEXT COLLATE "C" NULL,
    parent_join_set_id    TEXT COLLATE "C" NULL,
    CHECK ((state_kind = 0) = (pending_at IS NOT NULL)),
    CHECK ((state_kind = 1) = (lock_expires_at IS NOT NULL))
);
CREATE INDEX t_execution_pending_idx ON t_execution (pending_at, execution_id)
    WHERE pending_at IS NOT NULL;
CREATE INDEX t_execution_pending_ffqn_idx ON t_execution (ffqn, pending_at, execution_id)
    WHERE pending_at IS NOT NULL;
CREATE INDEX t_execution_lock_expiry_idx ON t_execution (lock_expires_at, execution_id)
    WHERE lock_expires_at IS NOT NULL;
CREATE INDEX t_execution_created_idx
    ON t_execution (created_at DESC, created_at_ns DESC, execution_id DESC);

CREATE TABLE t_event (
    execution_id TEXT COLLATE "C" NOT NULL,
    version      BIGINT NOT NULL,
    is_history   BOOLEAN NOT NULL,
    -- serde JSON of concepts::ExecutionEvent (created_at and the event)
    event_json   TEXT NOT NULL,
    PRIMARY KEY (execution_id, version)
);

CREATE TABLE t_response (
    execution_id       TEXT COLLATE "C" NOT NULL,
    -- arrival order within the execution, assigned under the execution's row lock
    idx                BIGINT NOT NULL,
    join_set_id        TEXT COLLATE "C" NOT NULL,
    -- arrival order within the join set
    join_set_idx       BIGINT NOT NULL,
    delay_id           TEXT COLLATE "C" NULL,
    child_execution_id TEXT COLLATE "C" NULL,
    -- serde JSON of concepts::JoinSetResponseEventOuter
    response_json      TEXT NOT NULL,
    PRIMARY KEY (execution_id, idx),
    CHECK ((delay_id IS NULL) <> (child_execution_id IS NULL))
);
CREATE UNIQUE INDEX t_response_delay_uq ON t_response (execution_id, delay_id)
    WHERE delay_id IS NOT NULL;
CREATE UNIQUE INDEX t_response_child_uq ON t_response (execution_id, child_execution_id)
    WHERE child_execution_id IS NOT NULL;
CREATE UNIQUE INDEX t_response_join_set_uq ON t_response (execution_id, join_set_id, join_set_idx);

CREATE TABLE t_join_set (
    execution_id    TEXT COLLATE "C" NOT NULL,
    join_set_id     TEXT COLLATE "C" NOT NULL,
    join_next_count BIGINT NOT NULL,
    response_count  BIGINT NOT NULL,
    PRIMARY KEY (execution_id, join_set_id)
);

CREATE TABLE t_delay (
    execution_id  TEXT COLLATE "C" NOT NULL,
    delay_id      TEXT COLLATE "C" NOT NULL,
    join_set_id   TEXT COLLATE "C" NOT NULL,
    expires_at    BIGINT NOT NULL,
    expires_at_ns SMALLINT NOT NULL,
    -- requested and not answered by a DelayFinished yet
    is_open       BOOLEAN NOT NULL,
    PRIMARY KEY (execution_id, delay_id)
);
CREATE INDEX t_delay_open_idx ON t_delay (expires_at, execution_id) WHERE is_open;
"#;

/// Applies every missing migration in one transaction under an advisory lock, so that two
/// processes starting at once do not both migrate. Refuses a database whose schema is newer
/// than this binary's.
pub(crate) async fn migrate(client: &mut Object) -> Result<(), PostgresError> {
    let tx = client.transaction().await.map_err(map_pg_error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .map_err(map_pg_error)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS t_schema_migration (
            version     BIGINT PRIMARY KEY,
            description TEXT NOT NULL
        )",
    )
    .await
    .map_err(map_pg_error)?;
    let current: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM t_schema_migration",
            &[],
        )
        .await
        .map_err(map_pg_error)?
        .get(0);
    if current > SCHEMA_VERSION {
        return Err(PostgresError::SchemaTooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > current) {
        tracing::info!(
            version = migration.version,
            description = migration.description,
            "applying migration"
        );
        tx.batch_execute(migration.sql)
            .await
            .map_err(map_pg_error)?;
        tx.execute(
            "INSERT INTO t_schema_migration (version, description) VALUES ($1, $2)",
            &[&migration.version, &migration.description],
        )
        .await
        .map_err(map_pg_error)?;
    }
    tx.commit().await.map_err(map_pg_error)?;
    Ok(())
}
