//! The errors a workflow author sees: a failed child ([`ChildError`]), what a workflow returns
//! ([`WorkflowError`]), and what a typed client reports ([`ClientError`]).

use concepts::{
    CreateConflict, DbError, DuplicateKind, ExecutionId, FinishedExecutionError,
    FinishedExecutionResult, IdParseError, Json, SupportedFunctionReturnValue,
    schedule::{BadScheduleName, ScheduleName},
};
use serde::de::DeserializeOwned;
use std::fmt;

/// Why a function's execution did not give the value its handle promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FunctionFailure {
    /// The function returned its error variant (`FallibleResultErr`), shown as JSON.
    #[error("returned the error {0}")]
    ReturnedError(Json),
    /// The execution was cancelled (`DbClient::cancel`, `Client::cancel`, or the cancellation
    /// of an ancestor; a promise, when its workflow finished without it).
    #[error("was cancelled: {reason}")]
    Cancelled {
        /// The reason given to the cancellation.
        reason: String,
    },
    /// The execution failed: a permanent trap or timeout, an unhandled child error.
    #[error("failed: {0}")]
    Failed(FinishedExecutionError),
    /// The execution finished with a value that is not the handle's result type: the handle and
    /// the function disagree.
    #[error("returned {value}, which is not the expected result type: {reason}")]
    UndecodableResult {
        /// The stored value.
        value: Json,
        /// Why it does not decode.
        reason: String,
    },
}

impl FunctionFailure {
    /// The function's own error value, decoded, when it returned one.
    #[must_use]
    pub fn returned_error<E: DeserializeOwned>(&self) -> Option<E> {
        match self {
            Self::ReturnedError(value) => E::deserialize(&value.0).ok(),
            _ => None,
        }
    }
}

/// Decodes a finished result into `R`: `Ok(value)`, or why not.
pub(crate) fn decode_finished<R: DeserializeOwned>(
    result: &FinishedExecutionResult,
) -> Result<R, FunctionFailure> {
    let value = match result {
        Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(value)) => value.clone(),
        Ok(SupportedFunctionReturnValue::None) => Json(serde_json::Value::Null),
        Ok(SupportedFunctionReturnValue::FallibleResultErr(value)) => {
            return Err(FunctionFailure::ReturnedError(value.clone()));
        }
        Err(FinishedExecutionError::Cancelled { reason }) => {
            return Err(FunctionFailure::Cancelled {
                reason: reason.clone(),
            });
        }
        Err(err) => return Err(FunctionFailure::Failed(err.clone())),
    };
    R::deserialize(&value.0).map_err(|err| FunctionFailure::UndecodableResult {
        value,
        reason: err.to_string(),
    })
}

/// A child execution that did not give its value.
///
/// Handle it (compensate, try another way) or propagate it with `?`: a workflow that returns
/// it ([`WorkflowError::Child`]) finishes with `UnhandledChildExecutionError`, naming the child
/// and the execution where the failure started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("child execution {child_execution_id} {failure}")]
pub struct ChildError {
    /// The child.
    pub child_execution_id: ExecutionId,
    /// What happened to it.
    pub failure: FunctionFailure,
}

impl ChildError {
    /// The execution where the failure started: the child itself, or, when the child failed
    /// because of its own unhandled child, that one's root cause.
    #[must_use]
    pub fn root_cause_id(&self) -> &ExecutionId {
        match &self.failure {
            FunctionFailure::Failed(FinishedExecutionError::UnhandledChildExecutionError {
                root_cause_id,
                ..
            }) => root_cause_id,
            _ => &self.child_execution_id,
        }
    }
}

/// What a workflow returns when it does not succeed.
///
/// - [`WorkflowError::Child`]: a child failed and the workflow did not handle it (what `?` on a
///   [`ChildError`] gives); the execution finishes with `UnhandledChildExecutionError`.
/// - [`WorkflowError::Failed`]: the workflow chose to fail with its own error value; the
///   execution finishes with that value as its `FallibleResultErr` (like an activity's `Err`).
pub enum WorkflowError<E> {
    /// An unhandled child failure.
    Child(ChildError),
    /// The workflow's own error value.
    Failed(E),
}

impl<E> From<ChildError> for WorkflowError<E> {
    fn from(err: ChildError) -> Self {
        Self::Child(err)
    }
}

impl<E: fmt::Debug> fmt::Debug for WorkflowError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Child(err) => f.debug_tuple("Child").field(err).finish(),
            Self::Failed(err) => f.debug_tuple("Failed").field(err).finish(),
        }
    }
}

impl<E: fmt::Display> fmt::Display for WorkflowError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Child(err) => write!(f, "unhandled child failure: {err}"),
            Self::Failed(err) => write!(f, "workflow failed: {err}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for WorkflowError<E> {}

/// Why registering a function on a worker failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// The handle's name is not a legal function name.
    #[error("cannot register {name}: {source}")]
    InvalidName {
        /// The name.
        name: &'static str,
        /// Why.
        source: IdParseError,
    },
    /// The worker already runs a function of that name.
    #[error("{0} is registered twice on the same worker")]
    Duplicate(&'static str),
}

/// Why a typed client could not submit or could not give a result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The handle's name is not a legal function name.
    #[error("cannot submit {name}: {source}")]
    InvalidName {
        /// The name.
        name: &'static str,
        /// Why.
        source: IdParseError,
    },
    /// The parameters could not be encoded as JSON.
    #[error("cannot encode the parameters of {name}: {reason}")]
    EncodeParams {
        /// The function.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// The id is taken by an execution of another function, other parameters or another
    /// parent: a resubmission must repeat the original request exactly.
    #[error(
        "{}: submit under another id, or repeat the original function and parameters to get \
         its handle",
        DuplicateKind::ExecutionConflict {
            execution_id: execution_id.clone(),
            differences: differences.clone(),
        }
    )]
    Conflict {
        /// The execution.
        execution_id: ExecutionId,
        /// What differs from the existing execution.
        differences: Vec<CreateConflict>,
    },
    /// No execution has this id.
    #[error("no execution {0} in this store: check the id")]
    NotFound(ExecutionId),
    /// `complete` of an id that names no execution: the promise was never requested, or its
    /// id is misspelt.
    #[error(
        "no promise {0} in this store: a promise exists once its workflow requested it, and \
         its id is the workflow's id, the join set and the name (the promise `name` of \
         workflow `W` is `W.n:name_1`)"
    )]
    NoSuchPromise(ExecutionId),
    /// The execution is not a promise (not a stub), so it cannot be completed from outside.
    #[error("cannot complete {execution_id}: {reason}")]
    NotAPromise {
        /// The execution.
        execution_id: ExecutionId,
        /// Why, as the store says it.
        reason: String,
    },
    /// The promise already has another result: it takes one value, and repeating the same
    /// value is accepted ([`concepts::CompleteOutcome::AlreadyCompleted`], not an error).
    #[error(
        "promise {execution_id} already has another result, {existing}: a promise is \
         completed once (completing it again with the same value is accepted)"
    )]
    DifferentResult {
        /// The promise.
        execution_id: ExecutionId,
        /// The result it has, as text.
        existing: String,
    },
    /// The value for a promise could not be encoded as JSON.
    #[error("cannot encode the value for promise {execution_id}: {reason}")]
    EncodeValue {
        /// The promise.
        execution_id: ExecutionId,
        /// Why.
        reason: String,
    },
    /// A schedule's name is not legal.
    #[error("{0}")]
    InvalidScheduleName(BadScheduleName),
    /// The schedule's name is stored with another definition or other settings: create it
    /// under another name, update it, or repeat the original definition.
    #[error(
        "{}: create it under another name, update it, or repeat its definition",
        DuplicateKind::ScheduleConflict { name: name.clone(), differences: differences.clone() }
    )]
    ScheduleConflict {
        /// The schedule.
        name: ScheduleName,
        /// What differs from the stored one, in the order of `Definition::differences`.
        differences: Vec<&'static str>,
    },
    /// No schedule has this name.
    #[error("no schedule {0} in this store: check the name")]
    NoSuchSchedule(ScheduleName),
    /// The store refused or failed (a closed store, a lost connection).
    #[error("storage: {0}")]
    Db(#[from] DbError),
    /// The execution did not finish within the time the caller gave.
    #[error("execution {0} did not finish within the given time")]
    Timeout(ExecutionId),
    /// The execution finished without its value.
    #[error("execution {execution_id} {failure}")]
    Failed {
        /// The execution.
        execution_id: ExecutionId,
        /// What happened.
        failure: FunctionFailure,
    },
}
