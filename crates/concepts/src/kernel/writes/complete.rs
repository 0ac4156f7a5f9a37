//! `complete`: a stub execution (a durable promise) finished with a value from outside,
//! answering its parent in the same transaction; again with the same value it is answered as
//! done, with another value refused; an execution that is not a stub is refused.

use crate::{
    CompleteOutcome, CompleteRequest, DbError, DuplicateKind, ExecutionEventInner, ExecutionId,
    FinishedExecutionResult, JoinSetResponse, JoinSetResponseEvent, OutcomeWrite, ValidationError,
    kernel::{Keys, Planner, Snapshot, Write, snapshot::inconsistent, write::sealed::Sealed},
};

impl Sealed for CompleteRequest {}

impl Write for CompleteRequest {
    type Reply = CompleteOutcome;

    /// The stub and its parent (named by its id), the parent's join set, and the stub's
    /// finished result if it has one.
    fn keys(&self) -> Result<Keys, DbError> {
        let mut keys = Keys::default();
        let req = self;
        if let Some((parent_id, join_set_id)) = req.execution_id.split_to_parent() {
            keys.executions.push(parent_id.clone());
            keys.add_response(
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
        Ok(keys)
    }

    /// Finishes a stub with `Ok(value)`, answering its parent.
    fn plan(self, planner: &mut Planner<'_>) -> Result<CompleteOutcome, DbError> {
        let snapshot = planner.snapshot;
        let row = snapshot
            .executions
            .get(&self.execution_id)
            .ok_or_else(|| DbError::execution_not_found(&self.execution_id))?;
        if !row.ffqn.is_stub() {
            return Err(ValidationError::InvalidRequest(format!(
                "execution {} runs {}, which is not a stub (`{}.<name>`): only stubs are \
                 completed from outside; an execution that runs can be cancelled",
                self.execution_id,
                row.ffqn,
                crate::STUB_INTERFACE
            ))
            .into());
        }
        let value = Ok(self.value);
        if row.state.pending_state.is_finished() {
            let existing = finished_result(snapshot, &self.execution_id)?;
            if existing == value {
                return Ok(CompleteOutcome::AlreadyCompleted);
            }
            return Err(DuplicateKind::Completion {
                execution_id: self.execution_id,
                existing: describe_result(&existing),
            }
            .into());
        }
        planner.outcome(OutcomeWrite {
            execution_id: self.execution_id,
            version: row.state.next_version,
            now: self.now,
            event: ExecutionEventInner::Finished { result: value },
            parent: row.parent.clone(),
        })?;
        Ok(CompleteOutcome::Completed)
    }
}

pub(super) fn finished_result(
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
