//! The read paths: logs, states, listings, expired timers, and the checks of the waits.

use crate::{
    codec::{
        column, count_to_i64, execution_columns, execution_row, finished_result_of, from_json,
        i64_to_u32, kind_to_i16, micros, parse_execution_id, parse_join_set_id, sub_micros,
        timestamp, version_to_i64,
    },
    error::{corrupt, map_pg_error},
    load::ordinal,
};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, DelayId, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredDelay,
    ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter,
    ListExecutionsFilter, LockedExecution, Pagination, Version,
    kernel::{self, LockGrant, LogRows},
};
use deadpool_postgres::GenericClient;

use tokio_postgres::{IsolationLevel, Row, types::ToSql};

fn event_of(row: &Row, idx: usize) -> Result<ExecutionEvent, DbError> {
    from_json(column(row, idx)?, "event")
}

fn response_of(row: &Row, idx: usize) -> Result<JoinSetResponseEventOuter, DbError> {
    from_json(column(row, idx)?, "response")
}

/// The events below each locked version `$2` of execution `$1`, with the ordinal of their
/// execution and their version. One index range scan per execution, whatever the statistics
/// say: the `OFFSET 0` keeps the planner from turning the `LATERAL` subquery into a join, which
/// on a table it had no statistics of (or with a plan cached while the table was small) it
/// planned as a scan of the whole table.
pub(crate) const SELECT_LOCKED_EVENTS: &str = "SELECT k.ord, e.version, e.event_json \
    FROM UNNEST($1::text[], $2::int8[]) WITH ORDINALITY AS k(id, below, ord) \
    CROSS JOIN LATERAL (SELECT e.version, e.event_json FROM t_event e \
    WHERE e.execution_id = k.id AND e.version < k.below OFFSET 0) AS e";

/// The responses of each execution `$1`, with the ordinal of their execution and their index;
/// one index range scan per execution, as `SELECT_LOCKED_EVENTS`.
pub(crate) const SELECT_LOCKED_RESPONSES: &str = "SELECT k.ord, r.idx, r.response_json \
    FROM UNNEST($1::text[]) WITH ORDINALITY AS k(id, ord) \
    CROSS JOIN LATERAL (SELECT r.idx, r.response_json FROM t_response r \
    WHERE r.execution_id = k.id OFFSET 0) AS r";

/// The executions `lock_pending` locked, handed over with their histories (the events below
/// the locked version and the responses), read after the `COMMIT` in one pipeline of two
/// statements: the log below a lease is append-only, so this reads what the write saw, and
/// the write's transaction (and its row locks) never waited for a long log.
pub(crate) async fn locked_executions(
    client: &impl GenericClient,
    grants: Vec<LockGrant>,
) -> Result<Vec<LockedExecution>, DbError> {
    let ids: Vec<&str> = grants.iter().map(|g| g.row.execution_id.as_str()).collect();
    let bound = |n: usize| count_to_i64(u64::try_from(n).unwrap_or(u64::MAX));
    let event_bounds: Vec<i64> = grants
        .iter()
        .map(|g| bound(g.events_handed_over()))
        .collect();
    let (events_stmt, responses_stmt) = tokio::join!(
        client.prepare_cached(SELECT_LOCKED_EVENTS),
        client.prepare_cached(SELECT_LOCKED_RESPONSES),
    );
    let (events_stmt, responses_stmt) = (
        events_stmt.map_err(map_pg_error)?,
        responses_stmt.map_err(map_pg_error)?,
    );
    let event_params: [&(dyn ToSql + Sync); 2] = [&ids, &event_bounds];
    let response_params: [&(dyn ToSql + Sync); 1] = [&ids];
    let (events, responses) = tokio::join!(
        client.query(&events_stmt, &event_params),
        client.query(&responses_stmt, &response_params),
    );
    let (events, responses) = (
        events.map_err(map_pg_error)?,
        responses.map_err(map_pg_error)?,
    );
    let mut events_of: Vec<Vec<(i64, ExecutionEvent)>> = ids.iter().map(|_| Vec::new()).collect();
    for row in &events {
        events_of[ordinal(row, 0, ids.len())?].push((column(row, 1)?, event_of(row, 2)?));
    }
    let mut responses_of: Vec<Vec<(i64, JoinSetResponseEventOuter)>> =
        ids.iter().map(|_| Vec::new()).collect();
    for row in &responses {
        responses_of[ordinal(row, 0, ids.len())?].push((column(row, 1)?, response_of(row, 2)?));
    }
    // In version (arrival) order: each scan returns its rows in index order, which SQL does
    // not promise, and sorting what is sorted costs one pass.
    let logs = events_of
        .into_iter()
        .zip(responses_of)
        .map(|(mut events, mut responses)| {
            events.sort_by_key(|(version, _)| *version);
            responses.sort_by_key(|(idx, _)| *idx);
            LogRows {
                events: events.into_iter().map(|(_, event)| event).collect(),
                responses: responses
                    .into_iter()
                    .map(|(_, response)| response)
                    .collect(),
            }
        });
    grants
        .into_iter()
        .zip(logs)
        .map(|(grant, log)| kernel::hand_over(grant, log))
        .collect()
}

/// Whether an execution of one of the functions `$2` is due at `$1`: per function, the first
/// entry of the partial index on `(ffqn, pending_at, execution_id)`. `ORDER BY ... LIMIT 1`
/// makes that index the plan whatever the statistics say: a plain `EXISTS` over the table,
/// planned while it was small, stayed a scan of the whole table once it held a million rows.
pub(crate) const ANY_DUE: &str = "SELECT EXISTS (SELECT 1 FROM UNNEST($2::text[]) AS f(ffqn) \
    CROSS JOIN LATERAL (SELECT 1 FROM t_execution t WHERE t.ffqn = f.ffqn \
    AND t.pending_at IS NOT NULL AND t.pending_at <= $1 \
    ORDER BY t.pending_at, t.execution_id LIMIT 1) AS due)";

/// True when an execution of `ffqns` is due at `at`.
pub(crate) async fn any_due(
    client: &impl GenericClient,
    at: DateTime<Utc>,
    ffqns: &[FunctionFqn],
) -> Result<bool, DbError> {
    let names: Vec<String> = ffqns.iter().map(ToString::to_string).collect();
    let stmt = client.prepare_cached(ANY_DUE).await.map_err(map_pg_error)?;
    let row = client
        .query_one(&stmt, &[&micros(at), &names])
        .await
        .map_err(map_pg_error)?;
    row.try_get(0).map_err(map_pg_error)
}

/// Responses of an execution from `start_idx` on; `NotFound` for an unknown execution.
pub(crate) async fn responses_from(
    client: &impl GenericClient,
    execution_id: &ExecutionId,
    start_idx: usize,
) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
    let (exists_stmt, responses_stmt) = tokio::join!(
        client.prepare_cached("SELECT response_count FROM t_execution WHERE execution_id = $1"),
        client.prepare_cached(
            "SELECT response_json FROM t_response WHERE execution_id = $1 AND idx >= $2 \
             ORDER BY idx",
        ),
    );
    let exists_stmt = exists_stmt.map_err(map_pg_error)?;
    let responses_stmt = responses_stmt.map_err(map_pg_error)?;
    let id = execution_id.as_str();
    let start = count_to_i64(u64::try_from(start_idx).unwrap_or(u64::MAX));
    let exists_params: [&(dyn ToSql + Sync); 1] = [&id];
    let responses_params: [&(dyn ToSql + Sync); 2] = [&id, &start];
    let (exists, rows) = tokio::join!(
        biased;
        client.query_opt(&exists_stmt, &exists_params),
        client.query(&responses_stmt, &responses_params),
    );
    if exists.map_err(map_pg_error)?.is_none() {
        return Err(DbError::execution_not_found(execution_id));
    }
    rows.map_err(map_pg_error)?
        .iter()
        .map(|row| response_of(row, 0))
        .collect()
}

/// Every lease with `lock_expires_at <= at` and every open delay with `expires_at <= at`,
/// ordered by expiry, then execution id, then leases before delays (by delay id).
pub(crate) async fn expired_timers(
    client: &impl GenericClient,
    at: DateTime<Utc>,
) -> Result<Vec<ExpiredTimer>, DbError> {
    let (locks_stmt, delays_stmt) = tokio::join!(
        client.prepare_cached(concat!(
            "SELECT ",
            execution_columns!(),
            " FROM t_execution WHERE lock_expires_at IS NOT NULL AND lock_expires_at <= $1"
        )),
        client.prepare_cached(
            "SELECT execution_id, delay_id, join_set_id, expires_at, expires_at_ns \
             FROM t_delay WHERE is_open AND expires_at <= $1",
        ),
    );
    let locks_stmt = locks_stmt.map_err(map_pg_error)?;
    let delays_stmt = delays_stmt.map_err(map_pg_error)?;
    let at_micros = micros(at);
    let params: [&(dyn ToSql + Sync); 1] = [&at_micros];
    let (locks, delays) = tokio::join!(
        biased;
        client.query(&locks_stmt, &params),
        client.query(&delays_stmt, &params),
    );
    let mut timers = Vec::new();
    for row in &locks.map_err(map_pg_error)? {
        if let Some(lock) = execution_row(row)?.expired_lock_at(at)? {
            timers.push(ExpiredTimer::Lock(lock));
        }
    }
    for row in &delays.map_err(map_pg_error)? {
        let delay_id: DelayId = column::<&str>(row, 1)?
            .parse()
            .map_err(|e| corrupt(format!("delay id: {e}")))?;
        let expires_at = timestamp(column(row, 3)?, column(row, 4)?)?;
        // SQL compares microseconds; the exact expiry decides.
        if expires_at <= at {
            timers.push(ExpiredTimer::Delay(ExpiredDelay {
                execution_id: parse_execution_id(column(row, 0)?)?,
                join_set_id: parse_join_set_id(column(row, 2)?)?,
                delay_id,
                expires_at,
            }));
        }
    }
    concepts::kernel::order_expired_timers(&mut timers);
    Ok(timers)
}

/// The whole log, its responses and its state, from one snapshot.
pub(crate) async fn get(
    client: &mut deadpool_postgres::Object,
    execution_id: &ExecutionId,
) -> Result<ExecutionLog, DbError> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(map_pg_error)?;
    let (state_stmt, events_stmt, responses_stmt) = tokio::join!(
        tx.prepare_cached(
            "SELECT next_version, state_json FROM t_execution WHERE execution_id = $1"
        ),
        tx.prepare_cached(
            "SELECT event_json FROM t_event WHERE execution_id = $1 ORDER BY version"
        ),
        tx.prepare_cached(
            "SELECT response_json FROM t_response WHERE execution_id = $1 ORDER BY idx"
        ),
    );
    let state_stmt = state_stmt.map_err(map_pg_error)?;
    let events_stmt = events_stmt.map_err(map_pg_error)?;
    let responses_stmt = responses_stmt.map_err(map_pg_error)?;
    let id = execution_id.as_str();
    let params: [&(dyn ToSql + Sync); 1] = [&id];
    let (state, events, responses) = tokio::join!(
        biased;
        tx.query_opt(&state_stmt, &params),
        tx.query(&events_stmt, &params),
        tx.query(&responses_stmt, &params),
    );
    let state = state
        .map_err(map_pg_error)?
        .ok_or_else(|| DbError::execution_not_found(execution_id))?;
    let events = events.map_err(map_pg_error)?;
    let responses = responses.map_err(map_pg_error)?;
    tx.commit().await.map_err(map_pg_error)?;
    Ok(ExecutionLog {
        execution_id: execution_id.clone(),
        events: events
            .iter()
            .map(|row| event_of(row, 0))
            .collect::<Result<_, _>>()?,
        responses: responses
            .iter()
            .map(|row| response_of(row, 0))
            .collect::<Result<_, _>>()?,
        next_version: Version(i64_to_u32(column(&state, 0)?, "next_version")?),
        pending_state: from_json(column(&state, 1)?, "pending state")?,
    })
}

/// One event; `NotFound` names the execution or the version that is missing.
pub(crate) async fn execution_event(
    client: &impl GenericClient,
    execution_id: &ExecutionId,
    version: Version,
) -> Result<ExecutionEvent, DbError> {
    let stmt = client
        .prepare_cached(
            "SELECT ev.event_json FROM t_execution e LEFT JOIN t_event ev \
             ON ev.execution_id = e.execution_id AND ev.version = $2 \
             WHERE e.execution_id = $1",
        )
        .await
        .map_err(map_pg_error)?;
    let row = client
        .query_opt(&stmt, &[&execution_id.as_str(), &version_to_i64(version)])
        .await
        .map_err(map_pg_error)?
        .ok_or_else(|| DbError::execution_not_found(execution_id))?;
    let json: Option<&str> = column(&row, 0)?;
    match json {
        Some(json) => from_json(json, "event"),
        None => Err(DbError::NotFound(format!(
            "event at version {version} of {execution_id}"
        ))),
    }
}

/// Executions, newest first (by creation time, then id, descending), after the cursor.
pub(crate) async fn list_executions(
    client: &impl GenericClient,
    filter: &ListExecutionsFilter,
    pagination: &Pagination,
) -> Result<Vec<ExecutionSummary>, DbError> {
    if pagination.length == 0 {
        return Ok(Vec::new());
    }
    let stmt = client
        .prepare_cached(
            "SELECT execution_id, ffqn, created_at, created_at_ns, scheduled_at, \
             scheduled_at_ns, state_json, next_version FROM t_execution \
             WHERE ($1::text IS NULL OR ffqn = $1) \
             AND ($2::int2 IS NULL OR state_kind = $2) \
             AND (NOT $3::bool OR is_top_level) \
             AND ($4::int8 IS NULL \
                  OR (created_at, created_at_ns, execution_id) < ($4::int8, $5::int2, $6::text)) \
             ORDER BY created_at DESC, created_at_ns DESC, execution_id DESC \
             LIMIT $7",
        )
        .await
        .map_err(map_pg_error)?;
    let ffqn = filter.ffqn.as_ref().map(ToString::to_string);
    let state = filter.state.map(kind_to_i16);
    let (cursor_at, cursor_ns, cursor_id) = match &pagination.cursor {
        Some((at, id)) => (Some(micros(*at)), Some(sub_micros(*at)), Some(id.as_str())),
        None => (None, None, None),
    };
    let limit = i64::try_from(pagination.length).unwrap_or(i64::MAX);
    let rows = client
        .query(
            &stmt,
            &[
                &ffqn,
                &state,
                &filter.top_level_only,
                &cursor_at,
                &cursor_ns,
                &cursor_id,
                &limit,
            ],
        )
        .await
        .map_err(map_pg_error)?;
    rows.iter()
        .map(|row| {
            let ffqn: &str = column(row, 1)?;
            Ok(ExecutionSummary {
                execution_id: parse_execution_id(column(row, 0)?)?,
                ffqn: ffqn
                    .parse()
                    .map_err(|e| corrupt(format!("ffqn `{ffqn}`: {e:?}")))?,
                created_at: timestamp(column(row, 2)?, column(row, 3)?)?,
                scheduled_at: timestamp(column(row, 4)?, column(row, 5)?)?,
                pending_state: from_json(column(row, 6)?, "pending state")?,
                next_version: Version(i64_to_u32(column(row, 7)?, "next_version")?),
            })
        })
        .collect()
}

/// The finished result, or `None` while the execution runs; `NotFound` for an unknown one.
pub(crate) async fn finished_result(
    client: &impl GenericClient,
    execution_id: &ExecutionId,
) -> Result<Option<FinishedExecutionResult>, DbError> {
    let stmt = client
        .prepare_cached(
            "SELECT ev.event_json FROM t_execution e LEFT JOIN t_event ev \
             ON ev.execution_id = e.execution_id AND ev.version = e.next_version \
             AND e.state_kind = 3 \
             WHERE e.execution_id = $1",
        )
        .await
        .map_err(map_pg_error)?;
    let row = client
        .query_opt(&stmt, &[&execution_id.as_str()])
        .await
        .map_err(map_pg_error)?
        .ok_or_else(|| DbError::execution_not_found(execution_id))?;
    let json: Option<&str> = column(&row, 0)?;
    json.map(|json| finished_result_of(execution_id, json))
        .transpose()
}
