//! `append_batch`: events appended to one execution in order at consecutive versions, and the
//! executions they announce created in the same transaction (children, or top-level executions
//! a `Schedule` event names); all or nothing. Executions it creates may be created already
//! locked (`AppendBatchRequest::leases`), their `Locked` event appended at version 1 as
//! `lock_pending` would, in the same transaction. Outcomes of its children may be recorded
//! first (`AppendBatchRequest::answers`), each as `append_outcome` records it, its response at
//! the place the run consumed it. A lease extension is a batch of one `Locked` event by the
//! same run.

use super::{
    create::{validate_create, validate_lease},
    outcome::outcome_keys,
};
use crate::{
    AppendBatchRequest, ChildAnswer, DbError, ExecutionEventInner, ExecutionId, HistoryEvent,
    JoinSetId, JoinSetRequest, ValidationError, Version,
    kernel::{Keys, Planner, Write, snapshot::FastHash, write::sealed::Sealed},
};
use std::collections::HashSet;

impl Sealed for AppendBatchRequest {}

impl Write for AppendBatchRequest {
    type Reply = Version;

    fn keys(&self) -> Result<Keys, DbError> {
        validate_append_batch(self)?;
        for child in &self.children {
            validate_create(child)?;
        }
        let mut keys = Keys::default();
        keys.executions.push(self.execution_id.clone());
        keys.add_events(&self.execution_id, &self.events);
        keys.new_executions = (self.children.iter())
            .map(|c| c.execution_id.clone())
            .collect();
        if !self.answers.is_empty() {
            for answer in &self.answers {
                outcome_keys(&mut keys, &answer.outcome);
            }
            keys.dedup();
        }
        Ok(keys)
    }

    fn plan(self, planner: &mut Planner<'_>) -> Result<Version, DbError> {
        planner
            .changes
            .reserve_exact(1 + self.children.len() + self.answers.len());
        let AppendBatchRequest {
            execution_id,
            mut version,
            now,
            events,
            children,
            leases,
            answers,
        } = self;
        for answer in answers {
            answer_in_place(planner, &execution_id, answer)?;
        }
        for event in events {
            if matches!(event, ExecutionEventInner::Finished { .. }) {
                refuse_silent_child_finish(planner, &execution_id)?;
            }
            version = planner.append(&execution_id, version, now, event)?;
        }
        for child in children {
            planner.create(child, false)?;
        }
        for lease in leases {
            // Checked as a lock of the new execution: due at `now`, the lease ending after it.
            let locked = ExecutionEventInner::Locked(lease.locked);
            planner.append(&lease.execution_id, Version(1), now, locked)?;
        }
        Ok(version)
    }
}

/// Records a child's answer as `append_outcome` does, refused unless its response takes the
/// place at which the run consumed it.
fn answer_in_place(
    planner: &mut Planner<'_>,
    parent_id: &ExecutionId,
    ChildAnswer {
        outcome,
        response_idx,
    }: ChildAnswer,
) -> Result<(), DbError> {
    let idx = planner.touch(parent_id)?;
    let found = planner.changes[idx].row.response_count;
    if found != response_idx {
        return Err(ValidationError::AnswerOutOfPlace {
            child: outcome.execution_id,
            expected: response_idx,
            found,
        }
        .into());
    }
    planner.outcome(outcome).map(drop)
}

/// A child finishes only through `append_outcome`, which answers its parent in the same
/// transaction.
fn refuse_silent_child_finish(
    planner: &mut Planner<'_>,
    execution_id: &ExecutionId,
) -> Result<(), DbError> {
    let idx = planner.touch(execution_id)?;
    match &planner.changes[idx].row.parent {
        Some((parent_id, _)) => Err(ValidationError::InvalidRequest(format!(
            "execution {execution_id} is a child of {parent_id}: finish it with \
             `append_outcome`, which answers the parent in the same transaction"
        ))
        .into()),
        None => Ok(()),
    }
}

/// Checks a request of `append_batch`: the batch is not empty, every execution it creates
/// is announced by an event of the same batch, a child by a `ChildExecutionRequest` in the join
/// set of its `parent` (which must be `execution_id`), a top-level execution by a `Schedule`,
/// and every lease names an execution the batch creates, once, of a function that is not a
/// stub, and ends after the batch's `now`.
pub fn validate_append_batch(req: &AppendBatchRequest) -> Result<(), ValidationError> {
    let AppendBatchRequest {
        execution_id,
        events,
        children,
        ..
    } = req;
    if events.is_empty() {
        return Err(ValidationError::EmptyBatch("append_batch"));
    }
    validate_leases(req)?;
    validate_answers(req)?;
    if children.is_empty() {
        return Ok(());
    }
    // Indexed once: a fan-out creates thousands of children in one batch.
    let mut requested: HashSet<(&ExecutionId, &JoinSetId), FastHash> = HashSet::default();
    let mut scheduled: HashSet<&ExecutionId, FastHash> = HashSet::default();
    for event in events {
        match event {
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinSetRequest {
                        join_set_id,
                        request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
                    },
            } => {
                requested.insert((child_execution_id, join_set_id));
            }
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::Schedule {
                        execution_id: scheduled_id,
                        ..
                    },
            } => {
                scheduled.insert(scheduled_id);
            }
            _ => {}
        }
    }
    for child in children {
        let announced = match &child.parent {
            Some((parent_id, join_set_id)) => {
                parent_id == execution_id && requested.contains(&(&child.execution_id, join_set_id))
            }
            None => scheduled.contains(&child.execution_id),
        };
        if !announced {
            return Err(ValidationError::InvalidRequest(format!(
                "execution {} is created by {execution_id} without a matching \
                 `ChildExecutionRequest` (for a child whose parent is {execution_id}) or \
                 `Schedule` (for a top-level execution) event in the same batch",
                child.execution_id
            )));
        }
    }
    Ok(())
}

/// Checks the answers of an `append_batch`: each is the `Finished` of a child of the batch's
/// execution, at most once per child.
fn validate_answers(req: &AppendBatchRequest) -> Result<(), ValidationError> {
    let AppendBatchRequest {
        execution_id,
        answers,
        ..
    } = req;
    for (n, ChildAnswer { outcome, .. }) in answers.iter().enumerate() {
        let child = &outcome.execution_id;
        if !matches!(outcome.event, ExecutionEventInner::Finished { .. }) {
            return Err(ValidationError::InvalidRequest(format!(
                "the batch of {execution_id} records a {} of {child}: a parent's batch records \
                 only its children's `Finished`",
                outcome.event.variant_name()
            )));
        }
        if outcome.parent.as_ref().map(|(parent, _)| parent) != Some(execution_id) {
            return Err(ValidationError::InvalidRequest(format!(
                "the batch of {execution_id} records the outcome of {child}, which does not \
                 name {execution_id} as its parent"
            )));
        }
        if answers[..n]
            .iter()
            .any(|a| a.outcome.execution_id == *child)
        {
            return Err(ValidationError::InvalidRequest(format!(
                "the batch of {execution_id} records two outcomes of {child}"
            )));
        }
    }
    Ok(())
}

/// Checks the leases of an `append_batch`: each names an execution the batch creates, at most
/// once, of a function an executor may run (not a stub), and ends after the batch's `now`.
fn validate_leases(req: &AppendBatchRequest) -> Result<(), ValidationError> {
    let AppendBatchRequest {
        execution_id,
        now,
        children,
        leases,
        ..
    } = req;
    if leases.is_empty() {
        return Ok(());
    }
    let mut leased: HashSet<&ExecutionId, FastHash> = HashSet::default();
    for lease in leases {
        let leased_id = &lease.execution_id;
        let Some(child) = children
            .iter()
            .find(|child| child.execution_id == *leased_id)
        else {
            return Err(ValidationError::InvalidRequest(format!(
                "execution {leased_id} is given a lease by the batch of {execution_id}, which \
                 does not create it: only an execution a batch creates can be created locked"
            )));
        };
        if !leased.insert(leased_id) {
            return Err(ValidationError::InvalidRequest(format!(
                "execution {leased_id} is given two leases by the batch of {execution_id}"
            )));
        }
        validate_lease(child, &lease.locked, *now)?;
    }
    Ok(())
}
