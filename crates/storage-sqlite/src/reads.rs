//! Queries that only read: on a reader connection (inside one read transaction when they take
//! several statements, so they see one snapshot) or on the writer's, inside its transaction.

use crate::{
    codec::{self, STATE_ROW_COLUMNS, from_micros, int_to_sql, micros, parse, version_from_sql},
    error::{Result, SqliteError},
};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog, ExecutionSummary,
    ExpiredDelay, ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter,
    ListExecutionsFilter, ListTerm, LockedExecution, Pagination, PendingState, Version,
    kernel::{self, ExecutionRow, LockGrant, LogRows},
};
use rusqlite::{Connection, Params, Row, params, params_from_iter, types::Value};
use std::path::Path;

/// Every row `sql` (a cached statement) selects, decoded by `decode`.
pub(crate) fn rows<T>(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    decode: impl FnMut(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    conn.prepare_cached(sql)?
        .query_and_then(params, decode)?
        .collect()
}

pub(crate) fn execution_row(
    conn: &Connection,
    execution_id: &ExecutionId,
) -> Result<Option<ExecutionRow>> {
    let sql = format!("SELECT {STATE_ROW_COLUMNS} FROM t_execution_state WHERE execution_id = ?1");
    Ok(rows(conn, &sql, [execution_id.as_str()], codec::execution_row)?.pop())
}

fn existing_row(conn: &Connection, execution_id: &ExecutionId) -> Result<ExecutionRow> {
    let row = execution_row(conn, execution_id)?;
    row.ok_or_else(|| DbError::execution_not_found(execution_id).into())
}

/// What `read` finds, from one snapshot; `NotFound` when it finds nothing of an unknown
/// execution.
fn of_existing<T>(
    conn: &mut Connection,
    execution_id: &ExecutionId,
    read: impl FnOnce(&Connection) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let tx = conn.transaction()?;
    let found = read(&tx)?;
    let exists = "SELECT 1 FROM t_execution_state WHERE execution_id = ?1";
    if found.is_empty() && !tx.prepare_cached(exists)?.exists([execution_id.as_str()])? {
        return Err(DbError::execution_not_found(execution_id).into());
    }
    tx.finish()?;
    Ok(found)
}

/// Up to `limit` events from version `from` on.
pub(crate) fn events(
    conn: &Connection,
    execution_id: &ExecutionId,
    from: Version,
    limit: usize,
) -> Result<Vec<ExecutionEvent>> {
    let sql = "SELECT event_json FROM t_event WHERE execution_id = ?1 AND version >= ?2 \
               ORDER BY version LIMIT ?3";
    let params = params![execution_id.as_str(), i64::from(from.0), int_to_sql(limit)];
    rows(conn, sql, params, |row| {
        Ok(serde_json::from_str(&row.get::<_, String>(0)?)?)
    })
}

/// [`events`] of a known execution, from one snapshot.
pub(crate) fn list_events(
    conn: &mut Connection,
    execution_id: &ExecutionId,
    from: Version,
    limit: usize,
) -> Result<Vec<ExecutionEvent>> {
    of_existing(conn, execution_id, |tx| {
        events(tx, execution_id, from, limit)
    })
}

/// Up to `max_length` responses from index `start_idx` on, in arrival order.
pub(crate) fn responses_up_to(
    conn: &Connection,
    execution_id: &ExecutionId,
    start_idx: usize,
    max_length: usize,
) -> Result<Vec<JoinSetResponseEventOuter>> {
    let sql = "SELECT response_json FROM t_response WHERE execution_id = ?1 ORDER BY id \
               LIMIT ?3 OFFSET ?2";
    let (offset, limit) = (int_to_sql(start_idx), int_to_sql(max_length));
    rows(
        conn,
        sql,
        params![execution_id.as_str(), offset, limit],
        |row| Ok(serde_json::from_str(&row.get::<_, String>(0)?)?),
    )
}

/// The responses from index `start_idx` on, `None` while there are none, from one snapshot.
pub(crate) fn next_responses(
    conn: &mut Connection,
    execution_id: &ExecutionId,
    start_idx: usize,
) -> Result<Option<Vec<JoinSetResponseEventOuter>>> {
    let responses = of_existing(conn, execution_id, |tx| {
        responses_up_to(tx, execution_id, start_idx, usize::MAX)
    })?;
    Ok((!responses.is_empty()).then_some(responses))
}

pub(crate) fn execution_log(
    conn: &mut Connection,
    execution_id: &ExecutionId,
) -> Result<ExecutionLog> {
    let tx = conn.transaction()?;
    let row = existing_row(&tx, execution_id)?;
    let log = ExecutionLog {
        execution_id: execution_id.clone(),
        events: events(&tx, execution_id, Version(0), usize::MAX)?,
        responses: responses_up_to(&tx, execution_id, 0, usize::MAX)?,
        next_version: row.state.next_version,
        pending_state: row.state.pending_state,
    };
    tx.finish()?;
    Ok(log)
}

pub(crate) fn finished_result(
    conn: &mut Connection,
    execution_id: &ExecutionId,
) -> Result<Option<FinishedExecutionResult>> {
    let tx = conn.transaction()?;
    let pending_state = existing_row(&tx, execution_id)?.state.pending_state;
    let result = result_if_finished(&tx, execution_id, &pending_state)?;
    tx.finish()?;
    Ok(result)
}

/// The result of an execution in `pending_state`: its `Finished` event's, `None` unless it
/// finished.
pub(crate) fn result_if_finished(
    conn: &Connection,
    execution_id: &ExecutionId,
    pending_state: &PendingState,
) -> Result<Option<FinishedExecutionResult>> {
    let PendingState::Finished { version, .. } = *pending_state else {
        return Ok(None);
    };
    let sql = "SELECT event_json FROM t_event WHERE execution_id = ?1 AND version = ?2";
    let params = (execution_id.as_str(), i64::from(version.0));
    let json = rows(conn, sql, params, |row| Ok(row.get::<_, String>(0)?))?.pop();
    let held = match json.map(|json| serde_json::from_str::<ExecutionEvent>(&json)) {
        None => "no event".to_string(),
        Some(event) => match event?.event {
            ExecutionEventInner::Finished { result } => return Ok(Some(result)),
            other => format!("a {} event", other.variant_name()),
        },
    };
    Err(SqliteError::Corrupt(format!(
        "execution {execution_id} is finished at version {version}, which holds {held}"
    )))
}

/// The state rows of up to `limit` executions of `ffqns` whose `pending_at` is at or before
/// `at` (to the microsecond), oldest first, ties by execution id.
pub(crate) fn due_rows(
    conn: &Connection,
    ffqns: &[FunctionFqn],
    at: DateTime<Utc>,
    limit: usize,
) -> Result<Vec<ExecutionRow>> {
    if ffqns.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    // The partial index `ix_state_pending` serves each function; the literal
    // `state = 'PendingAt'` lets the planner use it.
    let sql = format!(
        "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state \
         WHERE state = 'PendingAt' AND ffqn IN ({}) AND pending_at <= ? \
         ORDER BY pending_at, execution_id LIMIT ?",
        vec!["?"; ffqns.len()].join(", ")
    );
    let ffqns = ffqns.iter().map(|ffqn| Value::Text(ffqn.to_string()));
    let values = ffqns.chain([micros(at).into(), int_to_sql(limit).into()]);
    rows(conn, &sql, params_from_iter(values), codec::execution_row)
}

/// The `pending_at` (to the microsecond) of the first `limit` executions of `ffqn` due at
/// `at`, oldest first: `ix_state_pending`'s range, in its order.
pub(crate) fn due_times(
    conn: &Connection,
    ffqn: &FunctionFqn,
    at: DateTime<Utc>,
    limit: usize,
) -> Result<Vec<DateTime<Utc>>> {
    let sql = "SELECT pending_at FROM t_execution_state \
               WHERE state = 'PendingAt' AND ffqn = ?1 AND pending_at <= ?2 \
               ORDER BY pending_at, execution_id LIMIT ?3";
    let values = params![ffqn.to_string(), micros(at), int_to_sql(limit)];
    rows(conn, sql, values, |row| from_micros(row.get(0)?))
}

/// True when an execution of `ffqns` is due at `at` (to the microsecond; a spurious `true`
/// only makes a waiter look again).
pub(crate) fn any_due(conn: &Connection, ffqns: &[FunctionFqn], at: DateTime<Utc>) -> Result<bool> {
    Ok(!due_rows(conn, ffqns, at, 1)?.is_empty())
}

/// Every lease and open delay that expired at or before `at`, in the kernel's order.
pub(crate) fn expired_timers(
    conn: &mut Connection,
    at: DateTime<Utc>,
) -> Result<Vec<ExpiredTimer>> {
    let tx = conn.transaction()?;
    let sql = format!(
        "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state \
         WHERE state = 'Locked' AND lock_expires_at <= ?1"
    );
    let locks = rows(&tx, &sql, [micros(at)], |row| {
        Ok(codec::execution_row(row)?
            .expired_lock_at(at)?
            .map(ExpiredTimer::Lock))
    })?;
    let mut timers: Vec<_> = locks.into_iter().flatten().collect();
    let sql = "SELECT execution_id, delay_id, join_set_id, expires_at FROM t_delay \
               WHERE is_open = 1 AND expires_at <= ?1";
    let delays = rows(&tx, sql, [micros(at)], |row| {
        Ok(ExpiredTimer::Delay(ExpiredDelay {
            execution_id: parse(&row.get::<_, String>(0)?, "execution id")?,
            join_set_id: parse(&row.get::<_, String>(2)?, "join set id")?,
            delay_id: parse(&row.get::<_, String>(1)?, "delay id")?,
            expires_at: from_micros(row.get(3)?)?,
        }))
    })?;
    tx.finish()?;
    timers.extend(delays);
    kernel::order_expired_timers(&mut timers);
    Ok(timers)
}

/// Executions newest first that pass `filter`, after the cursor: only the filters given are
/// in the statement, so that its plan reads the index they name (a state but `Finished` reads
/// `ix_state_unfinished`, whose condition the statement repeats; a parent `ix_state_parent`;
/// anything else `ix_state_created`).
pub(crate) fn list_executions(
    conn: &Connection,
    filter: &ListExecutionsFilter,
    pagination: &Pagination,
) -> Result<Vec<ExecutionSummary>> {
    let mut sql = String::from(
        "SELECT execution_id, ffqn, created_at, scheduled_at, state_json, next_version \
         FROM t_execution_state WHERE 1",
    );
    let mut values: Vec<Value> = Vec::new();
    for term in filter.terms(pagination.cursor.as_ref()) {
        let text = |text: &dyn ToString| Value::Text(text.to_string());
        let (clause, bound) = match term {
            ListTerm::Function(ffqn) => ("ffqn = ?".into(), vec![text(ffqn)]),
            // One of four literals, inlined: the planner sees the condition.
            ListTerm::State(kind) => (format!("state = '{kind}'"), vec![]),
            ListTerm::Unfinished => ("state <> 'Finished'".into(), vec![]),
            ListTerm::TopLevel => ("is_top_level = 1".into(), vec![]),
            ListTerm::Parent(parent) => ("parent_execution_id = ?".into(), vec![text(parent)]),
            ListTerm::CreatedAfter(at) => ("created_at > ?".into(), vec![micros(at).into()]),
            ListTerm::CreatedBefore(at) => ("created_at < ?".into(), vec![micros(at).into()]),
            ListTerm::IdFrom(low) => ("execution_id >= ?".into(), vec![Value::Text(low)]),
            ListTerm::IdBelow(high) => ("execution_id < ?".into(), vec![Value::Text(high)]),
            ListTerm::Before(at, id) => {
                let bound = vec![micros(at).into(), text(id)];
                ("(created_at, execution_id) < (?, ?)".into(), bound)
            }
        };
        sql.push_str(" AND ");
        sql.push_str(&clause);
        values.extend(bound);
    }
    sql.push_str(" ORDER BY created_at DESC, execution_id DESC LIMIT ?");
    values.push(Value::Integer(int_to_sql(pagination.length)));
    rows(conn, &sql, params_from_iter(values), |row| {
        Ok(ExecutionSummary {
            execution_id: parse(&row.get::<_, String>(0)?, "execution id")?,
            ffqn: parse(&row.get::<_, String>(1)?, "function name")?,
            created_at: from_micros(row.get(2)?)?,
            scheduled_at: from_micros(row.get(3)?)?,
            pending_state: serde_json::from_str(&row.get::<_, String>(4)?)?,
            next_version: version_from_sql(row.get(5)?)?,
        })
    })
}

/// At most this many rows (events and responses of every execution of one lock together) are
/// read on the writer's connection after a lock's commit, sparing the caller a round trip;
/// longer histories are read on a reader, so that they never hold up the writer thread.
pub(crate) const WRITER_HANDOVER_ROWS: usize = 32;

/// Runs on the writer thread after the lock's commit: hands over the first grants whose
/// histories fit in [`WRITER_HANDOVER_ROWS`]; returns them and the grants left to a reader (all
/// of them if a read fails, or if their events alone exceed the budget: a large batch is read
/// on a reader without the writer reading any of it), in the order the kernel granted them.
pub(crate) fn handover_on_writer(
    conn: &Connection,
    path: &Path,
    mut unread: Vec<LockGrant>,
) -> (Vec<LockedExecution>, Vec<LockGrant>) {
    let events = unread.iter().try_fold(0_usize, |sum, grant| {
        sum.checked_add(grant.events_handed_over())
    });
    if unread.is_empty() || events.is_none_or(|events| events > WRITER_HANDOVER_ROWS) {
        return (Vec::new(), unread);
    }
    match locked_executions(conn, &unread, WRITER_HANDOVER_ROWS) {
        Ok(ready) => {
            unread.drain(..ready.len());
            (ready, unread)
        }
        // The reader reads them again, and reports what is still wrong.
        Err(err) => {
            tracing::debug!(path = %path.display(), "handing a lock over on the writer: {err}");
            (Vec::new(), unread)
        }
    }
}

/// The first of `grants` handed over with their histories, as many as fit in `max_rows` rows,
/// from one snapshot: the log below a lease is append-only, so this reads what the write saw.
pub(crate) fn locked_executions(
    conn: &Connection,
    grants: &[LockGrant],
    max_rows: usize,
) -> Result<Vec<LockedExecution>> {
    let tx = conn.unchecked_transaction()?;
    let mut rows_left = max_rows;
    let mut ready = Vec::with_capacity(grants.len());
    for grant in grants {
        let execution_id = &grant.row.execution_id;
        let handed_over = grant.events_handed_over();
        let Some(room) = rows_left.checked_sub(handed_over) else {
            break;
        };
        // One more than fits tells that they do not.
        let responses = responses_up_to(&tx, execution_id, 0, room.saturating_add(1))?;
        if responses.len() > room {
            break;
        }
        rows_left = room - responses.len();
        let log = LogRows {
            events: events(&tx, execution_id, Version(0), handed_over)?,
            responses,
        };
        ready.push(kernel::hand_over(grant.clone(), log)?);
    }
    tx.finish()?;
    Ok(ready)
}
