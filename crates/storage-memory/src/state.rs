//! The state behind the mutex: execution records, their indexes, the waiter registries, and
//! the staging transaction through which every write goes.

use chrono::{DateTime, Utc};
use concepts::{
    CreateRequest, DbError, DelayId, ExecutionEvent, ExecutionEventInner, ExecutionId,
    ExecutionState, FunctionFqn, HistoryEvent, JoinSetId, JoinSetRequest, JoinSetResponse,
    JoinSetResponseEvent, JoinSetResponseEventOuter, PendingState, ValidationError, Version,
};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};
use tokio::sync::oneshot;

/// The hasher of the maps keyed by execution id: `foldhash`'s per-process seeded hasher,
/// several times cheaper than SipHash on these short keys, and hashing sits on every write.
pub(crate) type FastHash = foldhash::fast::RandomState;

/// What a timer of an execution is for. Part of the timer key, so that a lease and any number
/// of delays of one execution expiring at the same instant never collide.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// The lease of a `Locked` execution.
    Lock,
    /// An open durable sleep.
    Delay(DelayId),
}

/// The key of the timer index: expiry first, so that a range scan finds everything due.
pub(crate) type TimerKey = (DateTime<Utc>, ExecutionId, TimerKind);

/// What a write needs to know about an execution without reading its log.
#[derive(Debug, Clone)]
pub(crate) struct RecordIndex {
    /// Next version and pending state, kept with `ExecutionState::after_append` /
    /// `after_response`.
    pub(crate) state: ExecutionState,
    /// `TemporarilyFailed` + `TemporarilyTimedOut` events so far.
    pub(crate) temporary_event_count: u32,
    /// The number of `JoinNext` events per join set.
    pub(crate) join_next_counts: HashMap<JoinSetId, usize>,
    /// The arrival time of every response per join set, in arrival order.
    pub(crate) response_times: HashMap<JoinSetId, Vec<DateTime<Utc>>>,
    /// Delays that have a `DelayFinished` response.
    pub(crate) delay_responses: HashSet<DelayId>,
    /// Children that have a `ChildExecutionFinished` response.
    pub(crate) child_responses: HashSet<ExecutionId>,
    /// Every delay requested in the log.
    pub(crate) requested_delays: HashSet<DelayId>,
    /// Delays requested and not yet answered: join set and expiry.
    pub(crate) open_delays: HashMap<DelayId, (JoinSetId, DateTime<Utc>)>,
}

/// One execution.
#[derive(Debug)]
pub(crate) struct Record {
    /// The request that created it (ffqn, params, retry settings, parent, ...).
    pub(crate) created: Arc<CreateRequest>,
    /// The log; `events[v]` is version `v`.
    pub(crate) events: Vec<ExecutionEvent>,
    /// The responses, in arrival order.
    pub(crate) responses: Vec<JoinSetResponseEventOuter>,
    /// The index.
    pub(crate) index: RecordIndex,
}

impl Record {
    /// The history events of the log, in order.
    pub(crate) fn event_history(&self) -> Vec<HistoryEvent> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                ExecutionEventInner::HistoryEvent { event } => Some(event.clone()),
                _ => None,
            })
            .collect()
    }

    /// The result, when finished.
    pub(crate) fn finished_result(&self) -> Option<concepts::FinishedExecutionResult> {
        if !self.index.state.pending_state.is_finished() {
            return None;
        }
        self.events.iter().rev().find_map(|e| match &e.event {
            ExecutionEventInner::Finished { result } => Some(result.clone()),
            _ => None,
        })
    }
}

/// A waiter of `wait_for_pending`.
#[derive(Debug)]
pub(crate) struct PendingWaiter {
    /// The functions it waits for.
    pub(crate) ffqns: Arc<[FunctionFqn]>,
    /// It wakes when one of them becomes due at or before this time plus the time it has
    /// waited (its horizon moves on while it waits, see [`PendingWaiter::horizon`]).
    pub(crate) pending_at_or_sooner: DateTime<Utc>,
    /// When it started waiting.
    pub(crate) since: tokio::time::Instant,
    /// Fired (and removed) on wake-up; dropped on close.
    pub(crate) tx: oneshot::Sender<()>,
}

impl PendingWaiter {
    /// `pending_at_or_sooner` moved on by the time waited: an execution another writer makes
    /// due at its own "now" while this one waits is due for this waiter too.
    fn horizon(&self) -> DateTime<Utc> {
        concepts::add_saturating(self.pending_at_or_sooner, self.since.elapsed())
    }
}

/// Waiters per execution; an execution's entry is removed as soon as its map is empty.
pub(crate) type ExecutionWaiters = HashMap<ExecutionId, BTreeMap<u64, oneshot::Sender<()>>>;

/// Everything the store holds.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Set by `close`; every call afterwards is refused.
    pub(crate) closed: bool,
    /// Every execution.
    pub(crate) records: HashMap<ExecutionId, Record, FastHash>,
    /// `(created_at, execution_id)` of every execution, for `list_executions`.
    pub(crate) by_created: BTreeSet<(DateTime<Utc>, ExecutionId)>,
    /// `(scheduled_at, execution_id)` of every `PendingAt` execution, per function.
    pub(crate) pending: HashMap<FunctionFqn, BTreeSet<(DateTime<Utc>, ExecutionId)>>,
    /// Every lease of a `Locked` execution and every open delay.
    pub(crate) timers: BTreeSet<TimerKey>,
    /// The id of the next registered waiter.
    pub(crate) next_waiter_id: u64,
    /// Waiters of `wait_for_pending`.
    pub(crate) pending_waiters: BTreeMap<u64, PendingWaiter>,
    /// Waiters of `subscribe_to_next_responses`.
    pub(crate) response_waiters: ExecutionWaiters,
    /// Waiters of `wait_for_finished_result`.
    pub(crate) finished_waiters: ExecutionWaiters,
}

impl State {
    /// The record, or `NotFound`.
    pub(crate) fn record(&self, execution_id: &ExecutionId) -> Result<&Record, DbError> {
        self.records
            .get(execution_id)
            .ok_or_else(|| DbError::execution_not_found(execution_id))
    }

    /// Up to `limit` executions of `ffqns` due at `at`, oldest `scheduled_at` first, ties by
    /// execution id.
    pub(crate) fn due(
        &self,
        ffqns: &[FunctionFqn],
        at: DateTime<Utc>,
        limit: usize,
    ) -> Vec<(DateTime<Utc>, ExecutionId)> {
        let mut found: Vec<(DateTime<Utc>, ExecutionId)> = Vec::new();
        for ffqn in ffqns {
            if let Some(set) = self.pending.get(ffqn) {
                found.extend(
                    set.iter()
                        .take_while(|(t, _)| *t <= at)
                        .take(limit)
                        .cloned(),
                );
            }
        }
        if ffqns.len() > 1 {
            // Each set is ordered already; merging several needs one sort.
            found.sort_unstable();
        }
        found.truncate(limit);
        found
    }

    /// True when an execution of `ffqns` is due at `at`.
    pub(crate) fn any_due(&self, ffqns: &[FunctionFqn], at: DateTime<Utc>) -> bool {
        ffqns.iter().any(|ffqn| {
            self.pending
                .get(ffqn)
                .and_then(BTreeSet::first)
                .is_some_and(|(t, _)| *t <= at)
        })
    }

    /// A fresh waiter id.
    pub(crate) fn waiter_id(&mut self) -> u64 {
        let id = self.next_waiter_id;
        self.next_waiter_id = self.next_waiter_id.wrapping_add(1);
        id
    }

    /// Registers a waiter of an execution; returns its id and the receiver to await.
    pub(crate) fn register(
        waiters: &mut ExecutionWaiters,
        waiter_id: u64,
        execution_id: &ExecutionId,
    ) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        waiters
            .entry(execution_id.clone())
            .or_default()
            .insert(waiter_id, tx);
        rx
    }

    /// Removes a waiter of an execution (it left), and the execution's entry when empty.
    pub(crate) fn unregister(
        waiters: &mut ExecutionWaiters,
        waiter_id: u64,
        execution_id: &ExecutionId,
    ) {
        if let Some(map) = waiters.get_mut(execution_id) {
            map.remove(&waiter_id);
            if map.is_empty() {
                waiters.remove(execution_id);
            }
        }
    }

    /// Wakes (and removes) every waiter of an execution.
    fn wake_all(waiters: &mut ExecutionWaiters, execution_id: &ExecutionId) {
        if let Some(map) = waiters.remove(execution_id) {
            for (_, tx) in map {
                // The receiver may be gone already (its guard runs after); that is fine.
                let _ = tx.send(());
            }
        }
    }

    /// Releases every waiter: their senders are dropped, so they see the store closed.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.pending_waiters.clear();
        self.response_waiters.clear();
        self.finished_waiters.clear();
    }

    /// Applies a validated transaction: the logs, every index, then the notifications.
    pub(crate) fn apply(&mut self, staged: StagedSet) {
        for (execution_id, staged) in staged.in_order {
            let Staged {
                created,
                ffqn,
                index,
                new_events,
                new_responses,
                is_new,
            } = staged;
            let (old_index, has_new_responses) = if is_new {
                self.by_created
                    .insert((created.created_at, execution_id.clone()));
                self.records.insert(
                    execution_id.clone(),
                    Record {
                        created,
                        events: new_events,
                        responses: new_responses,
                        index,
                    },
                );
                (None, false)
            } else {
                let Some(record) = self.records.get_mut(&execution_id) else {
                    // Staging only stages existing or new records; nothing to apply otherwise.
                    tracing::error!(%execution_id, "staged record vanished");
                    continue;
                };
                let has_new_responses = !new_responses.is_empty();
                record.events.extend(new_events);
                record.responses.extend(new_responses);
                (
                    Some(std::mem::replace(&mut record.index, index)),
                    has_new_responses,
                )
            };
            let Some(record) = self.records.get(&execution_id) else {
                continue;
            };
            let new_state = record.index.state.pending_state.clone();
            let new_delays = &record.index.open_delays;
            let mut delay_changes = Vec::new();
            if let Some(old) = &old_index {
                for (delay_id, (_, expires_at)) in &old.open_delays {
                    if !new_delays.contains_key(delay_id) {
                        delay_changes.push((false, *expires_at, *delay_id));
                    }
                }
            }
            for (delay_id, (_, expires_at)) in new_delays {
                if old_index
                    .as_ref()
                    .is_none_or(|old| !old.open_delays.contains_key(delay_id))
                {
                    delay_changes.push((true, *expires_at, *delay_id));
                }
            }
            let old_state = old_index.as_ref().map(|i| &i.state.pending_state);
            if old_state != Some(&new_state) {
                if let Some(old) = old_state {
                    self.unindex_state(&ffqn, &execution_id, old);
                }
                self.index_state(&ffqn, &execution_id, &new_state);
            }
            for (open, expires_at, delay_id) in delay_changes {
                let key = (expires_at, execution_id.clone(), TimerKind::Delay(delay_id));
                if open {
                    self.timers.insert(key);
                } else {
                    self.timers.remove(&key);
                }
            }

            if has_new_responses {
                Self::wake_all(&mut self.response_waiters, &execution_id);
            }
            if new_state.is_finished() && old_state.is_none_or(|s| !s.is_finished()) {
                Self::wake_all(&mut self.finished_waiters, &execution_id);
            }
            if let PendingState::PendingAt { scheduled_at } = new_state
                && old_state != Some(&new_state)
            {
                self.wake_pending_waiters(&ffqn, scheduled_at);
            }
        }
    }

    fn unindex_state(
        &mut self,
        ffqn: &FunctionFqn,
        execution_id: &ExecutionId,
        old: &PendingState,
    ) {
        match old {
            PendingState::PendingAt { scheduled_at } => {
                if let Some(set) = self.pending.get_mut(ffqn) {
                    set.remove(&(*scheduled_at, execution_id.clone()));
                    if set.is_empty() {
                        self.pending.remove(ffqn);
                    }
                }
            }
            PendingState::Locked {
                lock_expires_at, ..
            } => {
                self.timers
                    .remove(&(*lock_expires_at, execution_id.clone(), TimerKind::Lock));
            }
            PendingState::BlockedByJoinSet { .. } | PendingState::Finished { .. } => {}
        }
    }

    fn index_state(&mut self, ffqn: &FunctionFqn, execution_id: &ExecutionId, new: &PendingState) {
        match new {
            PendingState::PendingAt { scheduled_at } => {
                self.pending
                    .entry(ffqn.clone())
                    .or_default()
                    .insert((*scheduled_at, execution_id.clone()));
            }
            PendingState::Locked {
                lock_expires_at, ..
            } => {
                self.timers
                    .insert((*lock_expires_at, execution_id.clone(), TimerKind::Lock));
            }
            PendingState::BlockedByJoinSet { .. } | PendingState::Finished { .. } => {}
        }
    }

    fn wake_pending_waiters(&mut self, ffqn: &FunctionFqn, scheduled_at: DateTime<Utc>) {
        let woken: Vec<u64> = self
            .pending_waiters
            .iter()
            .filter(|(_, w)| scheduled_at <= w.horizon() && w.ffqns.contains(ffqn))
            .map(|(id, _)| *id)
            .collect();
        for id in woken {
            if let Some(waiter) = self.pending_waiters.remove(&id) {
                let _ = waiter.tx.send(());
            }
        }
    }
}

/// The staged change of one execution within a transaction.
#[derive(Debug)]
pub(crate) struct Staged {
    created: Arc<CreateRequest>,
    ffqn: FunctionFqn,
    index: RecordIndex,
    new_events: Vec<ExecutionEvent>,
    new_responses: Vec<JoinSetResponseEventOuter>,
    is_new: bool,
}

/// A write in progress: every change is staged on copies of the touched records' indexes and
/// checked as it is staged; nothing reaches the state until [`State::apply`]. Dropping a
/// transaction (because a step failed) writes nothing.
pub(crate) struct Tx<'s> {
    state: &'s State,
    staged: StagedSet,
}

/// The staged executions of a transaction, in the order they were first touched (which is the
/// order [`State::apply`] applies them and wakes their waiters). A `Vec` with a position index
/// instead of an ordered map: staged records are large, and an ordered map would move them on
/// every insert.
#[derive(Debug, Default)]
pub(crate) struct StagedSet {
    in_order: Vec<(ExecutionId, Staged)>,
    position: HashMap<ExecutionId, usize, FastHash>,
}

impl StagedSet {
    fn contains_key(&self, execution_id: &ExecutionId) -> bool {
        self.position.contains_key(execution_id)
    }

    fn insert(&mut self, execution_id: ExecutionId, staged: Staged) {
        match self.position.get(&execution_id) {
            Some(&idx) => self.in_order[idx].1 = staged,
            None => {
                self.position
                    .insert(execution_id.clone(), self.in_order.len());
                self.in_order.push((execution_id, staged));
            }
        }
    }

    fn get_mut(&mut self, execution_id: &ExecutionId) -> Option<&mut Staged> {
        let idx = *self.position.get(execution_id)?;
        self.in_order.get_mut(idx).map(|(_, staged)| staged)
    }
}

impl<'s> Tx<'s> {
    /// A transaction over `state`.
    pub(crate) fn new(state: &'s State) -> Self {
        Self {
            state,
            staged: StagedSet::default(),
        }
    }

    /// The staged changes, to hand to [`State::apply`].
    pub(crate) fn into_staged(self) -> StagedSet {
        self.staged
    }

    fn staged_mut(&mut self, execution_id: &ExecutionId) -> Result<&mut Staged, DbError> {
        if !self.staged.contains_key(execution_id) {
            let record = self.state.record(execution_id)?;
            self.staged.insert(
                execution_id.clone(),
                Staged {
                    created: Arc::clone(&record.created),
                    ffqn: record.created.ffqn.clone(),
                    index: record.index.clone(),
                    new_events: Vec::new(),
                    new_responses: Vec::new(),
                    is_new: false,
                },
            );
        }
        self.staged
            .get_mut(execution_id)
            .ok_or_else(|| DbError::execution_not_found(execution_id))
    }

    /// The staged (or stored) next version.
    pub(crate) fn next_version(&mut self, execution_id: &ExecutionId) -> Result<Version, DbError> {
        Ok(self.staged_mut(execution_id)?.index.state.next_version)
    }

    /// Stages the creation of an execution.
    pub(crate) fn create(&mut self, req: CreateRequest) -> Result<Version, DbError> {
        if self.state.records.contains_key(&req.execution_id)
            || self.staged.contains_key(&req.execution_id)
        {
            return Err(concepts::DuplicateKind::Execution(req.execution_id).into());
        }
        let created_event = req.to_created_event();
        let initial = ExecutionState {
            next_version: Version(0),
            pending_state: PendingState::PendingAt {
                scheduled_at: req.scheduled_at,
            },
        };
        let state = initial.after_append(&created_event, |_| None);
        let next_version = state.next_version;
        let execution_id = req.execution_id.clone();
        let ffqn = req.ffqn.clone();
        self.staged.insert(
            execution_id,
            Staged {
                created: Arc::new(req),
                ffqn,
                index: RecordIndex {
                    state,
                    temporary_event_count: 0,
                    join_next_counts: HashMap::new(),
                    response_times: HashMap::new(),
                    delay_responses: HashSet::new(),
                    child_responses: HashSet::new(),
                    requested_delays: HashSet::new(),
                    open_delays: HashMap::new(),
                },
                new_events: vec![created_event],
                new_responses: Vec::new(),
                is_new: true,
            },
        );
        Ok(next_version)
    }

    /// Stages one append at `version`; returns the next version.
    pub(crate) fn append(
        &mut self,
        execution_id: &ExecutionId,
        version: Version,
        created_at: DateTime<Utc>,
        event: ExecutionEventInner,
    ) -> Result<Version, DbError> {
        let staged = self.staged_mut(execution_id)?;
        let index = &mut staged.index;
        index.state.validate_append(version, created_at, &event)?;
        if let ExecutionEventInner::HistoryEvent {
            event:
                HistoryEvent::JoinSetRequest {
                    request: JoinSetRequest::DelayRequest { delay_id, .. },
                    ..
                },
        } = &event
            && index.requested_delays.contains(delay_id)
        {
            return Err(ValidationError::InvalidRequest(format!(
                "delay {delay_id} was already requested by execution {execution_id}"
            ))
            .into());
        }
        let event = ExecutionEvent { created_at, event };
        let new_state = index.state.after_append(&event, |join_set_id| {
            let already = index
                .join_next_counts
                .get(join_set_id)
                .copied()
                .unwrap_or(0);
            index
                .response_times
                .get(join_set_id)
                .and_then(|times| times.get(already))
                .copied()
        });
        match &event.event {
            ExecutionEventInner::HistoryEvent {
                event: HistoryEvent::JoinNext { join_set_id, .. },
            } => {
                *index
                    .join_next_counts
                    .entry(join_set_id.clone())
                    .or_default() += 1;
            }
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinSetRequest {
                        join_set_id,
                        request:
                            JoinSetRequest::DelayRequest {
                                delay_id,
                                expires_at,
                            },
                    },
            } => {
                index.requested_delays.insert(*delay_id);
                if !index.delay_responses.contains(delay_id) {
                    index
                        .open_delays
                        .insert(*delay_id, (join_set_id.clone(), *expires_at));
                }
            }
            other if other.is_temporary_event() => {
                index.temporary_event_count = index.temporary_event_count.saturating_add(1);
            }
            _ => {}
        }
        index.state = new_state;
        let next_version = index.state.next_version;
        staged.new_events.push(event);
        Ok(next_version)
    }

    /// Stages a response beside the log of `execution_id`.
    pub(crate) fn append_response(
        &mut self,
        created_at: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        let staged = self.staged_mut(execution_id)?;
        let index = &mut staged.index;
        match &response.event {
            JoinSetResponse::DelayFinished { delay_id } => {
                if !index.delay_responses.insert(*delay_id) {
                    return Err(concepts::DuplicateKind::DelayResponse {
                        execution_id: execution_id.clone(),
                        delay_id: *delay_id,
                    }
                    .into());
                }
                index.open_delays.remove(delay_id);
            }
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => {
                if !index.child_responses.insert(child_execution_id.clone()) {
                    return Err(concepts::DuplicateKind::ChildResponse {
                        execution_id: execution_id.clone(),
                        child_execution_id: child_execution_id.clone(),
                    }
                    .into());
                }
            }
        }
        let join_set_id = &response.join_set_id;
        let times = index.response_times.entry(join_set_id.clone()).or_default();
        times.push(created_at);
        let responses_for_join_set = times.len();
        let join_next_count = index
            .join_next_counts
            .get(join_set_id)
            .copied()
            .unwrap_or(0);
        index.state = index.state.after_response(
            join_set_id,
            created_at,
            responses_for_join_set,
            join_next_count,
        );
        staged.new_responses.push(JoinSetResponseEventOuter {
            created_at,
            event: response,
        });
        Ok(())
    }
}
