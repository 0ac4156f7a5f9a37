//! Writes planned without a load: on rows the store already knows (it wrote them itself) and on
//! the assumption that the executions a write creates are not stored. The plan is what a load
//! would have given exactly when the assumption holds, which the backend checks as it writes
//! (each row's [`Revision`] under the row's lock, each new id by its primary key); when it does
//! not hold, nothing of the write is stored, and the write runs again with the load.
//!
//! A row's revision also vouches for the counters of the join sets the same plan wrote with
//! it: a counter moves only with a `JoinNext` (an event) or a response, and both move the
//! revision. And a child whose known row has not finished has not answered its parent: a
//! child's response is stored with its finish (a response appended for it by other means,
//! `append_response`, is refused by the store's unique key on the child's response, as the
//! duplicate a load would have found).

use super::{
    keys::Keys,
    plan::{ExecutionChange, WritePlan},
    snapshot::{ExecutionRow, FastHash, JoinSetCounters, JoinSetRow, Revision, Snapshot},
};
use crate::{DbError, DuplicateKind, ExecutionId, JoinSetId, PendingState};
use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

/// The most executions a workflow's step changes for its rows to be kept for its next write.
const KEPT_STEP: usize = 8;

/// True when `plan` is a workflow's step: a write of a few executions that wrote join sets,
/// whose next one (or its child's outcome) is planned on what it left. A fan-out's thousands
/// of children are not worth copying for one outcome each.
#[must_use]
pub(crate) fn is_step(plan: &WritePlan) -> bool {
    plan.changes.len() <= KEPT_STEP && plan.changes.iter().any(|c| !c.join_sets.is_empty())
}

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
    /// Join sets the write creates, assumed to have no counters stored: stored ones refute it.
    pub absent_join_sets: Vec<(ExecutionId, JoinSetId)>,
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

/// The rows of executions a store wrote itself (the leases its `lock_pending` took, a
/// workflow's last write, say), each with the counters of the join sets its plan wrote, kept so
/// that the next write of those executions (the outcome of the lease, the workflow's next
/// step) can be planned without loading them. Each row is used once; at most `capacity` are
/// kept.
#[derive(Debug)]
pub struct KnownRows {
    rows: Mutex<HashMap<ExecutionId, Known, FastHash>>,
    capacity: usize,
}

/// A known row, and the join sets its plan wrote.
#[derive(Debug)]
struct Known {
    row: ExecutionRow,
    join_sets: Vec<(JoinSetId, JoinSetCounters)>,
}

impl Known {
    fn of(change: &ExecutionChange) -> Self {
        Self {
            row: change.row.clone(),
            join_sets: change.join_sets.to_vec(),
        }
    }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, Known, FastHash>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the rows `plan` left (after its commit).
    pub fn remember(&self, plan: &WritePlan) {
        self.remember_where(plan, |_| true);
    }

    /// Keeps, of the rows `plan` left (after its commit), what the next write of its
    /// executions is planned on: every row of a workflow's step (a write of a few executions
    /// that wrote join sets), otherwise the rows it leased, whose outcome comes next.
    pub fn remember_for_next(&self, plan: &WritePlan) {
        if is_step(plan) {
            self.remember(plan);
        } else {
            self.remember_where(plan, |change| {
                matches!(change.row.state.pending_state, PendingState::Locked { .. })
            });
        }
    }

    /// Keeps the rows of `plan` that `keep` names and forgets its other rows: plans committed
    /// together are remembered in order, and a row a later plan changed without keeping it
    /// (a lease, then a cancel of the same execution) is no longer what an earlier one left.
    fn remember_where(&self, plan: &WritePlan, keep: impl Fn(&ExecutionChange) -> bool) {
        let mut rows = self.lock();
        if rows.len() + plan.changes.len() > self.capacity {
            rows.clear();
        }
        for change in &plan.changes {
            if keep(change) {
                rows.insert(change.row.execution_id.clone(), Known::of(change));
            } else {
                rows.remove(&change.row.execution_id);
            }
        }
        for execution_id in &plan.deleted {
            rows.remove(execution_id);
        }
    }

    /// Forgets the rows `plan` changes or deletes: written in a transaction that has not
    /// committed, what is known of them may no longer be what is stored.
    pub fn forget(&self, plan: &WritePlan) {
        let mut rows = self.lock();
        for change in &plan.changes {
            rows.remove(&change.row.execution_id);
        }
        for execution_id in &plan.deleted {
            rows.remove(execution_id);
        }
    }

    /// Forgets every row: another connection may have changed any of them.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The snapshot a write with `keys` can be planned on without a load, and what that
    /// assumes; `None` when it cannot: its keys name more than execution rows, join sets and
    /// children's responses, or (with `use_known`) a row that is not known, a join set its
    /// known row's plan did not write, a join set whose unconsumed responses the write would
    /// consume (their times are not known), a child's response from a child whose row is not
    /// known unfinished, or (without `use_known`) any existing row. A write that only creates
    /// is planned on the empty snapshot. The rows of `keys` are forgotten either way: a known
    /// row is used once.
    #[must_use]
    pub fn assume(&self, keys: &Keys, use_known: bool) -> Option<(Snapshot, Assumption)> {
        if !keys.plannable_on_known_rows() {
            return None;
        }
        let mut snapshot = Snapshot::default();
        let mut assumption = Assumption {
            absent: keys.new_executions.to_vec(),
            ..Assumption::default()
        };
        if !keys.executions.is_empty() {
            let mut rows = self.lock();
            let found: Vec<_> = (keys.executions.iter())
                .filter_map(|id| rows.remove(id))
                .collect();
            drop(rows);
            if !use_known || found.len() != keys.executions.len() {
                return None;
            }
            for Known { row, join_sets } in found {
                for (join_set_id, counters) in join_sets {
                    let id = (row.execution_id.clone(), join_set_id);
                    snapshot.join_sets.insert(
                        id,
                        JoinSetRow {
                            counters,
                            next_response_times: Vec::new(),
                        },
                    );
                }
                assumption
                    .revisions
                    .push((row.execution_id.clone(), row.revision()));
                snapshot.add_execution(row);
            }
        }
        for key in &keys.join_sets {
            let id = (key.execution_id.clone(), key.join_set_id.clone());
            let counters = match snapshot.join_sets.get(&id) {
                Some(row) => row.counters,
                // One the write creates has, as far as the check finds, no counters yet.
                None if key.created && snapshot.executions.contains_key(&key.execution_id) => {
                    assumption.absent_join_sets.push(id.clone());
                    snapshot.join_sets.insert(id, JoinSetRow::default());
                    continue;
                }
                None => return None,
            };
            if key.next_responses > 0 && counters.response_count > counters.join_next_count {
                return None;
            }
        }
        // Only the join sets the keys name: the snapshot is what a load would have given.
        (snapshot.join_sets).retain(|(execution_id, join_set_id), _| {
            (keys.join_sets.iter())
                .any(|k| k.execution_id == *execution_id && k.join_set_id == *join_set_id)
        });
        for (_, child) in &keys.child_responses {
            let row = snapshot.executions.get(child);
            if row.is_none_or(|row| row.state.pending_state.is_finished()) {
                return None;
            }
        }
        if (assumption.absent.iter()).any(|id| snapshot.executions.contains_key(id)) {
            return None;
        }
        Some((snapshot, assumption))
    }
}
