//! Rules that depend on a request alone, checked before anything is read.

use super::snapshot::FastHash;
use crate::{
    AppendBatchRequest, CreateRequest, ExecutionEventInner, ExecutionId, HistoryEvent, JoinSetId,
    JoinSetRequest, LockPendingRequest, ValidationError,
};
use std::collections::HashSet;

/// Checks a request of `append_batch`: the batch is not empty, and every execution it creates
/// is announced by an event of the same batch, a child by a `ChildExecutionRequest` in the join
/// set of its `parent` (which must be `execution_id`), a top-level execution by a `Schedule`.
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

/// Checks a request of `create`: a child's id is derived from its parent and join set
/// (`<parent>.<join set>_<index>`, [`ExecutionId::next_level`]), and an execution without a
/// parent has a top-level id. So the descendants of an execution are exactly the ids that
/// start with its id and a dot, which is how `cancel` and `prune` find a tree.
pub fn validate_create(req: &CreateRequest) -> Result<(), ValidationError> {
    let derived = req.execution_id.split_to_parent();
    match (&req.parent, derived) {
        (None, None) => Ok(()),
        (Some(parent), Some(derived)) if *parent == derived => {
            // `next_level` builds without validating: an index of 0 would store an id that no
            // read could parse back.
            match req.execution_id.as_str().parse::<ExecutionId>() {
                Ok(_) => Ok(()),
                Err(err) => Err(ValidationError::InvalidRequest(format!(
                    "execution id {} is malformed ({err}): child indexes start at 1",
                    req.execution_id
                ))),
            }
        }
        (None, Some((parent_id, _))) => Err(ValidationError::InvalidRequest(format!(
            "execution {} has a child's id (of {parent_id}), but the request names no parent",
            req.execution_id
        ))),
        (Some((parent_id, join_set_id)), _) => Err(ValidationError::InvalidRequest(format!(
            "execution {} is created as a child of {parent_id} in join set {join_set_id}, so \
             its id must be `{parent_id}.{join_set_id}_<index>` (`ExecutionId::next_level`)",
            req.execution_id
        ))),
    }
}

/// Checks a request of `lock_pending`: the lease ends after it starts, and no stub function is
/// named (a stub is completed from outside, never run).
pub fn validate_lock_pending(req: &LockPendingRequest) -> Result<(), ValidationError> {
    if req.lock_expires_at <= req.now {
        return Err(ValidationError::InvalidExpiryDate {
            lock_expires_at: req.lock_expires_at,
            now: req.now,
        });
    }
    if let Some(stub) = req.ffqns.iter().find(|ffqn| ffqn.is_stub()) {
        return Err(ValidationError::InvalidRequest(format!(
            "function {stub} is a stub: no executor runs it, `complete` finishes its executions"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ComponentId, JoinSetId};
    use chrono::DateTime;

    fn child_request(execution_id: ExecutionId, parent: &ExecutionId) -> CreateRequest {
        let join_set_id: JoinSetId = "n:batch".parse().unwrap();
        let at = DateTime::from_timestamp(0, 0).unwrap();
        CreateRequest {
            created_at: at,
            execution_id,
            ffqn: "ns:pkg/ifc.fn".parse().unwrap(),
            params: serde_json::json!([]).into(),
            parent: Some((parent.clone(), join_set_id)),
            scheduled_at: at,
            retry_exp_backoff: std::time::Duration::ZERO,
            max_retries: 0,
            component_id: ComponentId::new("activity", "test").unwrap(),
            metadata: crate::ExecutionMetadata::default(),
            scheduled_by: None,
        }
    }

    #[test]
    fn a_child_index_of_zero_is_refused_before_it_is_stored() {
        let parent = ExecutionId::generate_at(DateTime::from_timestamp(0, 0).unwrap());
        let join_set_id: JoinSetId = "n:batch".parse().unwrap();
        let first = parent.next_level(&join_set_id, 1);
        assert_eq!(validate_create(&child_request(first, &parent)), Ok(()));
        let zeroth = parent.next_level(&join_set_id, 0);
        let err = validate_create(&child_request(zeroth, &parent)).unwrap_err();
        assert!(
            err.to_string().contains("child indexes start at 1"),
            "{err}"
        );
    }
}
