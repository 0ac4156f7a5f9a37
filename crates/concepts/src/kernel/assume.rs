//! Writes planned without a load: on rows the store already knows (it wrote them itself) and on
//! the assumption that the executions a write creates are not stored. The plan is what a load
//! would have given exactly when the assumption holds, which the backend checks as it writes
//! (each row's [`Revision`] under the row's lock, each new id by its primary key); when it does
//! not hold, nothing of the write is stored, and the write runs again with the load.

use super::{
    keys::Keys,
    plan::WritePlan,
    snapshot::{ExecutionRow, FastHash, Revision, Snapshot},
};
use crate::{DbError, DuplicateKind, ExecutionId};
use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

/// What a write planned without a load assumed about the store, for the backend to check in
/// the same transaction before anything of the write is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assumption {
    /// Rows the write changes, each with the revision it was planned on: a row whose stored
    /// revision differs refutes the assumption.
    pub revisions: Vec<(ExecutionId, Revision)>,
    /// Executions the write creates, assumed not stored: a stored one refutes it (the
    /// backend's unique key on the execution id reports it as a duplicate).
    pub absent: Vec<ExecutionId>,
}

impl Assumption {
    /// True when `err`, the answer of the write planned on this assumption, is the duplicate
    /// of an execution the write assumed absent: the write runs again with the load, and the
    /// kernel answers what it finds (an identical submit, a conflict).
    #[must_use]
    pub fn refuted_by(&self, err: &DbError) -> bool {
        matches!(err, DbError::Duplicate(DuplicateKind::Execution(id)) if self.absent.contains(id))
    }
}

/// The rows of executions a store wrote itself (the leases its `lock_pending` took, say), kept
/// so that the next write of those executions (the outcome of the lease) can be planned
/// without loading them. Each row is used once; at most `capacity` are kept.
#[derive(Debug)]
pub struct KnownRows {
    rows: Mutex<HashMap<ExecutionId, ExecutionRow, FastHash>>,
    capacity: usize,
}

impl KnownRows {
    /// Keeps at most `capacity` rows (a store that remembers more forgets them all first).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            rows: Mutex::default(),
            capacity,
        }
    }

    /// Keeps the rows `plan` left (after its commit).
    pub fn remember(&self, plan: &WritePlan) {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        if rows.len() + plan.changes.len() > self.capacity {
            rows.clear();
        }
        for change in &plan.changes {
            rows.insert(change.row.execution_id.clone(), change.row.clone());
        }
    }

    /// The snapshot a write with `keys` can be planned on without a load, and what that
    /// assumes; `None` when it cannot: its keys name more than execution rows, or (with
    /// `use_known`) a row that is not known, or (without) any existing row. A write that only
    /// creates is planned on the empty snapshot. The rows of `keys` are forgotten either way:
    /// a known row is used once.
    #[must_use]
    pub fn assume(&self, keys: &Keys, use_known: bool) -> Option<(Snapshot, Assumption)> {
        if !keys.names_rows_only() {
            return None;
        }
        let mut snapshot = Snapshot::default();
        let mut assumption = Assumption {
            absent: keys.new_executions.clone(),
            ..Assumption::default()
        };
        if !keys.executions.is_empty() {
            let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
            let found: Vec<_> = (keys.executions.iter())
                .filter_map(|id| rows.remove(id))
                .collect();
            drop(rows);
            if !use_known || found.len() != keys.executions.len() {
                return None;
            }
            for row in found {
                assumption
                    .revisions
                    .push((row.execution_id.clone(), row.revision()));
                snapshot.add_execution(row);
            }
        }
        if (assumption.absent.iter()).any(|id| snapshot.executions.contains_key(id)) {
            return None;
        }
        Some((snapshot, assumption))
    }
}
