//! The rules of LIFECYCLE.md, planned like every other write: a repeated `create`, `cancel`
//! over a tree, `complete` of a stub and `prune` of finished trees.

use super::plan::{Planner, inconsistent};
use super::request::response_keys;
use super::snapshot::{FastHash, JoinSetKey, Keys, PruneQuery, Snapshot, SubtreeKey};
use crate::{
    CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest, CreateConflict, CreateOutcome,
    CreateRequest, DbError, DuplicateKind, ExecutionEvent, ExecutionEventInner, ExecutionId,
    FinishedExecutionError, FinishedExecutionResult, JoinSetResponse, JoinSetResponseEvent,
    OutcomeWrite, PendingState, PruneOutcome, PruneRequest, ValidationError,
};
use std::collections::HashSet;

/// A `create` of an id that exists: identical (function, parameters, parent) is answered
/// `AlreadyExisted` and writes nothing; anything else is a conflict naming what differs.
pub(super) fn repeated_create(
    req: &CreateRequest,
    (created, pending_state): (ExecutionEvent, PendingState),
) -> Result<CreateOutcome, DbError> {
    let ExecutionEventInner::Created {
        ffqn,
        params,
        parent,
        ..
    } = created.event
    else {
        return Err(inconsistent(format!(
            "version 0 of execution {} is not `Created`",
            req.execution_id
        )));
    };
    let mut differences = Vec::new();
    if ffqn != req.ffqn {
        differences.push(CreateConflict::Function);
    }
    if params != req.params {
        differences.push(CreateConflict::Params);
    }
    if parent != req.parent {
        differences.push(CreateConflict::Parent);
    }
    if differences.is_empty() {
        Ok(CreateOutcome::AlreadyExisted { pending_state })
    } else {
        Err(DuplicateKind::ExecutionConflict {
            execution_id: req.execution_id.clone(),
            differences,
        }
        .into())
    }
}

/// `cancel`, first keys: the execution, its parent (named by its id), its finished result if
/// it has one, and all its descendants. All of them, not only the unfinished ones: a cancelled
/// descendant answers its parent, which may have finished, and every row the write touches is
/// locked in the first load, in id order (a parent's id is a prefix of its children's), so
/// that a cancel and a finishing child lock in the same order.
pub(super) fn cancel_keys(keys: &mut Keys, req: &CancelRequest) {
    // The parent's id is a prefix of the child's, so this is also the order to lock them in.
    if let Some((parent_id, _)) = req.execution_id.split_to_parent() {
        keys.executions.push(parent_id);
    }
    keys.executions.push(req.execution_id.clone());
    keys.finished_results.push(req.execution_id.clone());
    keys.subtrees.push(SubtreeKey {
        root: req.execution_id.clone(),
        unfinished_only: false,
    });
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

/// `cancel`, follow-up keys: the join sets each cancelled execution answers, and the open
/// delays each one closes.
pub(super) fn cancel_follow_up_keys(snapshot: &Snapshot, req: &CancelRequest) -> Option<Keys> {
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
                });
            }
            keys.child_responses
                .push((parent_id.clone(), member.clone()));
        }
    }
    Some(keys)
}

/// `complete`, keys: the stub and its parent (named by its id), the parent's join set, and
/// the stub's finished result if it has one.
pub(super) fn complete_keys(keys: &mut Keys, req: &CompleteRequest) {
    if let Some((parent_id, join_set_id)) = req.execution_id.split_to_parent() {
        keys.executions.push(parent_id.clone());
        response_keys(
            keys,
            &parent_id,
            &JoinSetResponseEvent {
                join_set_id,
                event: JoinSetResponse::ChildExecutionFinished {
                    child_execution_id: req.execution_id.clone(),
                    finished_version: crate::Version(0),
                    result: Ok(crate::SupportedFunctionReturnValue::None),
                },
            },
        );
    }
    keys.executions.push(req.execution_id.clone());
    keys.finished_results.push(req.execution_id.clone());
}

/// `prune`, keys: the candidates.
pub(super) fn prune_keys(keys: &mut Keys, req: &PruneRequest) -> Result<(), DbError> {
    if req.limit == 0 {
        return Err(ValidationError::InvalidRequest(
            "prune examines at least one execution: `limit` must be at least 1".to_owned(),
        )
        .into());
    }
    keys.prune = Some(PruneQuery {
        finished_before: req.finished_before,
        after: req.after.clone(),
        limit: req.limit,
    });
    Ok(())
}

/// `prune`, follow-up keys: the whole tree of every candidate.
pub(super) fn prune_follow_up_keys(snapshot: &Snapshot) -> Option<Keys> {
    if snapshot.prune_candidates.is_empty() {
        return None;
    }
    Some(Keys {
        subtrees: snapshot
            .prune_candidates
            .iter()
            .map(|root| SubtreeKey {
                root: root.clone(),
                unfinished_only: false,
            })
            .collect(),
        ..Keys::default()
    })
}

/// `prune`: the trees whose every member finished, and where the next call continues.
pub(super) fn plan_prune(
    snapshot: &Snapshot,
    req: &PruneRequest,
) -> Result<(PruneOutcome, Vec<ExecutionId>), DbError> {
    let mut outcome = PruneOutcome::default();
    let mut deleted = Vec::new();
    for root in &snapshot.prune_candidates {
        let row = snapshot
            .executions
            .get(root)
            .ok_or_else(|| inconsistent(format!("prune candidate {root} has no row")))?;
        let PendingState::Finished { finished_at, .. } = row.state.pending_state else {
            return Err(inconsistent(format!(
                "prune candidate {root} has not finished: {:?}",
                row.state.pending_state
            )));
        };
        if !root.is_top_level() || finished_at >= req.finished_before {
            return Err(inconsistent(format!(
                "prune candidate {root} (finished at {finished_at}) does not match the query"
            )));
        }
        outcome.next = Some((finished_at, root.clone()));
        let descendants = snapshot.subtrees.get(root).map_or(&[][..], Vec::as_slice);
        let all_finished = descendants.iter().all(|id| {
            snapshot
                .executions
                .get(id)
                .is_some_and(|row| row.state.pending_state.is_finished())
        });
        if all_finished {
            outcome.trees += 1;
            outcome.executions += 1 + descendants.len();
            deleted.push(root.clone());
            deleted.extend(descendants.iter().cloned());
        } else {
            outcome.kept += 1;
        }
    }
    if snapshot.prune_candidates.len() < req.limit {
        outcome.next = None;
    }
    Ok((outcome, deleted))
}

impl Planner<'_> {
    /// `cancel`: finishes the execution and each unfinished descendant with `Cancelled`, each
    /// answering its parent, and closes their open delays.
    pub(super) fn cancel(&mut self, req: CancelRequest) -> Result<CancelOutcome, DbError> {
        let snapshot = self.snapshot;
        let root = snapshot
            .executions
            .get(&req.execution_id)
            .ok_or_else(|| DbError::execution_not_found(&req.execution_id))?;
        if root.state.pending_state.is_finished() {
            return Ok(CancelOutcome::AlreadyFinished {
                result: finished_result(snapshot, &req.execution_id)?,
            });
        }
        let members = cancelled_members(snapshot, &req.execution_id);
        for member in &members {
            let row = &snapshot.executions[*member];
            self.outcome(OutcomeWrite {
                execution_id: (*member).clone(),
                version: row.state.next_version,
                now: req.now,
                event: ExecutionEventInner::Finished {
                    result: Err(FinishedExecutionError::Cancelled {
                        reason: req.reason.clone(),
                    }),
                },
                parent: row.parent.clone(),
            })?;
            if let Some(open) = snapshot.open_delays.get(*member) {
                let idx = self.touch(member)?;
                let change = &mut self.changes[idx];
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

    /// `complete`: finishes a stub with `Ok(value)`, answering its parent.
    pub(super) fn complete(&mut self, req: CompleteRequest) -> Result<CompleteOutcome, DbError> {
        let snapshot = self.snapshot;
        let row = snapshot
            .executions
            .get(&req.execution_id)
            .ok_or_else(|| DbError::execution_not_found(&req.execution_id))?;
        if !row.ffqn.is_stub() {
            return Err(ValidationError::InvalidRequest(format!(
                "execution {} runs {}, which is not a stub (`{}.<name>`): only stubs are \
                 completed from outside; an execution that runs can be cancelled",
                req.execution_id,
                row.ffqn,
                crate::STUB_INTERFACE
            ))
            .into());
        }
        let value = Ok(req.value);
        if row.state.pending_state.is_finished() {
            let existing = finished_result(snapshot, &req.execution_id)?;
            if existing == value {
                return Ok(CompleteOutcome::AlreadyCompleted);
            }
            return Err(DuplicateKind::Completion {
                execution_id: req.execution_id,
                existing: describe_result(&existing),
            }
            .into());
        }
        self.outcome(OutcomeWrite {
            execution_id: req.execution_id,
            version: row.state.next_version,
            now: req.now,
            event: ExecutionEventInner::Finished { result: value },
            parent: row.parent.clone(),
        })?;
        Ok(CompleteOutcome::Completed)
    }
}

fn finished_result(
    snapshot: &Snapshot,
    execution_id: &ExecutionId,
) -> Result<FinishedExecutionResult, DbError> {
    snapshot
        .finished_results
        .get(execution_id)
        .cloned()
        .ok_or_else(|| {
            inconsistent(format!(
                "the result of finished execution {execution_id} was not loaded"
            ))
        })
}

/// A finished result as one line of text.
fn describe_result(result: &FinishedExecutionResult) -> String {
    use crate::SupportedFunctionReturnValue as V;
    match result {
        Ok(V::None) => "no value".to_owned(),
        Ok(V::InfallibleOrResultOk(json)) => format!("the value {json}"),
        Ok(V::FallibleResultErr(json)) => format!("the error value {json}"),
        Err(err) => err.to_string(),
    }
}
