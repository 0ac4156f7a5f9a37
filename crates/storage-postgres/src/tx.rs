//! The write path: a staging layer over one database transaction.
//!
//! Every execution a write touches is first locked (`SELECT ... FOR UPDATE`) and its state row
//! read; each step (create, append, response) is validated and applied in memory with
//! `concepts::ExecutionState::{validate_append, after_append, after_response}`, exactly as the
//! other backends do; then [`PgTx::flush`] writes everything with a handful of multi-row
//! statements (`UNNEST` arrays), sent in one pipeline. It returns the wake-ups the write
//! causes; they are published once the transaction has committed.

use crate::{
    codec::{
        count_to_i64, duration_to_nanos, from_json, i64_to_count, i64_to_u32, micros,
        nanos_to_duration, state_columns, sub_micros, to_json, version_to_i64,
    },
    error::{corrupt, map_pg_error},
    notify::Wakeups,
};
use chrono::{DateTime, Utc};
use concepts::{
    CreateRequest, DbError, DelayId, DuplicateKind, ExecutionEvent, ExecutionEventInner,
    ExecutionId, ExecutionState, FunctionFqn, HistoryEvent, JoinSetId, JoinSetRequest,
    JoinSetResponse, JoinSetResponseEvent, JoinSetResponseEventOuter, PendingState,
    ValidationError, Version,
};
use deadpool_postgres::Transaction;
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::Duration,
};
use tokio_postgres::{Row, Statement, error::SqlState, types::ToSql};

/// The columns of `t_execution` that [`ExecRow::from_row`] reads, in order.
macro_rules! exec_columns {
    () => {
        "execution_id, ffqn, next_version, state_json, temporary_event_count, response_count, \
         max_retries, retry_exp_backoff_ns, parent_execution_id, parent_join_set_id"
    };
}
pub(crate) use exec_columns;

/// What a write needs to know about an execution, from its `t_execution` row.
#[derive(Debug, Clone)]
pub(crate) struct ExecRow {
    pub(crate) execution_id: ExecutionId,
    pub(crate) ffqn: FunctionFqn,
    pub(crate) state: ExecutionState,
    pub(crate) temporary_event_count: u32,
    pub(crate) response_count: u64,
    pub(crate) max_retries: u32,
    pub(crate) retry_exp_backoff: Duration,
    pub(crate) parent: Option<(ExecutionId, JoinSetId)>,
}

impl ExecRow {
    /// Reads the columns of [`exec_columns!`].
    pub(crate) fn from_row(row: &Row) -> Result<Self, DbError> {
        let id: &str = row.try_get(0).map_err(map_pg_error)?;
        let execution_id: ExecutionId = id
            .parse()
            .map_err(|e| corrupt(format!("execution id `{id}`: {e}")))?;
        let ffqn: &str = row.try_get(1).map_err(map_pg_error)?;
        let ffqn: FunctionFqn = ffqn
            .parse()
            .map_err(|e| corrupt(format!("ffqn `{ffqn}` of {execution_id}: {e:?}")))?;
        let next_version = Version(i64_to_u32(
            row.try_get(2).map_err(map_pg_error)?,
            "next_version",
        )?);
        let state_json: &str = row.try_get(3).map_err(map_pg_error)?;
        let pending_state: PendingState = from_json(state_json, "pending state")?;
        let parent_id: Option<&str> = row.try_get(8).map_err(map_pg_error)?;
        let parent_join_set: Option<&str> = row.try_get(9).map_err(map_pg_error)?;
        let parent = match (parent_id, parent_join_set) {
            (Some(parent_id), Some(join_set_id)) => Some((
                parent_id
                    .parse()
                    .map_err(|e| corrupt(format!("parent id `{parent_id}`: {e}")))?,
                join_set_id
                    .parse()
                    .map_err(|e| corrupt(format!("join set id `{join_set_id}`: {e}")))?,
            )),
            _ => None,
        };
        Ok(Self {
            ffqn,
            state: ExecutionState {
                next_version,
                pending_state,
            },
            temporary_event_count: i64_to_u32(
                row.try_get(4).map_err(map_pg_error)?,
                "temporary_event_count",
            )?,
            response_count: i64_to_count(row.try_get(5).map_err(map_pg_error)?, "response_count")?,
            max_retries: i64_to_u32(row.try_get(6).map_err(map_pg_error)?, "max_retries")?,
            retry_exp_backoff: nanos_to_duration(row.try_get(7).map_err(map_pg_error)?)?,
            parent,
            execution_id,
        })
    }
}

/// Per join set: `JoinNext` events and responses so far (stored + staged).
#[derive(Debug, Clone, Copy)]
struct JoinSetCounts {
    join_next: u64,
    responses: u64,
    /// Responses already stored before this transaction (staged ones have higher indexes).
    stored_responses: u64,
    dirty: bool,
}

/// What an execution created in this transaction needs beyond [`ExecRow`].
#[derive(Debug, Clone)]
struct NewExecution {
    created_at: DateTime<Utc>,
    scheduled_at: DateTime<Utc>,
}

#[derive(Debug)]
struct EventRow {
    version: i64,
    is_history: bool,
    json: String,
}

#[derive(Debug)]
struct ResponseRow {
    idx: i64,
    join_set_id: String,
    join_set_idx: i64,
    delay_id: Option<String>,
    child_execution_id: Option<String>,
    json: String,
    created_at: DateTime<Utc>,
}

#[derive(Debug)]
struct DelayRow {
    delay_id: DelayId,
    join_set_id: JoinSetId,
    expires_at: DateTime<Utc>,
    is_open: bool,
}

/// The staged change of one execution.
#[derive(Debug)]
struct Staged {
    row: ExecRow,
    /// The state before this transaction; `None` for a new execution.
    old_state: Option<PendingState>,
    new: Option<NewExecution>,
    dirty: bool,
    join_sets: HashMap<JoinSetId, JoinSetCounts>,
    new_events: Vec<EventRow>,
    new_responses: Vec<ResponseRow>,
    requested_delays: HashSet<DelayId>,
    answered_delays: HashSet<DelayId>,
    answered_children: HashSet<ExecutionId>,
    new_delays: Vec<DelayRow>,
    closed_delays: Vec<DelayId>,
}

impl Staged {
    fn new(row: ExecRow, new: Option<NewExecution>) -> Self {
        Self {
            old_state: new.is_none().then(|| row.state.pending_state.clone()),
            row,
            new,
            dirty: false,
            join_sets: HashMap::new(),
            new_events: Vec::new(),
            new_responses: Vec::new(),
            requested_delays: HashSet::new(),
            answered_delays: HashSet::new(),
            answered_children: HashSet::new(),
            new_delays: Vec::new(),
            closed_delays: Vec::new(),
        }
    }
}

/// A write in progress over one database transaction. Nothing is written before
/// [`PgTx::flush`]; a step that fails makes the caller roll the transaction back.
pub(crate) struct PgTx<'t> {
    client: &'t Transaction<'t>,
    staged: BTreeMap<ExecutionId, Staged>,
    /// Executions created in this transaction, in request order.
    create_order: Vec<ExecutionId>,
}

impl<'t> PgTx<'t> {
    /// A staging layer over `client`.
    pub(crate) fn new(client: &'t Transaction<'t>) -> Self {
        Self {
            client,
            staged: BTreeMap::new(),
            create_order: Vec::new(),
        }
    }

    /// The transaction.
    pub(crate) fn client(&self) -> &'t Transaction<'t> {
        self.client
    }

    /// Adds rows that the caller locked itself (`lock_pending`).
    pub(crate) fn add_locked(&mut self, row: ExecRow) {
        self.staged
            .entry(row.execution_id.clone())
            .or_insert_with(|| Staged::new(row, None));
    }

    /// The staged row of a locked execution.
    pub(crate) fn row(&self, execution_id: &ExecutionId) -> Option<&ExecRow> {
        self.staged.get(execution_id).map(|s| &s.row)
    }

    /// Locks and reads an execution (once per transaction).
    async fn load(&mut self, execution_id: &ExecutionId) -> Result<&mut Staged, DbError> {
        if !self.staged.contains_key(execution_id) {
            let stmt = self
                .client
                .prepare_cached(concat!(
                    "SELECT ",
                    exec_columns!(),
                    " FROM t_execution WHERE execution_id = $1 FOR UPDATE"
                ))
                .await
                .map_err(map_pg_error)?;
            let row = self
                .client
                .query_opt(&stmt, &[&execution_id.as_str()])
                .await
                .map_err(map_pg_error)?
                .ok_or_else(|| DbError::execution_not_found(execution_id))?;
            self.add_locked(ExecRow::from_row(&row)?);
        }
        self.staged
            .get_mut(execution_id)
            .ok_or_else(|| DbError::execution_not_found(execution_id))
    }

    /// The next version of an execution (locking it).
    pub(crate) async fn next_version(
        &mut self,
        execution_id: &ExecutionId,
    ) -> Result<Version, DbError> {
        Ok(self.load(execution_id).await?.row.state.next_version)
    }

    /// Stages the creation of an execution; returns `Version(1)`.
    pub(crate) fn create(&mut self, req: &CreateRequest) -> Result<Version, DbError> {
        if self.staged.contains_key(&req.execution_id) {
            return Err(DuplicateKind::Execution(req.execution_id.clone()).into());
        }
        let created_event = req.to_created_event();
        let initial = ExecutionState {
            next_version: Version(0),
            pending_state: PendingState::PendingAt {
                scheduled_at: req.scheduled_at,
            },
        };
        let state = initial.after_append(&created_event, |_| None);
        let next_version = state.next_version;
        let json = to_json(&created_event)?;
        let mut staged = Staged::new(
            ExecRow {
                execution_id: req.execution_id.clone(),
                ffqn: req.ffqn.clone(),
                state,
                temporary_event_count: 0,
                response_count: 0,
                max_retries: req.max_retries,
                retry_exp_backoff: req.retry_exp_backoff,
                parent: req.parent.clone(),
            },
            Some(NewExecution {
                created_at: req.created_at,
                scheduled_at: req.scheduled_at,
            }),
        );
        staged.new_events.push(EventRow {
            version: 0,
            is_history: false,
            json,
        });
        self.staged.insert(req.execution_id.clone(), staged);
        self.create_order.push(req.execution_id.clone());
        Ok(next_version)
    }

    /// Stages one append at `version`; returns the next version.
    pub(crate) async fn append(
        &mut self,
        execution_id: &ExecutionId,
        version: Version,
        created_at: DateTime<Utc>,
        event: ExecutionEventInner,
    ) -> Result<Version, DbError> {
        let client = self.client;
        let staged = self.load(execution_id).await?;
        staged
            .row
            .state
            .validate_append(version, created_at, &event)?;
        let mut nth_response_at = None;
        let mut delay_open = false;
        match &event {
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::DelayRequest { delay_id, .. },
                        ..
                    },
            } => {
                let (requested, answered) = if staged.requested_delays.contains(delay_id) {
                    (true, false)
                } else {
                    delay_status(client, execution_id, delay_id).await?
                };
                if requested {
                    return Err(ValidationError::InvalidRequest(format!(
                        "delay {delay_id} was already requested by execution {execution_id}"
                    ))
                    .into());
                }
                delay_open = !answered && !staged.answered_delays.contains(delay_id);
            }
            ExecutionEventInner::HistoryEvent {
                event: HistoryEvent::JoinNext { join_set_id, .. },
            } => {
                let counts = join_set_counts(client, staged, join_set_id).await?;
                if counts.responses > counts.join_next {
                    nth_response_at = Some(
                        response_created_at(client, staged, join_set_id, counts.join_next).await?,
                    );
                }
            }
            _ => {}
        }
        let event = ExecutionEvent { created_at, event };
        let new_state = staged.row.state.after_append(&event, |_| nth_response_at);
        let is_history = matches!(event.event, ExecutionEventInner::HistoryEvent { .. });
        match &event.event {
            ExecutionEventInner::HistoryEvent {
                event: HistoryEvent::JoinNext { join_set_id, .. },
            } => {
                if let Some(counts) = staged.join_sets.get_mut(join_set_id) {
                    counts.join_next = counts.join_next.saturating_add(1);
                    counts.dirty = true;
                }
            }
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinSetRequest {
                        join_set_id,
                        request:
                            JoinSetRequest::DelayRequest {
                                delay_id,
                                expires_at,
                            },
                    },
            } => {
                staged.requested_delays.insert(*delay_id);
                staged.new_delays.push(DelayRow {
                    delay_id: *delay_id,
                    join_set_id: join_set_id.clone(),
                    expires_at: *expires_at,
                    is_open: delay_open,
                });
            }
            other if other.is_temporary_event() => {
                staged.row.temporary_event_count =
                    staged.row.temporary_event_count.saturating_add(1);
            }
            _ => {}
        }
        staged.new_events.push(EventRow {
            version: version_to_i64(staged.row.state.next_version),
            is_history,
            json: to_json(&event)?,
        });
        staged.row.state = new_state;
        staged.dirty = true;
        Ok(staged.row.state.next_version)
    }

    /// Stages a response beside the log of `execution_id`, at the next index under its lock.
    pub(crate) async fn append_response(
        &mut self,
        created_at: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        let client = self.client;
        let staged = self.load(execution_id).await?;
        let (delay_id, child_execution_id) = match &response.event {
            JoinSetResponse::DelayFinished { delay_id } => {
                if !staged.answered_delays.insert(*delay_id) {
                    return Err(DuplicateKind::DelayResponse {
                        execution_id: execution_id.clone(),
                        delay_id: *delay_id,
                    }
                    .into());
                }
                match staged
                    .new_delays
                    .iter_mut()
                    .find(|d| d.delay_id == *delay_id)
                {
                    Some(delay) => delay.is_open = false,
                    None => staged.closed_delays.push(*delay_id),
                }
                (Some(delay_id.to_string()), None)
            }
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => {
                if !staged.answered_children.insert(child_execution_id.clone()) {
                    return Err(DuplicateKind::ChildResponse {
                        execution_id: execution_id.clone(),
                        child_execution_id: child_execution_id.clone(),
                    }
                    .into());
                }
                (None, Some(child_execution_id.to_string()))
            }
        };
        let join_set_id = response.join_set_id.clone();
        let mut counts = join_set_counts(client, staged, &join_set_id).await?;
        counts.responses = counts.responses.saturating_add(1);
        counts.dirty = true;
        staged.join_sets.insert(join_set_id.clone(), counts);
        staged.row.state = staged.row.state.after_response(
            &join_set_id,
            created_at,
            usize::try_from(counts.responses).unwrap_or(usize::MAX),
            usize::try_from(counts.join_next).unwrap_or(usize::MAX),
        );
        let outer = JoinSetResponseEventOuter {
            created_at,
            event: response,
        };
        staged.new_responses.push(ResponseRow {
            idx: count_to_i64(staged.row.response_count),
            join_set_id: join_set_id.to_string(),
            join_set_idx: count_to_i64(counts.responses - 1),
            delay_id,
            child_execution_id,
            json: to_json(&outer)?,
            created_at,
        });
        staged.row.response_count = staged.row.response_count.saturating_add(1);
        staged.dirty = true;
        Ok(())
    }

    /// Writes everything staged in one pipeline of multi-row statements. Returns the wake-ups,
    /// to publish after the commit.
    pub(crate) async fn flush(self) -> Result<Wakeups, DbError> {
        let client = self.client;
        let mut wakeups = Wakeups::default();
        let mut ins = NewExecColumns::default();
        for id in &self.create_order {
            if let Some(staged) = self.staged.get(id)
                && let Some(new) = &staged.new
            {
                ins.push(&staged.row, new)?;
            }
        }
        let mut upd = UpdateColumns::default();
        let mut events = EventColumns::default();
        let mut responses = ResponseColumns::default();
        let mut join_sets = JoinSetColumns::default();
        let mut delays = DelayColumns::default();
        let mut closed = ClosedDelayColumns::default();
        for (execution_id, staged) in &self.staged {
            let id = execution_id.as_str();
            if staged.new.is_none() && staged.dirty {
                upd.push(&staged.row)?;
            }
            for e in &staged.new_events {
                events.ids.push(id);
                events.versions.push(e.version);
                events.is_history.push(e.is_history);
                events.json.push(&e.json);
            }
            for r in &staged.new_responses {
                responses.ids.push(id);
                responses.idx.push(r.idx);
                responses.join_set_ids.push(&r.join_set_id);
                responses.join_set_idx.push(r.join_set_idx);
                responses.delay_ids.push(r.delay_id.as_deref());
                responses.child_ids.push(r.child_execution_id.as_deref());
                responses.json.push(&r.json);
            }
            for (join_set_id, counts) in &staged.join_sets {
                if counts.dirty {
                    join_sets.ids.push(id);
                    join_sets.join_set_ids.push(join_set_id.to_string());
                    join_sets.join_next.push(count_to_i64(counts.join_next));
                    join_sets.responses.push(count_to_i64(counts.responses));
                }
            }
            for d in &staged.new_delays {
                delays.ids.push(id);
                delays.delay_ids.push(d.delay_id.to_string());
                delays.join_set_ids.push(d.join_set_id.to_string());
                delays.expires_at.push(micros(d.expires_at));
                delays.expires_at_ns.push(sub_micros(d.expires_at));
                delays.is_open.push(d.is_open);
            }
            for delay_id in &staged.closed_delays {
                closed.ids.push(id);
                closed.delay_ids.push(delay_id.to_string());
            }
            // The same wake-ups as the other backends: new responses, a new `Finished`, a new
            // `PendingAt` state.
            if !staged.new_responses.is_empty() {
                wakeups.responses(id);
            }
            let new_state = &staged.row.state.pending_state;
            let old_state = staged.old_state.as_ref();
            if new_state.is_finished() && old_state.is_none_or(|s| !s.is_finished()) {
                wakeups.finished(id);
            }
            if let PendingState::PendingAt { scheduled_at } = new_state
                && old_state != Some(new_state)
            {
                wakeups.pending(&staged.row.ffqn, *scheduled_at);
            }
        }

        // Prepare first (cached per connection), then send every statement in order in one
        // pipeline: the first failing statement is the one whose error is reported.
        let sql: [Option<&str>; 7] = [
            (!ins.ids.is_empty()).then_some(INSERT_EXECUTIONS),
            (!upd.ids.is_empty()).then_some(UPDATE_EXECUTIONS),
            (!events.ids.is_empty()).then_some(INSERT_EVENTS),
            (!responses.ids.is_empty()).then_some(INSERT_RESPONSES),
            (!join_sets.ids.is_empty()).then_some(UPSERT_JOIN_SETS),
            (!delays.ids.is_empty()).then_some(INSERT_DELAYS),
            (!closed.ids.is_empty()).then_some(CLOSE_DELAYS),
        ];
        let mut prepared = Vec::with_capacity(sql.len());
        for s in sql {
            prepared.push(s.map(|s| client.prepare_cached(s)));
        }
        let mut statements: [Option<Statement>; 7] = Default::default();
        for (slot, p) in statements.iter_mut().zip(prepared) {
            if let Some(p) = p {
                *slot = Some(p.await.map_err(map_pg_error)?);
            }
        }
        let p0: [&(dyn ToSql + Sync); 16] = [
            &ins.ids,
            &ins.ffqns,
            &ins.created_at,
            &ins.created_at_ns,
            &ins.scheduled_at,
            &ins.scheduled_at_ns,
            &ins.is_top_level,
            &ins.next_version,
            &ins.state_kind,
            &ins.pending_at,
            &ins.lock_expires_at,
            &ins.state_json,
            &ins.max_retries,
            &ins.backoff_ns,
            &ins.parent_ids,
            &ins.parent_join_set_ids,
        ];
        let p1: [&(dyn ToSql + Sync); 8] = [
            &upd.ids,
            &upd.next_version,
            &upd.state_kind,
            &upd.pending_at,
            &upd.lock_expires_at,
            &upd.state_json,
            &upd.temporary_event_count,
            &upd.response_count,
        ];
        let p2: [&(dyn ToSql + Sync); 4] = [
            &events.ids,
            &events.versions,
            &events.is_history,
            &events.json,
        ];
        let p3: [&(dyn ToSql + Sync); 7] = [
            &responses.ids,
            &responses.idx,
            &responses.join_set_ids,
            &responses.join_set_idx,
            &responses.delay_ids,
            &responses.child_ids,
            &responses.json,
        ];
        let p4: [&(dyn ToSql + Sync); 4] = [
            &join_sets.ids,
            &join_sets.join_set_ids,
            &join_sets.join_next,
            &join_sets.responses,
        ];
        let p5: [&(dyn ToSql + Sync); 6] = [
            &delays.ids,
            &delays.delay_ids,
            &delays.join_set_ids,
            &delays.expires_at,
            &delays.expires_at_ns,
            &delays.is_open,
        ];
        let p6: [&(dyn ToSql + Sync); 2] = [&closed.ids, &closed.delay_ids];
        let [s0, s1, s2, s3, s4, s5, s6] = statements;
        let results = tokio::join!(
            biased;
            execute(client, s0, &p0),
            execute(client, s1, &p1),
            execute(client, s2, &p2),
            execute(client, s3, &p3),
            execute(client, s4, &p4),
            execute(client, s5, &p5),
            execute(client, s6, &p6),
        );
        first_error([
            results.0, results.1, results.2, results.3, results.4, results.5, results.6,
        ])?;
        Ok(wakeups)
    }
}

/// Runs a prepared statement, or nothing when there is none.
async fn execute(
    client: &Transaction<'_>,
    statement: Option<Statement>,
    params: &[&(dyn ToSql + Sync)],
) -> Result<(), tokio_postgres::Error> {
    match statement {
        Some(statement) => client.execute(&statement, params).await.map(|_| ()),
        None => Ok(()),
    }
}

/// The first real error of a pipeline: statements after a failed one fail with "current
/// transaction is aborted", which says nothing.
pub(crate) fn first_error<const N: usize>(
    results: [Result<(), tokio_postgres::Error>; N],
) -> Result<(), DbError> {
    let mut aborted = None;
    for result in results {
        if let Err(e) = result {
            if e.code() == Some(&SqlState::IN_FAILED_SQL_TRANSACTION) {
                aborted.get_or_insert(e);
            } else {
                return Err(map_pg_error(e));
            }
        }
    }
    match aborted {
        Some(e) => Err(map_pg_error(e)),
        None => Ok(()),
    }
}

/// Whether `delay_id` was requested by `execution_id`, and whether it has a response.
async fn delay_status(
    client: &Transaction<'_>,
    execution_id: &ExecutionId,
    delay_id: &DelayId,
) -> Result<(bool, bool), DbError> {
    let stmt = client
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM t_delay WHERE execution_id = $1 AND delay_id = $2), \
             EXISTS (SELECT 1 FROM t_response WHERE execution_id = $1 AND delay_id = $2)",
        )
        .await
        .map_err(map_pg_error)?;
    let row = client
        .query_one(&stmt, &[&execution_id.as_str(), &delay_id.to_string()])
        .await
        .map_err(map_pg_error)?;
    Ok((
        row.try_get(0).map_err(map_pg_error)?,
        row.try_get(1).map_err(map_pg_error)?,
    ))
}

/// The counts of a join set (read once per transaction, then kept staged).
async fn join_set_counts(
    client: &Transaction<'_>,
    staged: &mut Staged,
    join_set_id: &JoinSetId,
) -> Result<JoinSetCounts, DbError> {
    if let Some(counts) = staged.join_sets.get(join_set_id) {
        return Ok(*counts);
    }
    let counts = if staged.new.is_some() {
        JoinSetCounts {
            join_next: 0,
            responses: 0,
            stored_responses: 0,
            dirty: false,
        }
    } else {
        let stmt = client
            .prepare_cached(
                "SELECT join_next_count, response_count FROM t_join_set \
                 WHERE execution_id = $1 AND join_set_id = $2",
            )
            .await
            .map_err(map_pg_error)?;
        let row = client
            .query_opt(
                &stmt,
                &[&staged.row.execution_id.as_str(), &join_set_id.to_string()],
            )
            .await
            .map_err(map_pg_error)?;
        match row {
            Some(row) => {
                let join_next =
                    i64_to_count(row.try_get(0).map_err(map_pg_error)?, "join_next_count")?;
                let responses =
                    i64_to_count(row.try_get(1).map_err(map_pg_error)?, "response_count")?;
                JoinSetCounts {
                    join_next,
                    responses,
                    stored_responses: responses,
                    dirty: false,
                }
            }
            None => JoinSetCounts {
                join_next: 0,
                responses: 0,
                stored_responses: 0,
                dirty: false,
            },
        }
    };
    staged.join_sets.insert(join_set_id.clone(), counts);
    Ok(counts)
}

/// The arrival time of the response with index `join_set_idx` within `join_set_id`.
async fn response_created_at(
    client: &Transaction<'_>,
    staged: &Staged,
    join_set_id: &JoinSetId,
    join_set_idx: u64,
) -> Result<DateTime<Utc>, DbError> {
    let stored = staged
        .join_sets
        .get(join_set_id)
        .map_or(0, |c| c.stored_responses);
    let js = join_set_id.to_string();
    if join_set_idx >= stored {
        let idx = count_to_i64(join_set_idx);
        return staged
            .new_responses
            .iter()
            .find(|r| r.join_set_id == js && r.join_set_idx == idx)
            .map(|r| r.created_at)
            .ok_or_else(|| {
                corrupt(format!(
                    "response {join_set_idx} of join set {join_set_id} of {} is missing",
                    staged.row.execution_id
                ))
            });
    }
    let stmt = client
        .prepare_cached(
            "SELECT response_json FROM t_response \
             WHERE execution_id = $1 AND join_set_id = $2 AND join_set_idx = $3",
        )
        .await
        .map_err(map_pg_error)?;
    let row = client
        .query_opt(
            &stmt,
            &[
                &staged.row.execution_id.as_str(),
                &js,
                &count_to_i64(join_set_idx),
            ],
        )
        .await
        .map_err(map_pg_error)?
        .ok_or_else(|| {
            corrupt(format!(
                "response {join_set_idx} of join set {join_set_id} of {} is missing",
                staged.row.execution_id
            ))
        })?;
    let json: &str = row.try_get(0).map_err(map_pg_error)?;
    let response: JoinSetResponseEventOuter = from_json(json, "response")?;
    Ok(response.created_at)
}

const INSERT_EXECUTIONS: &str = "INSERT INTO t_execution (execution_id, ffqn, created_at, \
    created_at_ns, scheduled_at, scheduled_at_ns, is_top_level, next_version, state_kind, \
    pending_at, lock_expires_at, state_json, temporary_event_count, response_count, max_retries, \
    retry_exp_backoff_ns, parent_execution_id, parent_join_set_id) \
    SELECT u.id, u.ffqn, u.created_at, u.created_at_ns, u.scheduled_at, u.scheduled_at_ns, \
    u.is_top_level, u.next_version, u.state_kind, u.pending_at, u.lock_expires_at, u.state_json, \
    0, 0, u.max_retries, u.backoff_ns, u.parent_id, u.parent_join_set_id \
    FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int2[], $5::int8[], $6::int2[], \
    $7::bool[], $8::int8[], $9::int2[], $10::int8[], $11::int8[], $12::text[], $13::int8[], \
    $14::int8[], $15::text[], $16::text[]) WITH ORDINALITY AS u(id, ffqn, created_at, \
    created_at_ns, scheduled_at, scheduled_at_ns, is_top_level, next_version, state_kind, \
    pending_at, lock_expires_at, state_json, max_retries, backoff_ns, parent_id, \
    parent_join_set_id, ord) ORDER BY u.ord";

const UPDATE_EXECUTIONS: &str = "UPDATE t_execution AS t SET next_version = u.next_version, \
    state_kind = u.state_kind, pending_at = u.pending_at, lock_expires_at = u.lock_expires_at, \
    state_json = u.state_json, temporary_event_count = u.temporary_event_count, \
    response_count = u.response_count \
    FROM UNNEST($1::text[], $2::int8[], $3::int2[], $4::int8[], $5::int8[], $6::text[], \
    $7::int8[], $8::int8[]) AS u(id, next_version, state_kind, pending_at, lock_expires_at, \
    state_json, temporary_event_count, response_count) \
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

#[derive(Default)]
struct NewExecColumns<'a> {
    ids: Vec<&'a str>,
    ffqns: Vec<String>,
    created_at: Vec<i64>,
    created_at_ns: Vec<i16>,
    scheduled_at: Vec<i64>,
    scheduled_at_ns: Vec<i16>,
    is_top_level: Vec<bool>,
    next_version: Vec<i64>,
    state_kind: Vec<i16>,
    pending_at: Vec<Option<i64>>,
    lock_expires_at: Vec<Option<i64>>,
    state_json: Vec<String>,
    max_retries: Vec<i64>,
    backoff_ns: Vec<i64>,
    parent_ids: Vec<Option<String>>,
    parent_join_set_ids: Vec<Option<String>>,
}

impl<'a> NewExecColumns<'a> {
    fn push(&mut self, row: &'a ExecRow, new: &NewExecution) -> Result<(), DbError> {
        let (state_kind, pending_at, lock_expires_at) = state_columns(&row.state.pending_state);
        self.ids.push(row.execution_id.as_str());
        self.ffqns.push(row.ffqn.to_string());
        self.created_at.push(micros(new.created_at));
        self.created_at_ns.push(sub_micros(new.created_at));
        self.scheduled_at.push(micros(new.scheduled_at));
        self.scheduled_at_ns.push(sub_micros(new.scheduled_at));
        self.is_top_level.push(row.execution_id.is_top_level());
        self.next_version
            .push(version_to_i64(row.state.next_version));
        self.state_kind.push(state_kind);
        self.pending_at.push(pending_at);
        self.lock_expires_at.push(lock_expires_at);
        self.state_json.push(to_json(&row.state.pending_state)?);
        self.max_retries.push(i64::from(row.max_retries));
        self.backoff_ns
            .push(duration_to_nanos(row.retry_exp_backoff));
        self.parent_ids
            .push(row.parent.as_ref().map(|(id, _)| id.to_string()));
        self.parent_join_set_ids
            .push(row.parent.as_ref().map(|(_, js)| js.to_string()));
        Ok(())
    }
}

#[derive(Default)]
struct UpdateColumns<'a> {
    ids: Vec<&'a str>,
    next_version: Vec<i64>,
    state_kind: Vec<i16>,
    pending_at: Vec<Option<i64>>,
    lock_expires_at: Vec<Option<i64>>,
    state_json: Vec<String>,
    temporary_event_count: Vec<i64>,
    response_count: Vec<i64>,
}

impl<'a> UpdateColumns<'a> {
    fn push(&mut self, row: &'a ExecRow) -> Result<(), DbError> {
        let (state_kind, pending_at, lock_expires_at) = state_columns(&row.state.pending_state);
        self.ids.push(row.execution_id.as_str());
        self.next_version
            .push(version_to_i64(row.state.next_version));
        self.state_kind.push(state_kind);
        self.pending_at.push(pending_at);
        self.lock_expires_at.push(lock_expires_at);
        self.state_json.push(to_json(&row.state.pending_state)?);
        self.temporary_event_count
            .push(i64::from(row.temporary_event_count));
        self.response_count.push(count_to_i64(row.response_count));
        Ok(())
    }
}

#[derive(Default)]
struct EventColumns<'a> {
    ids: Vec<&'a str>,
    versions: Vec<i64>,
    is_history: Vec<bool>,
    json: Vec<&'a str>,
}

#[derive(Default)]
struct ResponseColumns<'a> {
    ids: Vec<&'a str>,
    idx: Vec<i64>,
    join_set_ids: Vec<&'a str>,
    join_set_idx: Vec<i64>,
    delay_ids: Vec<Option<&'a str>>,
    child_ids: Vec<Option<&'a str>>,
    json: Vec<&'a str>,
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
