//! The request of `append_batch` ([`DbWorkflow::append_batch`](super::DbWorkflow::append_batch)),
//! the leases the executions it creates may be created with, and the answers of children it
//! records first.

use super::CreateRequest;
use crate::{
    OutcomeWrite,
    event::{ExecutionEventInner, Locked, Version},
    ids::ExecutionId,
};
use chrono::{DateTime, Utc};

/// Several events appended to one execution in order at consecutive versions, and the
/// executions created in the same transaction; all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendBatchRequest {
    /// The execution the events are appended to.
    pub execution_id: ExecutionId,
    /// The version of the first event, the one the writer read; the batch is refused if the
    /// log moved on.
    pub version: Version,
    /// The time of the request: the `created_at` of every event.
    pub now: DateTime<Utc>,
    /// The events, in order; at least one.
    pub events: Vec<ExecutionEventInner>,
    /// Executions created in the same transaction (children, or top-level executions it
    /// schedules), each announced by an event of `events`; may be empty.
    pub children: Vec<CreateRequest>,
    /// Executions of `children` created already locked, each under its lease; may be empty.
    /// An executor of a child's function in the writer's process that has a free permit gives
    /// its lease here and runs the child as soon as the batch commits, without a
    /// `lock_pending` (`executor::LocalExecutors`).
    pub leases: Vec<Lease>,
    /// Outcomes of children of `execution_id`, each with the response it gives the parent,
    /// recorded before the events in the same transaction; may be empty. A run that was
    /// handed a child's outcome before it was written (its executor is in the run's process)
    /// goes on at once and records it with its next batch: a workflow step is then one commit,
    /// not two.
    pub answers: Vec<ChildAnswer>,
}

/// A child's outcome recorded by its parent's batch ([`AppendBatchRequest::answers`]), as
/// `append_outcome` would record it: the child's `Finished` at the version its run read, and
/// the parent's response. The response must take `response_idx` among the parent's responses,
/// the place at which the run consumed it; a response written since (another child's, a
/// delay's) refuses the batch, and nothing is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildAnswer {
    /// The child's outcome: a `Finished` event naming the batch's execution as its parent.
    pub outcome: OutcomeWrite,
    /// The index its response takes among the parent's responses.
    pub response_idx: u64,
}

/// A lease an execution is created with ([`AppendBatchRequest::leases`]): its log is `Created`
/// at version 0 and this `Locked` at version 1, both at the batch's `now`, so that it is locked
/// from its first commit and never due. The lease is one like any other: it must end after
/// `now`, the execution must be due at `now` and not a stub, its executor writes the outcome
/// at version 2, and if nobody does before the lease ends, the timers watcher times it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The execution, one the batch creates.
    pub execution_id: ExecutionId,
    /// The lease: the executor, its component, a fresh run id and the lease's end.
    pub locked: Locked,
}

impl AppendBatchRequest {
    /// A batch of `events` appended to `execution_id` from `version` at `now`, creating
    /// nothing.
    #[must_use]
    pub fn events(
        execution_id: ExecutionId,
        version: Version,
        now: DateTime<Utc>,
        events: Vec<ExecutionEventInner>,
    ) -> Self {
        Self {
            execution_id,
            version,
            now,
            events,
            children: Vec::new(),
            leases: Vec::new(),
            answers: Vec::new(),
        }
    }
}
