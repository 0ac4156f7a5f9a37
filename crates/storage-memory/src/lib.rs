//! The in-memory storage backend of Stele: every storage trait of [`concepts`] over one
//! mutex-protected state, for tests, examples and single-process use.
//!
//! Every rule of a write is [`concepts::kernel`]'s, whose [`Backend`](concepts::kernel::Backend)
//! the store is; `docs/ARCHITECTURE.md` (section `storage-memory`) describes how it loads,
//! applies and wakes, and its records and indexes.
//!
//! ```
//! use concepts::{CreateOutcome, CreateRequest, DbClient, ExecutionId, PendingState};
//! use storage_memory::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let at = chrono::DateTime::UNIX_EPOCH;
//! let execution_id = ExecutionId::generate_at(at);
//! let req = CreateRequest {
//!     created_at: at,
//!     execution_id: execution_id.clone(),
//!     ffqn: "ns:pkg/ifc.fn".parse().unwrap(),
//!     params: serde_json::json!([1]).into(),
//!     parent: None,
//!     scheduled_at: at,
//!     retry_exp_backoff: std::time::Duration::from_secs(1),
//!     max_retries: 3,
//!     component_id: "activity:example".parse().unwrap(),
//!     metadata: Default::default(),
//!     scheduled_by: None,
//! };
//! assert_eq!(store.create(req.clone()).await.unwrap(), CreateOutcome::Created);
//! // A repeated submit writes nothing and says so.
//! let pending_state = PendingState::PendingAt { scheduled_at: at };
//! let again = store.create(req).await.unwrap();
//! assert_eq!(again, CreateOutcome::AlreadyExisted { pending_state: pending_state.clone() });
//! assert_eq!(store.get(&execution_id).await.unwrap().pending_state, pending_state);
//! # });
//! ```

mod pending;
mod records;
mod schedules;
mod state;
#[cfg(test)]
mod tests;
mod time_index;

use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredDelay,
    FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter, ListExecutionsFilter,
    LockPendingRequest, LockedExecution, Pagination, Version,
    kernel::{self, ExecutionRow, WaiterHub, Write},
    schedule::{ScheduleName, ScheduleRow, Tick},
};
use state::{At, Record, State, TimerKind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The largest snapshot a store keeps between writes (entries of its largest table), and the
/// largest list of changes: a write of a few executions fits; a batch's is dropped, since
/// clearing a table walks all its room.
const SCRATCH_CAPACITY: usize = 16;

/// The in-memory store. Clones share the same data.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    hub: Arc<WaiterHub>,
}

impl MemoryStore {
    /// A new, empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The names of the store's tables and indexes (`record`, `by_created`, `pending`,
    /// `timers`, `children`, `finished`) that still hold something of `execution_id`: none
    /// once it was pruned. For tests that check that a deletion left nothing behind.
    #[must_use]
    pub fn mentions(&self, execution_id: &ExecutionId) -> Vec<&'static str> {
        self.lock_state().mentions(execution_id)
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // Planning writes nothing and applying a plan cannot fail, so no panic leaves a
        // half-applied write behind a poisoned lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, unless the store is closed.
    fn open_state(&self) -> Result<MutexGuard<'_, State>, DbError> {
        let state = self.lock_state();
        if state.closed {
            return Err(DbError::Closed);
        }
        Ok(state)
    }

    /// Runs `read` on the record of `execution_id`.
    fn read<T>(
        &self,
        execution_id: &ExecutionId,
        read: impl FnOnce(&Record) -> T,
    ) -> Result<T, DbError> {
        Ok(read(self.open_state()?.record(execution_id)?))
    }

    /// Loads, plans and applies a write under the lock, then wakes whom it concerns.
    fn run<W: Write>(&self, write: W) -> Result<W::Reply, DbError> {
        // Borrowed where they were answered (and the plan below too): `?` would move them
        // out, a copy of a few hundred bytes.
        let keys = write.keys();
        let keys = match keys {
            Ok(ref keys) => keys,
            Err(err) => return Err(err),
        };
        let mut state = self.open_state()?;
        let mut snapshot = state.scratch.take().unwrap_or_default();
        state.load(keys, &mut snapshot);
        if let Some(more) = write.follow_up_keys(&snapshot) {
            state.load(&more, &mut snapshot);
        }
        let changes = std::mem::take(&mut state.scratch_changes);
        let mut planned = kernel::plan_into(&snapshot, write, changes);
        if snapshot.capacity() <= SCRATCH_CAPACITY {
            snapshot.clear();
            state.scratch = Some(snapshot);
        }
        let (plan, reply) = match planned {
            Ok((ref mut plan, reply)) => (plan, reply),
            Err(err) => return Err(err),
        };
        state.apply(&mut plan.changes);
        // Asked here: most writes delete nothing and touch no schedule, and each is a call.
        if !plan.deleted.is_empty() {
            state.delete(&plan.deleted);
        }
        if !plan.schedules.is_empty() {
            state.schedules.apply(std::mem::take(&mut plan.schedules));
        }
        if plan.changes.capacity() <= SCRATCH_CAPACITY {
            plan.changes.clear();
            state.scratch_changes = std::mem::take(&mut plan.changes);
        }
        drop(state);
        self.hub.deliver(&plan.wakeups);
        Ok(reply)
    }
}

impl kernel::Backend for MemoryStore {
    async fn write<W: Write>(&self, write: W) -> Result<W::Reply, DbError> {
        self.run(write)
    }

    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        let grants = self.run(req)?;
        // The histories are read after the write, as on the SQL backends: what the kernel
        // granted is cut at its bounds, whatever was appended since.
        let state = self.lock_state();
        // Sized once: collecting a `Result` does not know the length and would grow the list
        // of large values by doubling, copying it at each step.
        let mut locked = Vec::with_capacity(grants.len());
        for grant in &grants {
            let record = state.record(&grant.row.execution_id)?;
            let (events, responses) = (&record.events, &record.responses);
            kernel::hand_over_cloned_into(grant, events, responses, &mut locked)?;
        }
        Ok(locked)
    }

    fn hub(&self) -> &WaiterHub {
        &self.hub
    }

    async fn responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        self.read(execution_id, |record| {
            (record.responses.get(start_idx..).unwrap_or_default()).to_vec()
        })
    }

    async fn finished_result(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<FinishedExecutionResult>, DbError> {
        self.read(execution_id, Record::finished_result)
    }

    async fn expired(
        &self,
        at: DateTime<Utc>,
    ) -> Result<(Vec<ExecutionRow>, Vec<ExpiredDelay>), DbError> {
        let state = self.open_state()?;
        let (mut locked, mut delays) = (Vec::new(), Vec::new());
        let expired = (state.timers.oldest_first()).take_while(|(t, _, _)| t.at_or_before(at));
        for (expires_at, execution_id, kind) in expired {
            match kind {
                TimerKind::Lock => locked.push(state.record(execution_id)?.row.clone()),
                TimerKind::Delay(delay) => delays.push(ExpiredDelay {
                    execution_id: execution_id.clone(),
                    join_set_id: delay.1.clone(),
                    delay_id: delay.0,
                    expires_at: expires_at.time(),
                }),
            }
        }
        Ok((locked, delays))
    }

    async fn due_times(
        &self,
        ffqns: &[FunctionFqn],
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DateTime<Utc>>, DbError> {
        let state = self.open_state()?;
        Ok((state.due(ffqns, at, limit).into_iter())
            .map(|(t, _)| t.time())
            .collect())
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        self.read(execution_id, |record| ExecutionLog {
            execution_id: execution_id.clone(),
            events: record.events.to_vec(),
            responses: record.responses.clone(),
            next_version: record.row.state.next_version,
            pending_state: record.row.state.pending_state.clone(),
        })
    }

    async fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        self.read(execution_id, |record| {
            let from = usize::try_from(from.0).unwrap_or(usize::MAX);
            let events = record.events.get(from..).unwrap_or_default();
            events.iter().take(limit).cloned().collect()
        })
    }

    async fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> Result<Vec<(ExecutionId, ExecutionEvent)>, DbError> {
        let state = self.open_state()?;
        let created = |id: &ExecutionId| {
            let event = state.record(id).ok()?.events.first()?.clone();
            Some((id.clone(), event))
        };
        Ok(execution_ids.iter().filter_map(created).collect())
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        let state = self.open_state()?;
        let cursor = (pagination.cursor.as_ref()).map(|(at, id)| (At::new(*at, id), id.clone()));
        // The children of a parent from the index of children, the executions pending from a
        // time from the pending indexes (what a node's start looks for, the parked ones, are
        // a few among many), everything else newest first from the creation index.
        let keys: Box<dyn Iterator<Item = (At, ExecutionId)>> =
            match (&filter.parent, filter.pending_from) {
                (Some(parent), _) => {
                    let children = (state.descendants(parent))
                        .filter(|id| id.split_to_parent().is_some_and(|(of, _)| of == *parent));
                    Box::new(state.newest_created_first(children))
                }
                (None, Some(from)) => {
                    let pending = state.pending_from(filter.ffqn.as_ref(), from);
                    Box::new(state.newest_created_first(pending))
                }
                (None, None) => Box::new(state.by_created.newest_first().cloned()),
            };
        let mut out = Vec::new();
        let below_cursor = keys.skip_while(|key| cursor.as_ref().is_some_and(|c| key >= c));
        for (created_at, execution_id) in below_cursor {
            if out.len() >= pagination.length {
                break;
            }
            let record = state.record(&execution_id)?;
            let (row, created_at) = (&record.row, created_at.time());
            let (ffqn, pending_state) = (&row.ffqn, &row.state.pending_state);
            if filter.matches(&execution_id, ffqn, pending_state, created_at) {
                out.push(ExecutionSummary {
                    ffqn: ffqn.clone(),
                    created_at,
                    scheduled_at: record.scheduled_at(),
                    pending_state: pending_state.clone(),
                    next_version: row.state.next_version,
                    execution_id,
                });
            }
        }
        Ok(out)
    }

    async fn list_schedules(
        &self,
        from: Option<&ScheduleName>,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, DbError> {
        Ok(self.open_state()?.schedules.list(from, limit))
    }

    async fn schedule_ticks(
        &self,
        name: &ScheduleName,
        limit: usize,
    ) -> Result<Vec<Tick>, DbError> {
        Ok(self.open_state()?.schedules.ticks(name, limit))
    }

    async fn close(&self) {
        self.lock_state().closed = true;
        self.hub.close();
    }
}
