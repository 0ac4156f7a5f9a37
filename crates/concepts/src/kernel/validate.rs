//! Rules that depend on a request alone, checked before anything is read.

use crate::{
    AppendBatchRequest, ExecutionEventInner, HistoryEvent, JoinSetRequest, ValidationError,
};

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
    for child in children {
        let announced = events.iter().any(|event| {
            let ExecutionEventInner::HistoryEvent { event } = event else {
                return false;
            };
            match (event, &child.parent) {
                (
                    HistoryEvent::JoinSetRequest {
                        join_set_id,
                        request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
                    },
                    Some((parent_id, parent_join_set)),
                ) => {
                    *child_execution_id == child.execution_id
                        && parent_id == execution_id
                        && parent_join_set == join_set_id
                }
                (
                    HistoryEvent::Schedule {
                        execution_id: scheduled,
                        ..
                    },
                    None,
                ) => *scheduled == child.execution_id,
                _ => false,
            }
        });
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
