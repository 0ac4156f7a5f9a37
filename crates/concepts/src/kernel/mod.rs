//! The storage kernel: every rule of the execution model that a write must obey, written once,
//! for backend implementors. Users of Stele never need this module.
//!
//! A backend decides nothing. It implements [`Backend`], and the public storage traits come
//! with it. Each write, whatever its kind ([`Write`], one module per kind), goes through four
//! steps:
//!
//! 1. **Keys.** [`Write::keys`] names exactly the rows the write touches ([`Keys`]: execution
//!    rows, join-set counters, delays, child responses, whether due executions must be found).
//!    Rules that depend on the request alone (an empty batch, a lease that expires before it
//!    starts, a child that no event announces) are checked here, before anything is read.
//! 2. **Load.** The backend reads those rows into a [`Snapshot`], under its own locking (a
//!    mutex, the single writer's transaction, `SELECT ... FOR UPDATE`), and, when asked, finds
//!    the due executions, the descendants of an execution or the prune candidates with its
//!    own indexes. A write whose rows depend on what it read (`cancel` needs the join sets of
//!    the descendants it found, `prune` the trees of its candidates) names the rest with
//!    [`Write::follow_up_keys`], which the backend loads into the same snapshot.
//! 3. **Plan.** [`plan`] applies the write to the snapshot: it validates every step
//!    (versions, the locking rules, a repeated delay, a duplicate response, a child's parent),
//!    carries the pending state forward with [`ExecutionState`](crate::ExecutionState)'s
//!    transitions, assigns versions and response indexes, and returns a [`WritePlan`] (the
//!    events, rows, responses, counters and delays to persist, the executions to delete, and
//!    the [`Wakeup`]s the write causes) with the write's typed reply; or the error that refuses
//!    the whole write.
//! 4. **Persist, then wake.** The backend writes the plan atomically, and only after it
//!    committed hands the wake-ups to its [`WaiterHub`], or the plan itself, whose finish's
//!    result and responses the hub hands to whoever waits for them
//!    ([`WaiterHub::deliver_plans`]); and, across processes, the wake-ups to whatever carries
//!    them. A `lock_pending` plan grants leases from the state rows alone
//!    ([`LockGrant`]); after the commit the backend reads each granted execution's history and
//!    [`hand_over`] assembles what its worker gets, so no write transaction reads a log.
//!
//! **Groups.** Writes whose keys [`share a transaction`](Keys::shares_a_transaction) (they
//! name every row they read) may be planned together on one snapshot loaded for the
//! [`union`](Keys::union) of their keys: a [`GroupPlanner`] plans them one after the other,
//! each on the snapshot as the accepted ones before it left it, so each sees what it would
//! have seen alone after them, a refused one refuses only itself, and their changes merge into
//! one plan, one change per execution. A single write is a group of one; `append_outcomes`
//! (the watcher timing out many leases) is the group of its outcomes; a backend that lets
//! concurrent writes share a commit groups them ([`queue`] erases their kinds for its queue),
//! with [`Groups`] when it runs several transactions at once.
//!
//! **Assumptions.** A write whose keys name execution rows only can be planned without a load,
//! on rows the store wrote itself ([`KnownRows`]) and on the assumption that what it creates is
//! not stored; the [`Assumption`] says what the backend checks as it writes (each row's
//! [`Revision`], each new id's absence), and a refuted one runs the write again with the load.
//!
//! Every validation, every error message and every transition lives in this module and in
//! [`ExecutionState`](crate::ExecutionState); no backend constructs a
//! [`ValidationError`](crate::ValidationError). The kernel is driver-free and clock-free: time
//! comes in with the request.
//!
//! Its files depend on each other in one direction: `keys` and `snapshot` at the bottom, the
//! planner's primitives (`plan`) above them, the [`Write`] trait, the [`GroupPlanner`], the
//! kinds of write (`writes/`), and [`Backend`] on top; `assume`, `queued`, `groups`, `waiters`
//! and [`stored`] (how the SQL backends store values in columns) serve backends beside them.

mod assume;
mod backend;
mod group;
mod groups;
mod keys;
mod messages;
mod plan;
mod queued;
mod snapshot;
pub mod stored;
mod waiters;
mod write;
mod writes;

pub use assume::{Assumption, KnownRows};
pub use backend::Backend;
pub use group::{GroupPlanner, plan, plan_into};
pub use groups::{Attempted, Groups, MAX_GROUP, NotCommitted, Transactions};
pub use keys::{
    DueQuery, ExecutionIds, JoinSetKey, Keys, PruneQuery, ScheduleDueQuery, descendant_bounds,
};
pub use messages::{WAKE_EVERYONE, parse_wakeup_message, wakeup_messages};
pub use plan::{
    ExecutionChange, NewExecution, PlannedDelay, PlannedResponse, Planner, ScheduleWrite, ThinVec,
    Wakeup, Wakeups, WritePlan,
};
pub use queued::{Answer, Queued, queue};
pub use snapshot::{
    DelayRow, ExecutionRow, FastHash, JoinSetCounters, JoinSetRow, LogRows, Revision, Snapshot,
    expired_timers,
};
pub use waiters::{WaiterCounts, WaiterHub};
pub use write::Write;
pub use writes::{
    AppendOutcomes, AppendResponse, BUFFER_RECHECK, CreateBatch, CreateLocked, CreatedEvents,
    LockGrant, MAX_BACKFILL_TICKS, TICKS_KEPT, TICKS_PER_PASS, hand_over, hand_over_cloned,
    hand_over_cloned_into, hand_over_created, validate_append_batch, validate_create,
    validate_lock_pending,
};

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod outcomes_tests;
#[cfg(test)]
mod tests;
