//! The planner: a [`WriteRequest`] applied to a [`Snapshot`] gives a [`WritePlan`] or the typed
//! error that refuses the whole write.

pub use super::request::{
    ExecutionChange, PlannedDelay, PlannedResponse, Wakeup, Wakeups, WritePlan, WriteReply,
    WriteRequest,
};

use super::handover::LockGrant;
use super::snapshot::{DelayRow, ExecutionRow, FastHash, JoinSetCounters, Snapshot};
use crate::{
    AppendBatchRequest, BackendError, CreateOutcome, CreateRequest, DbError, DelayId,
    DuplicateKind, ExecutionEvent, ExecutionEventInner, ExecutionId, HistoryEvent, JoinSetId,
    JoinSetRequest, JoinSetResponse, JoinSetResponseEvent, JoinSetResponseEventOuter,
    LockPendingRequest, Locked, OutcomeWrite, PendingState, RunId, ValidationError, Version,
};
use chrono::{DateTime, Utc};
use smallvec::{SmallVec, smallvec};
use std::collections::{HashMap, HashSet};

/// Applies `request` to `snapshot` (loaded for `request.keys()`): the plan to persist, or the
/// error that refuses the whole write.
pub fn plan(snapshot: &Snapshot, request: WriteRequest) -> Result<WritePlan, DbError> {
    let mut planner = Planner::new(snapshot);
    let mut locked = Vec::new();
    let mut deleted = Vec::new();
    // A change is large (most of a kilobyte): a first push would allocate room for four, a
    // block allocators serve slowly, where most writes change one or two executions.
    match &request {
        WriteRequest::Create(_) | WriteRequest::Response { .. } => planner.changes.reserve_exact(1),
        WriteRequest::Outcome(write) => {
            let parent = usize::from(write.parent.is_some());
            planner.changes.reserve_exact(1 + parent);
        }
        WriteRequest::AppendBatch(req) => planner.changes.reserve_exact(1 + req.children.len()),
        _ => {}
    }
    let reply = match request {
        WriteRequest::Create(req) => WriteReply::Create(planner.create(req, true)?),
        WriteRequest::CreateBatch(reqs) => {
            // One change per request: grown once, not doubled (and moved) a thousand times.
            planner.changes.reserve(reqs.len());
            for req in reqs {
                planner.create(req, true)?;
            }
            WriteReply::Nothing
        }
        WriteRequest::AppendBatch(req) => WriteReply::Version(planner.append_batch(req)?),
        WriteRequest::Outcome(write) => WriteReply::Version(planner.outcome(write)?),
        WriteRequest::Outcomes(writes) => {
            return Ok(super::outcomes::plan_outcomes(snapshot, writes));
        }
        WriteRequest::Response {
            now,
            execution_id,
            response,
        } => {
            planner.respond(now, &execution_id, response)?;
            WriteReply::Nothing
        }
        WriteRequest::LockPending(req) => {
            locked = planner.lock_pending(&req)?;
            WriteReply::Nothing
        }
        WriteRequest::Cancel(req) => WriteReply::Cancel(planner.cancel(req)?),
        WriteRequest::Complete(req) => WriteReply::Complete(planner.complete(req)?),
        WriteRequest::Prune(req) => {
            let (outcome, ids) = super::lifecycle::plan_prune(snapshot, &req)?;
            deleted = ids;
            WriteReply::Prune(outcome)
        }
    };
    let changes = planner.changes;
    let mut wakeups = Wakeups::new();
    for change in &changes {
        wakeups_of(change, &mut wakeups);
    }
    Ok(WritePlan {
        changes,
        wakeups,
        locked,
        deleted,
        reply,
    })
}

/// Which waiters a change concerns: new responses; a new `Finished`; a new `PendingAt`.
pub(super) fn wakeups_of(change: &ExecutionChange, wakeups: &mut Wakeups) {
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
        wakeups.push(Wakeup::Pending {
            ffqn: change.row.ffqn.clone(),
            at: *scheduled_at,
        });
    }
}

/// The error of a snapshot that lacks what its keys named: a bug of the backend, never of the
/// caller.
pub(crate) fn inconsistent(what: String) -> DbError {
    DbError::Backend(BackendError {
        message: format!("storage is inconsistent: {what}"),
        retriable: false,
        source: None,
    })
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

pub(super) struct Planner<'s> {
    pub(super) snapshot: &'s Snapshot,
    pub(super) changes: Vec<ExecutionChange>,
    /// The index of each change by execution, built only once a write touches more than
    /// [`LINEAR_LOOKUP`] executions: most writes touch one or two, and a scan is cheaper.
    position: HashMap<ExecutionId, usize, FastHash>,
    join_sets: HashMap<(ExecutionId, JoinSetId), StagedJoinSet, FastHash>,
    delays: HashMap<(ExecutionId, DelayId), DelayRow, FastHash>,
    answered_children: HashSet<(ExecutionId, ExecutionId), FastHash>,
}

impl<'s> Planner<'s> {
    pub(super) fn new(snapshot: &'s Snapshot) -> Self {
        Self {
            snapshot,
            changes: Vec::new(),
            position: HashMap::default(),
            join_sets: HashMap::default(),
            delays: HashMap::default(),
            answered_children: HashSet::default(),
        }
    }

    /// The index of the change of an existing execution, staged on first touch.
    pub(super) fn touch(&mut self, execution_id: &ExecutionId) -> Result<usize, DbError> {
        if let Some(idx) = self.find(execution_id) {
            return Ok(idx);
        }
        let row = self
            .snapshot
            .executions
            .get(execution_id)
            .ok_or_else(|| DbError::execution_not_found(execution_id))?;
        let idx = self.index_next(execution_id);
        self.changes.push(ExecutionChange {
            old_state: Some(row.state.pending_state.clone()),
            row: row.clone(),
            created: None,
            // Most writes append one event: inline, no allocation.
            events: SmallVec::new(),
            responses: Vec::new(),
            join_sets: Vec::new(),
            delays_requested: Vec::new(),
            delays_closed: Vec::new(),
        });
        Ok(idx)
    }

    fn find(&self, execution_id: &ExecutionId) -> Option<usize> {
        if self.changes.len() <= LINEAR_LOOKUP {
            self.changes
                .iter()
                .position(|c| c.row.execution_id == *execution_id)
        } else {
            self.position.get(execution_id).copied()
        }
    }

    /// The index the next change pushed (of `execution_id`) gets, indexed for [`Planner::find`].
    /// The caller pushes the change itself, straight into the list: a change is large, and
    /// handing it through one more call would copy it once more.
    fn index_next(&mut self, execution_id: &ExecutionId) -> usize {
        let idx = self.changes.len();
        if idx == LINEAR_LOOKUP {
            // Sized for the changes the write reserved room for (a batch), not grown.
            let mut position =
                HashMap::with_capacity_and_hasher(self.changes.capacity(), FastHash::default());
            let staged = self.changes.iter().enumerate();
            position.extend(staged.map(|(i, c)| (c.row.execution_id.clone(), i)));
            self.position = position;
        }
        if idx >= LINEAR_LOOKUP {
            self.position.insert(execution_id.clone(), idx);
        }
        idx
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

    fn delay(&mut self, execution_id: &ExecutionId, delay_id: DelayId) -> &mut DelayRow {
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

    /// Stages the creation of `req`. When its id exists (stored, or created earlier in this
    /// write), `idempotent` decides: an identical request is answered `AlreadyExisted` and
    /// writes nothing, a different one is a conflict; without it any existing id is a
    /// duplicate (children of `append_batch`, fenced by their parent's version).
    fn create(&mut self, req: CreateRequest, idempotent: bool) -> Result<CreateOutcome, DbError> {
        if let Some(existing) = self.existing_creation(&req.execution_id)? {
            if !idempotent {
                return Err(DuplicateKind::Execution(req.execution_id).into());
            }
            return super::lifecycle::repeated_create(&req, existing);
        }
        let row = ExecutionRow::new_execution(&req);
        let created_event = req.to_created_event();
        self.index_next(&req.execution_id);
        self.changes.push(ExecutionChange {
            row,
            created: Some(req),
            old_state: None,
            events: smallvec![(Version(0), created_event)],
            responses: Vec::new(),
            join_sets: Vec::new(),
            delays_requested: Vec::new(),
            delays_closed: Vec::new(),
        });
        Ok(CreateOutcome::Created)
    }

    /// The `Created` event and current state of an execution with this id, stored or created
    /// earlier in this write.
    fn existing_creation(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<(ExecutionEvent, PendingState)>, DbError> {
        if let Some(idx) = self.find(execution_id)
            && let Some(req) = &self.changes[idx].created
        {
            let state = self.changes[idx].row.state.pending_state.clone();
            return Ok(Some((req.to_created_event(), state)));
        }
        let Some(row) = self.snapshot.executions.get(execution_id) else {
            return Ok(None);
        };
        let created = self.snapshot.created.get(execution_id).ok_or_else(|| {
            inconsistent(format!(
                "the `Created` event of existing execution {execution_id} was not loaded"
            ))
        })?;
        Ok(Some((created.clone(), row.state.pending_state.clone())))
    }

    /// Validates and stages one event at `version`; returns the next version.
    fn append(
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
    fn append_at(
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
    fn respond(
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
                    return Err(DuplicateKind::DelayResponse {
                        execution_id: execution_id.clone(),
                        delay_id: *delay_id,
                    }
                    .into());
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
                    return Err(DuplicateKind::ChildResponse {
                        execution_id: execution_id.clone(),
                        child_execution_id: child_execution_id.clone(),
                    }
                    .into());
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

    fn append_batch(&mut self, req: AppendBatchRequest) -> Result<Version, DbError> {
        let AppendBatchRequest {
            execution_id,
            mut version,
            now,
            events,
            children,
        } = req;
        for event in events {
            if matches!(event, ExecutionEventInner::Finished { .. }) {
                self.refuse_silent_child_finish(&execution_id)?;
            }
            version = self.append(&execution_id, version, now, event)?;
        }
        for child in children {
            self.create(child, false)?;
        }
        Ok(version)
    }

    /// A child finishes only through `append_outcome`, which answers its parent in the same
    /// transaction.
    fn refuse_silent_child_finish(&mut self, execution_id: &ExecutionId) -> Result<(), DbError> {
        let idx = self.touch(execution_id)?;
        match &self.changes[idx].row.parent {
            Some((parent_id, _)) => Err(ValidationError::InvalidRequest(format!(
                "execution {execution_id} is a child of {parent_id}: finish it with \
                 `append_outcome`, which answers the parent in the same transaction"
            ))
            .into()),
            None => Ok(()),
        }
    }

    pub(super) fn outcome(&mut self, write: OutcomeWrite) -> Result<Version, DbError> {
        let parent_response = write.parent_response();
        let next_version =
            self.append(&write.execution_id, write.version, write.now, write.event)?;
        if let Some((parent_id, response)) = parent_response {
            // Answered before the parent check: a named parent that does not exist is
            // `NotFound`, whatever else the outcome gets wrong.
            self.respond(response.created_at, &parent_id, response.event)?;
        }
        let idx = self.touch(&write.execution_id)?;
        if self.changes[idx].row.parent != write.parent {
            return Err(ValidationError::InvalidRequest(format!(
                "the outcome of execution {} names parent {}, the execution's parent is {}",
                write.execution_id,
                describe_parent(write.parent.as_ref()),
                describe_parent(self.changes[idx].row.parent.as_ref()),
            ))
            .into());
        }
        Ok(next_version)
    }

    fn lock_pending(&mut self, req: &LockPendingRequest) -> Result<Vec<LockGrant>, DbError> {
        let mut locked = Vec::with_capacity(self.snapshot.due.len());
        self.changes.reserve(self.snapshot.due.len());
        for execution_id in &self.snapshot.due {
            let row =
                self.snapshot.executions.get(execution_id).ok_or_else(|| {
                    inconsistent(format!("due execution {execution_id} has no row"))
                })?;
            // An index may round a due time down (to microseconds, say): not due yet after all.
            if row
                .state
                .pending_state
                .pending_at()
                .is_none_or(|at| at > req.pending_at_or_sooner)
            {
                continue;
            }
            let locked_event = Locked {
                component_id: req.component_id.clone(),
                executor_id: req.executor_id,
                run_id: RunId::generate_at(req.now),
                lock_expires_at: req.lock_expires_at,
            };
            let version = row.state.next_version;
            let idx = self.touch(execution_id)?;
            self.append_at(
                idx,
                execution_id,
                version,
                req.now,
                ExecutionEventInner::Locked(locked_event.clone()),
            )?;
            locked.push(LockGrant {
                row: self.changes[idx].row.clone(),
                locked_at: version,
                locked_event,
            });
        }
        Ok(locked)
    }
}

fn describe_parent(parent: Option<&(ExecutionId, JoinSetId)>) -> String {
    match parent {
        Some((id, join_set_id)) => format!("{id} (join set {join_set_id})"),
        None => "none".to_owned(),
    }
}
