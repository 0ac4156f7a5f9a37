//! The execution log: events, history events, join set responses, finished results, and the
//! JSON payloads they carry.

use crate::ids::{ComponentId, DelayId, ExecutionId, ExecutorId, FunctionFqn, JoinSetId, RunId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::{collections::BTreeMap, fmt, time::Duration};

/// The position of an event in an execution's log; `Created` is version 0.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    derive_more::Display,
    derive_more::From,
    derive_more::Into,
)]
#[serde(transparent)]
pub struct Version(pub u32);

impl Version {
    /// The version after this one, or `None` at `u32::MAX`.
    #[must_use]
    pub fn next(self) -> Option<Version> {
        self.0.checked_add(1).map(Version)
    }
}

/// A JSON payload: parameters, a return value, a persisted value. Object key order is kept.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, derive_more::From)]
#[serde(transparent)]
pub struct Json(pub serde_json::Value);

impl fmt::Debug for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// The parameters of an execution, as one JSON value (usually an array of arguments).
pub type Params = Json;

/// A string map stored with an execution; it carries the submitter's trace context
/// (`traceparent`) so that every worker run links to the span that submitted it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExecutionMetadata(pub BTreeMap<String, String>);

impl ExecutionMetadata {
    /// The key of the W3C trace context.
    pub const TRACEPARENT: &'static str = "traceparent";

    /// The submitter's W3C `traceparent`, if any.
    #[must_use]
    pub fn traceparent(&self) -> Option<&str> {
        self.0.get(Self::TRACEPARENT).map(String::as_str)
    }

    /// The stored `traceparent`, if it is one in the W3C format.
    #[must_use]
    pub fn trace_parent(&self) -> Option<crate::trace::TraceParent> {
        self.traceparent()
            .and_then(crate::trace::TraceParent::parse)
    }

    /// Stores `parent` as the trace context, in place of any other.
    #[must_use]
    pub fn with_trace(mut self, parent: crate::trace::TraceParent) -> Self {
        self.0
            .insert(Self::TRACEPARENT.to_owned(), parent.as_str().to_owned());
        self
    }

    /// A submit's metadata: the context given stays; without one, the current span's
    /// ([`crate::trace::current`]) is stored.
    #[must_use]
    pub fn with_current_trace(self) -> Self {
        if self.trace_parent().is_some() {
            return self;
        }
        match crate::trace::current() {
            Some(parent) => self.with_trace(parent),
            None => self,
        }
    }
}

/// What a successfully finished function returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SupportedFunctionReturnValue {
    /// The function returns nothing.
    None,
    /// An infallible function's value, or the `Ok` value of a fallible one.
    InfallibleOrResultOk(Json),
    /// The error value of a fallible function (the function ran to completion and chose it).
    FallibleResultErr(Json),
}

/// What kind of permanent failure ended an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, derive_more::Display)]
pub enum PermanentFailureKind {
    /// An activity trapped (panicked, failed) and had no retry left.
    ActivityTrap,
    /// A workflow trapped and had no retry left.
    WorkflowTrap,
    /// The parameters could not be decoded into the function's arguments.
    ParamsParsingError,
    /// The function's output could not be encoded as its result.
    ResultParsingError,
    /// A workflow's replay diverged from its recorded history.
    NondeterminismDetected,
    /// The worker reported an unrecoverable error of another kind.
    Other,
}

/// Why an execution finished with an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum FinishedExecutionError {
    /// The execution timed out and had no retry left.
    #[error("permanent timeout")]
    PermanentTimeout,
    /// A child execution failed and the parent did not handle it.
    #[error("unhandled error of child execution {child_execution_id} (root cause {root_cause_id})")]
    UnhandledChildExecutionError {
        /// The child whose failure this is.
        child_execution_id: ExecutionId,
        /// The execution where the failure started.
        root_cause_id: ExecutionId,
    },
    /// A failure that retries cannot fix.
    #[error("{reason_full}")]
    PermanentFailure {
        /// The failure's own message.
        reason_inner: String,
        /// The message with its context, for people.
        reason_full: String,
        /// What kind of failure it was.
        kind: PermanentFailureKind,
        /// Extra detail (a backtrace, say).
        detail: Option<String>,
    },
    /// The execution was cancelled (`DbClient::cancel`) before it finished, itself or as a
    /// descendant of a cancelled execution.
    #[error("cancelled: {reason}")]
    Cancelled {
        /// Why, as the canceller said.
        reason: String,
    },
}

/// The result of a finished execution.
pub type FinishedExecutionResult = Result<SupportedFunctionReturnValue, FinishedExecutionError>;

/// A coarse classification of a finished result, kept in the pending state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, derive_more::Display)]
pub enum ResultKind {
    /// `Ok(None)` or `Ok(InfallibleOrResultOk(_))`.
    Ok,
    /// `Ok(FallibleResultErr(_))`.
    FallibleError,
    /// `Err(PermanentTimeout)`.
    Timeout,
    /// `Err(UnhandledChildExecutionError { .. })`.
    UnhandledChildExecutionError,
    /// `Err(PermanentFailure { .. })`.
    PermanentFailure,
    /// `Err(Cancelled { .. })`.
    Cancelled,
}

impl ResultKind {
    /// Its name where it is read by other programs (the HTTP API's documents, the metrics'
    /// labels): `ok`, `error`, `timeout`, `unhandled_child_error`, `failed`, `cancelled`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::FallibleError => "error",
            Self::Timeout => "timeout",
            Self::UnhandledChildExecutionError => "unhandled_child_error",
            Self::PermanentFailure => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// The kind of a finished result.
    #[must_use]
    pub fn of(result: &FinishedExecutionResult) -> Self {
        match result {
            Ok(
                SupportedFunctionReturnValue::None
                | SupportedFunctionReturnValue::InfallibleOrResultOk(_),
            ) => Self::Ok,
            Ok(SupportedFunctionReturnValue::FallibleResultErr(_)) => Self::FallibleError,
            Err(FinishedExecutionError::PermanentTimeout) => Self::Timeout,
            Err(FinishedExecutionError::UnhandledChildExecutionError { .. }) => {
                Self::UnhandledChildExecutionError
            }
            Err(FinishedExecutionError::PermanentFailure { .. }) => Self::PermanentFailure,
            Err(FinishedExecutionError::Cancelled { .. }) => Self::Cancelled,
        }
    }
}

/// One event of the log with the time it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionEvent {
    /// When the event was appended (the caller's clock).
    #[serde(with = "crate::time::rfc3339")]
    pub created_at: DateTime<Utc>,
    /// The event.
    pub event: ExecutionEventInner,
}

/// An event of the execution log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecutionEventInner {
    /// Always version 0, written by `create` only. Boxed: it is by far the largest event, and
    /// every event of a log would otherwise be as large as it.
    Created(Box<Created>),
    /// An executor holds the execution until `lock_expires_at`.
    Locked(Locked),
    /// The worker hit a limit; the execution comes back later without using up a retry.
    Unlocked {
        /// When it becomes due again.
        #[serde(with = "crate::time::rfc3339")]
        backoff_expires_at: DateTime<Utc>,
        /// Which limit.
        reason: String,
    },
    /// The worker failed; retried at `backoff_expires_at`.
    TemporarilyFailed {
        /// When it becomes due again.
        #[serde(with = "crate::time::rfc3339")]
        backoff_expires_at: DateTime<Utc>,
        /// The message with its context.
        reason_full: String,
        /// The failure's own message.
        reason_inner: String,
        /// Extra detail.
        detail: Option<String>,
    },
    /// The run outlived its lease; retried at `backoff_expires_at`.
    TemporarilyTimedOut {
        /// When it becomes due again.
        #[serde(with = "crate::time::rfc3339")]
        backoff_expires_at: DateTime<Utc>,
    },
    /// Terminal.
    Finished {
        /// The result.
        result: FinishedExecutionResult,
    },
    /// Progress recorded by a workflow-style worker.
    HistoryEvent {
        /// The history event.
        event: HistoryEvent,
    },
}

impl ExecutionEventInner {
    /// The event's variant name, for logs and tables.
    #[must_use]
    pub fn variant_name(&self) -> &'static str {
        match self {
            Self::Created(_) => "Created",
            Self::Locked(_) => "Locked",
            Self::Unlocked { .. } => "Unlocked",
            Self::TemporarilyFailed { .. } => "TemporarilyFailed",
            Self::TemporarilyTimedOut { .. } => "TemporarilyTimedOut",
            Self::Finished { .. } => "Finished",
            Self::HistoryEvent { .. } => "HistoryEvent",
        }
    }

    /// The creation, for a `Created` event.
    #[must_use]
    pub fn created(&self) -> Option<&Created> {
        match self {
            Self::Created(created) => Some(created),
            _ => None,
        }
    }

    /// The creation, for a `Created` event (`None` for any other).
    #[must_use]
    pub fn into_created(self) -> Option<Box<Created>> {
        match self {
            Self::Created(created) => Some(created),
            _ => None,
        }
    }

    /// True for the events that use up a retry.
    #[must_use]
    pub fn is_temporary_event(&self) -> bool {
        matches!(
            self,
            Self::TemporarilyFailed { .. } | Self::TemporarilyTimedOut { .. }
        )
    }
}

/// What an execution is created with: its [`ExecutionEventInner::Created`] event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    /// The function to run.
    pub ffqn: FunctionFqn,
    /// Its parameters.
    pub params: Params,
    /// The parent and the join set this execution answers to, for a child.
    pub parent: Option<(ExecutionId, JoinSetId)>,
    /// When it becomes due.
    #[serde(with = "crate::time::rfc3339")]
    pub scheduled_at: DateTime<Utc>,
    /// The first retry's backoff; each further retry doubles it.
    #[serde(with = "duration_micros")]
    pub retry_exp_backoff: Duration,
    /// How many temporary failures or timeouts are retried.
    pub max_retries: u32,
    /// The component that runs the function.
    pub component_id: ComponentId,
    /// The submitter's string map (trace context).
    pub metadata: ExecutionMetadata,
    /// The execution that scheduled this one, if any.
    pub scheduled_by: Option<ExecutionId>,
}

/// The lease an executor holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locked {
    /// The component of the executor.
    pub component_id: ComponentId,
    /// The executor that holds the lease.
    pub executor_id: ExecutorId,
    /// The run this lease belongs to.
    pub run_id: RunId,
    /// When the lease expires.
    #[serde(with = "crate::time::rfc3339")]
    pub lock_expires_at: DateTime<Utc>,
}

/// What kind of value a `Persist` recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PersistKind {
    /// A random integer in `min..=max_inclusive`.
    RandomU64 {
        /// Lower bound.
        min: u64,
        /// Upper bound, inclusive.
        max_inclusive: u64,
    },
    /// A random string of a length in `min_length..max_length_exclusive`.
    RandomString {
        /// Shortest length.
        min_length: u64,
        /// Longest length, exclusive.
        max_length_exclusive: u64,
    },
    /// A value recorded by the worker under its own name.
    Custom(String),
    /// A patch marker: the code that recorded the log took the new branch of the change named
    /// here (`WorkflowCtx::patched`); its value is `true`.
    Patch(String),
    /// The workflow's status, as it set it last (`WorkflowCtx::set_status`): any JSON value
    /// that `show`, the HTTP API and the web UI show.
    Status,
}

/// How a join set is closed when its workflow finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ClosingStrategy {
    /// Await every request that was not awaited yet.
    #[default]
    Complete,
}

/// A request submitted into a join set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinSetRequest {
    /// A durable sleep until `expires_at`.
    DelayRequest {
        /// The delay.
        delay_id: DelayId,
        /// When it fires.
        #[serde(with = "crate::time::rfc3339")]
        expires_at: DateTime<Utc>,
    },
    /// A child execution, created in the same transaction.
    ChildExecutionRequest {
        /// The child.
        child_execution_id: ExecutionId,
    },
}

/// Progress recorded by a workflow-style worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HistoryEvent {
    /// A recorded non-deterministic value.
    Persist {
        /// The value.
        value: Json,
        /// What it is.
        kind: PersistKind,
    },
    /// A join set was opened.
    JoinSetCreate {
        /// The join set.
        join_set_id: JoinSetId,
        /// How it is closed.
        closing_strategy: ClosingStrategy,
    },
    /// A request was submitted into a join set.
    JoinSetRequest {
        /// The join set.
        join_set_id: JoinSetId,
        /// The request.
        request: JoinSetRequest,
    },
    /// The worker awaits the next response of a join set.
    JoinNext {
        /// The join set.
        join_set_id: JoinSetId,
        /// Until when the run stays warm (its deadline) or `now` when it gives up its run.
        #[serde(with = "crate::time::rfc3339")]
        run_expires_at: DateTime<Utc>,
        /// True when the join set is being closed.
        closing: bool,
    },
    /// Another execution was scheduled (not as a child).
    Schedule {
        /// The scheduled execution.
        execution_id: ExecutionId,
        /// When it is due.
        #[serde(with = "crate::time::rfc3339")]
        scheduled_at: DateTime<Utc>,
    },
}

impl HistoryEvent {
    /// The event's variant name, for logs and tables.
    #[must_use]
    pub fn variant_name(&self) -> &'static str {
        match self {
            Self::Persist { .. } => "Persist",
            Self::JoinSetCreate { .. } => "JoinSetCreate",
            Self::JoinSetRequest { .. } => "JoinSetRequest",
            Self::JoinNext { .. } => "JoinNext",
            Self::Schedule { .. } => "Schedule",
        }
    }

    /// The join set it concerns, if any.
    #[must_use]
    pub fn join_set_id(&self) -> Option<&JoinSetId> {
        match self {
            Self::JoinSetCreate { join_set_id, .. }
            | Self::JoinSetRequest { join_set_id, .. }
            | Self::JoinNext { join_set_id, .. } => Some(join_set_id),
            Self::Persist { .. } | Self::Schedule { .. } => None,
        }
    }
}

/// A response to a join set request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinSetResponse {
    /// A delay fired.
    DelayFinished {
        /// The delay.
        delay_id: DelayId,
    },
    /// A child finished.
    ChildExecutionFinished {
        /// The child.
        child_execution_id: ExecutionId,
        /// The version of the child's `Finished` event.
        finished_version: Version,
        /// The child's result.
        result: FinishedExecutionResult,
    },
}

impl JoinSetResponse {
    /// The delay a `DelayFinished` answers.
    #[must_use]
    pub fn delay_id(&self) -> Option<DelayId> {
        match self {
            Self::DelayFinished { delay_id } => Some(*delay_id),
            Self::ChildExecutionFinished { .. } => None,
        }
    }

    /// The child a `ChildExecutionFinished` comes from.
    #[must_use]
    pub fn child_execution_id(&self) -> Option<&ExecutionId> {
        match self {
            Self::ChildExecutionFinished {
                child_execution_id, ..
            } => Some(child_execution_id),
            Self::DelayFinished { .. } => None,
        }
    }

    /// The duplicate this response is when `execution_id` holds it already: each delay and
    /// each child answers once.
    #[must_use]
    pub fn duplicate_for(&self, execution_id: &ExecutionId) -> crate::DuplicateKind {
        let execution_id = execution_id.clone();
        match self {
            Self::DelayFinished { delay_id } => crate::DuplicateKind::DelayResponse {
                execution_id,
                delay_id: *delay_id,
            },
            Self::ChildExecutionFinished {
                child_execution_id, ..
            } => crate::DuplicateKind::ChildResponse {
                execution_id,
                child_execution_id: child_execution_id.clone(),
            },
        }
    }
}

/// A response with the join set it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinSetResponseEvent {
    /// The join set.
    pub join_set_id: JoinSetId,
    /// The response.
    pub event: JoinSetResponse,
}

/// A response as stored beside the log, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinSetResponseEventOuter {
    /// When it arrived (the caller's clock).
    #[serde(with = "crate::time::rfc3339")]
    pub created_at: DateTime<Utc>,
    /// The response.
    pub event: JoinSetResponseEvent,
}

/// Serializes a `Duration` as integer microseconds (saturating).
pub(crate) mod duration_micros {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Serialize as microseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(micros(*d))
    }

    /// The microseconds written: saturating at `u64::MAX`.
    pub(crate) fn micros(d: Duration) -> u64 {
        u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
    }

    /// Deserialize from microseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_micros)
    }
}

#[cfg(test)]
mod tests;
