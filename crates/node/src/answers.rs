//! The sentences that answer an operator's cancel and complete, the same wherever they are
//! asked: the `stele` command prints them, the web UI shows them.

use concepts::{CancelOutcome, CompleteOutcome, ExecutionId};

/// `cancelled E_...`, `cancelled E_... and 2 unfinished descendants (3 executions)`, or
/// `E_... had already finished, nothing cancelled` (to which a caller may add the result).
#[must_use]
pub fn cancel_answer(execution_id: &ExecutionId, outcome: &CancelOutcome) -> String {
    match outcome {
        CancelOutcome::Cancelled { executions: 0 | 1 } => format!("cancelled {execution_id}"),
        CancelOutcome::Cancelled { executions: 2 } => {
            format!("cancelled {execution_id} and 1 unfinished descendant (2 executions)")
        }
        CancelOutcome::Cancelled { executions } => format!(
            "cancelled {execution_id} and {} unfinished descendants ({executions} executions)",
            executions - 1
        ),
        CancelOutcome::AlreadyFinished { .. } => {
            format!("{execution_id} had already finished, nothing cancelled")
        }
    }
}

/// `completed E_....n:approval_1 with true; E_... has its answer`, or `... was already
/// completed with true, nothing written`.
#[must_use]
pub fn complete_answer(
    execution_id: &ExecutionId,
    outcome: &CompleteOutcome,
    value: &serde_json::Value,
) -> String {
    match outcome {
        CompleteOutcome::Completed => {
            let answered = execution_id
                .split_to_parent()
                .map(|(parent, _)| format!("; {parent} has its answer"))
                .unwrap_or_default();
            format!("completed {execution_id} with {value}{answered}")
        }
        CompleteOutcome::AlreadyCompleted => {
            format!("{execution_id} was already completed with {value}, nothing written")
        }
    }
}
