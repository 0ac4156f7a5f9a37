//! The write operations, run by the writer thread on its connection inside the batch's
//! transaction, each inside its own savepoint. Validation and state transitions are those of
//! `concepts::ExecutionState`, so error kinds agree with every other backend.

use crate::{
    codec::{
        StateColumns, StateRow, duration_to_sql, event_join_set, event_kind, micros, response_keys,
        version_to_sql,
    },
    error::{Result, SqliteError},
    notify::Note,
    reads,
};
use chrono::{DateTime, Utc};
use concepts::{
    CreateRequest, DuplicateKind, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionState,
    FunctionFqn, HistoryEvent, JoinSetRequest, JoinSetResponse, JoinSetResponseEvent,
    JoinSetResponseEventOuter, LockPendingRequest, Locked, LockedExecution, PendingState, RunId,
    ValidationError, Version,
};
use rusqlite::{Connection, params};

/// The writer's view of one operation: its connection (inside the batch transaction) and the
/// notifications it will send if it commits.
pub(crate) struct WriteCtx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) notes: &'a mut Vec<Note>,
}

impl WriteCtx<'_> {
    /// Creates an execution; returns `Version(1)`.
    pub(crate) fn create(&mut self, req: &CreateRequest) -> Result<Version> {
        let created = req.to_created_event();
        let initial = ExecutionState {
            next_version: Version(0),
            pending_state: PendingState::PendingAt {
                scheduled_at: req.scheduled_at,
            },
        };
        let state = initial.after_append(&created, |_| None);
        let columns = StateColumns::of(&state.pending_state)?;
        let (parent_id, parent_join_set) = match &req.parent {
            Some((id, join_set)) => (Some(id.to_string()), Some(join_set.to_string())),
            None => (None, None),
        };
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO t_execution_state (execution_id, ffqn, component_id, next_version, state, \
             pending_at, lock_expires_at, executor_id, run_id, join_set_id, result_kind, \
             state_json, temporary_event_count, max_retries, retry_exp_backoff_us, \
             parent_execution_id, parent_join_set_id, is_top_level, created_at, scheduled_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, ?13, ?14, ?15, ?16, \
             ?17, ?18, ?19)",
        )?;
        stmt.execute(params![
            req.execution_id.as_str(),
            req.ffqn.to_string(),
            req.component_id.to_string(),
            version_to_sql(state.next_version),
            columns.state,
            columns.pending_at,
            columns.lock_expires_at,
            columns.executor_id,
            columns.run_id,
            columns.join_set_id,
            columns.result_kind,
            columns.json,
            i64::from(req.max_retries),
            duration_to_sql(req.retry_exp_backoff),
            parent_id,
            parent_join_set,
            req.execution_id.is_top_level(),
            micros(req.created_at),
            micros(req.scheduled_at),
        ])
        .map_err(|err| {
            SqliteError::from_insert(err, || DuplicateKind::Execution(req.execution_id.clone()))
        })?;
        self.insert_event(&req.execution_id, Version(0), &created)?;
        self.notes.push(Note::Pending {
            ffqn: req.ffqn.clone(),
            at: req.scheduled_at,
        });
        Ok(state.next_version)
    }

    fn insert_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
        event: &ExecutionEvent,
    ) -> Result<()> {
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO t_event (execution_id, version, created_at, kind, join_set_id, event_json) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        stmt.execute(params![
            execution_id.as_str(),
            version_to_sql(version),
            micros(event.created_at),
            event_kind(&event.event),
            event_join_set(&event.event),
            serde_json::to_string(event)?,
        ])?;
        Ok(())
    }

    /// Writes the state row back after appends.
    pub(crate) fn save_state(&self, row: &StateRow) -> Result<()> {
        let columns = StateColumns::of(&row.pending_state)?;
        let mut stmt = self.conn.prepare_cached(
            "UPDATE t_execution_state SET next_version = ?2, state = ?3, pending_at = ?4, \
             lock_expires_at = ?5, executor_id = ?6, run_id = ?7, join_set_id = ?8, \
             result_kind = ?9, state_json = ?10, temporary_event_count = ?11 \
             WHERE execution_id = ?1",
        )?;
        let changed = stmt.execute(params![
            row.execution_id.as_str(),
            version_to_sql(row.next_version),
            columns.state,
            columns.pending_at,
            columns.lock_expires_at,
            columns.executor_id,
            columns.run_id,
            columns.join_set_id,
            columns.result_kind,
            columns.json,
            i64::from(row.temporary_event_count),
        ])?;
        if changed == 1 {
            Ok(())
        } else {
            Err(SqliteError::corrupt(format!(
                "execution {} has no state row",
                row.execution_id
            )))
        }
    }

    /// Validates and appends one event at `version` to the log of `row`, updating `row` (the
    /// caller saves it).
    pub(crate) fn append(
        &mut self,
        row: &mut StateRow,
        version: Version,
        created_at: DateTime<Utc>,
        event: ExecutionEventInner,
    ) -> Result<()> {
        let state = row.execution_state();
        state.validate_append(version, created_at, &event)?;
        let delay = match &event {
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
            } => Some((delay_id.to_string(), join_set_id.to_string(), *expires_at)),
            _ => None,
        };
        if let Some((delay_id, ..)) = &delay {
            let mut stmt = self.conn.prepare_cached(
                "SELECT 1 FROM t_delay WHERE execution_id = ?1 AND delay_id = ?2",
            )?;
            if stmt.exists(params![row.execution_id.as_str(), delay_id])? {
                return Err(ValidationError::InvalidRequest(format!(
                    "delay {delay_id} was already requested by execution {}",
                    row.execution_id
                ))
                .into());
            }
        }
        let event = ExecutionEvent { created_at, event };
        let mut lookup_error = None;
        let new_state = state.after_append(&event, |join_set_id| {
            let join_set_id = join_set_id.to_string();
            let lookup = reads::join_next_count(self.conn, &row.execution_id, &join_set_id)
                .and_then(|already| {
                    reads::nth_response_time(
                        self.conn,
                        &row.execution_id,
                        &join_set_id,
                        already + 1,
                    )
                });
            lookup.unwrap_or_else(|err| {
                lookup_error = Some(err);
                None
            })
        });
        if let Some(err) = lookup_error {
            return Err(err);
        }
        self.insert_event(&row.execution_id, row.next_version, &event)?;
        if let Some((delay_id, join_set_id, expires_at)) = delay {
            let mut answered = self.conn.prepare_cached(
                "SELECT 1 FROM t_response WHERE execution_id = ?1 AND delay_id = ?2",
            )?;
            let is_open = !answered.exists(params![row.execution_id.as_str(), delay_id])?;
            let mut stmt = self.conn.prepare_cached(
                "INSERT INTO t_delay (execution_id, delay_id, join_set_id, expires_at, is_open) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            stmt.execute(params![
                row.execution_id.as_str(),
                delay_id,
                join_set_id,
                micros(expires_at),
                is_open
            ])?;
        }
        if event.event.is_temporary_event() {
            row.temporary_event_count = row.temporary_event_count.saturating_add(1);
        }
        self.note_transition(
            &row.ffqn,
            &row.execution_id,
            &row.pending_state,
            &new_state.pending_state,
        );
        row.next_version = new_state.next_version;
        row.pending_state = new_state.pending_state;
        Ok(())
    }

    fn note_transition(
        &mut self,
        ffqn: &FunctionFqn,
        execution_id: &ExecutionId,
        old: &PendingState,
        new: &PendingState,
    ) {
        if old == new {
            return;
        }
        match new {
            PendingState::PendingAt { scheduled_at } => {
                self.notes.push(Note::Pending {
                    ffqn: ffqn.clone(),
                    at: *scheduled_at,
                });
            }
            PendingState::Finished { .. } => self.notes.push(Note::Finished(execution_id.clone())),
            PendingState::Locked { .. } | PendingState::BlockedByJoinSet { .. } => {}
        }
    }

    /// Appends `batch` in order from `version`, all to one execution; returns the next version.
    pub(crate) fn append_batch(
        &mut self,
        execution_id: &ExecutionId,
        version: Version,
        created_at: DateTime<Utc>,
        batch: Vec<ExecutionEventInner>,
    ) -> Result<Version> {
        let mut row = reads::state_row(self.conn, execution_id)?;
        let mut version = version;
        for event in batch {
            self.append(&mut row, version, created_at, event)?;
            version = row.next_version;
        }
        self.save_state(&row)?;
        Ok(row.next_version)
    }

    /// Stores a response beside the log and moves a blocked execution on.
    pub(crate) fn append_response(
        &mut self,
        created_at: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<()> {
        let mut row = reads::state_row(self.conn, execution_id)?;
        let (delay_id, child_id) = response_keys(&response.event);
        let join_set_id = response.join_set_id.clone();
        let outer = JoinSetResponseEventOuter {
            created_at,
            event: response,
        };
        let mut stmt = self.conn.prepare_cached(
            "INSERT INTO t_response (execution_id, created_at, join_set_id, delay_id, \
             child_execution_id, response_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        stmt.execute(params![
            execution_id.as_str(),
            micros(created_at),
            join_set_id.to_string(),
            delay_id,
            child_id,
            serde_json::to_string(&outer)?,
        ])
        .map_err(|err| {
            SqliteError::from_insert(err, || match &outer.event.event {
                JoinSetResponse::DelayFinished { delay_id } => DuplicateKind::DelayResponse {
                    execution_id: execution_id.clone(),
                    delay_id: *delay_id,
                },
                JoinSetResponse::ChildExecutionFinished {
                    child_execution_id, ..
                } => DuplicateKind::ChildResponse {
                    execution_id: execution_id.clone(),
                    child_execution_id: child_execution_id.clone(),
                },
            })
        })?;
        if let Some(delay_id) = &delay_id {
            let mut stmt = self.conn.prepare_cached(
                "UPDATE t_delay SET is_open = 0 WHERE execution_id = ?1 AND delay_id = ?2",
            )?;
            stmt.execute(params![execution_id.as_str(), delay_id])?;
        }
        // Only an execution blocked on this join set can change; skip the counting otherwise.
        if matches!(&row.pending_state, PendingState::BlockedByJoinSet { join_set_id: blocked, .. } if *blocked == join_set_id)
        {
            let key = join_set_id.to_string();
            let responses = reads::response_count(self.conn, execution_id, &key)?;
            let join_nexts = reads::join_next_count(self.conn, execution_id, &key)?;
            let new_state = row.execution_state().after_response(
                &join_set_id,
                created_at,
                responses,
                join_nexts,
            );
            if new_state.pending_state != row.pending_state {
                self.note_transition(
                    &row.ffqn,
                    execution_id,
                    &row.pending_state,
                    &new_state.pending_state,
                );
                row.pending_state = new_state.pending_state;
                self.save_state(&row)?;
            }
        }
        self.notes.push(Note::Response(execution_id.clone()));
        Ok(())
    }

    /// Locks up to `batch_size` due executions, all or nothing.
    pub(crate) fn lock_pending(
        &mut self,
        req: &LockPendingRequest,
    ) -> Result<Vec<LockedExecution>> {
        let &LockPendingRequest {
            batch_size,
            pending_at_or_sooner,
            ref ffqns,
            now,
            ref component_id,
            executor_id,
            lock_expires_at,
        } = req;
        if lock_expires_at <= now {
            return Err(ValidationError::InvalidExpiryDate {
                lock_expires_at,
                now,
            }
            .into());
        }
        let candidates = reads::due_rows(self.conn, ffqns, pending_at_or_sooner, batch_size)?;
        let mut locked = Vec::with_capacity(candidates.len());
        for mut row in candidates {
            // The index keeps microseconds; a sub-microsecond later due time is not due yet.
            if row
                .pending_state
                .pending_at()
                .is_none_or(|at| at > pending_at_or_sooner)
            {
                continue;
            }
            let locked_event = Locked {
                component_id: component_id.clone(),
                executor_id,
                run_id: RunId::generate_at(now),
                lock_expires_at,
            };
            let version = row.next_version;
            self.append(
                &mut row,
                version,
                now,
                ExecutionEventInner::Locked(locked_event.clone()),
            )?;
            self.save_state(&row)?;
            locked.push(self.locked_execution(row, locked_event)?);
        }
        Ok(locked)
    }

    /// What a worker needs about an execution that was just locked.
    fn locked_execution(&self, row: StateRow, locked_event: Locked) -> Result<LockedExecution> {
        let mut events = reads::events(self.conn, &row.execution_id)?.into_iter();
        let Some(ExecutionEventInner::Created {
            params,
            metadata,
            scheduled_at,
            ..
        }) = events.next().map(|e| e.event)
        else {
            return Err(SqliteError::corrupt(format!(
                "execution {}: version 0 is not `Created`",
                row.execution_id
            )));
        };
        let event_history = events
            .filter_map(|e| match e.event {
                ExecutionEventInner::HistoryEvent { event } => Some(event),
                _ => None,
            })
            .collect();
        Ok(LockedExecution {
            event_history,
            responses: reads::responses_from(self.conn, &row.execution_id, 0)?,
            execution_id: row.execution_id,
            next_version: row.next_version,
            metadata,
            locked_event,
            ffqn: row.ffqn,
            params,
            scheduled_at,
            retry_exp_backoff: row.retry_exp_backoff,
            max_retries: row.max_retries,
            parent: row.parent,
            temporary_event_count: row.temporary_event_count,
        })
    }
}
