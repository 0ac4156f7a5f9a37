//! The embedded migrations and the guarded migration run at start.

use crate::{
    PostgresConfig,
    error::{PostgresError, map_pg_error},
};

/// The advisory lock key that serializes migrations of one database ("STELEMIG").
const MIGRATION_LOCK_KEY: i64 = 0x5354_454C_454D_4947;

/// Every migration this binary knows, in order, as its description and its SQL:
/// `MIGRATIONS[i]` moves a database from schema version `i` to `i + 1`.
const MIGRATIONS: [(&str, &str); 10] = [
    (
        "executions, events, responses, join set counters, delays",
        SCHEMA_V1,
    ),
    (
        "the finished time of executions, indexed for prune",
        SCHEMA_V2,
    ),
    (
        "state rows vacuumed after a number of dead rows; the due executions read in index order",
        SCHEMA_V3,
    ),
    (
        "the revision check of writes planned on rows a store knows",
        SCHEMA_V4,
    ),
    (
        "the indexes of the listings by state and of a parent's children",
        SCHEMA_V5,
    ),
    ("schedules and their ticks", SCHEMA_V6),
    (
        "the due executions read by a function whose plan is made once per connection; \
         f_check_revisions dropped",
        SCHEMA_V7,
    ),
    (
        "the response and temporary event counts of executions recounted",
        SCHEMA_V8,
    ),
    (
        "schedule names in byte order, as execution ids are",
        SCHEMA_V9,
    ),
    (
        "the listings by creation from the unfinished and the finished executions' indexes, \
         in ascending order; only parked executions indexed by their pending time",
        SCHEMA_V10,
    ),
];

/// The newest schema version this binary knows (the number of embedded migrations).
#[expect(clippy::cast_possible_wrap, reason = "a few migrations fit in an i64")]
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The signature of `f_due_executions` and the rows it returns (versions 3 and 7).
macro_rules! due_executions_signature {
    () => {
        "f_due_executions(due_at BIGINT, ffqns TEXT[], max_rows BIGINT)
RETURNS TABLE (
    execution_id TEXT, ffqn TEXT, next_version BIGINT, state_json TEXT,
    temporary_event_count BIGINT, response_count BIGINT, max_retries BIGINT,
    retry_exp_backoff_ns BIGINT, parent_execution_id TEXT, parent_join_set_id TEXT,
    pending_at BIGINT
)
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
"
    };
}

/// The query of `f_due_executions` (versions 3 and 7).
macro_rules! due_executions_query {
    () => {
        "SELECT d.* FROM (SELECT DISTINCT u.f FROM UNNEST(ffqns) AS u(f)) AS f
CROSS JOIN LATERAL (
    SELECT x.execution_id, x.ffqn, x.next_version, x.state_json, x.temporary_event_count,
        x.response_count, x.max_retries, x.retry_exp_backoff_ns, x.parent_execution_id,
        x.parent_join_set_id, x.pending_at
    FROM t_execution x
    WHERE x.ffqn = f.f AND x.pending_at IS NOT NULL AND x.pending_at <= due_at
    ORDER BY x.pending_at, x.execution_id LIMIT max_rows FOR UPDATE SKIP LOCKED
) AS d
ORDER BY d.pending_at, d.execution_id LIMIT max_rows"
    };
}

/// Version 7: `f_due_executions` (version 3) in PL/pgSQL, same arguments, rows and settings;
/// `f_check_revisions` (version 4) dropped, as writes check their revisions in a statement.
/// A `LANGUAGE sql` function with `SET` clauses is never inlined, and PostgreSQL 15 plans the
/// body of such a function again at every call (about 0.1 ms, half the cost of a lock of one
/// execution); PL/pgSQL keeps the plan of its query for the session, and the generic plan is
/// the index-ordered scan the settings leave as the only one.
const SCHEMA_V7: &str = concat!(
    "DROP FUNCTION f_check_revisions;\nCREATE OR REPLACE FUNCTION ",
    due_executions_signature!(),
    "SET plan_cache_mode = force_generic_plan
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY ",
    due_executions_query!(),
    ";\nEND\n$$;\n"
);

/// Version 8: each execution's response count and temporary event count, recounted from its
/// responses and events. Before it, an execution that a group of writes created and changed
/// (a create and a response to it, queued together) was stored with both counts at zero.
const SCHEMA_V8: &str = r#"
UPDATE t_execution AS t SET response_count = r.n
FROM (SELECT execution_id, count(*) AS n FROM t_response GROUP BY execution_id) AS r
WHERE t.execution_id = r.execution_id AND t.response_count <> r.n;
UPDATE t_execution AS t SET temporary_event_count = e.n
FROM (
    SELECT execution_id, count(*) AS n FROM t_event
    WHERE NOT is_history
        AND (event_json::jsonb -> 'event') ?| ARRAY['TemporarilyFailed', 'TemporarilyTimedOut']
    GROUP BY execution_id
) AS e
WHERE t.execution_id = e.execution_id AND t.temporary_event_count <> e.n;
"#;

/// Version 10: fewer and cheaper index entries per execution, for the same reads.
///
/// - Every update of `t_execution` that changes an indexed column writes a new version of the
///   row and an entry for it into each index whose condition it meets. The creation index held
///   every version (three per execution); its place takes `t_execution_finished_created_idx`,
///   the finished executions by creation, which gets one. A listing of every state merges it
///   with the unfinished index (`reads::listing`).
/// - The unfinished index is keyed by creation alone under `finished_at IS NULL`, as SQLite's
///   is since its version 10: a listing by a state other than `Finished` reads it newest first
///   and filters by state.
/// - The listing indexes were in descending order, so each new execution's entry went to the
///   first leaf, which B-trees split in halves; in ascending order it goes to the last one,
///   which the server reaches without a descent and splits leaving it full. Listings read them
///   backwards.
/// - `t_execution_pending_idx` indexed every pending execution by `pending_at` for one reader,
///   the listing of parked executions (pending at `concepts::PARKED_UNTIL`, 9999-12-31, the
///   literal below); `t_execution_parked_idx` holds those alone, so a create, a retry or a
///   wake-up writes no entry into it. The due executions are read through
///   `t_execution_pending_ffqn_idx`, as before.
/// - No statistics of the JSON documents, which no statement filters, joins or sorts by: an
///   `ANALYZE` (the autovacuum runs one each time a tenth of a table changed) sorted a sample of
///   each to find its most common values, about as much of its time as all the other columns.
const SCHEMA_V10: &str = r#"
DROP INDEX t_execution_pending_idx;
CREATE INDEX t_execution_parked_idx ON t_execution (pending_at, execution_id)
    WHERE pending_at >= 253402214400000000;
DROP INDEX t_execution_created_idx;
CREATE INDEX t_execution_finished_created_idx
    ON t_execution (created_at, created_at_ns, execution_id)
    WHERE finished_at IS NOT NULL;
DROP INDEX t_execution_unfinished_idx;
CREATE INDEX t_execution_unfinished_idx
    ON t_execution (created_at, created_at_ns, execution_id)
    WHERE finished_at IS NULL;
DROP INDEX t_execution_parent_idx;
CREATE INDEX t_execution_parent_idx
    ON t_execution (parent_execution_id, created_at, created_at_ns, execution_id)
    WHERE parent_execution_id IS NOT NULL;
ALTER TABLE t_execution ALTER COLUMN state_json SET STATISTICS 0;
ALTER TABLE t_event ALTER COLUMN event_json SET STATISTICS 0;
ALTER TABLE t_response ALTER COLUMN response_json SET STATISTICS 0;
ALTER TABLE t_schedule ALTER COLUMN row_json SET STATISTICS 0;
ALTER TABLE t_schedule_tick ALTER COLUMN tick_json SET STATISTICS 0;
"#;

/// Version 9: schedule names compared byte by byte (`COLLATE "C"`, as every id column is), so
/// that listings and the due query's ties go in the order of the other backends on a database
/// whose default collation is a language's.
const SCHEMA_V9: &str = r#"
ALTER TABLE t_schedule ALTER COLUMN name TYPE text COLLATE "C";
ALTER TABLE t_schedule_tick ALTER COLUMN name TYPE text COLLATE "C";
"#;

/// Version 6: schedules (the row as JSON, beside its name and the due time a pass seeks) and
/// their recorded ticks.
const SCHEMA_V6: &str = r#"
CREATE TABLE t_schedule (
    name        text PRIMARY KEY,
    next_due_at int8,
    row_json    text NOT NULL
);
CREATE INDEX t_schedule_due_idx ON t_schedule (next_due_at, name) WHERE next_due_at IS NOT NULL;
CREATE TABLE t_schedule_tick (
    name      text NOT NULL,
    seq       int8 NOT NULL,
    tick_json text NOT NULL,
    PRIMARY KEY (name, seq)
);
"#;

/// Version 5: the listings by state and of a parent's children, newest first, read their own
/// partial indexes; finished executions, the bulk of a database, stay out of the first (a
/// listing of them finds its page in the creation index).
const SCHEMA_V5: &str = r#"
CREATE INDEX t_execution_unfinished_idx
    ON t_execution (state_kind, created_at DESC, created_at_ns DESC, execution_id DESC)
    WHERE state_kind <> 3;
CREATE INDEX t_execution_parent_idx
    ON t_execution (parent_execution_id, created_at DESC, created_at_ns DESC, execution_id DESC)
    WHERE parent_execution_id IS NOT NULL;
"#;

/// Version 1 (why these column types, `docs/ARCHITECTURE.md` says).
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

/// Version 2: `finished_at` (`finished_at_ns`), set exactly while the state is `Finished`, and
/// the partial index that `prune` reads its candidates from: finished top-level executions in
/// `(finished_at, execution_id)` order. Rows that finished before the migration get the time
/// from their state's JSON (RFC 3339, up to nine fractional digits, always in UTC).
const SCHEMA_V2: &str = r#"
ALTER TABLE t_execution
    ADD COLUMN finished_at    BIGINT NULL,
    ADD COLUMN finished_at_ns SMALLINT NULL;
WITH finished AS (
    SELECT execution_id, (state_json::json -> 'Finished' ->> 'finished_at') AS finished_text
    FROM t_execution WHERE state_kind = 3
), parts AS (
    SELECT execution_id,
        EXTRACT(EPOCH FROM regexp_replace(finished_text, '\.[0-9]+', '')::timestamptz)::bigint
            AS seconds,
        rpad(COALESCE(substring(finished_text FROM '\.([0-9]+)'), ''), 9, '0') AS fraction
    FROM finished
)
UPDATE t_execution AS t
SET finished_at = p.seconds * 1000000 + substr(p.fraction, 1, 6)::bigint,
    finished_at_ns = substr(p.fraction, 7, 3)::smallint
FROM parts AS p WHERE t.execution_id = p.execution_id;
ALTER TABLE t_execution
    ADD CONSTRAINT t_execution_finished_at_check
        CHECK ((state_kind = 3) = (finished_at IS NOT NULL)),
    ADD CONSTRAINT t_execution_finished_at_ns_check
        CHECK ((finished_at IS NULL) = (finished_at_ns IS NULL));
CREATE INDEX t_execution_finished_top_level_idx
    ON t_execution (finished_at, finished_at_ns, execution_id)
    WHERE is_top_level AND finished_at IS NOT NULL;
"#;

/// Version 3: autovacuum of `t_execution` after 50,000 dead rows, whatever the table's size,
/// and `f_due_executions`, the lock query's read of due executions.
///
/// Every state change leaves dead entries in the partial indexes that due executions and expired
/// leases are found by (`pending_at`, `lock_expires_at`), ahead of the live ones in the order
/// these queries read, until a vacuum removes them. With the default trigger (a fifth of the
/// table) a lock query walks through more the more history is stored (up to 200,000 dead rows
/// at 1,000,000 stored executions, 2,000,000 at 10,000,000); with a fixed one it does not.
///
/// `f_due_executions(at, ffqns, n)`: per function, the first `n` due rows of the partial index
/// on `(ffqn, pending_at, execution_id)`, read in its order and locked as they are read
/// (`FOR UPDATE SKIP LOCKED`), then the first `n` of them all. The statistics of due rows are
/// always stale (they come and go between two `ANALYZE`s), and with an estimate below `n` the
/// planner read every due row by a bitmap scan and sorted them, for each batch; without bitmap
/// scans and with sorts priced out, the only plan left reads the index in order and stops after
/// `n`, and without JIT (which the priced-out sort would buy at every call, for about 250 ms).
/// Rows of one function beyond the first `n` overall stay locked, unchanged, until the commit.
const SCHEMA_V3: &str = concat!(
    "ALTER TABLE t_execution
    SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50000);
CREATE FUNCTION ",
    due_executions_signature!(),
    "LANGUAGE sql VOLATILE AS $$\n",
    due_executions_query!(),
    "\n$$;\n"
);

/// Version 4: `f_check_revisions(ids, versions, finished, response counts)`, which locks the
/// rows of `ids` in id order and raises SQLSTATE `SR001` unless each still has that revision.
const SCHEMA_V4: &str = r#"
CREATE FUNCTION f_check_revisions(
    ids TEXT[], versions BIGINT[], finished BOOLEAN[], responses BIGINT[]
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    matching BIGINT;
BEGIN
    PERFORM 1 FROM t_execution t
        JOIN UNNEST(ids, versions, finished, responses)
            AS k(id, next_version, finished, response_count)
        ON t.execution_id = k.id AND t.next_version = k.next_version
        AND (t.state_kind = 3) = k.finished AND t.response_count = k.response_count
        ORDER BY t.execution_id FOR UPDATE OF t;
    GET DIAGNOSTICS matching = ROW_COUNT;
    IF matching <> cardinality(ids) THEN
        RAISE EXCEPTION 'a row changed since the write was planned on it'
            USING ERRCODE = 'SR001';
    END IF;
END
$$;
"#;

/// Applies every missing migration up to version `up_to` in one transaction under an advisory
/// lock (two processes starting at once do not both migrate), refusing a newer schema and, as
/// `config` asks, a database without the schema or with an older one, changing nothing.
pub(crate) async fn migrate(
    client: &mut tokio_postgres::Client,
    up_to: i64,
    config: &PostgresConfig,
) -> Result<(), PostgresError> {
    let tx = client.transaction().await.map_err(map_pg_error)?;
    let current = (current_version(&tx, config.schema.create).await).map_err(map_pg_error)?;
    let version = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
    let checked = (config.schema).check(version(current), version(up_to), version(SCHEMA_VERSION));
    checked.map_err(|refusal| {
        let url = config.redacted_url().to_string();
        PostgresError::Schema { url, refusal }
    })?;
    let missing = (1..)
        .zip(MIGRATIONS)
        .filter(|(v, _)| *v > current && *v <= up_to);
    for (version, (description, sql)) in missing {
        tracing::info!(version, description, "applying migration");
        let applied = async {
            tx.batch_execute(sql).await?;
            let sql = "INSERT INTO t_schema_migration (version, description) VALUES ($1, $2)";
            tx.execute(sql, &[&version, &description]).await
        };
        applied.await.map_err(map_pg_error)?;
    }
    tx.commit().await.map_err(map_pg_error)?;
    Ok(())
}

/// Takes the migration lock and reads the schema version (creating `t_schema_migration` first
/// when `create`); no table is version 0.
async fn current_version(
    tx: &tokio_postgres::Transaction<'_>,
    create: bool,
) -> Result<i64, tokio_postgres::Error> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await?;
    if create {
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS t_schema_migration (
                version     BIGINT PRIMARY KEY,
                description TEXT NOT NULL
            )",
        )
        .await?;
    }
    // Resolved through `search_path`, as the `CREATE TABLE` above is.
    let exists = "SELECT to_regclass('t_schema_migration') IS NOT NULL";
    if !tx.query_one(exists, &[]).await?.get::<_, bool>(0) {
        return Ok(0);
    }
    let newest = "SELECT COALESCE(MAX(version), 0) FROM t_schema_migration";
    Ok(tx.query_one(newest, &[]).await?.get(0))
}
