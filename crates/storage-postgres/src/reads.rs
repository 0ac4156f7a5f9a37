//! The read paths: logs, states, listings, expired timers, and the checks of the waits.

use crate::{
    codec::{
        column, count_to_i64, execution_columns, execution_row, finished_result_of, from_json,
        i64_to_u32, kind_to_i16, micros, parse_execution_id, parse_join_set_id, sub_micros,
        timestamp, version_to_i64,
    },
    error::corrupt,
    load::ordinal,
    pipeline::{self, Param, Statement, statement, unnest},
};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, DelayId, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredDelay,
    ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter,
    ListExecutionsFilter, ListTerm, LockedExecution, Pagination, PendingStateKind, Version,
    kernel::{self, LockGrant, LogRows},
};
use deadpool_postgres::ClientWrapper;
use tokio_postgres::Row;

const SELECT_EXISTS: &str = "SELECT 1 FROM t_execution WHERE execution_id = $1";
const SELECT_STATE: &str =
    "SELECT next_version, state_json FROM t_execution WHERE execution_id = $1";
const SELECT_EVENTS: &str =
    "SELECT event_json FROM t_event WHERE execution_id = $1 ORDER BY version";
const SELECT_RESPONSES: &str =
    "SELECT response_json FROM t_response WHERE execution_id = $1 ORDER BY idx";
const SELECT_RESPONSES_FROM: &str =
    "SELECT response_json FROM t_response WHERE execution_id = $1 AND idx >= $2 ORDER BY idx";

/// The `Finished` event of execution `$1`, stored at its next version; no row when the
/// execution does not exist.
const SELECT_FINISHED_EVENT: &str = "SELECT ev.event_json FROM t_execution e \
    LEFT JOIN t_event ev ON ev.execution_id = e.execution_id AND ev.version = e.next_version \
    AND e.state_kind = 3 WHERE e.execution_id = $1";

const SELECT_EXPIRED_LOCKS: &str = concat!(
    "SELECT ",
    execution_columns!(),
    " FROM t_execution WHERE lock_expires_at IS NOT NULL AND lock_expires_at <= $1"
);

const SELECT_EXPIRED_DELAYS: &str = "SELECT execution_id, delay_id, join_set_id, expires_at, \
    expires_at_ns FROM t_delay WHERE is_open AND expires_at <= $1";

/// The columns of a listing; its conditions follow, one per filter given
/// ([`listing`]), then `ORDER BY created_at DESC, created_at_ns DESC, execution_id DESC`.
const LIST_EXECUTIONS: &str = "SELECT execution_id, ffqn, created_at, created_at_ns, \
    scheduled_at, scheduled_at_ns, state_json, next_version FROM t_execution WHERE true";

/// Up to `$3` events of execution `$1` from version `$2` on; the first column says whether
/// the execution exists (one row with `NULL` events when it has none from `$2`).
pub(crate) const LIST_EVENTS: &str = "SELECT true, ev.event_json FROM t_execution e \
    LEFT JOIN LATERAL (SELECT event_json FROM t_event WHERE execution_id = e.execution_id \
    AND version >= $2 ORDER BY version LIMIT $3) AS ev ON true WHERE e.execution_id = $1";

fn event_of(row: &Row, idx: usize) -> Result<ExecutionEvent, DbError> {
    from_json(column(row, idx)?, "event")
}

fn response_of(row: &Row, idx: usize) -> Result<JoinSetResponseEventOuter, DbError> {
    from_json(column(row, idx)?, "response")
}

/// The events below each locked version `$2` of execution `$1`, with the ordinal of their
/// execution and their version: one index range per execution, since `OFFSET 0` keeps the
/// planner from making the `LATERAL` subquery a join, which without statistics (or with a plan
/// cached while the table was small) it planned as a scan of the whole table.
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

/// The executions `lock_pending` locked, with their histories, read after the `COMMIT` so that
/// its row locks never wait for a long log (the log below a lease is append-only).
pub(crate) async fn locked_executions(
    client: &ClientWrapper,
    grants: Vec<LockGrant>,
) -> Result<Vec<LockedExecution>, DbError> {
    let count = grants.len();
    let (Some(events), Some(responses)) = (
        unnest!(SELECT_LOCKED_EVENTS, &grants, |grant| {
            ids: &str = grant.row.execution_id.as_str(),
            below: i64 = count_to_i64(u64::try_from(grant.events_handed_over()).unwrap_or(u64::MAX)),
        }),
        unnest!(SELECT_LOCKED_RESPONSES, &grants, |grant| {
            ids: &str = grant.row.execution_id.as_str(),
        }),
    ) else {
        return Ok(Vec::new());
    };
    let [events, responses] = all(client, false, [events, responses]).await?;
    let events = by_ordinal(&events, count, |row| {
        Ok((column(row, 1)?, event_of(row, 2)?))
    })?;
    let responses = by_ordinal(&responses, count, |row| {
        Ok((column(row, 1)?, response_of(row, 2)?))
    })?;
    (grants.into_iter().zip(events.into_iter().zip(responses)))
        .map(|(grant, (events, responses))| kernel::hand_over(grant, LogRows { events, responses }))
        .collect()
}

/// The values of `rows` per key (the ordinal in column 0), each key's in the order of its
/// column 1 (the version, the index): each scan returns its rows in index order, which SQL does
/// not promise, and sorting what is sorted costs one pass.
fn by_ordinal<T>(
    rows: &[Row],
    count: usize,
    value: impl Fn(&Row) -> Result<(i64, T), DbError>,
) -> Result<Vec<Vec<T>>, DbError> {
    let mut of: Vec<Vec<(i64, T)>> = (0..count).map(|_| Vec::new()).collect();
    for row in rows {
        of[ordinal(row, 0, count)?].push(value(row)?);
    }
    Ok((of.into_iter())
        .map(|mut values| {
            values.sort_by_key(|(order, _)| *order);
            values.into_iter().map(|(_, value)| value).collect()
        })
        .collect())
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
    client: &ClientWrapper,
    at: DateTime<Utc>,
    ffqns: &[FunctionFqn],
) -> Result<bool, DbError> {
    let names: Vec<String> = ffqns.iter().map(ToString::to_string).collect();
    let rows = one(client, ANY_DUE, vec![Box::new(micros(at)), Box::new(names)]).await?;
    rows.first().map_or(Ok(false), |row| column(row, 0))
}

/// The `pending_at` (to the microsecond) of the first `limit` executions of `ffqn` due at
/// `at`, oldest first: the partial index on `(ffqn, pending_at, execution_id)`, in its order.
pub(crate) async fn due_times(
    client: &ClientWrapper,
    ffqn: &FunctionFqn,
    at: DateTime<Utc>,
    limit: usize,
) -> Result<Vec<DateTime<Utc>>, DbError> {
    const DUE_TIMES: &str = "SELECT pending_at FROM t_execution WHERE ffqn = $1 \
        AND pending_at IS NOT NULL AND pending_at <= $2 ORDER BY pending_at, execution_id LIMIT $3";
    let limit = count_to_i64(u64::try_from(limit).unwrap_or(u64::MAX));
    let params = vec![
        Box::new(ffqn.to_string()) as Param<'_>,
        Box::new(micros(at)),
        Box::new(limit),
    ];
    let rows = one(client, DUE_TIMES, params).await?;
    rows.iter()
        .map(|row| timestamp(column(row, 0)?, 0))
        .collect()
}

/// Responses of an execution from `start_idx` on; `NotFound` for an unknown execution.
pub(crate) async fn responses_from(
    client: &ClientWrapper,
    execution_id: &ExecutionId,
    start_idx: usize,
) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
    let id = || Box::new(execution_id.as_str());
    let start = count_to_i64(u64::try_from(start_idx).unwrap_or(u64::MAX));
    let statements = [
        statement(SELECT_EXISTS, vec![id()]),
        statement(SELECT_RESPONSES_FROM, vec![id(), Box::new(start)]),
    ];
    let [exists, responses] = all(client, false, statements).await?;
    if exists.is_empty() {
        return Err(DbError::execution_not_found(execution_id));
    }
    responses.iter().map(|row| response_of(row, 0)).collect()
}

/// Every lease with `lock_expires_at <= at` and every open delay with `expires_at <= at`,
/// ordered by expiry, then execution id, then leases before delays (by delay id).
pub(crate) async fn expired_timers(
    client: &ClientWrapper,
    at: DateTime<Utc>,
) -> Result<Vec<ExpiredTimer>, DbError> {
    let statements = [
        statement(SELECT_EXPIRED_LOCKS, vec![Box::new(micros(at))]),
        statement(SELECT_EXPIRED_DELAYS, vec![Box::new(micros(at))]),
    ];
    let [locks, delays] = all(client, false, statements).await?;
    let mut timers = Vec::new();
    for row in &locks {
        if let Some(lock) = execution_row(row)?.expired_lock_at(at)? {
            timers.push(ExpiredTimer::Lock(lock));
        }
    }
    for row in &delays {
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
    client: &ClientWrapper,
    execution_id: &ExecutionId,
) -> Result<ExecutionLog, DbError> {
    let id = || Box::new(execution_id.as_str());
    let statements = [
        statement(SELECT_STATE, vec![id()]),
        statement(SELECT_EVENTS, vec![id()]),
        statement(SELECT_RESPONSES, vec![id()]),
    ];
    let [state, events, responses] = all(client, true, statements).await?;
    let state = state
        .first()
        .ok_or_else(|| DbError::execution_not_found(execution_id))?;
    Ok(ExecutionLog {
        execution_id: execution_id.clone(),
        events: (events.iter().map(|row| event_of(row, 0))).collect::<Result<_, _>>()?,
        responses: (responses.iter().map(|row| response_of(row, 0))).collect::<Result<_, _>>()?,
        next_version: Version(i64_to_u32(column(state, 0)?, "next_version")?),
        pending_state: from_json(column(state, 1)?, "pending state")?,
    })
}

/// Up to `limit` events from version `from` on, in version order; `NotFound` for an unknown
/// execution.
pub(crate) async fn list_events(
    client: &ClientWrapper,
    execution_id: &ExecutionId,
    from: Version,
    limit: usize,
) -> Result<Vec<ExecutionEvent>, DbError> {
    let params: Vec<Param<'_>> = vec![
        Box::new(execution_id.as_str()),
        Box::new(version_to_i64(from)),
        Box::new(limit_param(limit)),
    ];
    let rows = one(client, LIST_EVENTS, params).await?;
    if rows.is_empty() {
        return Err(DbError::execution_not_found(execution_id));
    }
    (rows.iter())
        .filter_map(|row| column::<Option<&str>>(row, 1).transpose())
        .map(|json| from_json(json?, "event"))
        .collect()
}

/// Executions newest first that pass `filter`, after the cursor.
pub(crate) async fn list_executions(
    client: &ClientWrapper,
    filter: &ListExecutionsFilter,
    pagination: &Pagination,
) -> Result<Vec<ExecutionSummary>, DbError> {
    if pagination.length == 0 {
        return Ok(Vec::new());
    }
    let (sql, params) = listing(filter, pagination);
    let rows = one(client, sql, params).await?;
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

/// The statement of a listing: only the filters given are in it, so that its plan reads the
/// index they name (a state but `Finished` the partial index of unfinished executions, whose
/// condition the statement repeats with the kind as a literal; a parent the index of children;
/// anything else the creation index, newest first).
pub(crate) fn listing<'a>(
    filter: &'a ListExecutionsFilter,
    pagination: &'a Pagination,
) -> (String, Vec<Param<'a>>) {
    let mut sql = String::from(LIST_EXECUTIONS);
    let mut params: Vec<Param<'a>> = Vec::new();
    let mut term = |clause: &str, bound: Vec<Param<'a>>| {
        let mut clause = clause.to_owned();
        for param in bound {
            params.push(param);
            clause = clause.replacen('?', &format!("${}", params.len()), 1);
        }
        sql.push_str(" AND ");
        sql.push_str(&clause);
    };
    let at = |at: DateTime<Utc>| -> Vec<Param<'a>> {
        vec![Box::new(micros(at)), Box::new(sub_micros(at))]
    };
    for list_term in filter.terms(pagination.cursor.as_ref()) {
        match list_term {
            ListTerm::Function(ffqn) => term("ffqn = ?", vec![Box::new(ffqn.to_string())]),
            ListTerm::State(kind) => term(&format!("state_kind = {}", kind_to_i16(kind)), vec![]),
            ListTerm::Unfinished => {
                let finished = kind_to_i16(PendingStateKind::Finished);
                term(&format!("state_kind <> {finished}"), vec![]);
            }
            ListTerm::TopLevel => term("is_top_level", vec![]),
            ListTerm::Parent(parent) => {
                term("parent_execution_id = ?", vec![Box::new(parent.as_str())])
            }
            ListTerm::CreatedAfter(after) => {
                term("(created_at, created_at_ns) > (?, ?)", at(after))
            }
            ListTerm::CreatedBefore(before) => {
                term("(created_at, created_at_ns) < (?, ?)", at(before))
            }
            ListTerm::IdFrom(low) => term("execution_id >= ?", vec![Box::new(low)]),
            ListTerm::IdBelow(high) => term("execution_id < ?", vec![Box::new(high)]),
            ListTerm::Before(cursor_at, id) => {
                let mut bound = at(cursor_at);
                bound.push(Box::new(id.as_str()));
                term(
                    "(created_at, created_at_ns, execution_id) < (?, ?, ?)",
                    bound,
                );
            }
        }
    }
    params.push(Box::new(limit_param(pagination.length)));
    sql.push_str(&format!(
        " ORDER BY created_at DESC, created_at_ns DESC, execution_id DESC LIMIT ${}",
        params.len()
    ));
    (sql, params)
}

/// A `LIMIT` parameter.
fn limit_param(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The finished result, or `None` while the execution runs; `NotFound` for an unknown one.
pub(crate) async fn finished_result(
    client: &ClientWrapper,
    execution_id: &ExecutionId,
) -> Result<Option<FinishedExecutionResult>, DbError> {
    let rows = one(
        client,
        SELECT_FINISHED_EVENT,
        vec![Box::new(execution_id.as_str())],
    )
    .await?;
    let row = rows
        .first()
        .ok_or_else(|| DbError::execution_not_found(execution_id))?;
    (column::<Option<&str>>(row, 0)?)
        .map(|json| finished_result_of(execution_id, json))
        .transpose()
}

/// The rows of one statement.
async fn one(
    client: &ClientWrapper,
    sql: impl Into<std::borrow::Cow<'static, str>>,
    params: Vec<Param<'_>>,
) -> Result<Vec<Row>, DbError> {
    let [rows] = all(client, false, [statement(sql, params)]).await?;
    Ok(rows)
}

/// The rows of each of `statements`, sent in one pipeline (reading one snapshot when
/// `snapshot`).
async fn all<const N: usize>(
    client: &ClientWrapper,
    snapshot: bool,
    statements: [Statement<'_>; N],
) -> Result<[Vec<Row>; N], DbError> {
    let rows = pipeline::query_all(client, snapshot, &statements).await?;
    <[Vec<Row>; N]>::try_from(rows)
        .map_err(|rows| corrupt(format!("{} answers to {N} statements", rows.len())))
}
