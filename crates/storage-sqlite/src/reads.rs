//! Queries that only read. They run on a reader connection of the pool (inside one read
//! transaction when they take several statements, so they see one snapshot) or on the writer's
//! connection inside its transaction.

use crate::{
    codec::{
        self, STATE_ROW_COLUMNS, from_micros, micros, parse, version_from_sql, version_to_sql,
    },
    error::{Result, SqliteError},
};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog, ExecutionSummary,
    ExpiredDelay, ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter,
    ListExecutionsFilter, Pagination, PendingState, Version, kernel::ExecutionRow,
};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter, types::Value};

/// The state row of an execution, `None` when it does not exist.
pub(crate) fn execution_row(
    conn: &Connection,
    execution_id: &ExecutionId,
) -> Result<Option<ExecutionRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state WHERE execution_id = ?1"
    ))?;
    let mut rows = stmt.query([execution_id.as_str()])?;
    rows.next()?.map(codec::execution_row).transpose()
}

/// The state row of an execution, or `NotFound`.
fn existing_row(conn: &Connection, execution_id: &ExecutionId) -> Result<ExecutionRow> {
    execution_row(conn, execution_id)?
        .ok_or_else(|| DbError::execution_not_found(execution_id).into())
}

/// True when the execution exists.
pub(crate) fn exists(conn: &Connection, execution_id: &ExecutionId) -> Result<bool> {
    let mut stmt =
        conn.prepare_cached("SELECT 1 FROM t_execution_state WHERE execution_id = ?1")?;
    Ok(stmt.exists([execution_id.as_str()])?)
}

/// Every event of the log, in version order.
pub(crate) fn events(conn: &Connection, execution_id: &ExecutionId) -> Result<Vec<ExecutionEvent>> {
    events_since(conn, execution_id, Version(0), usize::MAX)
}

/// Up to `max_length` events from version `since` on.
pub(crate) fn events_since(
    conn: &Connection,
    execution_id: &ExecutionId,
    since: Version,
    max_length: usize,
) -> Result<Vec<ExecutionEvent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT event_json FROM t_event WHERE execution_id = ?1 AND version >= ?2 \
         ORDER BY version LIMIT ?3",
    )?;
    let limit = i64::try_from(max_length).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![execution_id.as_str(), version_to_sql(since), limit])?;
    let mut events = Vec::new();
    while let Some(row) = rows.next()? {
        let json: String = row.get(0)?;
        events.push(serde_json::from_str(&json)?);
    }
    Ok(events)
}

/// One event, or `NotFound`.
pub(crate) fn event_at(
    conn: &Connection,
    execution_id: &ExecutionId,
    version: Version,
) -> Result<ExecutionEvent> {
    let mut stmt = conn.prepare_cached(
        "SELECT event_json FROM t_event WHERE execution_id = ?1 AND version = ?2",
    )?;
    let json: Option<String> = stmt
        .query_row(
            params![execution_id.as_str(), version_to_sql(version)],
            |row| row.get(0),
        )
        .optional()?;
    match json {
        Some(json) => Ok(serde_json::from_str(&json)?),
        None if exists(conn, execution_id)? => {
            Err(DbError::NotFound(format!("event at version {version} of {execution_id}")).into())
        }
        None => Err(DbError::execution_not_found(execution_id).into()),
    }
}

/// The responses from index `start_idx` on, in arrival order.
pub(crate) fn responses_from(
    conn: &Connection,
    execution_id: &ExecutionId,
    start_idx: usize,
) -> Result<Vec<JoinSetResponseEventOuter>> {
    responses_up_to(conn, execution_id, start_idx, usize::MAX)
}

/// Up to `max_length` responses from index `start_idx` on, in arrival order.
pub(crate) fn responses_up_to(
    conn: &Connection,
    execution_id: &ExecutionId,
    start_idx: usize,
    max_length: usize,
) -> Result<Vec<JoinSetResponseEventOuter>> {
    let mut stmt = conn.prepare_cached(
        "SELECT response_json FROM t_response WHERE execution_id = ?1 ORDER BY id \
         LIMIT ?3 OFFSET ?2",
    )?;
    let offset = i64::try_from(start_idx).unwrap_or(i64::MAX);
    let limit = i64::try_from(max_length).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![execution_id.as_str(), offset, limit])?;
    let mut responses = Vec::new();
    while let Some(row) = rows.next()? {
        let json: String = row.get(0)?;
        responses.push(serde_json::from_str(&json)?);
    }
    Ok(responses)
}

/// The responses from index `start_idx` on, `None` while there are none, from one snapshot.
pub(crate) fn next_responses(
    conn: &mut Connection,
    execution_id: &ExecutionId,
    start_idx: usize,
) -> Result<Option<Vec<JoinSetResponseEventOuter>>> {
    let tx = conn.transaction()?;
    let responses = responses_from(&tx, execution_id, start_idx)?;
    if responses.is_empty() && !exists(&tx, execution_id)? {
        return Err(DbError::execution_not_found(execution_id).into());
    }
    tx.finish()?;
    Ok((!responses.is_empty()).then_some(responses))
}

/// The whole log with its state, from one snapshot.
pub(crate) fn execution_log(
    conn: &mut Connection,
    execution_id: &ExecutionId,
) -> Result<ExecutionLog> {
    let tx = conn.transaction()?;
    let row = existing_row(&tx, execution_id)?;
    let log = ExecutionLog {
        execution_id: execution_id.clone(),
        events: events(&tx, execution_id)?,
        responses: responses_from(&tx, execution_id, 0)?,
        next_version: row.state.next_version,
        pending_state: row.state.pending_state,
    };
    tx.finish()?;
    Ok(log)
}

/// The result of a finished execution, `None` while it runs.
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
    match event_at(conn, execution_id, version)?.event {
        ExecutionEventInner::Finished { result } => Ok(Some(result)),
        other => Err(SqliteError::corrupt(format!(
            "execution {execution_id} is finished at version {version}, which holds a {} event",
            other.variant_name()
        ))),
    }
}

/// `?, ?, ...` with `count` placeholders.
pub(crate) fn placeholders(count: usize) -> String {
    let mut text = String::with_capacity(count * 3);
    for idx in 0..count {
        if idx > 0 {
            text.push_str(", ");
        }
        text.push('?');
    }
    text
}

/// The state rows of up to `limit` executions of `ffqns` whose `pending_at` is at or before
/// `at` (to the microsecond), oldest first, ties by execution id.
pub(crate) fn due_rows(
    conn: &Connection,
    ffqns: &[FunctionFqn],
    at: DateTime<Utc>,
    limit: usize,
) -> Result<Vec<ExecutionRow>> {
    let mut rows = Vec::new();
    query_due(conn, STATE_ROW_COLUMNS, ffqns, at, limit, |row| {
        rows.push(codec::execution_row(row)?);
        Ok(())
    })?;
    Ok(rows)
}

/// True when an execution of `ffqns` is due at `at` (to the microsecond; a spurious `true`
/// only makes a waiter look again).
pub(crate) fn any_due(conn: &Connection, ffqns: &[FunctionFqn], at: DateTime<Utc>) -> Result<bool> {
    let mut found = false;
    query_due(conn, "1", ffqns, at, 1, |_| {
        found = true;
        Ok(())
    })?;
    Ok(found)
}

fn query_due(
    conn: &Connection,
    columns: &str,
    ffqns: &[FunctionFqn],
    at: DateTime<Utc>,
    limit: usize,
    mut each: impl FnMut(&rusqlite::Row<'_>) -> Result<()>,
) -> Result<()> {
    if ffqns.is_empty() || limit == 0 {
        return Ok(());
    }
    // The partial index `ix_state_pending` serves each function; the literal
    // `state = 'PendingAt'` lets the planner use it.
    let sql = format!(
        "SELECT {columns} FROM t_execution_state \
         WHERE state = 'PendingAt' AND ffqn IN ({}) AND pending_at <= ? \
         ORDER BY pending_at, execution_id LIMIT ?",
        placeholders(ffqns.len())
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut values: Vec<Value> = ffqns.iter().map(|f| Value::Text(f.to_string())).collect();
    values.push(Value::Integer(micros(at)));
    values.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    let mut rows = stmt.query(params_from_iter(values))?;
    while let Some(row) = rows.next()? {
        each(row)?;
    }
    Ok(())
}

/// Every lease and open delay that expired at or before `at`, ordered by expiry, then
/// execution id, then leases before delays (by delay id).
pub(crate) fn expired_timers(
    conn: &mut Connection,
    at: DateTime<Utc>,
) -> Result<Vec<ExpiredTimer>> {
    let tx = conn.transaction()?;
    let mut timers = Vec::new();
    {
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state \
             WHERE state = 'Locked' AND lock_expires_at <= ?1"
        ))?;
        let mut rows = stmt.query([micros(at)])?;
        while let Some(row) = rows.next()? {
            if let Some(lock) = codec::execution_row(row)?.expired_lock_at(at)? {
                timers.push(ExpiredTimer::Lock(lock));
            }
        }
    }
    {
        let mut stmt = tx.prepare_cached(
            "SELECT execution_id, delay_id, join_set_id, expires_at FROM t_delay \
             WHERE is_open = 1 AND expires_at <= ?1",
        )?;
        let mut rows = stmt.query([micros(at)])?;
        while let Some(row) = rows.next()? {
            timers.push(ExpiredTimer::Delay(ExpiredDelay {
                execution_id: parse(&row.get::<_, String>(0)?, "execution id")?,
                join_set_id: parse(&row.get::<_, String>(2)?, "join set id")?,
                delay_id: parse(&row.get::<_, String>(1)?, "delay id")?,
                expires_at: from_micros(row.get(3)?)?,
            }));
        }
    }
    tx.finish()?;
    concepts::kernel::order_expired_timers(&mut timers);
    Ok(timers)
}

/// Executions newest first, filtered, after the cursor.
pub(crate) fn list_executions(
    conn: &Connection,
    filter: &ListExecutionsFilter,
    pagination: &Pagination,
) -> Result<Vec<ExecutionSummary>> {
    let mut stmt = conn.prepare_cached(
        "SELECT execution_id, ffqn, created_at, scheduled_at, state_json, next_version \
         FROM t_execution_state \
         WHERE (?1 IS NULL OR ffqn = ?1) AND (?2 IS NULL OR state = ?2) \
           AND (?3 = 0 OR is_top_level = 1) \
           AND (?4 IS NULL OR created_at < ?4 OR (created_at = ?4 AND execution_id < ?5)) \
         ORDER BY created_at DESC, execution_id DESC LIMIT ?6",
    )?;
    let (cursor_at, cursor_id) = match &pagination.cursor {
        Some((at, id)) => (Some(micros(*at)), Some(id.to_string())),
        None => (None, None),
    };
    let mut rows = stmt.query(params![
        filter.ffqn.as_ref().map(ToString::to_string),
        filter.state.map(codec::state_kind),
        filter.top_level_only,
        cursor_at,
        cursor_id,
        i64::try_from(pagination.length).unwrap_or(i64::MAX),
    ])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let state_json: String = row.get(4)?;
        out.push(ExecutionSummary {
            execution_id: parse(&row.get::<_, String>(0)?, "execution id")?,
            ffqn: parse(&row.get::<_, String>(1)?, "function name")?,
            created_at: from_micros(row.get(2)?)?,
            scheduled_at: from_micros(row.get(3)?)?,
            pending_state: serde_json::from_str(&state_json)?,
            next_version: version_from_sql(row.get(5)?)?,
        });
    }
    Ok(out)
}
