//! The read half of a write: the rows its [`Keys`] name, loaded into a [`Snapshot`] under row
//! locks. Every load a write needs goes out in one pipeline behind its `BEGIN`; only
//! `lock_pending` needs a second one, for the logs of what it found.

use crate::{
    codec::{
        column, count_to_i64, execution_columns, execution_row, from_json, i64_to_count, micros,
    },
    error::{corrupt, map_pg_error},
};
use concepts::{
    DbError, JoinSetResponseEventOuter,
    kernel::{DelayRow, JoinSetCounters, JoinSetRow, Keys, LogRows, Snapshot},
};
use deadpool_postgres::ClientWrapper;
use std::collections::HashMap;
use tokio_postgres::{Row, Statement, types::ToSql};

/// Due executions, oldest first; rows another transaction holds are skipped, so that two
/// executors never wait for, nor lock, the same execution.
const SELECT_DUE: &str = concat!(
    "SELECT ",
    execution_columns!(),
    " FROM t_execution WHERE pending_at IS NOT NULL AND pending_at <= $1 AND ffqn = ANY($2) \
     ORDER BY pending_at, execution_id LIMIT $3 FOR UPDATE SKIP LOCKED"
);

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

const SELECT_LOG_EVENTS: &str = "SELECT execution_id, event_json FROM t_event \
    WHERE execution_id = ANY($1) ORDER BY execution_id, version";

const SELECT_LOG_RESPONSES: &str = "SELECT execution_id, response_json FROM t_response \
    WHERE execution_id = ANY($1) ORDER BY execution_id, idx";

/// Begins the write transaction and loads what `keys` name, in one pipeline. A key that
/// names nothing costs no statement.
pub(crate) async fn begin_and_load(
    client: &ClientWrapper,
    keys: &Keys,
) -> Result<Snapshot, DbError> {
    let locked_ids: Vec<&str> = keys
        .executions
        .iter()
        .chain(&keys.new_executions)
        .map(|id| id.as_str())
        .collect();
    let [due, executions, join_sets, delays, children] = prepare(
        client,
        [
            keys.due.is_some().then_some(SELECT_DUE),
            (!locked_ids.is_empty()).then_some(LOCK_EXECUTIONS),
            (!keys.join_sets.is_empty()).then_some(SELECT_JOIN_SETS),
            (!keys.delays.is_empty()).then_some(SELECT_DELAYS),
            (!keys.child_responses.is_empty()).then_some(SELECT_CHILD_RESPONSES),
        ],
    )
    .await?;

    let (due_at, due_ffqns, due_limit) = match &keys.due {
        Some(due) => (
            micros(due.pending_at_or_sooner),
            due.ffqns.iter().map(ToString::to_string).collect(),
            i64::try_from(due.limit).unwrap_or(i64::MAX),
        ),
        None => (0, Vec::new(), 0),
    };
    let join_set_ids: Vec<&str> = keys
        .join_sets
        .iter()
        .map(|k| k.execution_id.as_str())
        .collect();
    let join_set_names: Vec<String> = keys
        .join_sets
        .iter()
        .map(|k| k.join_set_id.to_string())
        .collect();
    let join_set_next: Vec<i64> = keys
        .join_sets
        .iter()
        .map(|k| count_to_i64(u64::try_from(k.next_responses).unwrap_or(u64::MAX)))
        .collect();
    let delay_ids: Vec<&str> = keys.delays.iter().map(|(id, _)| id.as_str()).collect();
    let delay_names: Vec<String> = keys.delays.iter().map(|(_, d)| d.to_string()).collect();
    let parent_ids: Vec<&str> = keys
        .child_responses
        .iter()
        .map(|(id, _)| id.as_str())
        .collect();
    let child_ids: Vec<&str> = keys
        .child_responses
        .iter()
        .map(|(_, child)| child.as_str())
        .collect();

    let (begin, due, executions, join_sets, delays, children) = tokio::join!(
        biased;
        client.batch_execute("BEGIN"),
        query(client, due, [&due_at, &due_ffqns, &due_limit]),
        query(client, executions, [&locked_ids]),
        query(client, join_sets, [&join_set_ids, &join_set_names, &join_set_next]),
        query(client, delays, [&delay_ids, &delay_names]),
        query(client, children, [&parent_ids, &child_ids]),
    );
    // After a failed statement every later one of the pipeline fails with "current
    // transaction is aborted": the first error in statement order is the one that says why.
    begin.map_err(map_pg_error)?;
    let due = due.map_err(map_pg_error)?;
    let executions = executions.map_err(map_pg_error)?;
    let join_sets = join_sets.map_err(map_pg_error)?;
    let delays = delays.map_err(map_pg_error)?;
    let children = children.map_err(map_pg_error)?;

    let mut snapshot = Snapshot::default();
    for row in &executions {
        snapshot.add_execution(execution_row(row)?);
    }
    for row in &join_sets {
        let key = &keys.join_sets[ordinal(row, keys.join_sets.len())?];
        let responses: Vec<&str> = column(row, 3)?;
        snapshot.join_sets.insert(
            (key.execution_id.clone(), key.join_set_id.clone()),
            JoinSetRow {
                counters: JoinSetCounters {
                    join_next_count: i64_to_count(column(row, 1)?, "join_next_count")?,
                    response_count: i64_to_count(column(row, 2)?, "response_count")?,
                },
                next_response_times: responses
                    .into_iter()
                    .map(|json| {
                        from_json::<JoinSetResponseEventOuter>(json, "response")
                            .map(|r| r.created_at)
                    })
                    .collect::<Result<_, _>>()?,
            },
        );
    }
    for row in &delays {
        let (requested, answered) = (column(row, 1)?, column(row, 2)?);
        if requested || answered {
            let key = keys.delays[ordinal(row, keys.delays.len())?].clone();
            snapshot.delays.insert(
                key,
                DelayRow {
                    requested,
                    answered,
                },
            );
        }
    }
    for row in &children {
        let key = keys.child_responses[ordinal(row, keys.child_responses.len())?].clone();
        snapshot.child_responses.insert(key);
    }
    if !due.is_empty() {
        load_due(client, &due, &mut snapshot).await?;
    }
    Ok(snapshot)
}

/// Adds the due executions `rows` with their logs, oldest first: SQL ordered them by
/// microseconds, the exact due time (then the id) decides.
async fn load_due(
    client: &ClientWrapper,
    rows: &[Row],
    snapshot: &mut Snapshot,
) -> Result<(), DbError> {
    let mut due = rows
        .iter()
        .map(execution_row)
        .collect::<Result<Vec<_>, _>>()?;
    due.sort_by(|a, b| {
        let at = |row: &concepts::kernel::ExecutionRow| row.state.pending_state.pending_at();
        (at(a), &a.execution_id).cmp(&(at(b), &b.execution_id))
    });
    let ids: Vec<&str> = due.iter().map(|row| row.execution_id.as_str()).collect();
    let [events_stmt, responses_stmt] = prepare(
        client,
        [Some(SELECT_LOG_EVENTS), Some(SELECT_LOG_RESPONSES)],
    )
    .await?;
    let (events, responses) = tokio::join!(
        biased;
        query(client, events_stmt, [&ids]),
        query(client, responses_stmt, [&ids]),
    );
    let events = events.map_err(map_pg_error)?;
    let responses = responses.map_err(map_pg_error)?;
    let position: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut logs: Vec<LogRows> = ids
        .iter()
        .map(|_| LogRows {
            events: Vec::new(),
            responses: Vec::new(),
        })
        .collect();
    for row in &events {
        if let Some(i) = position.get(column::<&str>(row, 0)?) {
            logs[*i].events.push(from_json(column(row, 1)?, "event")?);
        }
    }
    for row in &responses {
        if let Some(i) = position.get(column::<&str>(row, 0)?) {
            logs[*i]
                .responses
                .push(from_json(column(row, 1)?, "response")?);
        }
    }
    for (row, log) in due.into_iter().zip(logs) {
        snapshot.add_due(row, log);
    }
    Ok(())
}

/// The statements of `sql`, prepared once per connection.
pub(crate) async fn prepare<const N: usize>(
    client: &ClientWrapper,
    sql: [Option<&str>; N],
) -> Result<[Option<Statement>; N], DbError> {
    let mut statements = [const { None }; N];
    for (slot, sql) in statements.iter_mut().zip(sql) {
        if let Some(sql) = sql {
            *slot = Some(client.prepare_cached(sql).await.map_err(map_pg_error)?);
        }
    }
    Ok(statements)
}

/// Runs a prepared statement, or nothing when there is none.
async fn query<const N: usize>(
    client: &ClientWrapper,
    statement: Option<Statement>,
    params: [&(dyn ToSql + Sync); N],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    match statement {
        Some(statement) => client.query(&statement, &params).await,
        None => Ok(Vec::new()),
    }
}

/// The 0-based position among `len` keys of the key a row answers (its `WITH ORDINALITY`).
fn ordinal(row: &Row, len: usize) -> Result<usize, DbError> {
    let ordinal: i64 = column(row, 0)?;
    usize::try_from(ordinal - 1)
        .ok()
        .filter(|idx| *idx < len)
        .ok_or_else(|| corrupt(format!("ordinal {ordinal} of {len} keys")))
}
