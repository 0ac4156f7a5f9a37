//! Queries that only read, shared by the store's reads (`pool.rs`), the writer's loads and the
//! hand-over of a lock, on a reader connection or on the writer's, inside its transaction.

use crate::{
    codec::{self, STATE_ROW_COLUMNS, json},
    error::Result,
    writer::AfterCommit,
};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionId, FinishedExecutionResult, FunctionFqn,
    JoinSetResponseEventOuter, ListExecutionsFilter, ListTerm, LockedExecution, Pagination,
    Version,
    kernel::{
        self, ExecutionRow, LockGrant, LogRows,
        stored::{self, corrupt, micros, to_i64},
    },
};
use rusqlite::{Connection, Params, Row, params, params_from_iter, types::Value};

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

/// What `read` finds, from one snapshot; `NotFound` when it finds nothing of an unknown
/// execution.
pub(crate) fn of_existing<T>(
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
    let params = params![execution_id.as_str(), i64::from(from.0), to_i64(limit)];
    rows(conn, sql, params, |row| json(row, 0))
}

/// Up to `max_length` responses from index `start_idx` on, in arrival order.
pub(crate) fn responses_up_to(
    conn: &Connection,
    execution_id: &ExecutionId,
    start_idx: usize,
    max_length: usize,
) -> Result<Vec<JoinSetResponseEventOuter>> {
    let sql = "SELECT response_json FROM t_response WHERE execution_id = ?1 AND idx >= ?2 \
               ORDER BY idx LIMIT ?3";
    let params = params![execution_id.as_str(), to_i64(start_idx), to_i64(max_length)];
    rows(conn, sql, params, |row| json(row, 0))
}

/// The result of `execution_id` if it finished: its `Finished` event, stored at the version the
/// row keeps as its next one; `NotFound` for an unknown execution.
pub(crate) fn finished_result(
    conn: &Connection,
    execution_id: &ExecutionId,
) -> Result<Option<FinishedExecutionResult>> {
    let sql = "SELECT e.state = 'Finished', ev.event_json FROM t_execution_state AS e \
               LEFT JOIN t_event AS ev ON ev.execution_id = e.execution_id \
               AND ev.version = e.next_version AND e.state = 'Finished' WHERE e.execution_id = ?1";
    let mut found = rows(conn, sql, [execution_id.as_str()], |row| {
        Ok((row.get::<_, bool>(0)?, row.get::<_, Option<String>>(1)?))
    })?;
    match found.pop() {
        None => Err(DbError::execution_not_found(execution_id).into()),
        Some((false, _)) => Ok(None),
        Some((true, Some(json))) => Ok(Some(stored::finished_result(execution_id, &json)?)),
        Some((true, None)) => {
            let message = format!("{execution_id} is finished without an event at its version");
            Err(corrupt(message).into())
        }
    }
}

/// The `columns` of the state rows of up to `limit` executions of `ffqns` whose `pending_at` is
/// at or before `at` (to the microsecond), oldest first, ties by execution id, as `decode` reads them.
pub(crate) fn due<T>(
    conn: &Connection,
    columns: &str,
    (ffqns, at, limit): (&[FunctionFqn], DateTime<Utc>, usize),
    decode: impl FnMut(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    if ffqns.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    // The partial index `ix_state_pending` serves each function; the literal
    // `state = 'PendingAt'` lets the planner use it.
    let sql = format!(
        "SELECT {columns} FROM t_execution_state \
         WHERE state = 'PendingAt' AND ffqn IN ({}) AND pending_at <= ? \
         ORDER BY pending_at, execution_id LIMIT ?",
        vec!["?"; ffqns.len()].join(", ")
    );
    let ffqns = ffqns.iter().map(|ffqn| Value::Text(ffqn.to_string()));
    let values = ffqns.chain([micros(at).into(), to_i64(limit).into()]);
    rows(conn, &sql, params_from_iter(values), decode)
}

/// The statement of a listing and its values: only the filters given are in it, so that its
/// plan reads the index they name (a state but `Finished` reads `ix_state_unfinished`, whose
/// condition the statement repeats, and filters its range by state; a parent
/// `ix_state_parent`; an id prefix its range of the primary key; anything else
/// `ix_state_created`).
pub(crate) fn listing(
    filter: &ListExecutionsFilter,
    pagination: &Pagination,
) -> (String, Vec<Value>) {
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
            ListTerm::Unfinished => ("finished_at IS NULL".into(), vec![]),
            ListTerm::TopLevel => ("is_top_level = 1".into(), vec![]),
            ListTerm::Parent(parent) => ("parent_execution_id = ?".into(), vec![text(parent)]),
            ListTerm::CreatedAfter(at) => ("created_at > ?".into(), vec![micros(at).into()]),
            ListTerm::CreatedBefore(at) => ("created_at < ?".into(), vec![micros(at).into()]),
            ListTerm::PendingFrom(at) => ("pending_at >= ?".into(), vec![micros(at).into()]),
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
    values.push(Value::Integer(to_i64(pagination.length)));
    (sql, values)
}

/// At most this many rows (events and responses of every execution of one lock together) are
/// read on the writer's connection after a lock's commit, sparing the caller a round trip;
/// longer histories are read on a reader, so that they never hold up the writer thread.
pub(crate) const WRITER_HANDOVER_ROWS: usize = 32;

/// Runs on the writer thread after the lock's commit: hands over the first grants whose
/// `Created` event the writer kept, then those whose histories fit in
/// [`WRITER_HANDOVER_ROWS`]; returns them and the grants left to a reader (all of them if a
/// read fails, or if their rows together exceed the budget: a large batch is read on a reader
/// without the writer reading any of it), in the order the kernel granted them.
pub(crate) fn handover_on_writer(
    at: &AfterCommit<'_>,
    mut unread: Vec<LockGrant>,
) -> (Vec<LockedExecution>, Vec<LockGrant>) {
    let mut ready = at.created.hand_over_leading(&mut unread);
    let rows = unread.iter().try_fold(0_usize, |sum, grant| {
        sum.checked_add(grant.events_handed_over())?
            .checked_add(grant.responses_handed_over())
    });
    if unread.is_empty() || rows.is_none_or(|rows| rows > WRITER_HANDOVER_ROWS) {
        return (ready, unread);
    }
    match locked_executions(at.conn, &unread, WRITER_HANDOVER_ROWS) {
        Ok(read) => {
            unread.drain(..read.len());
            ready.extend(read);
        }
        // The reader reads them again, and reports what is still wrong.
        Err(err) => {
            let path = at.path.display();
            tracing::debug!(path = %path, "handing a lock over on the writer: {err}");
        }
    }
    (ready, unread)
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
        let (handed_over, answered) = (grant.events_handed_over(), grant.responses_handed_over());
        let Some(left) = rows_left.checked_sub(handed_over.saturating_add(answered)) else {
            break;
        };
        rows_left = left;
        let responses = match answered {
            0 => Vec::new(),
            _ => responses_up_to(&tx, execution_id, 0, answered)?,
        };
        let log = LogRows {
            events: events(&tx, execution_id, Version(0), handed_over)?,
            responses,
        };
        ready.push(kernel::hand_over(grant.clone(), log)?);
    }
    tx.finish()?;
    Ok(ready)
}
