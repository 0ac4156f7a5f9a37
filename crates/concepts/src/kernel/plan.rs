//! The planner's vocabulary and its primitives: what a write changes ([`ExecutionChange`], the
//! [`WritePlan`] a backend persists, the [`Wakeup`]s it delivers after the commit) and the
//! [`Planner`], which stages the changes of one write on a [`Snapshot`]: appending an event,
//! storing a response, each validated and carried forward with the pending state's
//! transitions. The write kinds (`writes/`) are made of these steps.

use super::snapshot::{DelayRow, ExecutionRow, FastHash, JoinSetCounters, Snapshot, inconsistent};
use crate::{
    ComponentId, DbError, DelayId, ExecutionEvent, ExecutionEventInner, ExecutionId, FunctionFqn,
    HistoryEvent, JoinSetId, JoinSetRequest, JoinSetResponse, JoinSetResponseEvent,
    JoinSetResponseEventOuter, PendingState, ValidationError, Version,
    schedule::{ScheduleName, ScheduleRow, Tick},
};
use chrono::{DateTime, Utc};
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};
pub use thin_vec::ThinVec;

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
    /// The pending state before the write; `None` when the write creates the execution (its
    /// `Created` event, which holds everything the request said, is the first of `events`).
    pub old_state: Option<PendingState>,
    /// New events with their versions (a `Finished` is stored at the version it was appended
    /// at); one inline, the whole of most writes.
    pub events: SmallVec<[(Version, ExecutionEvent); 1]>,
    /// New responses. This list and the next three are empty in most changes: one pointer
    /// each, and dropped by comparing it ([`ThinVec`]).
    pub responses: ThinVec<PlannedResponse>,
    /// The counters after the write of every join set it changed.
    pub join_sets: ThinVec<(JoinSetId, JoinSetCounters)>,
    /// Delays requested.
    pub delays_requested: ThinVec<PlannedDelay>,
    /// Delays requested earlier that this write answered: they close.
    pub delays_closed: ThinVec<DelayId>,
}

impl ExecutionChange {
    /// True when the write creates the execution.
    #[must_use]
    #[inline]
    pub fn is_new(&self) -> bool {
        self.old_state.is_none()
    }

    /// What a new execution's `Created` event says beyond its row, when the write creates it.
    #[must_use]
    #[inline]
    pub fn created(&self) -> Option<NewExecution<'_>> {
        if !self.is_new() {
            return None;
        }
        match self.events.first() {
            Some((
                _,
                ExecutionEvent {
                    created_at,
                    event: ExecutionEventInner::Created(created),
                },
            )) => Some(NewExecution {
                created_at: *created_at,
                scheduled_at: created.scheduled_at,
                component_id: &created.component_id,
            }),
            _ => None,
        }
    }

    /// True when the pending state changed (always for a new execution).
    #[must_use]
    #[inline]
    pub fn state_changed(&self) -> bool {
        self.old_state.as_ref() != Some(&self.row.state.pending_state)
    }

    /// True when the stored row of an existing execution must be written back: events were
    /// appended, its pending state changed, or it received responses (a response counts on the
    /// row even when the state stays, as one to a parent waiting for another join set).
    #[must_use]
    pub fn row_changed(&self) -> bool {
        !self.events.is_empty() || self.state_changed() || !self.responses.is_empty()
    }
}

/// What the stored row of a new execution holds beyond its [`ExecutionRow`], read from the
/// `Created` event of its change ([`ExecutionChange::created`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewExecution<'a> {
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was first due.
    pub scheduled_at: DateTime<Utc>,
    /// The component that runs it.
    pub component_id: &'a ComponentId,
}

/// Everything a write changes about one schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleWrite {
    /// The schedule.
    pub name: ScheduleName,
    /// Its row after the write; `None` when the write deletes it, with its ticks.
    pub row: Option<ScheduleRow>,
    /// True when the write creates it (the load found no row).
    pub is_new: bool,
    /// Ticks recorded, in order.
    pub ticks: Vec<Tick>,
    /// The ticks recorded before this sequence number are deleted.
    pub forget_ticks_before: Option<u64>,
}

impl ScheduleWrite {
    /// A write that leaves `row` as it is, so far.
    pub(crate) fn new(row: ScheduleRow, is_new: bool) -> Self {
        Self {
            name: row.name().clone(),
            row: Some(row),
            is_new,
            ticks: Vec::new(),
            forget_ticks_before: None,
        }
    }
}

/// What a write persists, atomically, and what it causes once committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WritePlan {
    /// One entry per execution the write touches, in the order first touched.
    pub changes: Vec<ExecutionChange>,
    /// The wake-ups to deliver after the commit ([`Wakeups`]).
    pub wakeups: Wakeups,
    /// Executions to delete with everything stored about them (`prune`): events, responses,
    /// join-set counters, delays and the row. Empty in most plans, as the next list is: one
    /// pointer each ([`ThinVec`]).
    pub deleted: ThinVec<ExecutionId>,
    /// What the write changes about schedules, one entry per schedule.
    pub schedules: ThinVec<ScheduleWrite>,
}

impl WritePlan {
    /// The plan of `changes`, with the wake-ups they cause.
    pub(crate) fn of(
        changes: Vec<ExecutionChange>,
        deleted: ThinVec<ExecutionId>,
        schedules: ThinVec<ScheduleWrite>,
    ) -> Self {
        let mut wakeups = Wakeups::new();
        for change in &changes {
            wakeups_of(change, &mut wakeups);
        }
        Self {
            changes,
            wakeups,
            deleted,
            schedules,
        }
    }
}

/// Which waiters a change concerns: new responses; a new `Finished`; a new `PendingAt`.
fn wakeups_of(change: &ExecutionChange, wakeups: &mut Wakeups) {
    let execution_id = &change.row.execution_id;
    let new_state = &change.row.state.pending_state;
    let old_state = change.old_state.as_ref();
    if !change.responses.is_empty() {
        wakeups.push(Wakeup::Responses(execution_id.clone()));
    }
    if new_state.is_finished() && old_state.is_none_or(|s| !s.is_finished()) {
        wakeups.push(Wakeup::Finished(execution_id.clone()));
    }
    if let PendingState::PendingAt { scheduled_at } = new_state
        && old_state != Some(new_state)
    {
        // A batch of one function's executions is one wake-up, at the earliest of their due
        // times: a waiter is woken when any of them falls within its horizon, so when the
        // earliest does.
        if let Some(Wakeup::Pending { ffqn, at }) = wakeups.last_mut()
            && *ffqn == change.row.ffqn
        {
            *at = (*at).min(*scheduled_at);
            return;
        }
        wakeups.push(Wakeup::Pending {
            ffqn: change.row.ffqn.clone(),
            at: *scheduled_at,
        });
    }
}

/// A join set within the write: counters, and the arrival times of the responses from
/// join-set index `base` on, as far as they are known.
#[derive(Debug)]
struct StagedJoinSet {
    counters: JoinSetCounters,
    base: u64,
    times: Vec<DateTime<Utc>>,
}

impl StagedJoinSet {
    /// The arrival time of the response with join-set index `idx`, `None` when there is none.
    fn time_at(
        &self,
        idx: u64,
        what: impl FnOnce() -> String,
    ) -> Result<Option<DateTime<Utc>>, DbError> {
        if idx >= self.counters.response_count {
            return Ok(None);
        }
        idx.checked_sub(self.base)
            .and_then(|offset| usize::try_from(offset).ok())
            .and_then(|offset| self.times.get(offset))
            .map(|t| Some(*t))
            .ok_or_else(|| inconsistent(what()))
    }
}

/// Up to this many changes, a change is found by a scan rather than a map.
const LINEAR_LOOKUP: usize = 8;

/// Stages the changes of one write on a snapshot: what the write kinds are made of. A write
/// that fails leaves its planner to be dropped; nothing it staged is persisted.
pub struct Planner<'s> {
    pub(crate) snapshot: &'s Snapshot,
    pub(crate) changes: Vec<ExecutionChange>,
    /// Executions the write deletes (`prune`).
    pub(crate) deleted: ThinVec<ExecutionId>,
    /// What the write changes about schedules.
    pub(crate) schedules: ThinVec<ScheduleWrite>,
    /// The index of each of the first changes by execution (`Planner::index_staged`), built
    /// only once a write touches more than [`LINEAR_LOOKUP`] executions: most writes touch
    /// one or two, and a scan is cheaper.
    position: HashMap<ExecutionId, usize, FastHash>,
    join_sets: HashMap<(ExecutionId, JoinSetId), StagedJoinSet, FastHash>,
    delays: HashMap<(ExecutionId, DelayId), DelayRow, FastHash>,
    pub(crate) answered_children: HashSet<(ExecutionId, ExecutionId), FastHash>,
}

impl<'s> Planner<'s> {
    pub(crate) fn new(snapshot: &'s Snapshot) -> Self {
        // One seed for the four tables: drawing a hasher's seed costs more than copying one.
        let hasher = FastHash::default();
        Self {
            snapshot,
            changes: Vec::new(),
            deleted: ThinVec::new(),
            schedules: ThinVec::new(),
            position: HashMap::with_hasher(hasher.clone()),
            join_sets: HashMap::with_hasher(hasher.clone()),
            delays: HashMap::with_hasher(hasher.clone()),
            answered_children: HashSet::with_hasher(hasher),
        }
    }

    /// The plan of what this planner staged, as the only write of its transaction: its
    /// changes, the wake-ups those cause, what it deletes and what it changes about schedules.
    pub(crate) fn into_plan(self) -> WritePlan {
        let Planner {
            changes,
            deleted,
            schedules,
            ..
        } = self;
        WritePlan::of(changes, deleted, schedules)
    }

    /// The index of the change of an existing execution, staged on first touch.
    pub(crate) fn touch(&mut self, execution_id: &ExecutionId) -> Result<usize, DbError> {
        if let Some(idx) = self.find(execution_id) {
            return Ok(idx);
        }
        let idx = self.stage(execution_id)?;
        self.index_staged();
        Ok(idx)
    }

    /// Stages the change of an existing execution that this write has not touched yet (the
    /// caller knows it: a lock's due executions, each found once), without indexing it for
    /// [`Planner::find`], which scans the changes staged after the last one indexed.
    pub(crate) fn stage(&mut self, execution_id: &ExecutionId) -> Result<usize, DbError> {
        let snapshot = self.snapshot;
        let row = (snapshot.executions.get(execution_id))
            .ok_or_else(|| DbError::execution_not_found(execution_id))?;
        Ok(self.stage_row(row))
    }

    /// [`Planner::stage`] of `row`, the snapshot's row that the caller looked up already.
    pub(crate) fn stage_row(&mut self, row: &ExecutionRow) -> usize {
        let idx = self.changes.len();
        // Made in its slot, after the room for it: `push` makes a change on the stack (the
        // list may grow first) and copies its 500 bytes over.
        self.changes
            .extend(std::iter::once_with(|| ExecutionChange {
                old_state: Some(row.state.pending_state.clone()),
                row: row.clone(),
                // Most writes append one event: inline, no allocation.
                events: SmallVec::new(),
                responses: ThinVec::new(),
                join_sets: ThinVec::new(),
                delays_requested: ThinVec::new(),
                delays_closed: ThinVec::new(),
            }));
        idx
    }

    pub(crate) fn find(&self, execution_id: &ExecutionId) -> Option<usize> {
        let is = |c: &ExecutionChange| c.row.execution_id == *execution_id;
        if self.changes.len() <= LINEAR_LOOKUP {
            return self.changes.iter().position(is);
        }
        // `position` indexes the first changes, in order; those staged after them, a scan.
        let indexed = self.position.len();
        (self.position.get(execution_id).copied())
            .or_else(|| (self.changes[indexed..].iter().position(is)).map(|i| indexed + i))
    }

    /// Indexes the changes staged since the last indexed one for [`Planner::find`], once
    /// the write has more than [`LINEAR_LOOKUP`]: most writes touch one or two executions,
    /// and a scan is cheaper. The caller pushes each change itself, straight into the list,
    /// and calls this after: a change is large, and handing it through one more call would
    /// copy it once more.
    pub(crate) fn index_staged(&mut self) {
        let indexed = self.position.len();
        if self.changes.len() <= LINEAR_LOOKUP || indexed == self.changes.len() {
            return;
        }
        if indexed == 0 {
            // Sized for the changes the write reserved room for (a batch), not grown.
            self.position.reserve(self.changes.capacity());
        }
        let staged = self.changes.iter().enumerate().skip(indexed);
        (self.position).extend(staged.map(|(i, c)| (c.row.execution_id.clone(), i)));
    }

    /// Takes `changes`, planned elsewhere on the same snapshot (by a nested group), as the
    /// changes of this planner, which has staged nothing yet.
    pub(crate) fn adopt(&mut self, changes: Vec<ExecutionChange>) {
        debug_assert!(
            self.changes.is_empty(),
            "a planner adopts changes only when empty"
        );
        self.changes = changes;
        self.index_staged();
    }

    fn join_set(
        &mut self,
        execution_id: &ExecutionId,
        join_set_id: &JoinSetId,
    ) -> &mut StagedJoinSet {
        let key = (execution_id.clone(), join_set_id.clone());
        let snapshot = self.snapshot;
        self.join_sets.entry(key).or_insert_with_key(|key| {
            let row = snapshot.join_sets.get(key).cloned().unwrap_or_default();
            StagedJoinSet {
                base: row.counters.join_next_count,
                counters: row.counters,
                times: row.next_response_times,
            }
        })
    }

    pub(crate) fn delay(&mut self, execution_id: &ExecutionId, delay_id: DelayId) -> &mut DelayRow {
        let key = (execution_id.clone(), delay_id);
        let snapshot = self.snapshot;
        self.delays
            .entry(key)
            .or_insert_with_key(|key| snapshot.delays.get(key).copied().unwrap_or_default())
    }

    /// Records the counters of a join set in its execution's change.
    fn note_join_set(&mut self, idx: usize, execution_id: &ExecutionId, join_set_id: &JoinSetId) {
        let counters = self.join_set(execution_id, join_set_id).counters;
        let change = &mut self.changes[idx];
        match change.join_sets.iter_mut().find(|(j, _)| j == join_set_id) {
            Some((_, c)) => *c = counters,
            None => change.join_sets.push((join_set_id.clone(), counters)),
        }
    }

    /// Validates and stages one event at `version`; returns the next version.
    pub(crate) fn append(
        &mut self,
        execution_id: &ExecutionId,
        version: Version,
        now: DateTime<Utc>,
        event: ExecutionEventInner,
    ) -> Result<Version, DbError> {
        let idx = self.touch(execution_id)?;
        self.append_at(idx, execution_id, version, now, event)
    }

    /// [`Planner::append`] to the change at `idx` (of `execution_id`, touched already).
    pub(crate) fn append_at(
        &mut self,
        idx: usize,
        execution_id: &ExecutionId,
        version: Version,
        now: DateTime<Utc>,
        event: ExecutionEventInner,
    ) -> Result<Version, DbError> {
        self.changes[idx]
            .row
            .state
            .validate_append(version, now, &event)?;
        let mut nth_response_at = None;
        if let ExecutionEventInner::HistoryEvent { event } = &event {
            match event {
                HistoryEvent::JoinSetRequest {
                    join_set_id,
                    request:
                        JoinSetRequest::DelayRequest {
                            delay_id,
                            expires_at,
                        },
                } => {
                    let delay = self.delay(execution_id, *delay_id);
                    if delay.requested {
                        return Err(ValidationError::InvalidRequest(format!(
                            "delay {delay_id} was already requested by execution {execution_id}"
                        ))
                        .into());
                    }
                    delay.requested = true;
                    let open = !delay.answered;
                    self.changes[idx].delays_requested.push(PlannedDelay {
                        delay_id: *delay_id,
                        join_set_id: join_set_id.clone(),
                        expires_at: *expires_at,
                        open,
                    });
                }
                HistoryEvent::JoinNext { join_set_id, .. } => {
                    let join_set = self.join_set(execution_id, join_set_id);
                    let k = join_set.counters.join_next_count;
                    nth_response_at = join_set.time_at(k, || {
                        format!("response {k} of join set {join_set_id} of {execution_id} was not loaded")
                    })?;
                    join_set.counters.join_next_count += 1;
                    self.note_join_set(idx, execution_id, join_set_id);
                }
                _ => {}
            }
        }
        let change = &mut self.changes[idx];
        let event = ExecutionEvent {
            created_at: now,
            event,
        };
        let new_state = change.row.state.after_append(&event, |_| nth_response_at);
        if event.event.is_temporary_event() {
            change.row.temporary_event_count = change.row.temporary_event_count.saturating_add(1);
        }
        change.events.push((version, event));
        change.row.state = new_state;
        Ok(change.row.state.next_version)
    }

    /// Validates and stages a response beside the log of `execution_id`.
    pub(crate) fn respond(
        &mut self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        let idx = self.touch(execution_id)?;
        match &response.event {
            JoinSetResponse::DelayFinished { delay_id } => {
                let delay = self.delay(execution_id, *delay_id);
                if delay.answered {
                    return Err(response.event.duplicate_for(execution_id).into());
                }
                delay.answered = true;
                let requested = delay.requested;
                let change = &mut self.changes[idx];
                match change
                    .delays_requested
                    .iter_mut()
                    .find(|d| d.delay_id == *delay_id)
                {
                    Some(planned) => planned.open = false,
                    None if requested => change.delays_closed.push(*delay_id),
                    None => {}
                }
            }
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => {
                let key = (execution_id.clone(), child_execution_id.clone());
                if self.snapshot.child_responses.contains(&key)
                    || !self.answered_children.insert(key)
                {
                    return Err(response.event.duplicate_for(execution_id).into());
                }
            }
        }
        let join_set_id = response.join_set_id.clone();
        let join_set = self.join_set(execution_id, &join_set_id);
        let join_set_idx = join_set.counters.response_count;
        join_set.counters.response_count += 1;
        // A JoinNext later in this write may consume it: keep its time when it extends the
        // known window of unconsumed responses.
        if join_set_idx.checked_sub(join_set.base) == u64::try_from(join_set.times.len()).ok() {
            join_set.times.push(now);
        }
        let counters = join_set.counters;
        self.note_join_set(idx, execution_id, &join_set_id);
        let change = &mut self.changes[idx];
        change.row.state = change.row.state.after_response(
            &join_set_id,
            now,
            usize::try_from(counters.response_count).unwrap_or(usize::MAX),
            usize::try_from(counters.join_next_count).unwrap_or(usize::MAX),
        );
        let response_idx = change.row.response_count;
        change.row.response_count += 1;
        change.responses.push(PlannedResponse {
            idx: response_idx,
            join_set_idx,
            response: JoinSetResponseEventOuter {
                created_at: now,
                event: response,
            },
        });
        Ok(())
    }
}
