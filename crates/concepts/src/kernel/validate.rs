//! Rules that depend on a request alone, checked before anything is read.

use super::snapshot::FastHash;
use crate::{
    AppendBatchRequest, ExecutionEventInner, ExecutionId, HistoryEvent, JoinSetId, JoinSetRequest,
    ValidationError,
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
