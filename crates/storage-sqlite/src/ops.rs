//! One write as the writer thread runs it, inside the batch's transaction: load the rows its
//! [`Keys`] name, let [`kernel::plan`] decide, persist the plan (deleting what `prune`
//! deletes).

use crate::{
    codec::{
        self, STATE_ROW_COLUMNS, duration_to_sql, event_join_set, event_kind, nullable, parsed,
        response_keys, state_columns, time,
    },
    error::{Result, SqliteError},
    reads::{self, rows},
    writer::Op,
};
use concepts::{
    DbError, DelayId, DuplicateKind, ExecutionEvent, ExecutionId, Version,
    kernel::{
        self, Assumption, DelayRow, ExecutionChange, ExecutionRow, JoinSetCounters, JoinSetKey,
        Keys, KnownRows, NewExecution, PruneQuery, Snapshot, Write, WritePlan, descendant_bounds,
        stored::{corrupt, count, event_json, from_json, micros, to_i64, to_json},
    },
};
use rusqlite::{CachedStatement, Connection, Params, params, params_from_iter, types::Value};

/// The writer's view of one command: its connection (inside the batch transaction), the
/// plans persisted in the transaction so far (what the writer persists again if it must roll
/// back another command's writes, and whose wake-ups it delivers once they commit), and the
/// rows the writer committed itself and nobody changed since (`writer.rs`), on which a write
/// is planned without loading them.
pub(crate) struct WriteCtx<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) plans: &'a mut Vec<WritePlan>,
    pub(crate) known: Option<&'a KnownRows>,
}

/// A statement taken from the connection's cache once per write, not once per row: a lookup
/// hashes the whole SQL text, and a batch of creates runs each statement thousands of times.
type Reused<'c> = Option<CachedStatement<'c>>;

fn reused<'s, 'c>(
    conn: &'c Connection,
    slot: &'s mut Reused<'c>,
    sql: &str,
) -> Result<&'s mut CachedStatement<'c>> {
    let stmt = slot.take().map_or_else(|| conn.prepare_cached(sql), Ok)?;
    Ok(slot.insert(stmt))
}

/// The update of a state row that stays unfinished: it does not set `finished_at` (NULL until
/// the execution finishes), which is all `ix_state_unfinished` reads (`update_execution`).
pub(crate) const UPDATE_UNFINISHED: &str = "UPDATE t_execution_state SET next_version = ?2, \
     state = ?3, pending_at = ?4, lock_expires_at = ?5, state_json = ?6, \
     temporary_event_count = ?7, response_count = ?9 WHERE execution_id = ?1";

/// The update of a state row that finished (or was finished): every column of the state.
pub(crate) const UPDATE_FINISHED: &str = "UPDATE t_execution_state SET next_version = ?2, \
     state = ?3, pending_at = ?4, lock_expires_at = ?5, state_json = ?6, \
     temporary_event_count = ?7, finished_at = ?8, response_count = ?9 WHERE execution_id = ?1";

/// The tables that hold rows of an execution besides its state row, each keyed (or indexed)
/// by `execution_id` first, so that each delete of a pruned execution is a range of one index.
const DELETES: [&str; 4] = [
    "DELETE FROM t_event WHERE execution_id = ?1",
    "DELETE FROM t_response WHERE execution_id = ?1",
    "DELETE FROM t_join_set WHERE execution_id = ?1",
    "DELETE FROM t_delay WHERE execution_id = ?1",
];

/// The rows of the descendants of a root, `?1 <= id < ?2` ([`descendant_bounds`]): one range
/// of the primary key.
pub(crate) fn subtree_sql() -> String {
    format!(
        "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state \
         WHERE execution_id >= ?1 AND execution_id < ?2 ORDER BY execution_id"
    )
}

/// The prune candidates finished before `?1`, at most `?2`, after the cursor `(?3, ?4)` when
/// `with_cursor`. The literal `state = 'Finished' AND is_top_level = 1` lets the planner use
/// the partial index `ix_state_finished`; the cursor is a row value, which it seeks to.
pub(crate) fn prune_candidates_sql(with_cursor: bool) -> String {
    let cursor = if with_cursor {
        " AND (finished_at, execution_id) > (?3, ?4)"
    } else {
        ""
    };
    format!(
        "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state \
         WHERE state = 'Finished' AND is_top_level = 1 AND finished_at < ?1{cursor} \
         ORDER BY finished_at, execution_id LIMIT ?2"
    )
}

/// A kernel write and its keys, as the writer runs it.
pub(crate) struct Written<W> {
    pub(crate) write: W,
    pub(crate) keys: Keys,
}

impl<W: Write> Op for Written<W> {
    type Output = W::Reply;

    fn run(self, ctx: &mut WriteCtx<'_>) -> Result<W::Reply> {
        ctx.write(self.write, &self.keys)
    }

    // A read that fails leaves the answer to the write.
    fn answer_from_read(&self, conn: &Connection) -> Option<Result<W::Reply>> {
        if !W::ANSWERED_FROM_READ {
            return None;
        }
        let ctx = WriteCtx {
            conn,
            plans: &mut Vec::new(),
            known: None,
        };
        let mut snapshot = Snapshot::default();
        ctx.load(&self.keys, &mut snapshot).ok()?;
        let answer = self.write.answer_from_read(&snapshot)?;
        Some(answer.map_err(SqliteError::from))
    }
}

impl<'c> WriteCtx<'c> {
    /// Loads (or takes from the known rows), plans and persists `write` (whose keys are
    /// `keys`); its wake-ups wait, with its plan, for the commit.
    pub(crate) fn write<W: Write>(&mut self, write: W, keys: &Keys) -> Result<W::Reply> {
        let mut snapshot = Snapshot::default();
        match self.known.and_then(|known| known.assume(keys, true)) {
            Some((assumed, assumption)) if self.absent(&assumption)? => snapshot = assumed,
            _ => self.load(keys, &mut snapshot)?,
        }
        if let Some(more) = write.follow_up_keys(&snapshot) {
            self.load(&more, &mut snapshot)?;
        }
        let (mut plan, reply) = kernel::plan(&snapshot, write)?;
        let persisted = self.persist(&mut plan);
        if let Some(known) = self.known {
            known.forget(&plan);
        }
        // Kept even when it failed halfway: the writer then knows there is something to undo.
        self.plans.push(plan);
        persisted?;
        Ok(reply)
    }

    /// True when the executions and join sets a write planned on known rows creates are not
    /// stored (what a load would have found; the rows themselves are as this writer left them).
    fn absent(&self, assumption: &Assumption) -> Result<bool> {
        for id in &assumption.absent {
            let sql = "SELECT 1 FROM t_execution_state WHERE execution_id = ?1";
            if self.conn.prepare_cached(sql)?.exists([id.as_str()])? {
                return Ok(false);
            }
        }
        for (id, join_set_id) in &assumption.absent_join_sets {
            let sql = "SELECT 1 FROM t_join_set WHERE execution_id = ?1 AND join_set_id = ?2";
            let params = (id.as_str(), join_set_id.to_string());
            if self.conn.prepare_cached(sql)?.exists(params)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub(crate) fn execute(&self, sql: &str, params: impl Params) -> Result<usize> {
        Ok(self.conn.prepare_cached(sql)?.execute(params)?)
    }

    /// Adds the rows `keys` name to `snapshot`. Every lookup is a prepared statement on an
    /// index, inside the write's transaction.
    fn load(&self, keys: &Keys, snapshot: &mut Snapshot) -> Result<()> {
        let conn = self.conn;
        for execution_id in &keys.executions {
            if let Some(row) = reads::execution_row(conn, execution_id)? {
                snapshot.add_execution(row);
            }
        }
        self.load_existing_creations(&keys.new_executions, snapshot)?;
        self.load_lifecycle(keys, snapshot)?;
        self.load_schedules(keys, snapshot)?;
        for key in &keys.join_sets {
            self.load_join_set(key, snapshot)?;
        }
        for key in &keys.delays {
            snapshot.add_delay(key, self.delay(key)?);
        }
        for (execution_id, child_id) in &keys.child_responses {
            let mut stmt = conn.prepare_cached(
                "SELECT 1 FROM t_response WHERE execution_id = ?1 AND child_execution_id = ?2",
            )?;
            if stmt.exists(params![execution_id.as_str(), child_id.as_str()])? {
                let pair = (execution_id.clone(), child_id.clone());
                snapshot.child_responses.insert(pair);
            }
        }
        if let Some(due) = &keys.due {
            // Only the rows: the histories are read after the commit
            // (`reads::locked_executions`), so that the writer never waits for a long log.
            let query = (&due.ffqns[..], due.pending_at_or_sooner, due.limit);
            for row in reads::due(conn, STATE_ROW_COLUMNS, query, codec::execution_row)? {
                snapshot.add_due(row);
            }
        }
        Ok(())
    }

    /// Adds the subtrees, finished results, open delays and prune candidates `keys` name.
    fn load_lifecycle(&self, keys: &Keys, snapshot: &mut Snapshot) -> Result<()> {
        let conn = self.conn;
        for root in &keys.subtrees {
            let bounds = descendant_bounds(root);
            for row in rows(conn, &subtree_sql(), bounds, codec::execution_row)? {
                snapshot.add_descendant(root, row);
            }
        }
        let results = &mut snapshot.finished_results;
        for execution_id in &keys.finished_results {
            match reads::finished_result(conn, execution_id) {
                Ok(Some(result)) => _ = results.insert(execution_id.clone(), result),
                Ok(None) | Err(SqliteError::Db(DbError::NotFound(_))) => {}
                Err(err) => return Err(err),
            }
        }
        for execution_id in &keys.open_delays {
            let sql = "SELECT delay_id FROM t_delay WHERE execution_id = ?1 AND is_open = 1 \
                       ORDER BY delay_id";
            for delay_id in rows(conn, sql, [execution_id.as_str()], |row| {
                parsed(row, 0, "delay id")
            })? {
                snapshot.add_open_delay(execution_id, delay_id);
            }
        }
        if let Some(query) = &keys.prune {
            for row in self.prune_candidates(query)? {
                snapshot.add_prune_candidate(row);
            }
        }
        Ok(())
    }

    /// The rows of the prune candidates of `query`: one range of `ix_state_finished`.
    fn prune_candidates(&self, query: &PruneQuery) -> Result<Vec<ExecutionRow>> {
        let (before, limit) = (micros(query.finished_before), to_i64(query.limit));
        let mut values: Vec<Value> = vec![before.into(), limit.into()];
        if let Some((at, id)) = &query.after {
            values.extend([micros(*at).into(), Value::Text(id.to_string())]);
        }
        let sql = prune_candidates_sql(query.after.is_some());
        let decode = codec::execution_row;
        rows(self.conn, &sql, params_from_iter(values), decode)
    }

    /// The executions among `ids` (the ones a write creates) that are stored, with their
    /// `Created` events: one prepared point lookup per id.
    fn load_existing_creations(&self, ids: &[ExecutionId], snapshot: &mut Snapshot) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {STATE_ROW_COLUMNS}, (SELECT e.event_json FROM t_event AS e \
             WHERE e.execution_id = t_execution_state.execution_id AND e.version = 0) \
             FROM t_execution_state WHERE execution_id = ?1"
        ))?;
        let created_column = STATE_ROW_COLUMNS.split(',').count();
        for execution_id in ids {
            let mut rows = stmt.query([execution_id.as_str()])?;
            let Some(row) = rows.next()? else {
                continue;
            };
            // A row without its `Created` event stays without: the kernel reports it.
            if let Some(json) = codec::text_or_null(row, created_column)? {
                let created = from_json(json, "event")?;
                snapshot.created.insert(execution_id.clone(), created);
            }
            snapshot.add_execution(codec::execution_row(row)?);
        }
        Ok(())
    }

    /// Adds the counters of a join set (one `t_join_set` lookup) and the arrival times of the
    /// responses its next `JoinNext` events consume (by `join_set_idx`; the `created_at` column
    /// is whole microseconds, as every clock that feeds storage is).
    fn load_join_set(&self, key: &JoinSetKey, snapshot: &mut Snapshot) -> Result<()> {
        let (execution_id, join_set_id) = (key.execution_id.as_str(), key.join_set_id.to_string());
        let sql = "SELECT join_next_count, response_count FROM t_join_set \
                   WHERE execution_id = ?1 AND join_set_id = ?2";
        let params = (execution_id, &join_set_id);
        let mut counts = rows(self.conn, sql, params, |row| Ok((row.get(0)?, row.get(1)?)))?;
        let (join_nexts, responses): (i64, i64) = counts.pop().unwrap_or_default();
        let next_response_times = if key.next_responses > 0 && responses > join_nexts {
            let sql = "SELECT created_at FROM t_response WHERE execution_id = ?1 \
                       AND join_set_id = ?2 AND join_set_idx >= ?3 ORDER BY join_set_idx LIMIT ?4";
            let limit = to_i64(key.next_responses);
            let params = params![execution_id, join_set_id, join_nexts, limit];
            rows(self.conn, sql, params, |row| time(row, 0))?
        } else {
            Vec::new()
        };
        let counters = JoinSetCounters {
            join_next_count: count(join_nexts, "join_next_count")?,
            response_count: count(responses, "response_count")?,
        };
        snapshot.add_join_set(key, counters, next_response_times);
        Ok(())
    }

    /// Whether a delay was requested (`t_delay`) and answered (`t_response`).
    fn delay(&self, (execution_id, delay_id): &(ExecutionId, DelayId)) -> Result<DelayRow> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT EXISTS(SELECT 1 FROM t_delay WHERE execution_id = ?1 AND delay_id = ?2), \
             EXISTS(SELECT 1 FROM t_response WHERE execution_id = ?1 AND delay_id = ?2)",
        )?;
        let params = (execution_id.as_str(), delay_id.to_string());
        let (requested, answered) = stmt.query_row(params, |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(DelayRow {
            requested,
            answered,
        })
    }

    /// Writes every change of `plan`, then deletes what it prunes; each response's place in
    /// the plan becomes the one it was stored at.
    pub(crate) fn persist(&self, plan: &mut WritePlan) -> Result<()> {
        let (mut insert_state, mut update_state, mut insert_event) = (None, [None, None], None);
        for change in &mut plan.changes {
            if let Some(created) = change.created() {
                self.insert_execution(&mut insert_state, &change.row, created)?;
            } else if change.row_changed() {
                self.update_execution(&mut update_state, &change.row)?;
            }
            for (version, event) in &change.events {
                self.insert_event(&mut insert_event, &change.row.execution_id, *version, event)?;
            }
            self.persist_responses_and_delays(change)?;
        }
        self.persist_schedules(&plan.schedules)?;
        self.delete_executions(&plan.deleted)
    }

    /// The responses, join-set counters, requested and closed delays of one execution's change.
    fn persist_responses_and_delays(&self, change: &mut ExecutionChange) -> Result<()> {
        let execution_id = change.row.execution_id.as_str();
        for (join_set_id, counters) in &change.join_sets {
            let sql = "INSERT INTO t_join_set (execution_id, join_set_id, join_next_count, \
                 response_count) VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO UPDATE SET \
                 join_next_count = excluded.join_next_count, response_count = excluded.response_count";
            let params = params![
                execution_id,
                join_set_id.to_string(),
                to_i64(counters.join_next_count),
                to_i64(counters.response_count),
            ];
            self.execute(sql, params)?;
        }
        for planned in &mut change.responses {
            let (delay_id, child_id) = response_keys(&planned.response.event.event);
            // The place follows the last stored one, one seek of `ux_response_idx`, and the
            // plan learns it (the waiter hub hands the response to whoever waits for that
            // place); it is the one the kernel planned from the row's `response_count`.
            let sql = "INSERT INTO t_response (execution_id, created_at, join_set_id, \
                 join_set_idx, delay_id, child_execution_id, response_json, idx) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, (SELECT COALESCE(MAX(idx) + 1, 0) \
                 FROM t_response WHERE execution_id = ?1)) RETURNING idx";
            let params = params![
                execution_id,
                micros(planned.response.created_at),
                planned.response.event.join_set_id.to_string(),
                to_i64(planned.join_set_idx),
                delay_id,
                child_id,
                to_json(&planned.response)?,
            ];
            // A unique key met here is the response's own: the write was planned on the rows
            // the writer knew, and a child's response another write stored is not among them.
            let duplicate =
                || (planned.response.event.event).duplicate_for(&change.row.execution_id);
            let mut stmt = self.conn.prepare_cached(sql)?;
            let idx: i64 = (stmt.query_row(params, |row| row.get(0)))
                .map_err(|err| SqliteError::from_insert(err, duplicate))?;
            planned.idx = idx.cast_unsigned();
        }
        for delay in &change.delays_requested {
            let sql = "INSERT INTO t_delay (execution_id, delay_id, join_set_id, expires_at, \
                 is_open) VALUES (?1, ?2, ?3, ?4, ?5)";
            let params = params![
                execution_id,
                delay.delay_id.to_string(),
                delay.join_set_id.to_string(),
                micros(delay.expires_at),
                delay.open,
            ];
            self.execute(sql, params)?;
        }
        for delay_id in &change.delays_closed {
            let sql = "UPDATE t_delay SET is_open = 0 WHERE execution_id = ?1 AND delay_id = ?2";
            self.execute(sql, params![execution_id, delay_id.to_string()])?;
        }
        Ok(())
    }

    /// Deletes every row of each execution of `ids` from every table: a few statements per
    /// execution, each bounded by its id.
    fn delete_executions(&self, ids: &[ExecutionId]) -> Result<()> {
        for execution_id in ids {
            for sql in DELETES {
                self.execute(sql, [execution_id.as_str()])?;
            }
            let sql = "DELETE FROM t_execution_state WHERE execution_id = ?1";
            if self.execute(sql, [execution_id.as_str()])? != 1 {
                let message = format!("pruned execution {execution_id} has no state row");
                return Err(corrupt(message).into());
            }
        }
        Ok(())
    }
    /// Inserts the state row of a new execution. The kernel refused a stored id already (it was
    /// loaded); the primary key stays the last guard and makes it a duplicate too.
    fn insert_execution(
        &self,
        stmt: &mut Reused<'c>,
        row: &ExecutionRow,
        req: NewExecution<'_>,
    ) -> Result<()> {
        let sql = "INSERT INTO t_execution_state (execution_id, next_version, state, pending_at, \
             lock_expires_at, state_json, temporary_event_count, finished_at, response_count, \
             ffqn, component_id, max_retries, retry_exp_backoff_us, parent_execution_id, \
             parent_join_set_id, is_top_level, created_at, scheduled_at) VALUES (?1, ?2, ?3, ?4, \
             ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)";
        let parent = row.parent.as_ref();
        let mut params = state_columns(row)?;
        params.extend([
            row.ffqn.as_str().to_owned().into(),
            req.component_id.to_string().into(),
            i64::from(row.max_retries).into(),
            duration_to_sql(row.retry_exp_backoff).into(),
            nullable(parent.map(|(id, _)| id.to_string())),
            nullable(parent.map(|(_, join_set)| join_set.to_string())),
            row.execution_id.is_top_level().into(),
            micros(req.created_at).into(),
            micros(req.scheduled_at).into(),
        ]);
        reused(self.conn, stmt, sql)?
            .execute(params_from_iter(&params))
            .map_err(|err| {
                SqliteError::from_insert(err, || DuplicateKind::Execution(row.execution_id.clone()))
            })?;
        Ok(())
    }

    /// Writes the state row of an existing execution back. A row that stays unfinished keeps
    /// `finished_at` NULL and is written by a statement that does not set it, so that SQLite
    /// leaves `ix_state_unfinished` (`WHERE finished_at IS NULL`) alone: an execution enters
    /// that index when created and leaves it when it finishes, and its leases do not touch it.
    fn update_execution(&self, stmts: &mut [Reused<'c>; 2], row: &ExecutionRow) -> Result<()> {
        let [unfinished, finished] = stmts;
        let (stmt, sql) = if row.state.pending_state.is_finished() {
            (finished, UPDATE_FINISHED)
        } else {
            (unfinished, UPDATE_UNFINISHED)
        };
        let changed =
            reused(self.conn, stmt, sql)?.execute(params_from_iter(&state_columns(row)?))?;
        if changed != 1 {
            let message = format!("execution {} has no state row", row.execution_id);
            return Err(corrupt(message).into());
        }
        Ok(())
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
            i64::from(version.0),
            micros(event.created_at),
            event_kind(&event.event),
            event_join_set(&event.event),
            event_json(event)?,
        ])?;
        Ok(())
    }
}
