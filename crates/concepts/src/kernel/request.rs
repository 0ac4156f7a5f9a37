//! What a write is and what it produces: the [`WriteRequest`] a backend receives, the
//! [`Keys`] it names (first, and after a first load), and the [`WritePlan`] with its
//! [`WriteReply`] that the planner returns.

use super::outcomes::OutcomeReplies;
use super::plan::inconsistent;
use super::snapshot::{DueQuery, ExecutionRow, JoinSetCounters, JoinSetKey, Keys, Snapshot};
use super::validate::{validate_append_batch, validate_create, validate_lock_pending};
use crate::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest,
    CreateOutcome, CreateRequest, DbError, DelayId, ExecutionEvent, ExecutionEventInner,
    ExecutionId, FunctionFqn, HistoryEvent, JoinSetId, JoinSetRequest, JoinSetResponse,
    JoinSetResponseEvent, JoinSetResponseEventOuter, LockPendingRequest, OutcomeWrite,
    PendingState, PruneOutcome, PruneRequest, ValidationError, Version,
};
use chrono::{DateTime, Utc};
use smallvec::SmallVec;

/// One write, as a backend receives it from a caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRequest {
    /// `create`.
    Create(CreateRequest),
    /// `create_batch`: all or nothing.
    CreateBatch(Vec<CreateRequest>),
    /// `append_batch`, with the children it creates.
    AppendBatch(AppendBatchRequest),
    /// `append_outcome`: one event, plus the parent's response when it finishes a child.
    Outcome(OutcomeWrite),
    /// `append_outcomes`: outcome writes that succeed or fail one by one, in one transaction.
    Outcomes(Vec<OutcomeWrite>),
    /// `append_response`.
    Response {
        /// When it arrives.
        now: DateTime<Utc>,
        /// The execution that receives it.
        execution_id: ExecutionId,
        /// The response.
        response: JoinSetResponseEvent,
    },
    /// `lock_pending`.
    LockPending(LockPendingRequest),
    /// `cancel`: the execution and its unfinished descendants.
    Cancel(CancelRequest),
    /// `complete`: a stub, with a value from outside.
    Complete(CompleteRequest),
    /// `prune`: finished trees.
    Prune(PruneRequest),
}

/// What a write answers its caller, besides the plan's rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WriteReply {
    /// Nothing (`create_batch`, `append_response`, `lock_pending`, whose answer is
    /// [`WritePlan::locked`]).
    #[default]
    Nothing,
    /// The version the next append of the written execution carries (`append_batch`,
    /// `append_outcome`).
    Version(Version),
    /// `create`.
    Create(CreateOutcome),
    /// `cancel`.
    Cancel(CancelOutcome),
    /// `complete`.
    Complete(CompleteOutcome),
    /// `prune`.
    Prune(PruneOutcome),
    /// `append_outcomes`: each write's result.
    Outcomes(OutcomeReplies),
}

macro_rules! reply_accessor {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $ty:ty) => {
        $(#[$doc])*
        pub fn $name(self) -> Result<$ty, DbError> {
            match self {
                Self::$variant(answer) => Ok(answer),
                other => Err(inconsistent(format!(
                    concat!("the kernel answered {:?} where ", stringify!($variant), " belongs"),
                    other
                ))),
            }
        }
    };
}

impl WriteReply {
    reply_accessor!(
        /// The answer of `append_batch` and `append_outcome`.
        version, Version, Version
    );
    reply_accessor!(
        /// The answer of `create`.
        create, Create, CreateOutcome
    );
    reply_accessor!(
        /// The answer of `cancel`.
        cancel, Cancel, CancelOutcome
    );
    reply_accessor!(
        /// The answer of `complete`.
        complete, Complete, CompleteOutcome
    );
    reply_accessor!(
        /// The answer of `prune`.
        prune, Prune, PruneOutcome
    );
    reply_accessor!(
        /// The answer of `append_outcomes`.
        outcomes, Outcomes, OutcomeReplies
    );
}

/// A pending state became due, a response arrived, or an execution finished: who to wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// An execution of `ffqn` is due at `at`: wakes `wait_for_pending` callers of `ffqn`
    /// whose horizon covers `at`.
    Pending {
        /// The function.
        ffqn: FunctionFqn,
        /// When it is due.
        at: DateTime<Utc>,
    },
    /// The execution received responses: wakes `subscribe_to_next_responses` callers.
    Responses(ExecutionId),
    /// The execution finished: wakes `wait_for_finished_result` callers.
    Finished(ExecutionId),
}

/// The wake-ups of a write, with room for two inline: an outcome wakes the waiters of its
/// execution and perhaps its parent's, and allocates nothing for them.
pub type Wakeups = SmallVec<[Wakeup; 2]>;

/// A response to store, with its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedResponse {
    /// Its index among the execution's responses (arrival order).
    pub idx: u64,
    /// Its index among the responses of its join set.
    pub join_set_idx: u64,
    /// The response.
    pub response: JoinSetResponseEventOuter,
}

/// A delay requested by this write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDelay {
    /// The delay.
    pub delay_id: DelayId,
    /// Its join set.
    pub join_set_id: JoinSetId,
    /// When it fires.
    pub expires_at: DateTime<Utc>,
    /// False when its `DelayFinished` is already stored: it never opens.
    pub open: bool,
}

/// Everything a write changes about one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionChange {
    /// The row after the write (state, counters).
    pub row: ExecutionRow,
    /// The request, when the write creates the execution (its `Created` event is the first of
    /// `events`).
    pub created: Option<CreateRequest>,
    /// The pending state before the write; `None` for a new execution.
    pub old_state: Option<PendingState>,
    /// New events with their versions (a `Finished` is stored at the version it was appended
    /// at); one inline, the whole of most writes.
    pub events: SmallVec<[(Version, ExecutionEvent); 1]>,
    /// New responses.
    pub responses: Vec<PlannedResponse>,
    /// The counters after the write of every join set it changed.
    pub join_sets: Vec<(JoinSetId, JoinSetCounters)>,
    /// Delays requested.
    pub delays_requested: Vec<PlannedDelay>,
    /// Delays requested earlier that this write answered: they close.
    pub delays_closed: Vec<DelayId>,
}

impl ExecutionChange {
    /// True when the write creates the execution.
    #[must_use]
    pub fn is_new(&self) -> bool {
        self.created.is_some()
    }

    /// True when the pending state changed (always for a new execution).
    #[must_use]
    pub fn state_changed(&self) -> bool {
        self.old_state.as_ref() != Some(&self.row.state.pending_state)
    }
}

/// What a write persists, atomically, and what it causes once committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WritePlan {
    /// One entry per execution the write touches, in the order first touched.
    pub changes: Vec<ExecutionChange>,
    /// The wake-ups to deliver after the commit ([`Wakeups`]).
    pub wakeups: Wakeups,
    /// The leases granted (`lock_pending`), in lock order: the backend reads their histories
    /// after the commit and hands each over with [`hand_over`](super::hand_over).
    pub locked: Vec<super::handover::LockGrant>,
    /// Executions to delete with everything stored about them (`prune`): events, responses,
    /// join-set counters, delays and the row.
    pub deleted: Vec<ExecutionId>,
    /// What the caller is answered.
    pub reply: WriteReply,
}

impl WriteRequest {
    /// The rows this write touches. Rules that depend on the request alone are checked here,
    /// before anything is read.
    pub fn keys(&self) -> Result<Keys, DbError> {
        let mut keys = Keys::default();
        match self {
            Self::Create(req) => {
                validate_create(req)?;
                keys.new_executions.push(req.execution_id.clone());
            }
            Self::CreateBatch(reqs) => {
                if reqs.is_empty() {
                    return Err(ValidationError::EmptyBatch("create_batch").into());
                }
                for req in reqs {
                    validate_create(req)?;
                }
                keys.new_executions = reqs.iter().map(|r| r.execution_id.clone()).collect();
            }
            Self::AppendBatch(req) => {
                validate_append_batch(req)?;
                for child in &req.children {
                    validate_create(child)?;
                }
                keys.executions.push(req.execution_id.clone());
                event_keys(&mut keys, &req.execution_id, &req.events);
                keys.new_executions = req
                    .children
                    .iter()
                    .map(|c| c.execution_id.clone())
                    .collect();
            }
            Self::Outcome(write) => outcome_keys(&mut keys, write),
            Self::Outcomes(writes) => {
                if writes.is_empty() {
                    return Err(ValidationError::EmptyBatch("append_outcomes").into());
                }
                for write in writes {
                    outcome_keys(&mut keys, write);
                }
                let executions = std::mem::take(&mut keys.executions).into_vec();
                keys.executions = dedup_in_order(executions).into();
                keys.delays = dedup_in_order(std::mem::take(&mut keys.delays));
                keys.child_responses = dedup_in_order(std::mem::take(&mut keys.child_responses));
            }
            Self::Response {
                execution_id,
                response,
                ..
            } => {
                keys.executions.push(execution_id.clone());
                response_keys(&mut keys, execution_id, response);
            }
            Self::LockPending(req) => {
                validate_lock_pending(req)?;
                keys.due = Some(DueQuery {
                    ffqns: req.ffqns.clone(),
                    pending_at_or_sooner: req.pending_at_or_sooner,
                    limit: req.batch_size,
                });
            }
            Self::Cancel(req) => super::lifecycle::cancel_keys(&mut keys, req),
            Self::Complete(req) => super::lifecycle::complete_keys(&mut keys, req),
            Self::Prune(req) => super::lifecycle::prune_keys(&mut keys, req)?,
        }
        Ok(keys)
    }

    /// The rows this write touches that depend on what was loaded for [`WriteRequest::keys`]:
    /// call it once, with the snapshot loaded for those keys, and load what it names into the
    /// same snapshot. `None` when the first keys were all (every write but `cancel` and
    /// `prune`).
    #[must_use]
    pub fn follow_up_keys(&self, snapshot: &Snapshot) -> Option<Keys> {
        match self {
            Self::Cancel(req) => super::lifecycle::cancel_follow_up_keys(snapshot, req),
            Self::Prune(_) => super::lifecycle::prune_follow_up_keys(snapshot),
            _ => None,
        }
    }
}

/// The rows an outcome write touches: its execution, and its parent's when it answers one.
fn outcome_keys(keys: &mut Keys, write: &OutcomeWrite) {
    keys.executions.push(write.execution_id.clone());
    event_keys(
        keys,
        &write.execution_id,
        std::slice::from_ref(&write.event),
    );
    if let Some((parent_id, response)) = write.parent_response() {
        keys.executions.push(parent_id.clone());
        response_keys(keys, &parent_id, &response.event);
    }
}

/// Drops the repeats of `items`, keeping each first occurrence where it was.
fn dedup_in_order<T: Clone + Eq + std::hash::Hash>(mut items: Vec<T>) -> Vec<T> {
    let mut seen = std::collections::HashSet::with_capacity_and_hasher(
        items.len(),
        super::snapshot::FastHash::default(),
    );
    items.retain(|item| seen.insert(item.clone()));
    items
}

/// The join sets and delays that `events` of `execution_id` touch.
pub(super) fn event_keys(
    keys: &mut Keys,
    execution_id: &ExecutionId,
    events: &[ExecutionEventInner],
) {
    for event in events {
        let ExecutionEventInner::HistoryEvent { event } = event else {
            continue;
        };
        match event {
            HistoryEvent::JoinNext { join_set_id, .. } => {
                join_set_key(keys, execution_id, join_set_id, 1);
            }
            HistoryEvent::JoinSetRequest {
                request: JoinSetRequest::DelayRequest { delay_id, .. },
                ..
            } => keys.delays.push((execution_id.clone(), *delay_id)),
            _ => {}
        }
    }
}

/// The join set, delay and child that a response to `execution_id` touches.
pub(super) fn response_keys(
    keys: &mut Keys,
    execution_id: &ExecutionId,
    response: &JoinSetResponseEvent,
) {
    join_set_key(keys, execution_id, &response.join_set_id, 0);
    match &response.event {
        JoinSetResponse::DelayFinished { delay_id } => {
            keys.delays.push((execution_id.clone(), *delay_id));
        }
        JoinSetResponse::ChildExecutionFinished {
            child_execution_id, ..
        } => keys
            .child_responses
            .push((execution_id.clone(), child_execution_id.clone())),
    }
}

fn join_set_key(keys: &mut Keys, execution_id: &ExecutionId, join_set_id: &JoinSetId, n: usize) {
    match keys
        .join_sets
        .iter_mut()
        .find(|k| k.execution_id == *execution_id && k.join_set_id == *join_set_id)
    {
        Some(key) => key.next_responses += n,
        None => keys.join_sets.push(JoinSetKey {
            execution_id: execution_id.clone(),
            join_set_id: join_set_id.clone(),
            next_responses: n,
        }),
    }
}
