//! One write as the writer thread runs it, inside the batch's transaction and its own
//! savepoint: load the rows its [`Keys`] name, let [`kernel::plan`] decide, persist the plan.
//! The rules are the kernel's; this module only reads and writes rows.

use crate::{
    codec::{
        StateColumns, duration_to_sql, event_join_set, event_kind, from_micros, micros,
        response_keys, version_to_sql,
    },
    error::{Result, SqliteError},
    reads,
};
use concepts::{
    CreateRequest, DelayId, DuplicateKind, ExecutionEvent, ExecutionId, Version,
    kernel::{
        self, DelayRow, ExecutionChange, ExecutionRow, JoinSetCounters, JoinSetKey, JoinSetRow,
        Keys, Snapshot, Wakeup, Write, WritePlan,
    },
};
use rusqlite::{CachedStatement, Connection, OptionalExtension, params};

/// The writer's view of one command: its connection (inside the batch transaction) and the
/// wake-ups that are delivered if the batch commits.
pub(crate) struct WriteCtx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) wakeups: &'a mut Vec<Wakeup>,
}

/// A statement taken from the connection's cache once per write, not once per row: a lookup
/// hashes the whole SQL text, and a batch of creates runs each statement thousands of times.
type Reused<'c> = Option<CachedStatement<'c>>;

/// The statement in `slot`, taken from the cache on first use.
fn reused<'s, 'c>(
    conn: &'c Connection,
    slot: &'s mut Reused<'c>,
    sql: &str,
) -> Result<&'s mut CachedStatement<'c>> {
    let stmt = match slot.take() {
        Some(stmt) => stmt,
        None => conn.prepare_cached(sql)?,
    };
    Ok(slot.insert(stmt))
}

impl<'c> WriteCtx<'c> {
    /// Loads what `keys` (the keys of `write`) name and what its follow-up keys name, plans
    /// `write` and persists the plan; keeps its wake-ups for after the commit and returns the
    /// write's reply.
    pub(crate) fn write<W: Write>(&mut self, write: W, keys: &Keys) -> Result<W::Reply> {
        let mut snapshot = Snapshot::default();
        self.load(keys, &mut snapshot)?;
        if let Some(more) = write.follow_up_keys(&snapshot) {
            self.load(&more, &mut snapshot)?;
        }
        let (mut plan, reply) = kernel::plan(&snapshot, write)?;
        self.persist(&plan)?;
        self.wakeups.extend(plan.wakeups.drain(..));
        Ok(reply)
    }

    /// Adds the rows `keys` name to `snapshot`. Every lookup is a prepared statement on an
    /// index, inside the write's transaction.
    fn load(&self, keys: &Keys, snapshot: &mut Snapshot) -> Result<()> {
        for execution_id in &keys.executions {
            if let Some(row) = reads::execution_row(self.conn, execution_id)? {
                snapshot.add_execution(row);
            }
        }
        self.load_existing_creations(&keys.new_executions, snapshot)?;
        for root in &keys.subtrees {
            self.load_subtree(root, snapshot)?;
        }
        self.load_finished_results(&keys.finished_results, snapshot)?;
        self.load_open_delays(&keys.open_delays, snapshot)?;
        if let Some(query) = &keys.prune {
            self.load_prune_candidates(query, snapshot)?;
        }
        for key in &keys.join_sets {
            let row = self.join_set(key)?;
            snapshot
                .join_sets
                .insert((key.execution_id.clone(), key.join_set_id.clone()), row);
        }
        for (execution_id, delay_id) in &keys.delays {
            let row = self.delay(execution_id, *delay_id)?;
            snapshot
                .delays
                .insert((execution_id.clone(), *delay_id), row);
        }
        for (execution_id, child_id) in &keys.child_responses {
            let mut stmt = self.conn.prepare_cached(
                "SELECT 1 FROM t_response WHERE execution_id = ?1 AND child_execution_id = ?2",
            )?;
            if stmt.exists(params![execution_id.as_str(), child_id.as_str()])? {
                snapshot
                    .child_responses
                    .insert((execution_id.clone(), child_id.clone()));
            }
        }
        if let Some(due) = &keys.due {
            let rows = reads::due_rows(self.conn, &due.ffqns, due.pending_at_or_sooner, due.limit)?;
            // Only the rows: the histories are read after the commit, on a reader (see
            // `reads::locked_executions`), so that the writer never waits for a long log.
            for row in rows {
                snapshot.add_due(row);
            }
        }
        Ok(())
    }

    /// The counters of a join set (one `t_join_set` lookup) and the arrival times of the
    /// responses its next `JoinNext` events consume (by `join_set_idx`; the `created_at` column
    /// is whole microseconds, as every clock that feeds storage is).
    fn join_set(&self, key: &JoinSetKey) -> Result<JoinSetRow> {
        let (execution_id, join_set_id) = (key.execution_id.as_str(), key.join_set_id.to_string());
        let mut stmt = self.conn.prepare_cached(
            "SELECT join_next_count, response_count FROM t_join_set \
             WHERE execution_id = ?1 AND join_set_id = ?2",
        )?;
        let counts: Option<(i64, i64)> = stmt
            .query_row(params![execution_id, join_set_id], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()?;
        let (join_nexts, responses) = counts.unwrap_or_default();
        let mut next_response_times = Vec::new();
        if key.next_responses > 0 && responses > join_nexts {
            let mut stmt = self.conn.prepare_cached(
                "SELECT created_at FROM t_response WHERE execution_id = ?1 AND join_set_id = ?2 \
                 AND join_set_idx >= ?3 ORDER BY join_set_idx LIMIT ?4",
            )?;
            let limit = i64::try_from(key.next_responses).unwrap_or(i64::MAX);
            let mut rows = stmt.query(params![execution_id, join_set_id, join_nexts, limit])?;
            while let Some(row) = rows.next()? {
                next_response_times.push(from_micros(row.get(0)?)?);
            }
        }
        let count = |value: i64| u64::try_from(value).unwrap_or(0);
        Ok(JoinSetRow {
            counters: JoinSetCounters {
                join_next_count: count(join_nexts),
                response_count: count(responses),
            },
            next_response_times,
        })
    }

    /// Whether a delay was requested (`t_delay`) and answered (`t_response`).
    fn delay(&self, execution_id: &ExecutionId, delay_id: DelayId) -> Result<DelayRow> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM t_delay WHERE execution_id = ?1 AND delay_id = ?2), \
             EXISTS(SELECT 1 FROM t_response WHERE execution_id = ?1 AND delay_id = ?2)",
        )?;
        Ok(stmt.query_row(
            params![execution_id.as_str(), delay_id.to_string()],
            |row| {
                Ok(DelayRow {
                    requested: row.get(0)?,
                    answered: row.get(1)?,
                })
            },
        )?)
    }

    /// Writes every change of `plan`, then deletes what it prunes.
    fn persist(&self, plan: &WritePlan) -> Result<()> {
        let (mut insert_state, mut update_state, mut insert_event) = (None, None, None);
        for change in &plan.changes {
            if let Some(req) = &change.created {
                self.insert_execution(&mut insert_state, &change.row, req)?;
            } else if !change.events.is_empty() || change.state_changed() {
                self.update_execution(&mut update_state, &change.row)?;
            }
            for (version, event) in &change.events {
                self.insert_event(&mut insert_event, &change.row.execution_id, *version, event)?;
            }
            self.persist_responses_and_delays(change)?;
        }
        self.delete_executions(&plan.deleted)
    }

    /// The responses, join-set counters, requested and closed delays of one execution's change.
    fn persist_responses_and_delays(&self, change: &ExecutionChange) -> Result<()> {
        let execution_id = change.row.execution_id.as_str();
        for (join_set_id, counters) in &change.join_sets {
            let mut stmt = self.conn.prepare_cached(
                "INSERT INTO t_join_set (execution_id, join_set_id, join_next_count, \
                 response_count) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO UPDATE SET \
                 join_next_count = excluded.join_next_count, response_count = excluded.response_count",
            )?;
            let count = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
            stmt.execute(params![
                execution_id,
                join_set_id.to_string(),
                count(counters.join_next_count),
                count(counters.response_count),
            ])?;
        }
        for planned in &change.responses {
            let (delay_id, child_id) = response_keys(&planned.response.event.event);
            let mut stmt = self.conn.prepare_cached(
                "INSERT INTO t_response (execution_id, created_at, join_set_id, join_set_idx, \
                 delay_id, child_execution_id, response_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            stmt.execute(params![
                execution_id,
                micros(planned.response.created_at),
                planned.response.event.join_set_id.to_string(),
                i64::try_from(planned.join_set_idx).unwrap_or(i64::MAX),
                delay_id,
                child_id,
                serde_json::to_string(&planned.response)?,
            ])?;
        }
        for delay in &change.delays_requested {
            let mut stmt = self.conn.prepare_cached(
                "INSERT INTO t_delay (execution_id, delay_id, join_set_id, expires_at, is_open) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            stmt.execute(params![
                execution_id,
                delay.delay_id.to_string(),
                delay.join_set_id.to_string(),
                micros(delay.expires_at),
                delay.open,
            ])?;
        }
        for delay_id in &change.delays_closed {
            let mut stmt = self.conn.prepare_cached(
                "UPDATE t_delay SET is_open = 0 WHERE execution_id = ?1 AND delay_id = ?2",
            )?;
            stmt.execute(params![execution_id, delay_id.to_string()])?;
        }
        Ok(())
    }

    /// Inserts the state row of a new execution. The kernel refused a stored id already (it was
    /// loaded); the primary key stays the last guard and makes it a duplicate too.
    fn insert_execution(
        &self,
        stmt: &mut Reused<'c>,
        row: &ExecutionRow,
        req: &CreateRequest,
    ) -> Result<()> {
        let columns = StateColumns::of(&row.state.pending_state)?;
        let (parent_id, parent_join_set) = match &row.parent {
            Some((id, join_set)) => (Some(id.to_string()), Some(join_set.to_string())),
            None => (None, None),
        };
        let sql = "INSERT INTO t_execution_state (execution_id, ffqn, component_id, next_version, \
             state, pending_at, lock_expires_at, executor_id, run_id, join_set_id, result_kind, \
             state_json, temporary_event_count, max_retries, retry_exp_backoff_us, \
             parent_execution_id, parent_join_set_id, is_top_level, created_at, scheduled_at, \
             finished_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
             ?15, ?16, ?17, ?18, ?19, ?20, ?21)";
        reused(self.conn, stmt, sql)?
            .execute(params![
                row.execution_id.as_str(),
                row.ffqn.to_string(),
                req.component_id.to_string(),
                version_to_sql(row.state.next_version),
                columns.state,
                columns.pending_at,
                columns.lock_expires_at,
                columns.executor_id,
                columns.run_id,
                columns.join_set_id,
                columns.result_kind,
                columns.json,
                i64::from(row.temporary_event_count),
                i64::from(row.max_retries),
                duration_to_sql(row.retry_exp_backoff),
                parent_id,
                parent_join_set,
                row.execution_id.is_top_level(),
                micros(req.created_at),
                micros(req.scheduled_at),
                columns.finished_at,
            ])
            .map_err(|err| {
                SqliteError::from_insert(err, || DuplicateKind::Execution(row.execution_id.clone()))
            })?;
        Ok(())
    }

    /// Writes the state row of an existing execution back.
    fn update_execution(&self, stmt: &mut Reused<'c>, row: &ExecutionRow) -> Result<()> {
        let columns = StateColumns::of(&row.state.pending_state)?;
        let sql = "UPDATE t_execution_state SET next_version = ?2, state = ?3, pending_at = ?4, \
             lock_expires_at = ?5, executor_id = ?6, run_id = ?7, join_set_id = ?8, \
             result_kind = ?9, state_json = ?10, temporary_event_count = ?11, finished_at = ?12 \
             WHERE execution_id = ?1";
        let changed = reused(self.conn, stmt, sql)?.execute(params![
            row.execution_id.as_str(),
            version_to_sql(row.state.next_version),
            columns.state,
            columns.pending_at,
            columns.lock_expires_at,
            columns.executor_id,
            columns.run_id,
            columns.join_set_id,
            columns.result_kind,
            columns.json,
            i64::from(row.temporary_event_count),
            columns.finished_at,
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

    fn insert_event(
        &self,
        stmt: &mut Reused<'c>,
        execution_id: &ExecutionId,
        version: Version,
        event: &ExecutionEvent,
    ) -> Result<()> {
        let sql = "INSERT INTO t_event (execution_id, version, created_at, kind, join_set_id, \
             event_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
        reused(self.conn, stmt, sql)?.execute(params![
            execution_id.as_str(),
            version_to_sql(version),
            micros(event.created_at),
            event_kind(&event.event),
            event_join_set(&event.event),
            serde_json::to_string(event)?,
        ])?;
        Ok(())
    }
}
