//! The read half of a write: the rows its [`Keys`] name, loaded into a [`Snapshot`] under row
//! locks, in one pipeline behind its `BEGIN` (a second one loads the follow-up keys of `cancel`
//! and `prune`).

use crate::{
    codec::{
        column, documents, execution_columns, execution_row, json, micros, parsed, sub_micros,
    },
    pipeline::{self, Statement, Trips, for_ids, params, statement, unnest},
    schedules,
};
use concepts::{
    DbError, ExecutionId, JoinSetResponseEventOuter,
    kernel::{
        DelayRow, JoinSetCounters, Keys, PruneQuery, Snapshot, descendant_bounds,
        stored::{self, corrupt, count, to_i64},
    },
};
use deadpool_postgres::ClientWrapper;
use tokio_postgres::{Error as PgError, Row};

/// Due executions, oldest first, skipping rows another transaction holds (two executors never
/// wait for, nor lock, the same execution): the schema's `f_due_executions`, whose migration
/// (`SCHEMA_V3` in `schema.rs`) says why the read is a function.
pub(crate) const SELECT_DUE: &str = "SELECT * FROM f_due_executions($1, $2, $3)";

/// Begins a write transaction whose statements reach rows by key or index range only (with
/// missing or stale statistics the planner otherwise sometimes scans a whole table while the
/// transaction holds its row locks) and run their generic plans, made once per connection; why
/// generic plans for writes and custom ones for reads, `docs/ARCHITECTURE.md` says.
pub(crate) const BEGIN_WRITE: &str = "BEGIN; SET LOCAL enable_seqscan = off; \
    SET LOCAL enable_bitmapscan = off; SET LOCAL plan_cache_mode = force_generic_plan";

/// Sends [`BEGIN_WRITE`] when `begin` (a pipeline's first statement).
pub(crate) async fn begin_write(client: &ClientWrapper, begin: bool) -> Result<(), PgError> {
    if begin {
        client.batch_execute(BEGIN_WRITE).await?;
    }
    Ok(())
}

/// The rows of the executions a write changes or creates, locked in id order: every write
/// locks in this one order, so two writes never wait for each other in a circle.
const LOCK_EXECUTIONS: &str = concat!(
    "SELECT ",
    execution_columns!(),
    " FROM t_execution WHERE execution_id = ANY($1) ORDER BY execution_id FOR UPDATE"
);

/// Per join set: its counters, and the responses the next `k.n` `JoinNext` events consume.
const SELECT_JOIN_SETS: &str = "SELECT k.ord, j.join_next_count, j.response_count, \
    ARRAY(SELECT r.response_json FROM t_response r \
          WHERE r.execution_id = k.id AND r.join_set_id = k.join_set_id \
          AND r.join_set_idx >= j.join_next_count AND r.join_set_idx < j.join_next_count + k.n \
          ORDER BY r.join_set_idx) \
    FROM UNNEST($1::text[], $2::text[], $3::int8[]) WITH ORDINALITY AS k(id, join_set_id, n, ord) \
    JOIN t_join_set j ON j.execution_id = k.id AND j.join_set_id = k.join_set_id";

/// Per delay: whether it was requested, whether it was answered.
const SELECT_DELAYS: &str = "SELECT k.ord, \
    EXISTS (SELECT 1 FROM t_delay d WHERE d.execution_id = k.id AND d.delay_id = k.delay_id), \
    EXISTS (SELECT 1 FROM t_response r WHERE r.execution_id = k.id AND r.delay_id = k.delay_id) \
    FROM UNNEST($1::text[], $2::text[]) WITH ORDINALITY AS k(id, delay_id, ord)";

/// The `(execution, child)` pairs whose response is stored.
const SELECT_CHILD_RESPONSES: &str = "SELECT k.ord \
    FROM UNNEST($1::text[], $2::text[]) WITH ORDINALITY AS k(id, child_id, ord) \
    WHERE EXISTS (SELECT 1 FROM t_response r \
                  WHERE r.execution_id = k.id AND r.child_execution_id = k.child_id)";

/// The `Created` event of each execution `$1` that exists, one index lookup per id (a plain
/// join was planned as a scan of the whole log once the statistics knew its size).
pub(crate) const SELECT_CREATED: &str = "SELECT k.id, e.event_json FROM UNNEST($1::text[]) AS k(id) \
    CROSS JOIN LATERAL (SELECT e.event_json FROM t_event e \
    WHERE e.execution_id = k.id AND e.version = 0 OFFSET 0) AS e";

/// The descendants of each root `k` (ids in `[low, high)`), locked in id order after the rows
/// of `LOCK_EXECUTIONS` (whose ids sort before them); the `LATERAL` join makes it one
/// primary-key range per root whatever the statistics say.
const LOCK_SUBTREES: &str = concat!(
    "SELECT ",
    execution_columns!(),
    ", k.ord FROM UNNEST($1::text[], $2::text[]) \
     WITH ORDINALITY AS k(low, high, ord) \
     CROSS JOIN LATERAL (SELECT * FROM t_execution t \
     WHERE t.execution_id >= k.low AND t.execution_id < k.high \
     ORDER BY t.execution_id FOR UPDATE) AS t \
     ORDER BY t.execution_id, k.ord"
);

/// The ids `LOCK_SUBTREES` would find now, read without locks: see [`lock_subtrees`].
const SUBTREE_MEMBERS: &str = "SELECT t.execution_id, k.ord \
    FROM UNNEST($1::text[], $2::text[]) \
    WITH ORDINALITY AS k(low, high, ord) \
    CROSS JOIN LATERAL (SELECT execution_id FROM t_execution t \
    WHERE t.execution_id >= k.low AND t.execution_id < k.high) AS t";

/// `prune`'s candidates: top-level executions finished before `($1, $2)` and after the cursor
/// `($3, $4, $5)`, oldest first, from their partial index; one another transaction holds is
/// skipped until the next pass.
const SELECT_PRUNE: &str = concat!(
    "SELECT ",
    execution_columns!(),
    " FROM t_execution WHERE is_top_level AND finished_at IS NOT NULL \
     AND (finished_at, finished_at_ns) < ($1, $2) \
     AND (finished_at, finished_at_ns, execution_id) > ($3, $4, $5) \
     ORDER BY finished_at, finished_at_ns, execution_id LIMIT $6 FOR UPDATE SKIP LOCKED"
);

/// The `Finished` event of each execution `$1` that finished: it is stored at the version the
/// row keeps as its next one.
const SELECT_FINISHED: &str = "SELECT e.execution_id, ev.event_json FROM t_execution e \
    JOIN t_event ev ON ev.execution_id = e.execution_id AND ev.version = e.next_version \
    WHERE e.execution_id = ANY($1) AND e.state_kind = 3";

/// The open delays of each execution `$1`.
const SELECT_OPEN_DELAYS: &str = "SELECT execution_id, delay_id FROM t_delay \
    WHERE execution_id = ANY($1) AND is_open ORDER BY execution_id, delay_id";

/// The column of `LOCK_SUBTREES` that holds the ordinal of the root.
const SUBTREE_ORD: usize = 10;

/// Loads what `keys` name into `snapshot` in one pipeline, after a `BEGIN` when `begin`
/// (without, a write's follow-up keys in the same transaction); a key that names nothing costs
/// no statement. Row locks are taken in id order: the executions, then the descendants.
pub(crate) async fn load(
    client: &ClientWrapper,
    trips: &Trips,
    keys: &Keys,
    begin: bool,
    snapshot: &mut Snapshot,
) -> Result<(), DbError> {
    let locked: Vec<&str> = (keys.executions.iter())
        .chain(&keys.new_executions)
        .map(ExecutionId::as_str)
        .collect();
    let subtrees = keys.subtrees.iter().map(descendant_bounds).unzip();
    let [schedules_named, due_schedules] = schedules::load_statements(keys);
    let statements = [
        keys.due.as_ref().map(|due| {
            let ffqns: Vec<String> = due.ffqns.iter().map(ToString::to_string).collect();
            let (at, limit) = (micros(due.pending_at_or_sooner), to_i64(due.limit));
            statement(SELECT_DUE, params![at, ffqns, limit])
        }),
        (!locked.is_empty()).then(|| statement(LOCK_EXECUTIONS, params![locked])),
        for_ids(SELECT_CREATED, &keys.new_executions),
        over_subtrees(LOCK_SUBTREES, &subtrees),
        over_subtrees(SUBTREE_MEMBERS, &subtrees),
        keys.prune.as_ref().map(prune_statement),
        for_ids(SELECT_FINISHED, &keys.finished_results),
        for_ids(SELECT_OPEN_DELAYS, &keys.open_delays),
        unnest!(SELECT_JOIN_SETS, &keys.join_sets, |key| {
            ids: &str = key.execution_id.as_str(),
            join_sets: String = key.join_set_id.to_string(),
            next: i64 = to_i64(key.next_responses),
        }),
        unnest!(SELECT_DELAYS, &keys.delays, |(id, delay_id)| {
            ids: &str = id.as_str(),
            delays: String = delay_id.to_string(),
        }),
        unnest!(SELECT_CHILD_RESPONSES, &keys.child_responses, |(id, child)| {
            ids: &str = id.as_str(),
            children: &str = child.as_str(),
        }),
        schedules_named,
        due_schedules,
    ];
    let [
        due,
        executions,
        created,
        subtree_rows,
        subtree_check,
        prune,
        finished,
        open_delays,
        join_sets,
        delays,
        children,
        schedules_named,
        due_schedules,
    ] = pipeline::run_present(client, Some(trips), begin, statements).await?;
    schedules::add_rows(&schedules_named, &due_schedules, snapshot)?;
    for row in &executions {
        snapshot.add_execution(execution_row(row)?);
    }
    for row in &created {
        let id = parsed(row, 0, "execution id")?;
        snapshot.created.insert(id, json(row, 1, "event")?);
    }
    for row in &lock_subtrees(client, trips, &subtrees, (subtree_rows, subtree_check)).await? {
        let root = &keys.subtrees[ordinal(row, SUBTREE_ORD, keys.subtrees.len())?];
        snapshot.add_descendant(root, execution_row(row)?);
    }
    for row in &prune {
        snapshot.add_prune_candidate(execution_row(row)?);
    }
    for row in &finished {
        let id = parsed(row, 0, "execution id")?;
        let result = stored::finished_result(&id, column(row, 1)?)?;
        snapshot.finished_results.insert(id, result);
    }
    for row in &open_delays {
        let id = parsed(row, 0, "execution id")?;
        snapshot.add_open_delay(&id, parsed(row, 1, "delay id")?);
    }
    for row in &join_sets {
        let key = &keys.join_sets[ordinal(row, 0, keys.join_sets.len())?];
        let responses: Vec<JoinSetResponseEventOuter> = documents(row, 3, "response")?;
        let next_response_times = responses.iter().map(|r| r.created_at).collect();
        let counters = JoinSetCounters {
            join_next_count: count(column(row, 1)?, "join_next_count")?,
            response_count: count(column(row, 2)?, "response_count")?,
        };
        snapshot.add_join_set(key, counters, next_response_times);
    }
    for row in &delays {
        let key = &keys.delays[ordinal(row, 0, keys.delays.len())?];
        let (requested, answered) = (column(row, 1)?, column(row, 2)?);
        let delay = DelayRow {
            requested,
            answered,
        };
        snapshot.add_delay(key, delay);
    }
    for row in &children {
        let key = keys.child_responses[ordinal(row, 0, keys.child_responses.len())?].clone();
        snapshot.child_responses.insert(key);
    }
    // Only the rows: the histories are read after the `COMMIT` (`reads::locked_executions`).
    let due = due.iter().map(execution_row).collect::<Result<_, _>>()?;
    snapshot.add_due_in_order(due);
    Ok(())
}

/// Locks the subtrees until no member is missing: a descendant committed while the locking
/// statement waited is not in its snapshot, but once every member found is locked none can
/// appear below them, so a read without locks that finds no more members proves the set
/// complete. The first pair goes out with the other loads; another only when the tree grew.
async fn lock_subtrees(
    client: &ClientWrapper,
    trips: &Trips,
    subtrees: &Bounds,
    (mut rows, mut check): (Vec<Row>, Vec<Row>),
) -> Result<Vec<Row>, DbError> {
    while subtree_members(&rows, 0, SUBTREE_ORD)? != subtree_members(&check, 0, 1)? {
        let statements = [
            over_subtrees(LOCK_SUBTREES, subtrees),
            over_subtrees(SUBTREE_MEMBERS, subtrees),
        ];
        [rows, check] = pipeline::run_present(client, Some(trips), false, statements).await?;
    }
    Ok(rows)
}

/// The `(root ordinal, member id)` pairs of subtree rows, sorted.
fn subtree_members(rows: &[Row], id: usize, ord: usize) -> Result<Vec<(i64, &str)>, DbError> {
    let mut members = rows
        .iter()
        .map(|row| Ok((column(row, ord)?, column(row, id)?)))
        .collect::<Result<Vec<_>, DbError>>()?;
    members.sort_unstable();
    Ok(members)
}

/// Per subtree root, its bounds ([`descendant_bounds`]): the lows, then the highs.
type Bounds = (Vec<String>, Vec<String>);

/// `sql` (`LOCK_SUBTREES` or `SUBTREE_MEMBERS`) over `bounds`, unless there are none.
fn over_subtrees<'a>(sql: &'static str, (lows, highs): &'a Bounds) -> Option<Statement<'a>> {
    (!lows.is_empty()).then(|| statement(sql, params![lows, highs]))
}

/// `SELECT_PRUNE` for `prune`; without a cursor, one below every row.
fn prune_statement(prune: &PruneQuery) -> Statement<'_> {
    let (after_micros, after_sub, after_id) = match &prune.after {
        Some((at, id)) => (micros(*at), sub_micros(*at), id.as_str()),
        None => (i64::MIN, i16::MIN, ""),
    };
    let (before, limit) = (prune.finished_before, to_i64(prune.limit));
    let params = params![
        micros(before),
        sub_micros(before),
        after_micros,
        after_sub,
        after_id,
        limit
    ];
    statement(SELECT_PRUNE, params)
}

/// The 0-based position among `len` keys of the key a row answers (its `WITH ORDINALITY`, in
/// column `idx`).
fn ordinal(row: &Row, idx: usize, len: usize) -> Result<usize, DbError> {
    let ordinal: i64 = column(row, idx)?;
    usize::try_from(ordinal - 1)
        .ok()
        .filter(|idx| *idx < len)
        .ok_or_else(|| corrupt(format!("ordinal {ordinal} of {len} keys")))
}
