//! The loads and deletes of the lifecycle writes (LIFECYCLE.md) on the writer's connection,
//! inside the command's savepoint: the stored executions a create names, the descendants of an
//! execution, finished results, open delays, the prune candidates, and the deletion of pruned
//! executions with every row stored about them.

use crate::{
    codec::{self, STATE_ROW_COLUMNS, micros, parse},
    error::{Result, SqliteError},
    ops::WriteCtx,
    reads,
};
use concepts::{
    ExecutionId,
    kernel::{PruneQuery, Snapshot, SubtreeKey, descendant_bounds},
};
use rusqlite::params;

/// The tables that hold rows of an execution besides its state row, each keyed (or indexed)
/// by `execution_id` first, so that each delete is a range of one index.
const DELETES: [&str; 4] = [
    "DELETE FROM t_event WHERE execution_id = ?1",
    "DELETE FROM t_response WHERE execution_id = ?1",
    "DELETE FROM t_join_set WHERE execution_id = ?1",
    "DELETE FROM t_delay WHERE execution_id = ?1",
];

/// The rows of the descendants of `?1`'s root, `?1 <= id < ?2` (all, or the unfinished only).
pub(crate) fn subtree_sql(unfinished_only: bool) -> String {
    let filter = if unfinished_only {
        " AND state <> 'Finished'"
    } else {
        ""
    };
    format!(
        "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state \
         WHERE execution_id >= ?1 AND execution_id < ?2{filter} ORDER BY execution_id"
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

impl WriteCtx<'_> {
    /// The executions among `ids` (the ones a write creates) that are stored: their rows and
    /// `Created` events. One prepared point lookup per id, in the write's transaction; an id
    /// that is not stored costs one probe of the primary key.
    pub(crate) fn load_existing_creations(
        &self,
        ids: &[ExecutionId],
        snapshot: &mut Snapshot,
    ) -> Result<()> {
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
            let created: Option<String> = row.get(created_column)?;
            if let Some(json) = created {
                snapshot
                    .created
                    .insert(execution_id.clone(), serde_json::from_str(&json)?);
            }
            snapshot.add_execution(codec::execution_row(row)?);
        }
        Ok(())
    }

    /// The descendants of `key.root` (the unfinished ones, when asked), their rows, and their
    /// ids in id order: one range of the primary key, [`descendant_bounds`].
    pub(crate) fn load_subtree(&self, key: &SubtreeKey, snapshot: &mut Snapshot) -> Result<()> {
        let mut stmt = self
            .conn
            .prepare_cached(&subtree_sql(key.unfinished_only))?;
        let (low, high) = descendant_bounds(&key.root);
        let mut rows = stmt.query(params![low, high])?;
        let mut ids = Vec::new();
        while let Some(row) = rows.next()? {
            let row = codec::execution_row(row)?;
            ids.push(row.execution_id.clone());
            snapshot.add_execution(row);
        }
        snapshot.subtrees.insert(key.root.clone(), ids);
        Ok(())
    }

    /// The results of the executions among `ids` that finished (the rows come from the
    /// snapshot when loaded, otherwise from the table).
    pub(crate) fn load_finished_results(
        &self,
        ids: &[ExecutionId],
        snapshot: &mut Snapshot,
    ) -> Result<()> {
        for execution_id in ids {
            let pending_state = match snapshot.executions.get(execution_id) {
                Some(row) => row.state.pending_state.clone(),
                None => match reads::execution_row(self.conn, execution_id)? {
                    Some(row) => row.state.pending_state,
                    None => continue,
                },
            };
            if let Some(result) =
                reads::result_if_finished(self.conn, execution_id, &pending_state)?
            {
                snapshot
                    .finished_results
                    .insert(execution_id.clone(), result);
            }
        }
        Ok(())
    }

    /// The open delays of each execution among `ids` that has any, by delay id.
    pub(crate) fn load_open_delays(
        &self,
        ids: &[ExecutionId],
        snapshot: &mut Snapshot,
    ) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT delay_id FROM t_delay WHERE execution_id = ?1 AND is_open = 1 \
             ORDER BY delay_id",
        )?;
        for execution_id in ids {
            let mut rows = stmt.query([execution_id.as_str()])?;
            let mut open = Vec::new();
            while let Some(row) = rows.next()? {
                open.push(parse(&row.get::<_, String>(0)?, "delay id")?);
            }
            if !open.is_empty() {
                snapshot.open_delays.insert(execution_id.clone(), open);
            }
        }
        Ok(())
    }

    /// The top-level executions that finished before `query.finished_before`, after its
    /// cursor, in `(finished_at, execution_id)` order, at most `query.limit`: one range of the
    /// partial index `ix_state_finished`.
    pub(crate) fn load_prune_candidates(
        &self,
        query: &PruneQuery,
        snapshot: &mut Snapshot,
    ) -> Result<()> {
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let before = micros(query.finished_before);
        let mut stmt = self
            .conn
            .prepare_cached(&prune_candidates_sql(query.after.is_some()))?;
        let mut rows = match &query.after {
            None => stmt.query(params![before, limit])?,
            Some((after_at, after_id)) => {
                stmt.query(params![before, limit, micros(*after_at), after_id.as_str()])?
            }
        };
        while let Some(row) = rows.next()? {
            let row = codec::execution_row(row)?;
            snapshot.prune_candidates.push(row.execution_id.clone());
            snapshot.add_execution(row);
        }
        Ok(())
    }

    /// Deletes every row of each execution of `ids` from every table: a few statements per
    /// execution, each bounded by its id.
    pub(crate) fn delete_executions(&self, ids: &[ExecutionId]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut deletes = Vec::with_capacity(DELETES.len());
        for sql in DELETES {
            deletes.push(self.conn.prepare_cached(sql)?);
        }
        let mut delete_state = self
            .conn
            .prepare_cached("DELETE FROM t_execution_state WHERE execution_id = ?1")?;
        for execution_id in ids {
            for stmt in &mut deletes {
                stmt.execute([execution_id.as_str()])?;
            }
            if delete_state.execute([execution_id.as_str()])? != 1 {
                return Err(SqliteError::corrupt(format!(
                    "pruned execution {execution_id} has no state row"
                )));
            }
        }
        Ok(())
    }
}
