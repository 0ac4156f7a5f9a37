//! The write half of a write: a [`WritePlan`]'s changes (or those of a group of writes) as one
//! statement of multi-row `UNNEST` parts ([`combined`]), then `COMMIT`, the notifications and
//! what the write reads after its commit, in one pipeline; a write planned without a load
//! checks its [`Assumption`] first, in the same statement ([`CHECK_ASSUMPTION`]), and a
//! refuted one stores nothing.

use crate::{
    codec::{kind_to_i16, micros, sub_micros},
    error::map_pg_error,
    load,
    pipeline::{self, Statement, Trips, for_ids, params, push_renumbered, statement, unnest},
};
use concepts::{
    DbError, ExecutionEventInner, ExecutionId, PendingState,
    kernel::{
        Assumption, ExecutionChange, NotCommitted, WritePlan,
        stored::{event_json, state_json, to_i64, to_json},
    },
};
use deadpool_postgres::ClientWrapper;
use std::fmt::Write as _;

/// The condition of each part of a write's [`combined`] statement: true unless its check
/// (`c`, [`CHECK_ASSUMPTION`] or nothing to check) refuted the write.
macro_rules! unless_refuted {
    () => {
        "NOT (SELECT refuted FROM c)"
    };
}

const INSERT_EXECUTIONS: &str = concat!(
    "INSERT INTO t_execution (execution_id, ffqn, created_at, \
    created_at_ns, scheduled_at, scheduled_at_ns, is_top_level, next_version, state_kind, \
    pending_at, lock_expires_at, finished_at, finished_at_ns, state_json, temporary_event_count, \
    response_count, max_retries, retry_exp_backoff_ns, parent_execution_id, parent_join_set_id) \
    SELECT u.id, u.ffqn, u.created_at, u.created_at_ns, u.scheduled_at, u.scheduled_at_ns, \
    u.is_top_level, u.next_version, u.state_kind, u.pending_at, u.lock_expires_at, \
    u.finished_at, u.finished_at_ns, u.state_json, u.temporary_event_count, u.response_count, \
    u.max_retries, u.backoff_ns, u.parent_id, u.parent_join_set_id \
    FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int2[], $5::int8[], $6::int2[], \
    $7::bool[], $8::int8[], $9::int2[], $10::int8[], $11::int8[], $12::int8[], $13::int2[], \
    $14::text[], $15::int8[], $16::int8[], $17::text[], $18::text[], $19::int8[], $20::int8[]) \
    WITH ORDINALITY AS u(id, \
    ffqn, created_at, created_at_ns, scheduled_at, scheduled_at_ns, is_top_level, next_version, \
    state_kind, pending_at, lock_expires_at, finished_at, finished_at_ns, state_json, \
    max_retries, backoff_ns, parent_id, parent_join_set_id, temporary_event_count, \
    response_count, ord) WHERE ",
    unless_refuted!(),
    " ORDER BY u.ord"
);

const UPDATE_EXECUTIONS: &str = concat!(
    "UPDATE t_execution AS t SET next_version = u.next_version, \
    state_kind = u.state_kind, pending_at = u.pending_at, lock_expires_at = u.lock_expires_at, \
    finished_at = u.finished_at, finished_at_ns = u.finished_at_ns, state_json = u.state_json, \
    temporary_event_count = u.temporary_event_count, response_count = u.response_count \
    FROM UNNEST($1::text[], $2::int8[], $3::int2[], $4::int8[], $5::int8[], $6::int8[], \
    $7::int2[], $8::text[], $9::int8[], $10::int8[]) AS u(id, next_version, state_kind, \
    pending_at, lock_expires_at, finished_at, finished_at_ns, state_json, temporary_event_count, \
    response_count) WHERE t.execution_id = u.id AND ",
    unless_refuted!()
);

const INSERT_EVENTS: &str = concat!(
    "INSERT INTO t_event (execution_id, version, is_history, event_json) \
    SELECT u.id, u.version, u.is_history, u.json \
    FROM UNNEST($1::text[], $2::int8[], $3::bool[], $4::text[]) WITH ORDINALITY \
    AS u(id, version, is_history, json, ord) WHERE ",
    unless_refuted!(),
    " ORDER BY u.ord"
);

const INSERT_RESPONSES: &str = concat!(
    "INSERT INTO t_response (execution_id, idx, join_set_id, \
    join_set_idx, delay_id, child_execution_id, response_json) \
    SELECT u.id, u.idx, u.join_set_id, u.join_set_idx, u.delay_id, u.child_id, u.json \
    FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::int8[], $5::text[], $6::text[], \
    $7::text[]) WITH ORDINALITY AS u(id, idx, join_set_id, join_set_idx, delay_id, child_id, \
    json, ord) WHERE ",
    unless_refuted!(),
    " ORDER BY u.ord"
);

const UPSERT_JOIN_SETS: &str = concat!(
    "INSERT INTO t_join_set (execution_id, join_set_id, \
    join_next_count, response_count) \
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int8[]) WHERE ",
    unless_refuted!(),
    " ON CONFLICT (execution_id, join_set_id) DO UPDATE \
    SET join_next_count = EXCLUDED.join_next_count, response_count = EXCLUDED.response_count"
);

const INSERT_DELAYS: &str = "INSERT INTO t_delay (execution_id, delay_id, join_set_id, \
    expires_at, expires_at_ns, is_open) \
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int2[], $6::bool[])";

const CLOSE_DELAYS: &str = "UPDATE t_delay AS t SET is_open = false \
    FROM UNNEST($1::text[], $2::text[]) AS u(id, delay_id) \
    WHERE t.execution_id = u.id AND t.delay_id = u.delay_id";

/// Everything stored about the executions `$1` (`prune`): one statement, so one entry in the
/// pipeline; the row goes last.
const DELETE_EXECUTIONS: &str = "WITH \
    events AS (DELETE FROM t_event WHERE execution_id = ANY($1)), \
    responses AS (DELETE FROM t_response WHERE execution_id = ANY($1)), \
    join_sets AS (DELETE FROM t_join_set WHERE execution_id = ANY($1)), \
    delays AS (DELETE FROM t_delay WHERE execution_id = ANY($1)) \
    DELETE FROM t_execution WHERE execution_id = ANY($1)";

/// Locks the rows `$1` of a write planned without a load and answers `true` when it is
/// refuted: one of them no longer has the revision it was planned on, `($2, $3, $4)`, one of
/// the executions `$5` it creates is stored, or one of the join sets `($6, $7)` it creates has
/// counters stored. The `c` of a [`combined`] statement, whose parts read its answer
/// ([`unless_refuted!`]).
const CHECK_ASSUMPTION: &str = "SELECT ((SELECT count(*) \
    FROM (SELECT 1 FROM t_execution t JOIN UNNEST($1::text[], $2::int8[], $3::bool[], \
    $4::int8[]) AS k(id, next_version, finished, response_count) ON t.execution_id = k.id \
    AND t.next_version = k.next_version AND (t.state_kind = 3) = k.finished \
    AND t.response_count = k.response_count ORDER BY t.execution_id FOR UPDATE OF t) AS held) \
    <> cardinality($1::text[]) \
    OR EXISTS (SELECT 1 FROM t_execution WHERE execution_id = ANY($5::text[])) \
    OR EXISTS (SELECT 1 FROM t_join_set j JOIN UNNEST($6::text[], $7::text[]) AS a(id, js) \
    ON j.execution_id = a.id AND j.join_set_id = a.js)) AS refuted";

/// The `c` of a write loaded under row locks: nothing to check.
const NOTHING_TO_CHECK: &str = "SELECT false AS refuted";

/// Sends in one pipeline, one round trip: `BEGIN` when the transaction is not open yet (the
/// write loaded nothing and `assumed` what it planned on), the statements of [`statements`]
/// (the check of `assumed` first), `COMMIT`, the notifications, and whatever `after` sends when
/// first polled (outside the transaction: the reads `lock_pending` hands over). After a failed
/// statement the server runs the `COMMIT` as a `ROLLBACK`, so nothing of the write is stored;
/// the notifications are then hints about nothing, and what `after` returned is dropped.
pub(crate) async fn persist_and_commit<T>(
    client: &ClientWrapper,
    trips: &Trips,
    assumed: Option<&Assumption>,
    plan: &WritePlan,
    after: impl Future<Output = T>,
) -> Result<T, NotCommitted> {
    let begin = assumed.is_some();
    let prepared = async {
        let statements = statements(assumed, plan)?;
        let prepared = pipeline::prepare(client, &statements).await?;
        Ok::<_, DbError>((statements, prepared))
    };
    let (statements, prepared) = match prepared.await {
        Ok(prepared) => prepared,
        // Nothing was sent: no transaction is open.
        Err(e) if begin => return Err(NotCommitted::RolledBack(e)),
        Err(e) => return Err(rolled_back(client, trips, e).await),
    };
    trips.one();
    let (began, persisted, committed, (), after) = tokio::join!(
        biased;
        load::begin_write(client, begin),
        pipeline::run(client, &statements, &prepared),
        client.batch_execute("COMMIT"),
        crate::notify::publish(client, &plan.wakeups),
        after,
    );
    match (began, persisted, committed) {
        // Without its `BEGIN` each statement would have run alone: whatever happened, the
        // connection must not be trusted (it is lost, in practice).
        (Err(e), _, _) | (_, _, Err(e)) => Err(NotCommitted::Unknown(map_pg_error(e))),
        // The server refused a statement: its transaction was aborted, the `COMMIT` rolled
        // it back.
        (Ok(()), Err(e), Ok(())) if e.as_db_error().is_some() => {
            Err(NotCommitted::RolledBack(map_pg_error(e)))
        }
        // A statement that never reached the server (the driver could not encode it) did
        // not abort the transaction: what was sent may have committed.
        (Ok(()), Err(e), Ok(())) => Err(NotCommitted::Unknown(map_pg_error(e))),
        (Ok(()), Ok(rows), Ok(())) if begin && refuted(&rows) => Err(NotCommitted::Refuted),
        (Ok(()), Ok(_), Ok(())) => Ok(after),
    }
}

/// Rolls back after a failure found before anything was sent; a connection that cannot even
/// do that makes the outcome [`NotCommitted::Unknown`] (its caller drops it).
async fn rolled_back(client: &ClientWrapper, trips: &Trips, e: DbError) -> NotCommitted {
    trips.one();
    match client.batch_execute("ROLLBACK").await {
        Ok(()) => NotCommitted::RolledBack(e),
        Err(_) => NotCommitted::Unknown(e),
    }
}

/// True when the first statement's answer, its check's ([`combined`]), refuted the write.
fn refuted(rows: &[Vec<tokio_postgres::Row>]) -> bool {
    let answer = rows.first().and_then(|rows| rows.first());
    answer.and_then(|row| row.try_get::<_, bool>(0).ok()) != Some(false)
}

/// The `lock_expires_at` column: set only while `Locked` (a blocked run's lease is not a timer
/// of the watcher's).
fn locked_until(state: &PendingState) -> Option<i64> {
    match state {
        PendingState::Locked {
            lock_expires_at, ..
        } => Some(micros(*lock_expires_at)),
        _ => None,
    }
}

/// The statements that persist `plan` after checking what it `assumed`, each only when it has
/// rows: new executions in the order given (so that a duplicate the database finds is the
/// first one), updated rows, events, responses, join-set counters, delays requested and closed,
/// and the deleted executions. Each statement a plan on an assumption may hold (rows, events,
/// responses, join sets) is guarded ([`unless_refuted!`]).
fn statements<'a>(
    assumed: Option<&'a Assumption>,
    plan: &'a WritePlan,
) -> Result<Vec<Statement<'a>>, DbError> {
    let changes = &plan.changes;
    let new = changes.iter().filter_map(|c| Some((c, c.created()?)));
    let updated = changes.iter().filter(|c| !c.is_new());
    let each = |part: fn(&ExecutionChange) -> usize| {
        changes
            .iter()
            .flat_map(move |c| (0..part(c)).map(move |i| (c, i)))
    };
    let id = |change: &'a ExecutionChange| change.row.execution_id.as_str();
    let state = |change: &'a ExecutionChange| &change.row.state.pending_state;
    let response =
        |change: &'a ExecutionChange, i: usize| &change.responses[i].response.event.event;
    let parts = [
        unnest!(INSERT_EXECUTIONS, new, |(change, created)| {
            ids: &str = id(change),
            ffqns: &str = change.row.ffqn.as_str(),
            created_at: i64 = micros(created.created_at),
            created_at_ns: i16 = sub_micros(created.created_at),
            scheduled_at: i64 = micros(created.scheduled_at),
            scheduled_at_ns: i16 = sub_micros(created.scheduled_at),
            top_level: bool = change.row.execution_id.is_top_level(),
            versions: i64 = to_i64(change.row.state.next_version.0),
            kinds: i16 = kind_to_i16(state(change).kind()),
            pending_at: Option<i64> = state(change).pending_at().map(micros),
            lock_expires_at: Option<i64> = locked_until(state(change)),
            finished_at: Option<i64> = state(change).finished_at().map(micros),
            finished_at_ns: Option<i16> = state(change).finished_at().map(sub_micros),
            states: String = state_json(state(change))?,
            max_retries: i64 = i64::from(change.row.max_retries),
            backoff_ns: i64 = to_i64(change.row.retry_exp_backoff.as_nanos()),
            parents: Option<&str> = change.row.parent.as_ref().map(|(id, _)| id.as_str()),
            parent_join_sets: Option<String> =
                change.row.parent.as_ref().map(|(_, js)| js.to_string()),
            temporary_events: i64 = i64::from(change.row.temporary_event_count),
            responses: i64 = to_i64(change.row.response_count),
        }),
        unnest!(UPDATE_EXECUTIONS, updated, |change| {
            ids: &str = id(change),
            versions: i64 = to_i64(change.row.state.next_version.0),
            kinds: i16 = kind_to_i16(state(change).kind()),
            pending_at: Option<i64> = state(change).pending_at().map(micros),
            lock_expires_at: Option<i64> = locked_until(state(change)),
            finished_at: Option<i64> = state(change).finished_at().map(micros),
            finished_at_ns: Option<i16> = state(change).finished_at().map(sub_micros),
            states: String = state_json(state(change))?,
            temporary_events: i64 = i64::from(change.row.temporary_event_count),
            responses: i64 = to_i64(change.row.response_count),
        }),
        unnest!(INSERT_EVENTS, each(|c| c.events.len()), |(change, i)| {
            ids: &str = id(change),
            versions: i64 = to_i64(change.events[i].0.0),
            history: bool = matches!(change.events[i].1.event, ExecutionEventInner::HistoryEvent { .. }),
            events: String = event_json(&change.events[i].1)?,
        }),
        unnest!(INSERT_RESPONSES, each(|c| c.responses.len()), |(change, i)| {
            ids: &str = id(change),
            idx: i64 = to_i64(change.responses[i].idx),
            join_sets: String = change.responses[i].response.event.join_set_id.to_string(),
            join_set_idx: i64 = to_i64(change.responses[i].join_set_idx),
            delays: Option<String> = response(change, i).delay_id().map(|id| id.to_string()),
            children: Option<&str> = response(change, i).child_execution_id().map(|id| id.as_str()),
            responses: String = to_json(&change.responses[i].response)?,
        }),
        unnest!(UPSERT_JOIN_SETS, each(|c| c.join_sets.len()), |(change, i)| {
            ids: &str = id(change),
            join_sets: String = change.join_sets[i].0.to_string(),
            join_nexts: i64 = to_i64(change.join_sets[i].1.join_next_count),
            responses: i64 = to_i64(change.join_sets[i].1.response_count),
        }),
        unnest!(INSERT_DELAYS, each(|c| c.delays_requested.len()), |(change, i)| {
            ids: &str = id(change),
            delays: String = change.delays_requested[i].delay_id.to_string(),
            join_sets: String = change.delays_requested[i].join_set_id.to_string(),
            expires_at: i64 = micros(change.delays_requested[i].expires_at),
            expires_at_ns: i16 = sub_micros(change.delays_requested[i].expires_at),
            open: bool = change.delays_requested[i].open,
        }),
    ];
    // Apart, after it: a closed delay may be one this write requests, and the deletions and
    // schedules are statements of their own `WITH`.
    let apart = [
        unnest!(CLOSE_DELAYS, each(|c| c.delays_closed.len()), |(change, i)| {
            ids: &str = id(change),
            delays: String = change.delays_closed[i].to_string(),
        }),
        for_ids(DELETE_EXECUTIONS, &plan.deleted),
    ];
    let parts: Vec<_> = parts.into_iter().flatten().collect();
    let apart = apart
        .into_iter()
        .flatten()
        .chain(crate::schedules::statements(plan)?);
    let apart: Vec<_> = apart.collect();
    debug_assert!(
        assumed.is_none()
            || (apart.is_empty() && parts.iter().all(|s| s.sql.contains(unless_refuted!()))),
        "a plan on an assumption writes only what a refuted check keeps from being stored"
    );
    let check = assumed.map(check_assumption);
    let mut statements = Vec::new();
    if check.is_some() || !parts.is_empty() {
        statements.push(combined(check, parts));
    }
    statements.extend(apart);
    Ok(statements)
}

/// The check `c` ([`CHECK_ASSUMPTION`], or [`NOTHING_TO_CHECK`]) and the `parts` of a write as
/// one statement, `WITH c AS MATERIALIZED (check), w1 AS (part), ... SELECT refuted FROM c`,
/// each part's parameters numbered after those of the parts before it. The main query reads
/// `c` first, so the check has locked its rows before any part writes (the server runs the
/// parts the main query does not read at the statement's end), and each part reads the answer
/// ([`unless_refuted!`]). One statement is one message to bind and one answer to flush, where
/// a statement per part cost the server more than the parts' own work on a serial step.
pub(crate) fn combined<'a>(
    check: Option<Statement<'a>>,
    parts: Vec<Statement<'a>>,
) -> Statement<'a> {
    let check = check.unwrap_or_else(|| statement(NOTHING_TO_CHECK, Vec::new()));
    let (mut sql, mut params) = (String::from("WITH c AS MATERIALIZED ("), Vec::new());
    for (i, part) in std::iter::once(check).chain(parts).enumerate() {
        if i > 0 {
            let _ = write!(sql, "), w{i} AS (");
        }
        let highest = push_renumbered(&mut sql, &part.sql, params.len());
        debug_assert_eq!(
            highest,
            part.params.len(),
            "a part's parameters are `$1` to `$n`, one value each: {}",
            part.sql
        );
        params.extend(part.params);
    }
    sql.push_str(") SELECT refuted FROM c");
    statement(sql, params)
}

/// [`CHECK_ASSUMPTION`] of `assumed`.
fn check_assumption(assumed: &Assumption) -> Statement<'_> {
    let (ids, versions, finished, responses): (Vec<&str>, Vec<i64>, Vec<bool>, Vec<i64>) =
        (assumed.revisions.iter())
            .map(|(id, r)| {
                let (version, responses) = (to_i64(r.next_version.0), to_i64(r.response_count));
                (id.as_str(), version, r.finished, responses)
            })
            .collect();
    let absent: Vec<&str> = assumed.absent.iter().map(ExecutionId::as_str).collect();
    let (js_ids, js): (Vec<&str>, Vec<String>) = (assumed.absent_join_sets.iter())
        .map(|(id, js)| (id.as_str(), js.to_string()))
        .unzip();
    let params = params![ids, versions, finished, responses, absent, js_ids, js];
    statement(CHECK_ASSUMPTION, params)
}
