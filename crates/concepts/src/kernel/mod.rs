//! The storage kernel: every rule of the execution model that a write must obey, written once,
//! for backend implementors. Users of Stele never need this module.
//!
//! A backend does not decide anything. Each write goes through four steps:
//!
//! 1. **Keys.** The backend wraps the call in a [`WriteRequest`] and asks it for its
//!    [`Keys`]: exactly the rows the write touches (execution rows, join-set counters, delays,
//!    child responses, whether due executions must be found). Rules that depend on the request alone (an empty batch, a lease that expires
//!    before it starts, a child that no event announces) are checked here, before anything is
//!    read.
//! 2. **Load.** The backend reads those rows into a [`Snapshot`], under its own locking (a
//!    mutex, the single writer's transaction, `SELECT ... FOR UPDATE`), and, when asked, finds
//!    the due executions, the descendants of an execution or the prune candidates with its
//!    own indexes. A write whose rows depend on what it read (`cancel` needs the join sets of
//!    the descendants it found, `prune` the trees of its candidates) names the rest with
//!    [`WriteRequest::follow_up_keys`], which the backend loads into the same snapshot.
//! 3. **Plan.** [`plan`] applies the request to the snapshot: it validates every step
//!    (versions, the locking rules, a repeated delay, a duplicate response, a child's parent),
//!    carries the pending state forward with [`ExecutionState`](crate::ExecutionState)'s
//!    transitions, assigns versions and response indexes, and returns a [`WritePlan`]: the
//!    events, rows, responses, counters and delays to persist, the executions locked, and the
//!    [`Wakeup`]s the write causes. Or the typed error that refuses the whole write.
//! 4. **Persist, then wake.** The backend writes the plan atomically, and only after it
//!    committed hands the wake-ups to its [`WaiterHub`] (and, across processes, to whatever
//!    carries them). A `lock_pending` plan grants leases from the state rows alone
//!    ([`LockGrant`]); after the commit the backend reads each granted execution's history and
//!    [`hand_over`] assembles what its worker gets, so no write transaction reads a log.
//!
//! One write is planned item by item: `append_outcomes` ([`WriteRequest::Outcomes`], the
//! watcher timing out many leases), where each outcome is planned on the snapshot as the
//! accepted ones before it left it, a refused one refuses only itself, and the accepted
//! changes are merged into one plan; its reply is one result per item ([`OutcomeReplies`]).
//!
//! Every validation, every error message and every transition lives in this module and in
//! [`ExecutionState`](crate::ExecutionState); no backend constructs a
//! [`ValidationError`](crate::ValidationError). The kernel is driver-free and clock-free: time
//! comes in with the request.

mod handover;
mod lifecycle;
mod outcomes;
mod plan;
mod request;
mod snapshot;
mod validate;
mod waiters;

pub use handover::{LockGrant, hand_over, hand_over_cloned};
pub use outcomes::OutcomeReplies;
pub use plan::{
    ExecutionChange, PlannedDelay, PlannedResponse, Wakeup, Wakeups, WritePlan, WriteReply,
    WriteRequest, plan,
};
pub use snapshot::{
    DelayRow, DueQuery, ExecutionIds, ExecutionRow, JoinSetCounters, JoinSetKey, JoinSetRow, Keys,
    LogRows, PruneQuery, Snapshot, descendant_bounds, order_expired_timers,
};
pub use validate::{validate_append_batch, validate_create, validate_lock_pending};
pub use waiters::{WaiterCounts, WaiterHub};

#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod outcomes_tests;
#[cfg(test)]
mod tests;
