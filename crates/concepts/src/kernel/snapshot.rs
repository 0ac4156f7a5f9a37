//! What a write reads before it is planned: the rows of the [`Snapshot`] a backend loads for
//! the write's [`Keys`](super::Keys), and the [`Revision`] that tells whether a row changed.

use crate::{
    CreateRequest, DbError, DelayId, ExecutionEvent, ExecutionId, ExecutionState, ExecutorId,
    ExpiredDelay, ExpiredLock, ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetId,
    JoinSetResponseEventOuter, PendingState, Version,
    schedule::{ScheduleName, ScheduleRow},
};
use chrono::{DateTime, Utc};
use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

/// The hasher of the kernel's maps (and of a backend's maps keyed by ids): `foldhash`'s
/// per-process seeded hasher, several times cheaper than SipHash on these short keys, and
/// hashing sits on every write.
pub type FastHash = foldhash::fast::RandomState;

/// The state row of one execution: what a write needs to know about it without its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its function.
    pub ffqn: FunctionFqn,
    /// Next version and pending state.
    pub state: ExecutionState,
    /// `TemporarilyFailed` + `TemporarilyTimedOut` events so far.
    pub temporary_event_count: u32,
    /// How many responses it has received (the index of the next one).
    pub response_count: u64,
    /// How many failures are retried.
    pub max_retries: u32,
    /// The first retry's backoff.
    pub retry_exp_backoff: Duration,
    /// The parent and join set, for a child.
    pub parent: Option<(ExecutionId, JoinSetId)>,
}

impl ExecutionRow {
    /// The row of an execution that `req` creates: `PendingAt(scheduled_at)`, next version 1.
    #[must_use]
    pub fn new_execution(req: &CreateRequest) -> Self {
        Self {
            execution_id: req.execution_id.clone(),
            ffqn: req.ffqn.clone(),
            state: ExecutionState {
                next_version: Version(1),
                pending_state: PendingState::PendingAt {
                    scheduled_at: req.scheduled_at,
                },
            },
            temporary_event_count: 0,
            response_count: 0,
            max_retries: req.max_retries,
            retry_exp_backoff: req.retry_exp_backoff,
            parent: req.parent.clone(),
        }
    }

    /// What the timers watcher needs about this execution's lease, if it expired at or before
    /// `at` (an index may round expiries: the exact time decides); an execution indexed as
    /// locked that is not is the backend's inconsistency.
    pub fn expired_lock_at(&self, at: DateTime<Utc>) -> Result<Option<ExpiredLock>, DbError> {
        match self.state.pending_state {
            PendingState::Locked {
                executor_id,
                lock_expires_at,
                ..
            } => Ok(
                (lock_expires_at <= at).then(|| self.expired_lock(executor_id, lock_expires_at))
            ),
            ref other => Err(inconsistent(format!(
                "execution {} is indexed as locked, its state is {other:?}",
                self.execution_id
            ))),
        }
    }

    /// What the timers watcher needs about this execution's lease, held by `executor_id`,
    /// that expired at `lock_expires_at`.
    fn expired_lock(&self, executor_id: ExecutorId, lock_expires_at: DateTime<Utc>) -> ExpiredLock {
        ExpiredLock {
            execution_id: self.execution_id.clone(),
            ffqn: self.ffqn.clone(),
            executor_id,
            next_version: self.state.next_version,
            temporary_event_count: self.temporary_event_count,
            max_retries: self.max_retries,
            retry_exp_backoff: self.retry_exp_backoff,
            parent: self.parent.clone(),
            lock_expires_at,
        }
    }
}

impl ExecutionRow {
    /// The row's revision: it changes with every write that changes the row.
    #[must_use]
    pub fn revision(&self) -> Revision {
        Revision {
            next_version: self.state.next_version,
            finished: self.state.pending_state.is_finished(),
            response_count: self.response_count,
        }
    }
}

/// What tells two states of one execution's row apart: every event appended moves its next
/// version (but `Finished`, which is stored at the version it was appended at and finishes the
/// row), and every response stored its response count, and nothing else changes a row (its
/// pending state, its temporary event count and its response count change only with an event
/// or a response; its function, retry settings and parent never). A write planned on a row the
/// store already knows is valid exactly when the stored row still has the revision of the
/// known one ([`KnownRows`](super::KnownRows)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Revision {
    /// The version the next append carries.
    pub next_version: Version,
    /// True once it finished.
    pub finished: bool,
    /// How many responses the execution has received.
    pub response_count: u64,
}

/// The error of a snapshot that lacks what its keys named: a bug of the backend, never of the
/// caller.
pub(crate) fn inconsistent(what: String) -> DbError {
    DbError::backend(format!("storage is inconsistent: {what}"), false, None)
}

/// The counters of one join set of one execution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JoinSetCounters {
    /// `JoinNext` events for the join set in the log.
    pub join_next_count: u64,
    /// Responses for the join set.
    pub response_count: u64,
}

/// A join set as a write sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinSetRow {
    /// Its counters (zero for a join set that has neither `JoinNext` events nor responses).
    pub counters: JoinSetCounters,
    /// The `created_at` of the responses with join-set indexes `join_next_count`,
    /// `join_next_count + 1`, ...: the responses the next `JoinNext` events will consume, as
    /// many as [`next_responses`](super::keys::JoinSetKey::next_responses) asked for and exist.
    pub next_response_times: Vec<DateTime<Utc>>,
}

/// A requested delay as a write sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelayRow {
    /// The log holds a `DelayRequest` with this id.
    pub requested: bool,
    /// A `DelayFinished` for this id is stored.
    pub answered: bool,
}

/// The history of an execution that was locked, read after the commit: what its worker is
/// handed, cut at the grant's bounds by [`hand_over`](super::hand_over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRows {
    /// Every event, `events[v]` at version `v`.
    pub events: Vec<ExecutionEvent>,
    /// Every response, in arrival order.
    pub responses: Vec<JoinSetResponseEventOuter>,
}

/// What the backend read for a write's [`Keys`](super::Keys). A key that names nothing stored is simply
/// absent (an execution that does not exist) or default (a join set with no counters yet, a
/// delay never requested).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The rows of the executions found, among `Keys::executions` and `Keys::new_executions`,
    /// of the due executions, the descendants and the prune candidates.
    pub executions: HashMap<ExecutionId, ExecutionRow, FastHash>,
    /// The `Created` event of every execution of `Keys::new_executions` that exists.
    pub created: HashMap<ExecutionId, ExecutionEvent, FastHash>,
    /// For each `Keys::subtrees` root: the descendants found, in id order (their rows are in
    /// `executions`).
    pub subtrees: HashMap<ExecutionId, Vec<ExecutionId>, FastHash>,
    /// The finished results of the executions of `Keys::finished_results` that have finished.
    pub finished_results: HashMap<ExecutionId, FinishedExecutionResult, FastHash>,
    /// The open delays of each execution of `Keys::open_delays` that has any.
    pub open_delays: HashMap<ExecutionId, Vec<DelayId>, FastHash>,
    /// The executions `Keys::prune` found, in the order found (their rows are in
    /// `executions`).
    pub prune_candidates: Vec<ExecutionId>,
    /// The join sets of `Keys::join_sets` that have counters.
    pub join_sets: HashMap<(ExecutionId, JoinSetId), JoinSetRow, FastHash>,
    /// The delays of `Keys::delays` that were requested or answered.
    pub delays: HashMap<(ExecutionId, DelayId), DelayRow, FastHash>,
    /// The pairs of `Keys::child_responses` whose response is stored.
    pub child_responses: HashSet<(ExecutionId, ExecutionId), FastHash>,
    /// The executions the due query found, in the order it found them (their rows are in
    /// `executions`; their histories are read after the commit, see
    /// [`hand_over`](super::hand_over)).
    pub due: Vec<ExecutionId>,
    /// The schedules found, among `Keys::schedules` and the due ones.
    pub schedules: HashMap<ScheduleName, ScheduleRow, FastHash>,
    /// The schedules `Keys::due_schedules` found, in the order found (their rows are in
    /// `schedules`).
    pub due_schedules: Vec<ScheduleName>,
}

impl Snapshot {
    /// Adds an execution's row.
    pub fn add_execution(&mut self, row: ExecutionRow) {
        self.executions.insert(row.execution_id.clone(), row);
    }

    /// Adds a schedule's row.
    pub fn add_schedule(&mut self, row: ScheduleRow) {
        self.schedules.insert(row.name().clone(), row);
    }

    /// Adds a due schedule's row, in the order found.
    pub fn add_due_schedule(&mut self, row: ScheduleRow) {
        self.due_schedules.push(row.name().clone());
        self.add_schedule(row);
    }

    /// Adds a due execution's row, in the order found.
    pub fn add_due(&mut self, row: ExecutionRow) {
        self.due.push(row.execution_id.clone());
        self.add_execution(row);
    }

    /// Adds a prune candidate's row, in the order found.
    pub fn add_prune_candidate(&mut self, row: ExecutionRow) {
        self.prune_candidates.push(row.execution_id.clone());
        self.add_execution(row);
    }

    /// Adds the row of a descendant of `root`, in id order.
    pub fn add_descendant(&mut self, root: &ExecutionId, row: ExecutionRow) {
        let members = self.subtrees.entry(root.clone()).or_default();
        members.push(row.execution_id.clone());
        self.add_execution(row);
    }

    /// Adds an open delay of `execution_id`, in delay id order.
    pub fn add_open_delay(&mut self, execution_id: &ExecutionId, delay_id: DelayId) {
        let open = self.open_delays.entry(execution_id.clone()).or_default();
        open.push(delay_id);
    }

    /// Adds the counters of the join set of `key` and the arrival times of its next responses,
    /// as many as `key` asked for.
    pub fn add_join_set(
        &mut self,
        key: &super::JoinSetKey,
        counters: JoinSetCounters,
        next_response_times: Vec<DateTime<Utc>>,
    ) {
        let row = JoinSetRow {
            counters,
            next_response_times,
        };
        let id = (key.execution_id.clone(), key.join_set_id.clone());
        self.join_sets.insert(id, row);
    }

    /// Adds what was found of a delay; nothing when it was neither requested nor answered.
    pub fn add_delay(&mut self, (execution_id, delay_id): &(ExecutionId, DelayId), row: DelayRow) {
        if row != DelayRow::default() {
            self.delays.insert((execution_id.clone(), *delay_id), row);
        }
    }

    /// Adds the rows of due executions, ordered as `lock_pending` locks them: by the exact
    /// due time, then by id (an index that rounds times may have ordered them otherwise).
    pub fn add_due_in_order(&mut self, mut rows: Vec<ExecutionRow>) {
        rows.sort_by(|a, b| {
            let at = |row: &ExecutionRow| row.state.pending_state.pending_at();
            (at(a), &a.execution_id).cmp(&(at(b), &b.execution_id))
        });
        self.executions.reserve(rows.len());
        for row in rows {
            self.add_due(row);
        }
    }

    /// Empties the snapshot and keeps its allocations, for the next write of a backend that
    /// reuses one snapshot (a write of one execution then allocates nothing to load it).
    pub fn clear(&mut self) {
        // Destructured: a field added to the snapshot must be cleared here too.
        let Self {
            executions,
            created,
            subtrees,
            finished_results,
            open_delays,
            prune_candidates,
            join_sets,
            delays,
            child_responses,
            due,
            schedules,
            due_schedules,
        } = self;
        // A table's `clear` is a call even when it is empty, as most of these are after a
        // write of one execution: asked first, inline.
        macro_rules! clear_unless_empty {
            ($($table:ident),*) => {
                $(if !$table.is_empty() {
                    $table.clear();
                })*
            };
        }
        clear_unless_empty!(
            schedules,
            due_schedules,
            executions,
            created,
            subtrees,
            finished_results,
            open_delays,
            prune_candidates,
            join_sets,
            delays,
            child_responses,
            due
        );
    }

    /// How many entries the snapshot's largest table has room for.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.executions
            .capacity()
            .max(self.created.capacity())
            .max(self.due.capacity())
            .max(self.prune_candidates.capacity())
    }
}

/// What `get_expired_timers(at)` answers, from what a backend's indexes found: the leases of
/// the `locked` rows and the `delays` that expired at or before `at` by their exact times (an
/// index may round them), ordered by expiry, then execution id, then the lease before the
/// delays, and delays by id. A row found as locked that is not is the backend's inconsistency.
pub fn expired_timers(
    at: DateTime<Utc>,
    locked: impl IntoIterator<Item = ExecutionRow>,
    delays: impl IntoIterator<Item = ExpiredDelay>,
) -> Result<Vec<ExpiredTimer>, DbError> {
    let mut timers = Vec::new();
    for row in locked {
        timers.extend(row.expired_lock_at(at)?.map(ExpiredTimer::Lock));
    }
    let delays = delays.into_iter().filter(|delay| delay.expires_at <= at);
    timers.extend(delays.map(ExpiredTimer::Delay));
    timers.sort_by(|a, b| timer_key(a).cmp(&timer_key(b)));
    Ok(timers)
}

fn timer_key(timer: &ExpiredTimer) -> (DateTime<Utc>, &ExecutionId, Option<DelayId>) {
    match timer {
        ExpiredTimer::Lock(lock) => (lock.lock_expires_at, &lock.execution_id, None),
        ExpiredTimer::Delay(delay) => (delay.expires_at, &delay.execution_id, Some(delay.delay_id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tests::{create_request, row};

    #[test]
    fn a_cleared_snapshot_holds_nothing_and_keeps_its_room() {
        let at = DateTime::from_timestamp(0, 0).unwrap();
        let mut snapshot = Snapshot::default();
        for _ in 0..20 {
            let id = ExecutionId::generate_at(at);
            let created = create_request(&id, None).to_created_event();
            snapshot.created.insert(id.clone(), created);
            snapshot.subtrees.insert(id.clone(), vec![id.clone()]);
            snapshot.open_delays.insert(id.clone(), Vec::new());
            snapshot.prune_candidates.push(id.clone());
            let join_set = (id.clone(), "n:j".parse().unwrap());
            snapshot.join_sets.insert(join_set, JoinSetRow::default());
            snapshot
                .delays
                .insert((id.clone(), DelayId::generate_at(at)), DelayRow::default());
            snapshot.child_responses.insert((id.clone(), id.clone()));
            let result = Ok(crate::SupportedFunctionReturnValue::None);
            snapshot.finished_results.insert(id.clone(), result);
            snapshot.add_due(row(&id, 1, PendingState::PendingAt { scheduled_at: at }));
        }
        let room = snapshot.capacity();
        assert!(room >= 20);
        snapshot.clear();
        // Every table and list is empty again (an empty table prints `{}` whatever its room).
        let empty = format!("{:?}", Snapshot::default());
        assert_eq!(format!("{snapshot:?}"), empty);
        assert_eq!(snapshot.capacity(), room, "the allocations are kept");
    }
}
