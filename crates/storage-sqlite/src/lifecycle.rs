//! The loads and deletes of the lifecycle writes (LIFECYCLE.md) on the writer's connection,
//! inside the command's savepoint: the descendants of an execution, finished results, open
//! delays, the prune candidates, and the deletion of pruned executions with all their rows.

use crate::{
    codec::{self, STATE_ROW_COLUMNS, int_to_sql, micros, parse},
    error::{Result, SqliteError},
    ops::WriteCtx,
    reads::{self, rows},
};
use concepts::{
    ExecutionId,
    kernel::{ExecutionRow, Keys, PruneQuery, Snapshot, descendant_bounds},
};

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

impl WriteCtx<'_> {
    /// Adds the subtrees, finished results, open delays and prune candidates `keys` name.
    pub(crate) fn load_lifecycle(&self, keys: &Keys, snapshot: &mut Snapshot) -> Result<()> {
        let conn = self.conn;
        for root in &keys.subtrees {
            let bounds = descendant_bounds(root);
            let rows = rows(conn, &subtree_sql(), bounds, codec::execution_row)?;
            let ids = rows.iter().map(|row| row.execution_id.clone()).collect();
            snapshot.subtrees.insert(root.clone(), ids);
            rows.into_iter().for_each(|row| snapshot.add_execution(row));
        }
        for execution_id in &keys.finished_results {
            // The row comes from the snapshot when loaded, otherwise from the table.
            let pending_state = match snapshot.executions.get(execution_id) {
                Some(row) => row.state.pending_state.clone(),
                None => match reads::execution_row(conn, execution_id)? {
                    Some(row) => row.state.pending_state,
                    None => continue,
                },
            };
            if let Some(result) = reads::result_if_finished(conn, execution_id, &pending_state)? {
                snapshot
                    .finished_results
                    .insert(execution_id.clone(), result);
            }
        }
        for execution_id in &keys.open_delays {
            let sql = "SELECT delay_id FROM t_delay WHERE execution_id = ?1 AND is_open = 1 \
                       ORDER BY delay_id";
            let open = rows(conn, sql, [execution_id.as_str()], |row| {
                parse(&row.get::<_, String>(0)?, "delay id")
            })?;
            if !open.is_empty() {
                snapshot.open_delays.insert(execution_id.clone(), open);
            }
        }
        if let Some(query) = &keys.prune {
            for row in self.prune_candidates(query)? {
                snapshot.prune_candidates.push(row.execution_id.clone());
                snapshot.add_execution(row);
            }
        }
        Ok(())
    }

    /// The rows of the prune candidates of `query`: one range of `ix_state_finished`.
    fn prune_candidates(&self, query: &PruneQuery) -> Result<Vec<ExecutionRow>> {
        let (before, limit) = (micros(query.finished_before), int_to_sql(query.limit));
        let sql = prune_candidates_sql(query.after.is_some());
        let decode = codec::execution_row;
        match &query.after {
            None => rows(self.conn, &sql, (before, limit), decode),
            Some((at, id)) => {
                let params = (before, limit, micros(*at), id.as_str());
                rows(self.conn, &sql, params, decode)
            }
        }
    }

    /// Deletes every row of each execution of `ids` from every table, inside the command's
    /// savepoint: a few statements per execution, each bounded by its id.
    pub(crate) fn delete_executions(&self, ids: &[ExecutionId]) -> Result<()> {
        for execution_id in ids {
            for sql in DELETES {
                self.execute(sql, [execution_id.as_str()])?;
            }
            let sql = "DELETE FROM t_execution_state WHERE execution_id = ?1";
            if self.execute(sql, [execution_id.as_str()])? != 1 {
                let message = format!("pruned execution {execution_id} has no state row");
                return Err(SqliteError::Corrupt(message));
            }
        }
        Ok(())
    }
}
