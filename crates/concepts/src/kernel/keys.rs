//! What a write names before anything is read: the [`Keys`] a backend loads into a
//! [`Snapshot`](super::Snapshot), and how the keys of several writes combine when they share a
//! transaction.

use super::{ThinVec, snapshot::FastHash};
use crate::{
    DbError, DelayId, DuplicateKind, ExecutionEventInner, ExecutionId, FunctionFqn, HistoryEvent,
    JoinSetId, JoinSetRequest, JoinSetResponse, JoinSetResponseEvent, schedule::ScheduleName,
};
use chrono::{DateTime, Utc};
use smallvec::SmallVec;
use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    sync::Arc,
};

/// A join set a write touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinSetKey {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The join set.
    pub join_set_id: JoinSetId,
    /// How many of the next unconsumed responses' times the write needs (the number of its
    /// `JoinNext` events for this join set).
    pub next_responses: usize,
    /// The write's own events create the join set (`JoinSetCreate`): a write planned without
    /// a load assumes it has no counters yet ([`Assumption`](super::Assumption)).
    pub created: bool,
}

/// Which due executions a `lock_pending` must find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueQuery {
    /// Of these functions.
    pub ffqns: Arc<[FunctionFqn]>,
    /// Due at or before this time.
    pub pending_at_or_sooner: DateTime<Utc>,
    /// At most this many, oldest `scheduled_at` first, ties by execution id.
    pub limit: usize,
}

/// Which top-level executions `prune` examines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneQuery {
    /// Top-level executions that finished strictly before this time...
    pub finished_before: DateTime<Utc>,
    /// ...and after this `(finished_at, execution_id)`, when given...
    pub after: Option<(DateTime<Utc>, ExecutionId)>,
    /// ...at most this many, in `(finished_at, execution_id)` order.
    pub limit: usize,
}

/// Which schedules `fire_schedules` finds due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleDueQuery {
    /// Due at or before this time.
    pub at: DateTime<Utc>,
    /// At most this many, the soonest `next_due_at` first, ties by name.
    pub limit: usize,
}

/// The ids of the descendants of `root`, as a half-open range in byte order: every id `d`
/// with `low <= d < high` (`low` is `<root>.`, `high` is `<root>/`, since `/` follows `.`).
#[must_use]
pub fn descendant_bounds(root: &ExecutionId) -> (String, String) {
    (format!("{root}."), format!("{root}/"))
}

/// A list of execution ids with room for two inline: an outcome write names its execution and
/// perhaps its parent, and allocates nothing for them.
pub type ExecutionIds = SmallVec<[ExecutionId; 2]>;

/// The rows a write touches, which the backend loads into a [`Snapshot`](super::Snapshot).
/// A write names few kinds of rows: each list beside `executions` is a [`ThinVec`], one
/// pointer when empty, dropped by comparing it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    /// Existing executions whose rows the write changes, in the order to lock them.
    pub executions: ExecutionIds,
    /// Executions the write creates. For each one that exists, the backend loads its row and
    /// its `Created` event (into `Snapshot::created`): the kernel decides whether the write
    /// repeats it (idempotent submit) or conflicts with it.
    pub new_executions: ThinVec<ExecutionId>,
    /// Executions whose descendants the write reads, with their rows, into
    /// `Snapshot::subtrees`: every execution whose id starts with `<root>.` (a child's id is
    /// derived from its parent's, so that is the whole tree below the root;
    /// [`descendant_bounds`] gives the range of ids). All of them, finished or not: `cancel`
    /// answers a descendant's parent that may have finished, and locks every row of the tree
    /// in its first load.
    pub subtrees: ThinVec<ExecutionId>,
    /// Executions whose finished result the write needs, when they have finished: into
    /// `Snapshot::finished_results`.
    pub finished_results: ThinVec<ExecutionId>,
    /// Executions whose open delays the write closes: into `Snapshot::open_delays`.
    pub open_delays: ThinVec<ExecutionId>,
    /// Top-level finished executions to examine for `prune`: their rows, and their ids into
    /// `Snapshot::prune_candidates`.
    pub prune: Option<PruneQuery>,
    /// Join sets whose counters the write reads.
    pub join_sets: ThinVec<JoinSetKey>,
    /// Delays the write requests or answers.
    pub delays: ThinVec<(ExecutionId, DelayId)>,
    /// `(execution, child)` pairs: whether the execution has a response from the child.
    pub child_responses: ThinVec<(ExecutionId, ExecutionId)>,
    /// Due executions to find and lock; their rows go into the snapshot too.
    pub due: Option<DueQuery>,
    /// Schedules whose rows the write reads or changes (or creates, when absent): into
    /// `Snapshot::schedules`, locked.
    pub schedules: ThinVec<ScheduleName>,
    /// Due schedules to find and lock: their rows into `Snapshot::schedules`, their names in
    /// order into `Snapshot::due_schedules`.
    pub due_schedules: Option<ScheduleDueQuery>,
}

impl Keys {
    /// True when every row the write reads is named by these keys: no query finds rows (due
    /// executions, the members of a tree, prune candidates), so nothing it reads depends on
    /// what another write of the same transaction does to rows it does not name. Such writes
    /// may share a transaction: one snapshot loaded for the [`union`](Keys::union) of their
    /// keys, planned one after the other by [`GroupPlanner`](super::GroupPlanner).
    #[must_use]
    pub fn shares_a_transaction(&self) -> bool {
        // Destructured: a field added to the keys must be classified here.
        let Self {
            executions: _,
            new_executions: _,
            finished_results: _,
            open_delays: _,
            join_sets: _,
            delays: _,
            child_responses: _,
            subtrees,
            prune,
            due,
            schedules,
            due_schedules,
        } = self;
        // A schedule's writes are rare (an operator's) or batches already (a pass): they run
        // alone.
        subtrees.is_empty()
            && prune.is_none()
            && due.is_none()
            && schedules.is_empty()
            && due_schedules.is_none()
    }

    /// True when the keys name nothing but execution rows, to change or to create, the
    /// counters of their join sets and whether they hold a child's response: a write with such
    /// keys can be planned on rows the store already knows ([`KnownRows`](super::KnownRows))
    /// and on the assumption that the executions it creates do not exist, both checked by the
    /// backend when it writes.
    #[must_use]
    pub fn plannable_on_known_rows(&self) -> bool {
        // Destructured: a field added to the keys must be classified here.
        let Self {
            executions: _,
            new_executions: _,
            subtrees,
            finished_results,
            open_delays,
            prune,
            join_sets: _,
            delays,
            child_responses: _,
            due,
            schedules,
            due_schedules,
        } = self;
        subtrees.is_empty()
            && schedules.is_empty()
            && due_schedules.is_none()
            && finished_results.is_empty()
            && open_delays.is_empty()
            && prune.is_none()
            && delays.is_empty()
            && due.is_none()
    }

    /// The keys of a group of writes that share a transaction: every row any of them names,
    /// each once, in the order first named; a join set named by several needs the responses
    /// all of them consume. Queries are taken from the first write that has them (only writes
    /// that [`share a transaction`](Keys::shares_a_transaction), which have none, are grouped).
    pub fn union<'k>(all: impl IntoIterator<Item = &'k Keys>) -> Keys {
        let mut union = Keys::default();
        let mut seen = Seen::default();
        for keys in all {
            // Destructured: a field added to the keys must be merged here.
            let Keys {
                executions,
                new_executions,
                subtrees,
                finished_results,
                open_delays,
                prune,
                join_sets,
                delays,
                child_responses,
                due,
                schedules,
                due_schedules,
            } = keys;
            seen.executions
                .extend_new(&mut union.executions, executions);
            (seen.new_executions).extend_new(&mut union.new_executions, new_executions);
            seen.subtrees.extend_new(&mut union.subtrees, subtrees);
            (seen.finished_results).extend_new(&mut union.finished_results, finished_results);
            seen.open_delays
                .extend_new(&mut union.open_delays, open_delays);
            seen.delays.extend_new(&mut union.delays, delays);
            (seen.child_responses).extend_new(&mut union.child_responses, child_responses);
            seen.schedules.extend_new(&mut union.schedules, schedules);
            for key in join_sets {
                let id = (key.execution_id.clone(), key.join_set_id.clone());
                match seen.join_sets.get(&id) {
                    Some(&idx) => {
                        union.join_sets[idx].next_responses += key.next_responses;
                        union.join_sets[idx].created |= key.created;
                    }
                    None => {
                        seen.join_sets.insert(id, union.join_sets.len());
                        union.join_sets.push(key.clone());
                    }
                }
            }
            if union.prune.is_none() {
                union.prune.clone_from(prune);
            }
            if union.due.is_none() {
                union.due.clone_from(due);
            }
            if union.due_schedules.is_none() {
                union.due_schedules.clone_from(due_schedules);
            }
        }
        union
    }

    /// True when the write creates `execution_id`.
    #[must_use]
    pub fn creates(&self, execution_id: &ExecutionId) -> bool {
        self.new_executions.contains(execution_id)
    }

    /// True when `err`, the database's refusal of the write, found a row the write creates
    /// (an execution, a schedule) that its load found absent: another transaction created it
    /// since, and the write run again is answered by the kernel on what is stored now.
    #[must_use]
    pub fn raced_by(&self, err: &DbError) -> bool {
        match err {
            DbError::Duplicate(DuplicateKind::Execution(id)) => self.creates(id),
            DbError::Duplicate(DuplicateKind::Schedule(name)) => self.schedules.contains(name),
            _ => false,
        }
    }

    /// Names the join sets and delays that `events` of `execution_id` touch.
    pub(crate) fn add_events(
        &mut self,
        execution_id: &ExecutionId,
        events: &[ExecutionEventInner],
    ) {
        for event in events {
            let ExecutionEventInner::HistoryEvent { event } = event else {
                continue;
            };
            match event {
                HistoryEvent::JoinSetCreate { join_set_id, .. } => {
                    add_join_set(self, execution_id, join_set_id, 0).created = true;
                }
                HistoryEvent::JoinNext { join_set_id, .. } => {
                    add_join_set(self, execution_id, join_set_id, 1);
                }
                HistoryEvent::JoinSetRequest {
                    request: JoinSetRequest::DelayRequest { delay_id, .. },
                    ..
                } => self.delays.push((execution_id.clone(), *delay_id)),
                _ => {}
            }
        }
    }

    /// Names the join set, delay and child that a response to `execution_id` touches.
    pub(crate) fn add_response(
        &mut self,
        execution_id: &ExecutionId,
        response: &JoinSetResponseEvent,
    ) {
        add_join_set(self, execution_id, &response.join_set_id, 0);
        match &response.event {
            JoinSetResponse::DelayFinished { delay_id } => {
                self.delays.push((execution_id.clone(), *delay_id));
            }
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => self
                .child_responses
                .push((execution_id.clone(), child_execution_id.clone())),
        }
    }

    /// Drops the repeats of the lists that a write built from several items (each first
    /// occurrence stays where it was).
    pub(crate) fn dedup(&mut self) {
        let mut first = first_occurrence(self.executions.len());
        self.executions.retain(|id| first(id));
        let mut first = first_occurrence(self.delays.len());
        self.delays.retain(|delay| first(delay));
        let mut first = first_occurrence(self.child_responses.len());
        self.child_responses.retain(|pair| first(pair));
    }
}

/// What a union of keys holds already, list by list.
#[derive(Default)]
struct Seen {
    executions: Known<ExecutionId>,
    new_executions: Known<ExecutionId>,
    subtrees: Known<ExecutionId>,
    finished_results: Known<ExecutionId>,
    open_delays: Known<ExecutionId>,
    delays: Known<(ExecutionId, DelayId)>,
    child_responses: Known<(ExecutionId, ExecutionId)>,
    schedules: Known<ScheduleName>,
    join_sets: HashMap<(ExecutionId, JoinSetId), usize, FastHash>,
}

/// The items of one list of a union.
struct Known<T>(HashSet<T, FastHash>);

impl<T> Default for Known<T> {
    fn default() -> Self {
        Self(HashSet::default())
    }
}

impl<T: Clone + Eq + Hash> Known<T> {
    /// Adds to `list` the items of `more` it does not hold yet.
    fn extend_new(&mut self, list: &mut impl Extend<T>, more: &[T]) {
        list.extend(
            more.iter()
                .filter(|item| self.0.insert((*item).clone()))
                .cloned(),
        );
    }
}

/// True for the first occurrence of each item of a list of about `len` items, asked in order:
/// what a list keeps to drop its repeats and keep each first occurrence where it was.
fn first_occurrence<T: Clone + Eq + Hash>(len: usize) -> impl FnMut(&T) -> bool {
    let mut seen = HashSet::with_capacity_and_hasher(len, FastHash::default());
    move |item| seen.insert(item.clone())
}

fn add_join_set<'k>(
    keys: &'k mut Keys,
    execution_id: &ExecutionId,
    join_set_id: &JoinSetId,
    n: usize,
) -> &'k mut JoinSetKey {
    let found = (keys.join_sets.iter())
        .position(|k| k.execution_id == *execution_id && k.join_set_id == *join_set_id);
    let idx = found.unwrap_or_else(|| {
        keys.join_sets.push(JoinSetKey {
            execution_id: execution_id.clone(),
            join_set_id: join_set_id.clone(),
            next_responses: 0,
            created: false,
        });
        keys.join_sets.len() - 1
    });
    let key = &mut keys.join_sets[idx];
    key.next_responses += n;
    key
}
