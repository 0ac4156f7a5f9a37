//! The store's [`kernel::Backend`]: writes go to the kernel's `Groups` (`writer.rs`); each
//! read is one statement (or one pipeline) on a pooled connection: one round trip, one snapshot.

use crate::{
    PostgresStore,
    codec::{
        column, documents, execution_columns, execution_row, json, kind_to_i16, micros, parsed,
        sub_micros, timestamp,
    },
    load,
    pipeline::{Param, params, push_renumbered, run_present, statement, unnest},
    schedules,
};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredDelay,
    FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter, ListExecutionsFilter,
    ListTerm, LockPendingRequest, LockedExecution, Pagination, PendingStateKind, Version,
    kernel::{
        self, ExecutionRow, LockGrant, LogRows, WaiterHub, Write,
        stored::{self, corrupt, count, from_json, to_i64},
    },
    schedule::{ScheduleName, ScheduleRow, Tick},
};
use deadpool_postgres::ClientWrapper;
use std::{sync::PoisonError, time::Duration};
use tokio_postgres::Row;

/// The state of execution `$1`, its events and its responses from index `$2` on, in order: one
/// statement, so one snapshot; no row when the execution does not exist.
pub(crate) const SELECT_LOG: &str = "SELECT next_version, state_json, \
    ARRAY(SELECT event_json FROM t_event WHERE execution_id = $1 AND $3 ORDER BY version), \
    ARRAY(SELECT response_json FROM t_response WHERE execution_id = $1 AND idx >= $2 \
    ORDER BY idx) FROM t_execution WHERE execution_id = $1";

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

/// The columns of a listing; its conditions follow, one per filter given ([`listing`]), then
/// `ORDER BY created_at DESC, created_at_ns DESC, execution_id DESC`.
const LIST_EXECUTIONS: &str = "SELECT execution_id, ffqn, created_at, created_at_ns, \
    scheduled_at, scheduled_at_ns, state_json, next_version FROM t_execution WHERE true";

/// Up to `$3` events of execution `$1` from version `$2` on; the first column says whether
/// the execution exists (one row with `NULL` events when it has none from `$2`).
pub(crate) const LIST_EVENTS: &str = "SELECT true, ev.event_json FROM t_execution e \
    LEFT JOIN LATERAL (SELECT event_json FROM t_event WHERE execution_id = e.execution_id \
    AND version >= $2 ORDER BY version LIMIT $3) AS ev ON true WHERE e.execution_id = $1";

/// Per execution `$1`, in order: its events below the locked version `$2` and its first `$3`
/// responses (those stored when the lock committed), each in order. The arrays' subqueries run
/// per execution, one index range each, which the planner cannot turn into a join (a `LATERAL`
/// join, without statistics or with a plan cached while the table was small, was planned as a
/// scan of the whole table); an execution without responses, as most are at their first
/// lease, costs no search of the responses' index. The `LIMIT`s (versions and response indexes
/// start at 0, so there are at most `below` events and `responses` responses) make the planner
/// read each key's index in its order: without them, it collected each execution's events (and
/// responses) through a bitmap and sorted them, a sort per execution: about 6,000 of the
/// server's 454,000 instructions per no-op execution.
pub(crate) const SELECT_LOCKED: &str = "SELECT \
    ARRAY(SELECT e.event_json FROM t_event e WHERE e.execution_id = k.id \
    AND e.version < k.below ORDER BY e.version LIMIT k.below), \
    CASE WHEN k.responses > 0 THEN ARRAY(SELECT r.response_json FROM t_response r \
    WHERE r.execution_id = k.id AND r.idx < k.responses ORDER BY r.idx LIMIT k.responses) \
    ELSE '{}' END \
    FROM UNNEST($1::text[], $2::int8[], $3::int8[]) WITH ORDINALITY AS k(id, below, responses, \
    ord) ORDER BY k.ord";

/// The executions `lock_pending` locked, with their histories, read after the `COMMIT` so that
/// its row locks never wait for a long log (the log below a lease is append-only).
pub(crate) async fn locked_executions(
    client: &ClientWrapper,
    grants: Vec<LockGrant>,
) -> Result<Vec<LockedExecution>, DbError> {
    let Some(statement) = unnest!(SELECT_LOCKED, &grants, |grant| {
        ids: &str = grant.row.execution_id.as_str(),
        below: i64 = to_i64(grant.events_handed_over()),
        responses: i64 = to_i64(grant.responses_handed_over()),
    }) else {
        return Ok(Vec::new());
    };
    let [rows] = run_present(client, None, false, [Some(statement)]).await?;
    let (histories, leases) = (rows.len(), grants.len());
    if histories != leases {
        return Err(corrupt(format!("{histories} histories of {leases} leases")));
    }
    (grants.into_iter().zip(&rows))
        .map(|(grant, row)| {
            let log = LogRows {
                events: documents(row, 0, "event")?,
                responses: documents(row, 1, "response")?,
            };
            kernel::hand_over(grant, log)
        })
        .collect()
}

/// The statement of a listing: only the filters given are in it, so that its plan reads the
/// index they name, newest first: a state but `Finished` the partial index of unfinished
/// executions, whose condition the statement repeats; `Finished` that of finished ones; the
/// parked executions (pending from a time inlined as a literal) theirs; a parent the index of
/// children; a range of ids the primary key. Any other listing reads a page of unfinished and
/// one of finished executions, each from its index, and merges the two in creation order (a
/// `UNION ALL` of two limited branches, which the server plans as one ordered append of two
/// backward index scans; a `UNION ALL` of unlimited branches under one `ORDER BY` it sorted):
/// no index holds every execution by creation, which would take an entry for each version of
/// a row.
pub(crate) fn listing<'a>(
    filter: &'a ListExecutionsFilter,
    pagination: &'a Pagination,
) -> (String, Vec<Param<'a>>) {
    let mut conditions = String::new();
    let mut params: Vec<Param<'a>> = Vec::new();
    // Whether a term names the index to read, or only filters.
    let mut named = false;
    let mut term = |clause: &str, bound: Vec<Param<'a>>, names_index: bool| {
        conditions.push_str(" AND ");
        push_renumbered(&mut conditions, clause, params.len());
        params.extend(bound);
        named |= names_index;
    };
    let at = |at: DateTime<Utc>| -> Vec<Param<'a>> { params![micros(at), sub_micros(at)] };
    for list_term in filter.terms(pagination.cursor.as_ref()) {
        match list_term {
            ListTerm::Function(ffqn) => term("ffqn = $1", params![ffqn.to_string()], false),
            ListTerm::State(PendingStateKind::Finished) => {
                let finished = kind_to_i16(PendingStateKind::Finished);
                let clause = format!("state_kind = {finished} AND finished_at IS NOT NULL");
                term(&clause, vec![], true);
            }
            ListTerm::State(kind) => {
                term(
                    &format!("state_kind = {}", kind_to_i16(kind)),
                    vec![],
                    false,
                );
            }
            ListTerm::Unfinished => term("finished_at IS NULL", vec![], true),
            ListTerm::TopLevel => term("is_top_level", vec![], false),
            ListTerm::Parent(parent) => {
                term("parent_execution_id = $1", params![parent.as_str()], true);
            }
            ListTerm::CreatedAfter(after) => {
                term("(created_at, created_at_ns) > ($1, $2)", at(after), false);
            }
            ListTerm::CreatedBefore(before) => {
                term("(created_at, created_at_ns) < ($1, $2)", at(before), false);
            }
            // Inlined, as the state is: the planner sees how few executions the range holds
            // (the parked ones are pending from a time no clock reaches).
            ListTerm::PendingFrom(from) => {
                term(&format!("pending_at >= {}", micros(from)), vec![], true);
            }
            ListTerm::IdFrom(low) => term("execution_id >= $1", params![low], true),
            ListTerm::IdBelow(high) => term("execution_id < $1", params![high], true),
            ListTerm::Before(cursor_at, id) => term(
                "(created_at, created_at_ns, execution_id) < ($1, $2, $3)",
                params![micros(cursor_at), sub_micros(cursor_at), id.as_str()],
                false,
            ),
        }
    }
    params.push(Box::new(to_i64(pagination.length)));
    let order = format!(
        " ORDER BY created_at DESC, created_at_ns DESC, execution_id DESC LIMIT ${}",
        params.len()
    );
    let sql = if named {
        format!("{LIST_EXECUTIONS}{conditions}{order}")
    } else {
        format!(
            "({LIST_EXECUTIONS} AND finished_at IS NULL{conditions}{order}) UNION ALL \
             ({LIST_EXECUTIONS} AND finished_at IS NOT NULL{conditions}{order}){order}"
        )
    };
    (sql, params)
}

/// The `pending_at` (to the microsecond) of the first `$3` executions of the functions `$1` due
/// at `$2`, oldest first: per function, the partial index on `(ffqn, pending_at, execution_id)`
/// in its order. `ORDER BY ... LIMIT` makes that index the plan whatever the statistics say: a
/// plain `EXISTS` over the table, planned while it was small, stayed a scan of the whole table
/// once it held a million rows.
pub(crate) const DUE_TIMES: &str = "SELECT due.pending_at FROM UNNEST($1::text[]) AS f(ffqn) \
    CROSS JOIN LATERAL (SELECT t.pending_at, t.execution_id FROM t_execution t \
    WHERE t.ffqn = f.ffqn AND t.pending_at IS NOT NULL AND t.pending_at <= $2 \
    ORDER BY t.pending_at, t.execution_id LIMIT $3) AS due \
    ORDER BY due.pending_at, due.execution_id LIMIT $3";

impl PostgresStore {
    /// The rows of one statement on a pooled connection.
    async fn query(
        &self,
        sql: impl Into<std::borrow::Cow<'static, str>>,
        params: Vec<Param<'_>>,
    ) -> Result<Vec<Row>, DbError> {
        let statement = Some(statement(sql, params));
        let [rows] = run_present(&*self.reader().await?, None, false, [statement]).await?;
        Ok(rows)
    }

    /// The row of [`SELECT_LOG`]: the responses from index `responses_from` on, the events when
    /// `events`; `NotFound` for an unknown execution.
    async fn log(
        &self,
        execution_id: &ExecutionId,
        responses_from: i64,
        events: bool,
    ) -> Result<Row, DbError> {
        let params = params![execution_id.as_str(), responses_from, events];
        let rows = self.query(SELECT_LOG, params).await?;
        rows.into_iter()
            .next()
            .ok_or_else(|| DbError::execution_not_found(execution_id))
    }
}

impl kernel::Backend for PostgresStore {
    async fn write<W: Write>(&self, write: W) -> Result<W::Reply, DbError> {
        self.inner.writer.hub.ensure_open()?;
        self.inner.groups.write(&*self.inner.writer, write).await
    }

    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        self.inner.writer.hub.ensure_open()?;
        self.inner.groups.lock(&*self.inner.writer, req).await
    }

    fn hub(&self) -> &WaiterHub {
        &self.inner.writer.hub
    }

    async fn responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        let row = self.log(execution_id, to_i64(start_idx), false).await?;
        documents(&row, 3, "response")
    }

    async fn finished_result(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<FinishedExecutionResult>, DbError> {
        let rows = self.query(SELECT_FINISHED_EVENT, params![execution_id.as_str()]);
        let rows = rows.await?;
        let row = (rows.first()).ok_or_else(|| DbError::execution_not_found(execution_id))?;
        (column::<Option<&str>>(row, 0)?)
            .map(|json| stored::finished_result(execution_id, json))
            .transpose()
    }

    /// Read in one pipeline.
    async fn expired(
        &self,
        at: DateTime<Utc>,
    ) -> Result<(Vec<ExecutionRow>, Vec<ExpiredDelay>), DbError> {
        let statements = [
            Some(statement(SELECT_EXPIRED_LOCKS, params![micros(at)])),
            Some(statement(SELECT_EXPIRED_DELAYS, params![micros(at)])),
        ];
        let [locks, delays] = run_present(&*self.reader().await?, None, false, statements).await?;
        let locks = (locks.iter())
            .map(execution_row)
            .collect::<Result<Vec<_>, _>>()?;
        let delays = (delays.iter())
            .map(|row| {
                Ok(ExpiredDelay {
                    execution_id: parsed(row, 0, "execution id")?,
                    join_set_id: parsed(row, 2, "join set id")?,
                    delay_id: parsed(row, 1, "delay id")?,
                    expires_at: timestamp(column(row, 3)?, column(row, 4)?)?,
                })
            })
            .collect::<Result<Vec<_>, DbError>>()?;
        Ok((locks, delays))
    }

    async fn due_times(
        &self,
        ffqns: &[FunctionFqn],
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DateTime<Utc>>, DbError> {
        let names: Vec<String> = ffqns.iter().map(ToString::to_string).collect();
        let params = params![names, micros(at), to_i64(limit)];
        let rows = self.query(DUE_TIMES, params).await?;
        (rows.iter())
            .map(|row| timestamp(column(row, 0)?, 0))
            .collect()
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        let row = self.log(execution_id, 0, true).await?;
        Ok(ExecutionLog {
            execution_id: execution_id.clone(),
            events: documents(&row, 2, "event")?,
            responses: documents(&row, 3, "response")?,
            next_version: Version(count(column(&row, 0)?, "next_version")?),
            pending_state: json(&row, 1, "pending state")?,
        })
    }

    async fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        let params = params![execution_id.as_str(), to_i64(from.0), to_i64(limit)];
        let rows = self.query(LIST_EVENTS, params).await?;
        if rows.is_empty() {
            return Err(DbError::execution_not_found(execution_id));
        }
        (rows.iter())
            .filter_map(|row| column::<Option<&str>>(row, 1).transpose())
            .map(|json| from_json(json?, "event"))
            .collect()
    }

    async fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> Result<Vec<(ExecutionId, ExecutionEvent)>, DbError> {
        let ids: Vec<&str> = execution_ids.iter().map(ExecutionId::as_str).collect();
        let rows = self.query(load::SELECT_CREATED, params![ids]).await?;
        (rows.iter())
            .map(|row| Ok((parsed(row, 0, "execution id")?, json(row, 1, "event")?)))
            .collect()
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        if pagination.length == 0 {
            return Ok(Vec::new());
        }
        let (sql, params) = listing(&filter, &pagination);
        let rows = self.query(sql, params).await?;
        rows.iter()
            .map(|row| {
                Ok(ExecutionSummary {
                    execution_id: parsed(row, 0, "execution id")?,
                    ffqn: parsed(row, 1, "function name")?,
                    created_at: timestamp(column(row, 2)?, column(row, 3)?)?,
                    scheduled_at: timestamp(column(row, 4)?, column(row, 5)?)?,
                    pending_state: json(row, 6, "pending state")?,
                    next_version: Version(count(column(row, 7)?, "next_version")?),
                })
            })
            .collect()
    }

    async fn list_schedules(
        &self,
        from: Option<&ScheduleName>,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, DbError> {
        let from = from.map_or("", ScheduleName::as_str);
        let rows = self
            .query(schedules::LIST, params![from, to_i64(limit)])
            .await?;
        rows.iter().map(|row| json(row, 0, "schedule")).collect()
    }

    async fn schedule_ticks(
        &self,
        name: &ScheduleName,
        limit: usize,
    ) -> Result<Vec<Tick>, DbError> {
        let params = params![name.as_str(), to_i64(limit)];
        let rows = self.query(schedules::TICKS, params).await?;
        rows.iter().map(|row| json(row, 0, "tick")).collect()
    }

    async fn close(&self) {
        if !self.inner.writer.hub.close() {
            return;
        }
        self.inner.writer.pool.close();
        let _ = self.inner.shutdown.send(true);
        let task = (self.inner.listener_task.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task
            && tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
        {
            tracing::warn!("the notification listener did not stop within 5 s");
        }
    }
}
