//! `cancel`: a not-yet-finished execution and every unfinished descendant finished with
//! `Cancelled`, each answering its parent, their open delays closed, in one transaction. A
//! finished execution is left alone.

use crate::{
    CancelOutcome, CancelRequest, DbError, ExecutionEventInner, ExecutionId,
    FinishedExecutionError, OutcomeWrite, ValidationError,
    kernel::{
        JoinSetKey, Keys, Planner, Snapshot, Write, snapshot::FastHash, write::sealed::Sealed,
    },
};
use std::collections::HashSet;

use super::complete::finished_result;

impl Sealed for CancelRequest {}

impl Write for CancelRequest {
    type Reply = CancelOutcome;

    /// A reason over [`CancelRequest::MAX_REASON_BYTES`] is refused before anything is read.
    /// The execution, its parent (named by its id), its finished result if it has one, and
    /// all its descendants: every row the write touches is locked in the first load, in id
    /// order (a parent's id is a prefix of its children's), so that a cancel and a finishing
    /// child lock in the same order.
    fn keys(&self) -> Result<Keys, DbError> {
        let req = self;
        if req.reason.len() > CancelRequest::MAX_REASON_BYTES {
            return Err(DbError::Validation(ValidationError::ReasonTooLong {
                length: req.reason.len(),
                limit: CancelRequest::MAX_REASON_BYTES,
            }));
        }
        let mut keys = Keys::default();
        // The parent's id is a prefix of the child's, so this is also the order to lock them in.
        if let Some((parent_id, _)) = req.execution_id.split_to_parent() {
            keys.executions.push(parent_id);
        }
        keys.executions.push(req.execution_id.clone());
        keys.finished_results.push(req.execution_id.clone());
        keys.subtrees.push(req.execution_id.clone());
        Ok(keys)
    }

    /// The join sets each cancelled execution answers, and the open delays each one closes.
    fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        let req = self;
        let members = cancelled_members(snapshot, &req.execution_id);
        if members.is_empty() {
            return None;
        }
        let mut keys = Keys::default();
        // Siblings answer one join set: name it once, not once per child.
        let mut answered = HashSet::<_, FastHash>::default();
        for member in members {
            keys.open_delays.push(member.clone());
            if let Some(parent @ (parent_id, join_set_id)) = &snapshot.executions[member].parent {
                if answered.insert(parent) {
                    keys.join_sets.push(JoinSetKey {
                        execution_id: parent_id.clone(),
                        join_set_id: join_set_id.clone(),
                        next_responses: 0,
                        created: false,
                    });
                }
                keys.child_responses
                    .push((parent_id.clone(), member.clone()));
            }
        }
        Some(keys)
    }

    /// Finishes the execution and each unfinished descendant with `Cancelled`, each
    /// answering its parent, and closes their open delays.
    fn plan(self, planner: &mut Planner<'_>) -> Result<CancelOutcome, DbError> {
        let snapshot = planner.snapshot;
        let root = snapshot
            .executions
            .get(&self.execution_id)
            .ok_or_else(|| DbError::execution_not_found(&self.execution_id))?;
        if root.state.pending_state.is_finished() {
            return Ok(CancelOutcome::AlreadyFinished {
                result: finished_result(snapshot, &self.execution_id)?,
            });
        }
        let members = cancelled_members(snapshot, &self.execution_id);
        for member in &members {
            let row = &snapshot.executions[*member];
            planner.outcome(OutcomeWrite {
                execution_id: (*member).clone(),
                version: row.state.next_version,
                now: self.now,
                event: ExecutionEventInner::Finished {
                    result: Err(FinishedExecutionError::Cancelled {
                        reason: self.reason.clone(),
                    }),
                },
                parent: row.parent.clone(),
            })?;
            if let Some(open) = snapshot.open_delays.get(*member) {
                let idx = planner.touch(member)?;
                let change = &mut planner.changes[idx];
                for delay_id in open {
                    if !change.delays_closed.contains(delay_id) {
                        change.delays_closed.push(*delay_id);
                    }
                }
            }
        }
        Ok(CancelOutcome::Cancelled {
            executions: members.len(),
        })
    }
}

/// The executions `cancel` finishes: the execution and its unfinished descendants, parents
/// before children; empty when the execution is missing or finished.
fn cancelled_members<'s>(snapshot: &'s Snapshot, root: &'s ExecutionId) -> Vec<&'s ExecutionId> {
    let unfinished = |id: &ExecutionId| {
        snapshot
            .executions
            .get(id)
            .is_some_and(|row| !row.state.pending_state.is_finished())
    };
    if !unfinished(root) {
        return Vec::new();
    }
    let mut members = vec![root];
    if let Some(descendants) = snapshot.subtrees.get(root) {
        members.extend(descendants.iter().filter(|id| unfinished(id)));
    }
    // A parent's id is a prefix of its children's: id order puts parents first.
    members.sort();
    members
}
