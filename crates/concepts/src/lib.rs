//! The domain of Stele, a durable-execution engine: what an execution is, how its append-only
//! log evolves, and the narrow storage traits every backend implements.
//!
//! An execution is a log of [`ExecutionEvent`]s. `Created` is version 0; executors append
//! `Locked` when they take it under a lease, then the outcome of the run: `Finished`, or a
//! temporary `TemporarilyFailed` / `TemporarilyTimedOut` that is retried with exponential
//! backoff ([`retry`]), or `Unlocked` when a worker hit a limit. Workflow-style workers record
//! [`HistoryEvent`]s: join sets, child executions, durable sleeps. Responses to join sets live
//! beside the log.
//!
//! The [`PendingState`] (due at a time, locked, blocked by a join set, finished) is a pure
//! function of the log and its responses: [`derive_pending_state`] is the reference, and every
//! backend's state index must agree with it.
//!
//! Storage is reached through narrow traits, split by who calls them: [`DbExecutor`],
//! [`DbWorkflow`], [`DbTimers`] and [`DbClient`] ([`DbConnection`] is all four). A write takes
//! one request: [`CreateRequest`], [`LockPendingRequest`], [`AppendBatchRequest`] (events, and
//! the executions created with them) or [`OutcomeWrite`] (how a run ended, and the parent's
//! response when a child finishes).
//!
//! This crate knows no database driver and reads no clock: timestamps are passed in, and time
//! comes from a [`ClockFn`] chosen by the caller.
//!
//! ```
//! use concepts::{ExecutionId, FunctionFqn, JoinSetId};
//!
//! let ffqn: FunctionFqn = "ns:pkg/ifc@1.0.0.fn".parse().unwrap();
//! assert_eq!(ffqn.ifc_name(), "ns:pkg/ifc@1.0.0");
//! let parent: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap();
//! let child = parent.next_level(&"n:batch".parse::<JoinSetId>().unwrap(), 1);
//! assert_eq!(child.to_string(), "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0.n:batch_1");
//! assert_eq!(child.split_to_parent().unwrap().0, parent);
//! assert!("E_nope".parse::<ExecutionId>().is_err());
//! ```

mod error;
mod event;
mod ids;
pub mod kernel;
mod lifecycle;
pub mod metrics;
mod outcome;
mod pending_state;
pub mod retry;
pub mod schedule;
mod schema;
mod storage;
mod time;
pub mod trace;

pub use error::{
    AppendRefused, BackendError, CreateConflict, DbError, DbErrorKind, DuplicateKind,
    ValidationError,
};
pub use event::{
    ClosingStrategy, Created, ExecutionEvent, ExecutionEventInner, ExecutionMetadata,
    FinishedExecutionError, FinishedExecutionResult, HistoryEvent, JoinSetRequest, JoinSetResponse,
    JoinSetResponseEvent, JoinSetResponseEventOuter, Json, Locked, Params, PermanentFailureKind,
    PersistKind, ResultKind, SupportedFunctionReturnValue, Version,
};
pub use ids::{
    ComponentId, DelayId, ExecutionId, ExecutionIdTopLevel, ExecutorId, FunctionFqn, IdParseError,
    JoinSetId, JoinSetKind, RunId,
};
pub use lifecycle::{
    CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest, CreateOutcome, PruneOutcome,
    PruneRequest, STUB_INTERFACE,
};
pub use outcome::{OutcomeWrite, is_lost_race};
pub use pending_state::{
    ExecutionState, PARKED_EXPLAINED, PARKED_UNTIL, PendingState, PendingStateKind, WarmRun,
    count_join_next, derive_pending_state, temporary_event_count, warm_run,
};
pub use schema::{SchemaOptions, SchemaPolicy, SchemaRefusal};
pub use storage::{
    AppendBatchRequest, ChildAnswer, CreateRequest, DbAwait, DbClient, DbClientExt, DbConnection,
    DbExecutor, DbSchedules, DbTimers, DbWorkflow, DueBacklog, ExecutionLog, ExecutionSummary,
    ExpiredDelay, ExpiredLock, ExpiredTimer, Lease, ListExecutionsFilter, ListTerm,
    LockPendingRequest, LockedExecution, Pagination,
};
pub use time::{
    ClockFn, add_saturating, sub_saturating, truncate_duration_to_micros, truncate_to_micros,
};
