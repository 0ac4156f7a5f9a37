//! The portable error kinds of every storage operation and of the execution model's rules.
//!
//! This module sits at the bottom of the crate: it knows ids and versions, nothing of the
//! storage traits or of the pending state, both of which use it.

use crate::{
    event::Version,
    ids::{DelayId, ExecutionId, JoinSetId},
    schedule::ScheduleName,
};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Why a request was refused by the execution model's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// Locking an execution that is not due yet.
    #[error("not yet pending: the execution is scheduled at {scheduled_at}")]
    NotYetPending {
        /// When it becomes due.
        scheduled_at: DateTime<Utc>,
    },
    /// Locking an execution that another executor or run holds (expired or not).
    #[error("already locked: another executor or run holds the lease")]
    AlreadyLocked,
    /// Locking an execution that waits for a join set response.
    #[error("not yet pending: the execution is blocked by join set {join_set_id}")]
    BlockedByJoinSet {
        /// The join set it waits on.
        join_set_id: JoinSetId,
    },
    /// Appending to a finished execution.
    #[error("already finished: a finished execution takes no more events")]
    AlreadyFinished,
    /// A lease that expires at or before the time it is taken.
    #[error("invalid expiry date: lease expiry {lock_expires_at} is not after {now}")]
    InvalidExpiryDate {
        /// The requested expiry.
        lock_expires_at: DateTime<Utc>,
        /// The time of the request.
        now: DateTime<Utc>,
    },
    /// `Created` passed to an append; only `create` writes it.
    #[error("`Created` can only be written by `create`, not appended")]
    CreatedEventAppended,
    /// A batch with nothing in it.
    #[error("empty batch: {0} needs at least one item")]
    EmptyBatch(&'static str),
    /// A request that is inconsistent in itself.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A cancel's reason longer than
    /// [`CancelRequest::MAX_REASON_BYTES`](crate::CancelRequest::MAX_REASON_BYTES).
    #[error(
        "the reason is {length} bytes long; a cancel's reason may be at most {limit} bytes: \
         say why in a sentence"
    )]
    ReasonTooLong {
        /// The reason's length in bytes.
        length: usize,
        /// The most a reason may be.
        limit: usize,
    },
    /// A child's answer recorded by its parent's batch
    /// ([`AppendBatchRequest::answers`](crate::AppendBatchRequest::answers)) would not take
    /// the place among the parent's responses at which the parent's run consumed it: another
    /// response was written since.
    #[error(
        "the answer of child {child} would be response {found} of its parent, whose run \
         consumed it as response {expected}: another response was written since"
    )]
    AnswerOutOfPlace {
        /// The child.
        child: ExecutionId,
        /// The place at which the run consumed the answer.
        expected: u64,
        /// The place it would take.
        found: u64,
    },
}

/// What already existed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DuplicateKind {
    /// An execution with this id exists.
    #[error("execution {0} already exists")]
    Execution(ExecutionId),
    /// This execution already has a `DelayFinished` for this delay.
    #[error("execution {execution_id} already has a response for delay {delay_id}")]
    DelayResponse {
        /// The execution that received the response.
        execution_id: ExecutionId,
        /// The delay.
        delay_id: DelayId,
    },
    /// This execution already has a response from this child.
    #[error("execution {execution_id} already has a response from child {child_execution_id}")]
    ChildResponse {
        /// The execution that received the response.
        execution_id: ExecutionId,
        /// The child.
        child_execution_id: ExecutionId,
    },
    /// An execution with this id exists with another function, parameters or parent: a
    /// `create` that reuses an id must repeat the request exactly.
    #[error(
        "execution {execution_id} already exists and differs in its {}",
        Differences(differences)
    )]
    ExecutionConflict {
        /// The execution.
        execution_id: ExecutionId,
        /// What differs, in the order function, parameters, parent.
        differences: Vec<CreateConflict>,
    },
    /// The stub was already completed (or cancelled) with another result.
    #[error("execution {execution_id} was already completed with a different result: {existing}")]
    Completion {
        /// The stub execution.
        execution_id: ExecutionId,
        /// The result it has, as text.
        existing: String,
    },
    /// A schedule with this name exists (the database found it; run again, the write is
    /// answered on what is stored).
    #[error("schedule {0} already exists")]
    Schedule(ScheduleName),
    /// A schedule with this name exists with another definition: a `create_schedule` that
    /// repeats a name must repeat the schedule exactly (or update it).
    #[error(
        "schedule {name} already exists with another {}: update it, or delete it and create it again",
        Differences(differences)
    )]
    ScheduleConflict {
        /// The schedule.
        name: ScheduleName,
        /// What differs, in the order of `Definition::differences`.
        differences: Vec<&'static str>,
    },
}

/// How a conflict lists what differs.
struct Differences<'a, T>(&'a [T]);

impl<T: std::fmt::Display> std::fmt::Display for Differences<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(if i + 1 == self.0.len() { " and " } else { ", " })?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// What differs between a `create` and the execution that already has its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, derive_more::Display)]
#[non_exhaustive]
pub enum CreateConflict {
    /// The function.
    #[display("function")]
    Function,
    /// The parameters.
    #[display("parameters")]
    Params,
    /// The parent (or its join set).
    #[display("parent")]
    Parent,
}

/// A backend's own error, wrapped: the driver's message and whether retrying may help.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// What went wrong, with the context a person needs (a path, say).
    pub message: String,
    /// True when the same request may succeed if retried (a busy database, a serialization
    /// failure).
    pub retriable: bool,
    /// The driver's error.
    #[source]
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// Why the execution model refuses to append an event: the log moved on, or the event breaks
/// a rule. [`DbError`] wraps it, with the same kinds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendRefused {
    /// Optimistic concurrency: somebody appended first.
    #[error("version mismatch: appending at {appending_version}, expected {expected_version}")]
    VersionMismatch {
        /// The version the request carried.
        appending_version: Version,
        /// The version the log expects next.
        expected_version: Version,
    },
    /// The event breaks a rule of the execution model.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

impl From<AppendRefused> for DbError {
    fn from(refused: AppendRefused) -> Self {
        match refused {
            AppendRefused::VersionMismatch {
                appending_version,
                expected_version,
            } => Self::VersionMismatch {
                appending_version,
                expected_version,
            },
            AppendRefused::Invalid(invalid) => Self::Validation(invalid),
        }
    }
}

/// The portable error kinds of every storage operation. Every backend maps its driver's errors
/// into these, so a caller (and the conformance suite) sees the same kind for the same
/// situation on every backend.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// The execution (or event) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Optimistic concurrency: somebody appended first.
    #[error("version mismatch: appending at {appending_version}, expected {expected_version}")]
    VersionMismatch {
        /// The version the request carried.
        appending_version: Version,
        /// The version the log expects next.
        expected_version: Version,
    },
    /// The request breaks a rule of the execution model.
    #[error("validation failed: {0}")]
    Validation(#[from] ValidationError),
    /// Something unique already exists.
    #[error("duplicate: {0}")]
    Duplicate(#[from] DuplicateKind),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// A wait ran out of time.
    #[error("timed out waiting")]
    Timeout,
    /// The connection to the database was lost; the request may be retried once it returns.
    #[error("connection error: {0}")]
    Connection(String),
    /// Any other error of the backend.
    #[error("backend error: {0}")]
    Backend(#[from] BackendError),
}

/// The kind of a [`DbError`], for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, derive_more::Display)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// [`DbError::NotFound`].
    NotFound,
    /// [`DbError::VersionMismatch`].
    VersionMismatch,
    /// [`DbError::Validation`].
    Validation,
    /// [`DbError::Duplicate`].
    Duplicate,
    /// [`DbError::Closed`].
    Closed,
    /// [`DbError::Timeout`].
    Timeout,
    /// [`DbError::Connection`].
    Connection,
    /// [`DbError::Backend`].
    Backend,
}

impl DbError {
    /// A backend's own error ([`DbError::Backend`]): its message, whether retrying may help,
    /// and the driver's error behind it, if any.
    #[must_use]
    pub fn backend(
        message: impl Into<String>,
        retriable: bool,
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        let message = message.into();
        Self::Backend(BackendError {
            message,
            retriable,
            source,
        })
    }

    /// The kind.
    #[must_use]
    pub fn kind(&self) -> DbErrorKind {
        match self {
            Self::NotFound(_) => DbErrorKind::NotFound,
            Self::VersionMismatch { .. } => DbErrorKind::VersionMismatch,
            Self::Validation(_) => DbErrorKind::Validation,
            Self::Duplicate(_) => DbErrorKind::Duplicate,
            Self::Closed => DbErrorKind::Closed,
            Self::Timeout => DbErrorKind::Timeout,
            Self::Connection(_) => DbErrorKind::Connection,
            Self::Backend(_) => DbErrorKind::Backend,
        }
    }

    /// The validation error, if this is one.
    #[must_use]
    pub fn as_validation(&self) -> Option<&ValidationError> {
        match self {
            Self::Validation(v) => Some(v),
            _ => None,
        }
    }

    /// True when retrying the same request later may succeed.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Connection(_) | Self::Timeout => true,
            Self::Backend(b) => b.retriable,
            _ => false,
        }
    }

    /// A `NotFound` for an execution.
    #[must_use]
    pub fn execution_not_found(execution_id: &ExecutionId) -> Self {
        Self::NotFound(format!("execution {execution_id}"))
    }
}
