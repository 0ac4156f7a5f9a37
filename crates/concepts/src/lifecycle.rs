//! The requests and answers of the life of an execution after submission
//! (`docs/SEMANTICS.md` §10-§13): idempotent submit, cancellation, external completion of stubs
//! (durable promises) and retention. Their rules live in the storage kernel; these are the
//! types callers see.

use crate::{
    event::{FinishedExecutionResult, SupportedFunctionReturnValue},
    ids::{ExecutionId, FunctionFqn},
    pending_state::PendingState,
};
use chrono::{DateTime, Utc};

/// The interface name of stub functions: an execution of `stele:stub.<name>` is never run by
/// an executor (`lock_pending` refuses to lock stubs); it waits until
/// [`DbClient::complete`](crate::DbClient::complete) finishes it with a value. A workflow's
/// durable promise is a child execution of a stub function.
pub const STUB_INTERFACE: &str = "stele:stub";

impl FunctionFqn {
    /// The stub function `stele:stub.<name>`, or the error of a bad name.
    pub fn stub(name: &str) -> Result<Self, crate::IdParseError> {
        Self::new(STUB_INTERFACE, name)
    }

    /// True for a stub function ([`STUB_INTERFACE`]): completed from outside, never run.
    #[must_use]
    pub fn is_stub(&self) -> bool {
        self.ifc_name() == STUB_INTERFACE
    }
}

/// What `create` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The execution was created; its next append carries version 1.
    Created,
    /// An execution with this id, function, parameters and parent already existed (a retried
    /// submit): nothing was written.
    AlreadyExisted {
        /// Its current pending state.
        pending_state: PendingState,
    },
}

impl CreateOutcome {
    /// True when this call created the execution.
    #[must_use]
    pub fn is_created(&self) -> bool {
        matches!(self, Self::Created)
    }
}

/// `cancel`: finish a not-yet-finished execution, and every unfinished descendant, with
/// `Err(FinishedExecutionError::Cancelled { reason })`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    /// The execution to cancel.
    pub execution_id: ExecutionId,
    /// The time of the cancellation: the `created_at` of every event and response it writes.
    pub now: DateTime<Utc>,
    /// Why, recorded in each result: at most [`CancelRequest::MAX_REASON_BYTES`].
    pub reason: String,
}

impl CancelRequest {
    /// The longest reason a cancel records, in bytes of UTF-8 (4 KiB): a reason is a sentence
    /// for the people who read the result, and every cancelled execution of a tree stores it
    /// again. A longer one is refused with
    /// [`ValidationError::ReasonTooLong`](crate::ValidationError::ReasonTooLong), and nothing
    /// is written.
    pub const MAX_REASON_BYTES: usize = 4_096;
}

/// What `cancel` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The execution was cancelled, with `executions - 1` unfinished descendants.
    Cancelled {
        /// How many executions this call finished (at least 1).
        executions: usize,
    },
    /// It had already finished (cancelled earlier, or otherwise): nothing was written.
    AlreadyFinished {
        /// How it finished.
        result: FinishedExecutionResult,
    },
}

/// `complete`: finish a stub execution with a value supplied from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteRequest {
    /// The stub execution (a durable promise).
    pub execution_id: ExecutionId,
    /// The time of the completion.
    pub now: DateTime<Utc>,
    /// The value: the execution finishes with `Ok(value)`.
    pub value: SupportedFunctionReturnValue,
}

/// What `complete` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// This call completed the stub (and answered its parent).
    Completed,
    /// It was already completed with the same value: nothing was written.
    AlreadyCompleted,
}

/// `prune`: delete finished trees of executions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneRequest {
    /// Only top-level executions that finished strictly before this time (with their trees).
    pub finished_before: DateTime<Utc>,
    /// At most this many top-level executions are examined (and so deleted) by one call; at
    /// least 1.
    pub limit: usize,
    /// Continue after this `(finished_at, execution_id)`: [`PruneOutcome::next`] of the
    /// previous call, so that trees kept (with an unfinished member) are not examined again.
    pub after: Option<(DateTime<Utc>, ExecutionId)>,
}

/// What `prune` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneOutcome {
    /// Trees deleted (their top-level executions).
    pub trees: usize,
    /// Executions deleted, top-level and descendants.
    pub executions: usize,
    /// Trees examined and kept because a member has not finished.
    pub kept: usize,
    /// Where the next call continues, when this one examined `limit` candidates (more may be
    /// left); `None` when no candidate is left.
    pub next: Option<(DateTime<Utc>, ExecutionId)>,
}
