//! The state behind the mutex: the execution records and their indexes, the loads of a
//! write's [`Snapshot`] and the application of its plan.

use crate::{pending::PendingSets, records::Records, time_index::TimeIndex};
use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Timelike, Utc};
use concepts::{
    DbError, DelayId, ExecutionEvent, ExecutionEventInner, ExecutionId, FinishedExecutionResult,
    FunctionFqn, JoinSetId, JoinSetResponse, JoinSetResponseEventOuter, PendingState,
    kernel::{
        DelayRow, ExecutionChange, ExecutionRow, FastHash, JoinSetCounters, Keys, Snapshot,
        descendant_bounds,
    },
};
use smallvec::SmallVec;
use std::{
    collections::{BTreeSet, HashMap, HashSet},
    ops::Bound,
};

/// What a timer of an execution is for. Part of the timer key, so that a lease and any number
/// of delays of one execution expiring at the same instant never collide.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// The lease of a `Locked` execution.
    Lock,
    /// An open durable sleep, and its join set (what the timers watcher answers). Boxed: a
    /// key is moved whenever a B-tree node shifts or splits, and a lease's key, the usual
    /// one, is 40 bytes smaller for it (64 bytes).
    Delay(Box<(DelayId, JoinSetId)>),
}

/// The key of the timer index: expiry first, so that a range scan finds everything due.
pub(crate) type TimerKey = (At, ExecutionId, TimerKind);

/// A key of the pending, creation and finished indexes: `(time, execution_id)`.
pub(crate) type TimeKey = (At, ExecutionId);

/// The leading part of every index key: a time and the first 28 bytes of the key's execution
/// id (an id's top-level part, `E_` and its ULID, which every id starts with), as integers,
/// ordered as `(time, id)` are: equal leads fall through to the whole id, which only a
/// descendant of the same top-level execution, or the same execution, at the same time has.
/// Keys of one time are common (a batch's executions are due, leased and created at one
/// instant), and their ids then rarely reach the comparison of the ids themselves. Integers
/// of 64 bits: 40 bytes, where 128-bit ones would align it to 48; five of them, so that two
/// keys of one time, whose ids differ only in their last bytes, compare five integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct At {
    /// The year, the day of the year and the second of the day packed as [`ticks`] does:
    /// ordered as the time, to the second.
    secs: i64,
    /// The nanoseconds past that second (past 10^9 in a leap second, below 2^31) in the high
    /// 32 bits, bytes 0..4 of the id in the low ones.
    nanos_id_0: u64,
    /// Bytes 4..12, 12..20 and 20..28 of the id, big-endian.
    id_4: u64,
    id_12: u64,
    id_20: u64,
}

impl At {
    pub(crate) fn new(time: DateTime<Utc>, execution_id: &ExecutionId) -> Self {
        let lead = lead(execution_id.as_str().as_bytes());
        let (secs, nanos) = ticks(time);
        let id_0 = u32::from_be_bytes(*lead.first_chunk().unwrap_or(&[0; 4]));
        let word = |at: usize| u64::from_be_bytes(*lead[at..].first_chunk().unwrap_or(&[0; 8]));
        Self {
            secs,
            nanos_id_0: (u64::from(nanos) << 32) | u64::from(id_0),
            id_4: word(4),
            id_12: word(12),
            id_20: word(20),
        }
    }

    /// The time.
    pub(crate) fn time(&self) -> DateTime<Utc> {
        // Made from a `DateTime`, so always one.
        let year = i32::try_from(self.secs >> YEAR_SHIFT).unwrap_or_default();
        let ordinal = u32::try_from((self.secs >> DAY_SHIFT) & 0x1ff).unwrap_or_default();
        let second = u32::try_from(self.secs & ((1 << DAY_SHIFT) - 1)).unwrap_or_default();
        let date = NaiveDate::from_yo_opt(year, ordinal);
        let time = NaiveTime::from_num_seconds_from_midnight_opt(second, self.ticks().1);
        (date.zip(time)).map_or_else(DateTime::default, |(date, time)| {
            date.and_time(time).and_utc()
        })
    }

    /// True when the time is `at`.
    pub(crate) fn is(&self, at: DateTime<Utc>) -> bool {
        self.ticks() == ticks(at)
    }

    /// True when the time is at or before `at`.
    pub(crate) fn at_or_before(&self, at: DateTime<Utc>) -> bool {
        self.ticks() <= ticks(at)
    }

    /// The time as [`ticks`] gives it.
    fn ticks(&self) -> (i64, u32) {
        let nanos = u32::try_from(self.nanos_id_0 >> 32).unwrap_or(u32::MAX);
        (self.secs, nanos)
    }
}

/// The first 28 bytes of an id, padded with zeros past its end (every id is at least 28 bytes
/// long; a shorter text, padded, still orders as its bytes do: an id holds no zero byte).
fn lead(bytes: &[u8]) -> [u8; 28] {
    if let Some(lead) = bytes.first_chunk::<28>() {
        return *lead;
    }
    let mut padded = [0u8; 28];
    padded[..bytes.len()].copy_from_slice(bytes);
    padded
}

/// Where [`ticks`] puts the day of the year (1 to 366, 9 bits) above the second of the day
/// (below 86,400, 17 bits).
const DAY_SHIFT: u32 = 17;
/// Where [`ticks`] puts the year above the day of the year.
const YEAR_SHIFT: u32 = DAY_SHIFT + 9;

/// The time as two integers ordered as it is: its year, day of the year and second of the day
/// packed into one (`chrono` keeps all three as they are, where seconds since the epoch would
/// be computed from them at each key), and the nanoseconds past that second.
fn ticks(at: DateTime<Utc>) -> (i64, u32) {
    // The stored time itself: `DateTime::time` and `date_naive` add the (zero) offset first.
    let utc = at.naive_utc();
    let (date, time) = (utc.date(), utc.time());
    let days = (i64::from(date.year()) << 9) | i64::from(date.ordinal());
    let second = i64::from(time.num_seconds_from_midnight());
    ((days << DAY_SHIFT) | second, time.nanosecond())
}

fn key(at: DateTime<Utc>, execution_id: &ExecutionId) -> TimeKey {
    (At::new(at, execution_id), execution_id.clone())
}

fn timer_key(at: DateTime<Utc>, execution_id: &ExecutionId, kind: TimerKind) -> TimerKey {
    (At::new(at, execution_id), execution_id.clone(), kind)
}

/// True when `key` is `key(at, execution_id)`, told without building that (the time and the
/// whole id decide the lead).
fn is_key((lead, id): &TimeKey, at: DateTime<Utc>, execution_id: &ExecutionId) -> bool {
    id == execution_id && lead.is(at)
}

/// A join set of one execution, as far as a snapshot needs it.
#[derive(Debug, Default)]
struct JoinSet {
    /// As the last plan that changed them wrote them.
    counters: JoinSetCounters,
    /// The arrival time of every response, in arrival order.
    response_times: Vec<DateTime<Utc>>,
}

/// A delay of one execution.
#[derive(Debug, Default)]
struct Delay {
    row: DelayRow,
    /// Its key in the timers while it is open.
    open: Option<TimerKey>,
}

/// The events a record holds without an allocation of their own: `Created`, `Locked` and
/// `Finished`, the whole log of most executions.
const INLINE_EVENTS: usize = 3;

/// One execution: its log and what loading a snapshot needs without reading the log.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) row: ExecutionRow,
    /// `events[v]` is version `v`. The first [`INLINE_EVENTS`] inside the record (its own
    /// allocation, made anyway), so that most executions' logs allocate nothing more.
    pub(crate) events: SmallVec<[ExecutionEvent; INLINE_EVENTS]>,
    /// In arrival order.
    pub(crate) responses: Vec<JoinSetResponseEventOuter>,
    /// Allocated on first use: most executions never request, await or answer anything.
    waits: Option<Box<Waits>>,
}

/// What a record holds about its join sets, its delays and the children that answered it.
#[derive(Debug, Default)]
struct Waits {
    join_sets: HashMap<JoinSetId, JoinSet, FastHash>,
    delays: HashMap<DelayId, Delay, FastHash>,
    answered_children: HashSet<ExecutionId, FastHash>,
}

impl Record {
    /// When the execution was created: the time of its `Created` event (version 0, kept
    /// until the record is deleted).
    pub(crate) fn created_at(&self) -> DateTime<Utc> {
        self.events
            .first()
            .map(|e| e.created_at)
            .unwrap_or_default()
    }

    /// When the execution was scheduled at its creation (its `Created` event's).
    pub(crate) fn scheduled_at(&self) -> DateTime<Utc> {
        let created = self.events.first().and_then(|e| e.event.created());
        created.map_or_else(DateTime::default, |created| created.scheduled_at)
    }

    /// The result, when finished (`Finished` is the last event).
    pub(crate) fn finished_result(&self) -> Option<FinishedExecutionResult> {
        let finished = self.row.state.pending_state.is_finished();
        match self.events.last().map(|e| &e.event) {
            Some(ExecutionEventInner::Finished { result }) if finished => Some(result.clone()),
            _ => None,
        }
    }
}

/// Everything the store holds.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Set by `close`; every call afterwards is refused.
    pub(crate) closed: bool,
    /// The last write's snapshot, emptied, for the next one to load into (`SCRATCH_CAPACITY`);
    /// boxed, so that taking it and putting it back moves a pointer, not the whole table set.
    pub(crate) scratch: Option<Box<Snapshot>>,
    /// The last write's list of changes, emptied, for the next one to stage its changes in
    /// (`SCRATCH_CAPACITY`): a write of one execution then allocates none.
    pub(crate) scratch_changes: Vec<ExecutionChange>,
    records: Records<Record>,
    /// `(created_at, execution_id)` of every execution, for `list_executions`.
    pub(crate) by_created: TimeIndex<TimeKey>,
    /// `(scheduled_at, execution_id)` of every `PendingAt` execution, per function.
    pub(crate) pending: PendingSets,
    /// Every lease of a `Locked` execution and every open delay.
    pub(crate) timers: TimeIndex<TimerKey>,
    /// The id of every child execution (top-level ones are never descendants): the descendants
    /// of an execution are one range ([`descendant_bounds`]).
    pub(crate) children: BTreeSet<ExecutionId>,
    /// `(finished_at, execution_id)` of every finished top-level execution, for `prune`.
    pub(crate) finished: TimeIndex<TimeKey>,
    pub(crate) schedules: crate::schedules::Schedules,
}

impl State {
    /// The record, or `NotFound`.
    pub(crate) fn record(&self, execution_id: &ExecutionId) -> Result<&Record, DbError> {
        self.records
            .get(execution_id)
            .ok_or_else(|| DbError::execution_not_found(execution_id))
    }

    /// What the record of `execution_id` holds about its join sets, delays and answers.
    fn waits(&self, execution_id: &ExecutionId) -> Option<&Waits> {
        self.records.get(execution_id)?.waits.as_deref()
    }

    /// The descendants of `root`, in id order: one range of the index of children (ids between
    /// `<root>` and `<root>.`, siblings whose join set name extends the root's last step, are
    /// in the range but not descendants: filtered out).
    pub(crate) fn descendants<'s>(
        &'s self,
        root: &'s ExecutionId,
    ) -> impl Iterator<Item = &'s ExecutionId> + 's {
        let (low, high) = descendant_bounds(root);
        (self.children)
            .range((Bound::Excluded(root), Bound::Unbounded))
            .take_while(move |id| id.as_str() < high.as_str())
            .filter(move |id| id.as_str().starts_with(&low))
    }

    /// The executions of `ffqn` (of every function when `None`) pending at `from` or later,
    /// from the pending indexes.
    pub(crate) fn pending_from<'s>(
        &'s self,
        ffqn: Option<&'s FunctionFqn>,
        from: DateTime<Utc>,
    ) -> impl Iterator<Item = &'s ExecutionId> + 's {
        let (sets, from) = (self.pending.iter(), ticks(from));
        let sets = sets.filter(move |(of, _)| ffqn.is_none_or(|f| f == *of));
        sets.flat_map(move |(_, set)| {
            (set.newest_first())
                .take_while(move |(at, _)| at.ticks() >= from)
                .map(|(_, execution_id)| execution_id)
        })
    }

    /// The creation keys of `executions`, newest first (as the creation index lists them).
    pub(crate) fn newest_created_first<'s>(
        &self,
        executions: impl Iterator<Item = &'s ExecutionId>,
    ) -> std::iter::Rev<std::vec::IntoIter<TimeKey>> {
        let created = |id: &ExecutionId| Some(key(self.record(id).ok()?.created_at(), id));
        let mut keys: Vec<TimeKey> = executions.filter_map(created).collect();
        keys.sort_unstable();
        keys.into_iter().rev()
    }

    /// The keys of the first `limit` executions of `ffqns` due at `at`, oldest first.
    pub(crate) fn due(
        &self,
        ffqns: &[FunctionFqn],
        at: DateTime<Utc>,
        limit: usize,
    ) -> Vec<&TimeKey> {
        let mut due: Vec<&TimeKey> = Vec::new();
        for set in ffqns.iter().filter_map(|ffqn| self.pending.get(ffqn)) {
            let due_now = set.oldest_first().take_while(|(t, _)| t.at_or_before(at));
            due.extend(due_now.take(limit));
        }
        if ffqns.len() > 1 {
            // Each set is ordered already; merging several needs one sort.
            due.sort_unstable();
        }
        due.truncate(limit);
        due
    }

    /// Loads the rows `keys` name, as they are now, into `snapshot` (which may hold the rows
    /// of earlier keys of the same write).
    pub(crate) fn load(&self, keys: &Keys, snapshot: &mut Snapshot) {
        for execution_id in &keys.executions {
            if let Some(record) = self.records.get(execution_id) {
                snapshot.add_execution(record.row.clone());
            }
        }
        for execution_id in &keys.new_executions {
            if let Some(record) = self.records.get(execution_id) {
                if let Some(created) = record.events.first() {
                    snapshot
                        .created
                        .insert(execution_id.clone(), created.clone());
                }
                snapshot.add_execution(record.row.clone());
            }
        }
        self.load_lifecycle(keys, snapshot);
        self.schedules.load(keys, snapshot);
        for key in &keys.join_sets {
            let waits = self.waits(&key.execution_id);
            let Some(join_set) = waits.and_then(|w| w.join_sets.get(&key.join_set_id)) else {
                continue;
            };
            let consumed = usize::try_from(join_set.counters.join_next_count);
            let next = (join_set.response_times.iter()).skip(consumed.unwrap_or(usize::MAX));
            let next_times = next.take(key.next_responses).copied().collect();
            snapshot.add_join_set(key, join_set.counters, next_times);
        }
        for key in &keys.delays {
            let delays = self.waits(&key.0).map(|w| &w.delays);
            if let Some(delay) = delays.and_then(|delays| delays.get(&key.1)) {
                snapshot.add_delay(key, delay.row);
            }
        }
        for (execution_id, child_id) in &keys.child_responses {
            if (self.waits(execution_id)).is_some_and(|w| w.answered_children.contains(child_id)) {
                let pair = (execution_id.clone(), child_id.clone());
                snapshot.child_responses.insert(pair);
            }
        }
        if let Some(query) = &keys.due {
            let due = self.due(&query.ffqns, query.pending_at_or_sooner, query.limit);
            // A batch of hundreds: grow the maps once, not a doubling at a time.
            snapshot.executions.reserve(due.len());
            for record in due.into_iter().filter_map(|(_, id)| self.records.get(id)) {
                snapshot.add_due(record.row.clone());
            }
        }
    }

    /// Loads the keys of `cancel`, `complete` and `prune`: descendants, finished results,
    /// open delays and prune candidates.
    fn load_lifecycle(&self, keys: &Keys, snapshot: &mut Snapshot) {
        for root in &keys.subtrees {
            for record in self.descendants(root).filter_map(|id| self.records.get(id)) {
                snapshot.add_descendant(root, record.row.clone());
            }
        }
        let results = &mut snapshot.finished_results;
        for execution_id in &keys.finished_results {
            let record = self.records.get(execution_id);
            if let Some(result) = record.and_then(|r| r.finished_result()) {
                results.insert(execution_id.clone(), result);
            }
        }
        for execution_id in &keys.open_delays {
            let waits = self.waits(execution_id);
            let mut open: Vec<DelayId> = (waits.into_iter().flat_map(|w| &w.delays))
                .filter_map(|(delay_id, delay)| delay.open.is_some().then_some(*delay_id))
                .collect();
            open.sort_unstable();
            open.into_iter()
                .for_each(|delay_id| snapshot.add_open_delay(execution_id, delay_id));
        }
        if let Some(query) = &keys.prune {
            let before = ticks(query.finished_before);
            let after = query.after.as_ref().map(|(at, id)| key(*at, id));
            let candidates = (self.finished.after(after))
                .take_while(|(finished_at, _)| finished_at.ticks() < before)
                .take(query.limit);
            for (_, execution_id) in candidates {
                if let Some(record) = self.records.get(execution_id) {
                    snapshot.add_prune_candidate(record.row.clone());
                }
            }
        }
    }

    /// Applies a plan's changes to the records and every index. Planning validated them
    /// against this state under the same lock, so they apply whole.
    pub(crate) fn apply(&mut self, changes: &mut [ExecutionChange]) {
        // A batch's new records: the table grown once, not doubled (and rehashed) as they
        // come.
        let created = changes.iter().filter(|change| change.is_new()).count();
        self.records.reserve(created);
        // Each change is worked on in place, and what a record keeps is swapped or taken out
        // of it: a change is large, and each move of it (or of its row) is a copy.
        for change in changes {
            let execution_id = change.row.execution_id.clone();
            if change.state_changed() {
                if let Some(old) = &change.old_state {
                    self.index_state(&change.row, old, false);
                }
                self.index_state(&change.row, &change.row.state.pending_state, true);
            }
            let record = match change.created() {
                Some(created) => {
                    self.by_created
                        .insert(key(created.created_at, &execution_id));
                    if change.row.parent.is_some() {
                        self.children.insert(execution_id.clone());
                    }
                    let record = Record {
                        row: change.row.clone(),
                        events: SmallVec::new(),
                        responses: Vec::new(),
                        waits: None,
                    };
                    self.records.insert(execution_id.clone(), record)
                }
                None => {
                    let Some(record) = self.records.get_mut(&execution_id) else {
                        // The plan changes only executions its snapshot found here.
                        tracing::error!(%execution_id, "planned change of a missing record");
                        continue;
                    };
                    // What a write can change of a row: its state and its counters (the
                    // rest is the request's, fixed at the create). A row is a few hundred
                    // bytes; these are a quarter of it.
                    let (stored, row) = (&mut record.row, &mut change.row);
                    debug_assert!(stored.ffqn == row.ffqn && stored.parent == row.parent);
                    std::mem::swap(&mut stored.state, &mut row.state);
                    stored.temporary_event_count = row.temporary_event_count;
                    stored.response_count = row.response_count;
                    record
                }
            };
            // Pushed one by one: the usual one to three events, where `extend` reserves and
            // checks more than it pushes.
            for (_, event) in change.events.drain(..) {
                record.events.push(event);
            }
            let responses = std::mem::take(&mut change.responses);
            if change.join_sets.is_empty()
                && responses.is_empty()
                && change.delays_requested.is_empty()
                && change.delays_closed.is_empty()
            {
                continue;
            }
            let waits = record.waits.get_or_insert_with(Box::default);
            for (join_set_id, counters) in change.join_sets.drain(..) {
                waits.join_sets.entry(join_set_id).or_default().counters = counters;
            }
            for planned in responses {
                // Its join set's counters are in the change, which counted it.
                let response = &planned.response;
                if let Some(join_set) = waits.join_sets.get_mut(&response.event.join_set_id) {
                    join_set.response_times.push(response.created_at);
                }
                match &planned.response.event.event {
                    JoinSetResponse::DelayFinished { delay_id } => {
                        waits.delays.entry(*delay_id).or_default().row.answered = true;
                    }
                    JoinSetResponse::ChildExecutionFinished {
                        child_execution_id, ..
                    } => {
                        waits.answered_children.insert(child_execution_id.clone());
                    }
                }
                record.responses.push(planned.response);
            }
            for planned in change.delays_requested.drain(..) {
                let delay = waits.delays.entry(planned.delay_id).or_default();
                delay.row.requested = true;
                if planned.open {
                    let kind = TimerKind::Delay(Box::new((planned.delay_id, planned.join_set_id)));
                    let key = timer_key(planned.expires_at, &execution_id, kind);
                    self.timers.insert(key.clone());
                    delay.open = Some(key);
                }
            }
            for delay_id in change.delays_closed.drain(..) {
                if let Some(key) = waits.delays.get_mut(&delay_id).and_then(|d| d.open.take()) {
                    self.timers.remove(key);
                }
            }
        }
    }

    /// Deletes each execution with everything stored about it: its record (log, responses,
    /// join sets, delays) and its entry in every index.
    pub(crate) fn delete(&mut self, deleted: &[ExecutionId]) {
        for execution_id in deleted {
            let Some(record) = self.records.remove(execution_id) else {
                // The plan deletes only executions its snapshot found here.
                tracing::error!(%execution_id, "planned deletion of a missing record");
                continue;
            };
            let row = &record.row;
            self.index_state(row, &row.state.pending_state, false);
            let created_at = record.created_at();
            let is = |k: &TimeKey| is_key(k, created_at, execution_id);
            (self.by_created).remove_with(is, || key(created_at, execution_id));
            if row.parent.is_some() {
                self.children.remove(execution_id);
            }
            let delays = (record.waits.into_iter()).flat_map(|w| w.delays.into_values());
            for key in delays.filter_map(|delay| delay.open) {
                self.timers.remove(key);
            }
        }
    }

    /// The tables and indexes that still hold something of `execution_id`.
    pub(crate) fn mentions(&self, execution_id: &ExecutionId) -> Vec<&'static str> {
        let keyed = |(_, id): &TimeKey| id == execution_id;
        let tables = [
            ("record", self.records.contains_key(execution_id)),
            ("by_created", self.by_created.newest_first().any(keyed)),
            (
                "pending",
                (self.pending.iter()).any(|(_, set)| set.newest_first().any(keyed)),
            ),
            (
                "timers",
                (self.timers.newest_first()).any(|(_, id, _)| id == execution_id),
            ),
            ("children", self.children.contains(execution_id)),
            ("finished", self.finished.newest_first().any(keyed)),
        ];
        tables
            .into_iter()
            .filter_map(|(name, holds)| holds.then_some(name))
            .collect()
    }

    /// Adds the execution to the index of its `state`, or removes it from it (`add` false):
    /// the pending set of its function, the timers, or the finished top-level executions.
    fn index_state(&mut self, row: &ExecutionRow, state: &PendingState, add: bool) {
        let (ffqn, execution_id) = (&row.ffqn, &row.execution_id);
        match state {
            PendingState::PendingAt { scheduled_at } => {
                let at = *scheduled_at;
                if add {
                    self.pending.insert(ffqn, key(at, execution_id));
                } else {
                    let is = |k: &TimeKey| is_key(k, at, execution_id);
                    self.pending.remove(ffqn, is, || key(at, execution_id));
                }
            }
            PendingState::Locked {
                lock_expires_at, ..
            } => {
                let (at, kind) = (*lock_expires_at, TimerKind::Lock);
                if add {
                    self.timers.insert(timer_key(at, execution_id, kind));
                } else {
                    let is = |(lead, id, kind): &TimerKey| {
                        matches!(kind, TimerKind::Lock) && id == execution_id && lead.is(at)
                    };
                    (self.timers).remove_with(is, || timer_key(at, execution_id, kind));
                }
            }
            PendingState::Finished { finished_at, .. } if row.parent.is_none() => {
                let at = *finished_at;
                if add {
                    self.finished.insert(key(at, execution_id));
                } else {
                    let is = |k: &TimeKey| is_key(k, at, execution_id);
                    self.finished.remove_with(is, || key(at, execution_id));
                }
            }
            PendingState::BlockedByJoinSet { .. } | PendingState::Finished { .. } => {}
        }
    }
}
