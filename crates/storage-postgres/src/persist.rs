//! The write half of a write: a [`WritePlan`]'s changes (or those of a group of plans) as a
//! handful of multi-row statements (`UNNEST` arrays, one statement per table and kind of
//! change) over statements prepared once per connection, the executions `prune` deletes in
//! one more, then `COMMIT`, the notifications and what the write reads after its commit, all
//! in one pipeline: one round trip.

use crate::{
    codec::{
        count_to_i64, duration_to_nanos, finished_columns, micros, state_columns, sub_micros,
        to_json, version_to_i64,
    },
    error::map_pg_error,
    load::{self, prepare},
    trips::Trips,
};
use concepts::{
    DbError, ExecutionEventInner, ExecutionId, JoinSetResponse,
    kernel::{ExecutionChange, ExecutionRow, Revision, WritePlan},
};
use deadpool_postgres::ClientWrapper;
use tokio_postgres::{Statement, types::ToSql};

const INSERT_EXECUTIONS: &str = "INSERT INTO t_execution (execution_id, ffqn, created_at, \
    created_at_ns, scheduled_at, scheduled_at_ns, is_top_level, next_version, state_kind, \
    pending_at, lock_expires_at, finished_at, finished_at_ns, state_json, temporary_event_count, \
    response_count, max_retries, retry_exp_backoff_ns, parent_execution_id, parent_join_set_id) \
    SELECT u.id, u.ffqn, u.created_at, u.created_at_ns, u.scheduled_at, u.scheduled_at_ns, \
    u.is_top_level, u.next_version, u.state_kind, u.pending_at, u.lock_expires_at, \
    u.finished_at, u.finished_at_ns, u.state_json, 0, 0, u.max_retries, u.backoff_ns, \
    u.parent_id, u.parent_join_set_id \
    FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int2[], $5::int8[], $6::int2[], \
    $7::bool[], $8::int8[], $9::int2[], $10::int8[], $11::int8[], $12::int8[], $13::int2[], \
    $14::text[], $15::int8[], $16::int8[], $17::text[], $18::text[]) WITH ORDINALITY AS u(id, \
    ffqn, created_at, created_at_ns, scheduled_at, scheduled_at_ns, is_top_level, next_version, \
    state_kind, pending_at, lock_expires_at, finished_at, finished_at_ns, state_json, \
    max_retries, backoff_ns, parent_id, parent_join_set_id, ord) ORDER BY u.ord";

const UPDATE_EXECUTIONS: &str = "UPDATE t_execution AS t SET next_version = u.next_version, \
    state_kind = u.state_kind, pending_at = u.pending_at, lock_expires_at = u.lock_expires_at, \
    finished_at = u.finished_at, finished_at_ns = u.finished_at_ns, state_json = u.state_json, \
    temporary_event_count = u.temporary_event_count, response_count = u.response_count \
    FROM UNNEST($1::text[], $2::int8[], $3::int2[], $4::int8[], $5::int8[], $6::int8[], \
    $7::int2[], $8::text[], $9::int8[], $10::int8[]) AS u(id, next_version, state_kind, \
    pending_at, lock_expires_at, finished_at, finished_at_ns, state_json, temporary_event_count, \
    response_count) \
    WHERE t.execution_id = u.id";

const INSERT_EVENTS: &str = "INSERT INTO t_event (execution_id, version, is_history, event_json) \
    SELECT u.id, u.version, u.is_history, u.json \
    FROM UNNEST($1::text[], $2::int8[], $3::bool[], $4::text[]) WITH ORDINALITY \
    AS u(id, version, is_history, json, ord) ORDER BY u.ord";

const INSERT_RESPONSES: &str = "INSERT INTO t_response (execution_id, idx, join_set_id, \
    join_set_idx, delay_id, child_execution_id, response_json) \
    SELECT u.id, u.idx, u.join_set_id, u.join_set_idx, u.delay_id, u.child_id, u.json \
    FROM UNNEST($1::text[], $2::int8[], $3::text[], $4::int8[], $5::text[], $6::text[], \
    $7::text[]) WITH ORDINALITY AS u(id, idx, join_set_id, join_set_idx, delay_id, child_id, \
    json, ord) ORDER BY u.ord";

const UPSERT_JOIN_SETS: &str = "INSERT INTO t_join_set (execution_id, join_set_id, \
    join_next_count, response_count) \
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int8[]) \
    ON CONFLICT (execution_id, join_set_id) DO UPDATE \
    SET join_next_count = EXCLUDED.join_next_count, response_count = EXCLUDED.response_count";

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

/// Locks the rows `$1` and checks that each still has the revision the write was planned on,
/// `($2, $3, $4)` (the schema's `f_check_revisions`, which raises [`STALE_REVISION`] otherwise,
/// aborting the transaction before anything of the write is stored).
const CHECK_REVISIONS: &str = "SELECT f_check_revisions($1, $2, $3, $4)";

/// The SQLSTATE `f_check_revisions` raises: a row changed since the write was planned on it.
const STALE_REVISION: &str = "SR001";

/// True when `err` is the refusal of [`CHECK_REVISIONS`].
pub(crate) fn is_stale(err: &DbError) -> bool {
    let DbError::Backend(backend) = err else {
        return false;
    };
    backend
        .source
        .as_deref()
        .and_then(|source| source.downcast_ref::<tokio_postgres::Error>())
        .and_then(tokio_postgres::Error::as_db_error)
        .is_some_and(|db| db.code().code() == STALE_REVISION)
}

/// How [`persist_and_commit`] ended when it did not commit.
pub(crate) enum NotCommitted {
    /// Nothing was written: a statement failed (or a value did not encode) and the transaction
    /// was rolled back; the connection is idle again.
    RolledBack(DbError),
    /// `COMMIT` itself failed (a lost connection): whether it committed is unknown, and the
    /// connection must not be used again.
    Unknown(DbError),
}

/// What goes out with a write's `COMMIT`.
pub(crate) struct Commit<'a> {
    /// True when the transaction is not open yet: `BEGIN` goes first, in the same pipeline
    /// (a write that loads nothing).
    pub(crate) begin: bool,
    /// The revisions of the rows the write was planned on without loading them, checked
    /// first ([`CHECK_REVISIONS`]); empty when it loaded them, or assumed nothing was stored.
    pub(crate) checked: &'a [(ExecutionId, Revision)],
    pub(crate) plan: &'a WritePlan,
    /// The notifications (see [`crate::notify::publish`]).
    pub(crate) payloads: &'a [String],
}

/// Writes the changes and deletions of `commit` inside the transaction (after its `BEGIN`
/// when it is not open yet), commits it, publishes its notifications and then runs `after`,
/// all in one pipeline, one round trip: new executions in the order given (so that a
/// duplicate found by the database is the first one), then updated rows, events, responses,
/// join-set counters, delays requested and delays closed, the deleted executions, `COMMIT`,
/// the notifications, and whatever statements `after` sends when first polled (outside the
/// transaction: the reads `lock_pending` hands over). After a failed statement the server runs
/// `COMMIT` as `ROLLBACK` (its transaction is aborted), so nothing of the write is stored; the
/// notifications that follow are then hints about nothing, which waiters tolerate, and what
/// `after` returned is dropped.
pub(crate) async fn persist_and_commit<T>(
    client: &ClientWrapper,
    trips: &Trips,
    commit: Commit<'_>,
    after: impl Future<Output = T>,
) -> Result<T, NotCommitted> {
    let Commit {
        begin,
        checked,
        plan,
        payloads,
    } = commit;
    let deleted: Vec<&str> = plan.deleted.iter().map(|id| id.as_str()).collect();
    let deleted = &deleted[..];
    let prepared = match (Columns::of(&plan.changes), CheckColumns::of(checked)) {
        (Ok(columns), Ok(check)) => {
            let statements = prepare_persist(client, &columns, deleted).await;
            let check_statement =
                prepare(client, [(!check.ids.is_empty()).then_some(CHECK_REVISIONS)]).await;
            match (statements, check_statement) {
                (Ok(statements), Ok([check_statement])) => {
                    Ok((columns, statements, check, check_statement))
                }
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let (columns, statements, check, check_statement) = match prepared {
        Ok(prepared) => prepared,
        // Nothing was sent: no transaction is open.
        Err(e) if begin => return Err(NotCommitted::RolledBack(e)),
        Err(e) => return Err(rolled_back(client, trips, e).await),
    };
    trips.one();
    let (began, checked, persisted, committed, (), after) = tokio::join!(
        biased;
        async {
            if begin {
                client.batch_execute(load::BEGIN_WRITE).await
            } else {
                Ok(())
            }
        },
        execute(client, check_statement, [
            &check.ids, &check.next_version, &check.finished, &check.response_count,
        ]),
        execute_all(client, &columns, deleted, statements),
        client.batch_execute("COMMIT"),
        crate::notify::publish(client, payloads),
        after,
    );
    // The first error in statement order is the one that says why.
    let persisted = checked.and(persisted);
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
        (Ok(()), Ok(()), Ok(())) => Ok(after),
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

/// The statements [`execute_all`] needs, in its order.
async fn prepare_persist(
    client: &ClientWrapper,
    columns: &Columns<'_>,
    deleted: &[&str],
) -> Result<[Option<Statement>; 8], DbError> {
    let Columns {
        new,
        updated,
        events,
        responses,
        join_sets,
        delays,
        closed,
    } = columns;
    prepare(
        client,
        [
            (!new.ids.is_empty()).then_some(INSERT_EXECUTIONS),
            (!updated.ids.is_empty()).then_some(UPDATE_EXECUTIONS),
            (!events.ids.is_empty()).then_some(INSERT_EVENTS),
            (!responses.ids.is_empty()).then_some(INSERT_RESPONSES),
            (!join_sets.ids.is_empty()).then_some(UPSERT_JOIN_SETS),
            (!delays.ids.is_empty()).then_some(INSERT_DELAYS),
            (!closed.ids.is_empty()).then_some(CLOSE_DELAYS),
            (!deleted.is_empty()).then_some(DELETE_EXECUTIONS),
        ],
    )
    .await
}

/// Runs the statements of `columns` and `deleted` in one pipeline; the first error in
/// statement order is the one returned.
async fn execute_all(
    client: &ClientWrapper,
    columns: &Columns<'_>,
    deleted: &[&str],
    statements: [Option<Statement>; 8],
) -> Result<(), tokio_postgres::Error> {
    let Columns {
        new,
        updated,
        events,
        responses,
        join_sets,
        delays,
        closed,
    } = columns;
    let [
        insert_executions,
        update_executions,
        insert_events,
        insert_responses,
        upsert_join_sets,
        insert_delays,
        close_delays,
        delete_executions,
    ] = statements;
    let results = tokio::join!(
        biased;
        execute(client, insert_executions, [
            &new.ids, &new.ffqns, &new.created_at, &new.created_at_ns, &new.scheduled_at,
            &new.scheduled_at_ns, &new.is_top_level, &new.state.next_version, &new.state.kind,
            &new.state.pending_at, &new.state.lock_expires_at, &new.state.finished_at,
            &new.state.finished_at_ns, &new.state.json, &new.max_retries, &new.backoff_ns, &new.parent_ids, &new.parent_join_set_ids,
        ]),
        execute(client, update_executions, [
            &updated.ids, &updated.state.next_version, &updated.state.kind,
            &updated.state.pending_at, &updated.state.lock_expires_at,
            &updated.state.finished_at, &updated.state.finished_at_ns, &updated.state.json,
            &updated.temporary_event_count, &updated.response_count,
        ]),
        execute(client, insert_events, [
            &events.ids, &events.versions, &events.is_history, &events.json,
        ]),
        execute(client, insert_responses, [
            &responses.ids, &responses.idx, &responses.join_set_ids, &responses.join_set_idx,
            &responses.delay_ids, &responses.child_ids, &responses.json,
        ]),
        execute(client, upsert_join_sets, [
            &join_sets.ids, &join_sets.join_set_ids, &join_sets.join_next, &join_sets.responses,
        ]),
        execute(client, insert_delays, [
            &delays.ids, &delays.delay_ids, &delays.join_set_ids, &delays.expires_at,
            &delays.expires_at_ns, &delays.is_open,
        ]),
        execute(client, close_delays, [&closed.ids, &closed.delay_ids]),
        execute(client, delete_executions, [&deleted]),
    );
    // After a failed statement every later one fails with "current transaction is aborted":
    // the first error in statement order is the one that says why.
    let (r0, r1, r2, r3, r4, r5, r6, r7) = results;
    for result in [r0, r1, r2, r3, r4, r5, r6, r7] {
        result?;
    }
    Ok(())
}

/// Runs a prepared statement, or nothing when there is none.
async fn execute<const N: usize>(
    client: &ClientWrapper,
    statement: Option<Statement>,
    params: [&(dyn ToSql + Sync); N],
) -> Result<(), tokio_postgres::Error> {
    match statement {
        Some(statement) => client.execute(&statement, &params).await.map(|_| ()),
        None => Ok(()),
    }
}

/// The arrays of [`CHECK_REVISIONS`].
#[derive(Default)]
struct CheckColumns<'a> {
    ids: Vec<&'a str>,
    next_version: Vec<i64>,
    finished: Vec<bool>,
    response_count: Vec<i64>,
}

impl<'a> CheckColumns<'a> {
    fn of(revisions: &'a [(ExecutionId, Revision)]) -> Result<Self, DbError> {
        let mut columns = Self::default();
        for (id, revision) in revisions {
            columns.ids.push(id.as_str());
            columns
                .next_version
                .push(version_to_i64(revision.next_version));
            columns.finished.push(revision.finished);
            columns
                .response_count
                .push(count_to_i64(revision.response_count));
        }
        Ok(columns)
    }
}

/// The arrays of every statement, one element per row.
#[derive(Default)]
struct Columns<'a> {
    new: NewExecutionColumns<'a>,
    updated: UpdateColumns<'a>,
    events: EventColumns<'a>,
    responses: ResponseColumns<'a>,
    join_sets: JoinSetColumns<'a>,
    delays: DelayColumns<'a>,
    closed: ClosedDelayColumns<'a>,
}

impl<'a> Columns<'a> {
    fn of(changes: &'a [ExecutionChange]) -> Result<Self, DbError> {
        let mut columns = Self::default();
        for change in changes {
            columns.push(change)?;
        }
        Ok(columns)
    }

    fn push(&mut self, change: &'a ExecutionChange) -> Result<(), DbError> {
        let row = &change.row;
        let id = row.execution_id.as_str();
        match &change.created {
            Some(created) => {
                let new = &mut self.new;
                new.ids.push(id);
                new.ffqns.push(row.ffqn.to_string());
                new.created_at.push(micros(created.created_at));
                new.created_at_ns.push(sub_micros(created.created_at));
                new.scheduled_at.push(micros(created.scheduled_at));
                new.scheduled_at_ns.push(sub_micros(created.scheduled_at));
                new.is_top_level.push(row.execution_id.is_top_level());
                new.state.push(row)?;
                new.max_retries.push(i64::from(row.max_retries));
                new.backoff_ns
                    .push(duration_to_nanos(row.retry_exp_backoff));
                new.parent_ids
                    .push(row.parent.as_ref().map(|(id, _)| id.as_str()));
                new.parent_join_set_ids
                    .push(row.parent.as_ref().map(|(_, js)| js.to_string()));
            }
            None => {
                let updated = &mut self.updated;
                updated.ids.push(id);
                updated.state.push(row)?;
                updated
                    .temporary_event_count
                    .push(i64::from(row.temporary_event_count));
                updated
                    .response_count
                    .push(count_to_i64(row.response_count));
            }
        }
        for (version, event) in &change.events {
            self.events.ids.push(id);
            self.events.versions.push(version_to_i64(*version));
            self.events.is_history.push(matches!(
                event.event,
                ExecutionEventInner::HistoryEvent { .. }
            ));
            self.events.json.push(to_json(event)?);
        }
        for planned in &change.responses {
            let response = &planned.response.event;
            let responses = &mut self.responses;
            responses.ids.push(id);
            responses.idx.push(count_to_i64(planned.idx));
            responses
                .join_set_ids
                .push(response.join_set_id.to_string());
            responses
                .join_set_idx
                .push(count_to_i64(planned.join_set_idx));
            let (delay_id, child_id) = match &response.event {
                JoinSetResponse::DelayFinished { delay_id } => (Some(delay_id.to_string()), None),
                JoinSetResponse::ChildExecutionFinished {
                    child_execution_id, ..
                } => (None, Some(child_execution_id.as_str())),
            };
            responses.delay_ids.push(delay_id);
            responses.child_ids.push(child_id);
            responses.json.push(to_json(&planned.response)?);
        }
        for (join_set_id, counters) in &change.join_sets {
            self.join_sets.ids.push(id);
            self.join_sets.join_set_ids.push(join_set_id.to_string());
            self.join_sets
                .join_next
                .push(count_to_i64(counters.join_next_count));
            self.join_sets
                .responses
                .push(count_to_i64(counters.response_count));
        }
        for delay in &change.delays_requested {
            let delays = &mut self.delays;
            delays.ids.push(id);
            delays.delay_ids.push(delay.delay_id.to_string());
            delays.join_set_ids.push(delay.join_set_id.to_string());
            delays.expires_at.push(micros(delay.expires_at));
            delays.expires_at_ns.push(sub_micros(delay.expires_at));
            delays.is_open.push(delay.open);
        }
        for delay_id in &change.delays_closed {
            self.closed.ids.push(id);
            self.closed.delay_ids.push(delay_id.to_string());
        }
        Ok(())
    }
}

/// The state columns of `t_execution`, shared by inserts and updates.
#[derive(Default)]
struct StateColumns {
    next_version: Vec<i64>,
    kind: Vec<i16>,
    pending_at: Vec<Option<i64>>,
    lock_expires_at: Vec<Option<i64>>,
    finished_at: Vec<Option<i64>>,
    finished_at_ns: Vec<Option<i16>>,
    json: Vec<String>,
}

impl StateColumns {
    fn push(&mut self, row: &ExecutionRow) -> Result<(), DbError> {
        let (kind, pending_at, lock_expires_at) = state_columns(&row.state.pending_state);
        self.next_version
            .push(version_to_i64(row.state.next_version));
        self.kind.push(kind);
        self.pending_at.push(pending_at);
        self.lock_expires_at.push(lock_expires_at);
        let (finished_at, finished_at_ns) = finished_columns(&row.state.pending_state);
        self.finished_at.push(finished_at);
        self.finished_at_ns.push(finished_at_ns);
        self.json.push(to_json(&row.state.pending_state)?);
        Ok(())
    }
}

#[derive(Default)]
struct NewExecutionColumns<'a> {
    ids: Vec<&'a str>,
    ffqns: Vec<String>,
    created_at: Vec<i64>,
    created_at_ns: Vec<i16>,
    scheduled_at: Vec<i64>,
    scheduled_at_ns: Vec<i16>,
    is_top_level: Vec<bool>,
    state: StateColumns,
    max_retries: Vec<i64>,
    backoff_ns: Vec<i64>,
    parent_ids: Vec<Option<&'a str>>,
    parent_join_set_ids: Vec<Option<String>>,
}

#[derive(Default)]
struct UpdateColumns<'a> {
    ids: Vec<&'a str>,
    state: StateColumns,
    temporary_event_count: Vec<i64>,
    response_count: Vec<i64>,
}

#[derive(Default)]
struct EventColumns<'a> {
    ids: Vec<&'a str>,
    versions: Vec<i64>,
    is_history: Vec<bool>,
    json: Vec<String>,
}

#[derive(Default)]
struct ResponseColumns<'a> {
    ids: Vec<&'a str>,
    idx: Vec<i64>,
    join_set_ids: Vec<String>,
    join_set_idx: Vec<i64>,
    delay_ids: Vec<Option<String>>,
    child_ids: Vec<Option<&'a str>>,
    json: Vec<String>,
}

#[derive(Default)]
struct JoinSetColumns<'a> {
    ids: Vec<&'a str>,
    join_set_ids: Vec<String>,
    join_next: Vec<i64>,
    responses: Vec<i64>,
}

#[derive(Default)]
struct DelayColumns<'a> {
    ids: Vec<&'a str>,
    delay_ids: Vec<String>,
    join_set_ids: Vec<String>,
    expires_at: Vec<i64>,
    expires_at_ns: Vec<i16>,
    is_open: Vec<bool>,
}

#[derive(Default)]
struct ClosedDelayColumns<'a> {
    ids: Vec<&'a str>,
    delay_ids: Vec<String>,
}
