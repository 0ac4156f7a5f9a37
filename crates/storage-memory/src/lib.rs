//! The in-memory storage backend of Stele: every storage trait of [`concepts`] over one
//! mutex-protected state, for tests, examples and single-process use.
//!
//! # Design
//!
//! **One lock, short sections.** All data lives in one `State` behind a `std::sync::Mutex`.
//! The lock is held only for short sections that never await, so it is cheap, and every
//! operation sees and produces a consistent snapshot.
//!
//! **Atomic writes.** Every write goes through a staging transaction: the indexes of the
//! executions it touches are copied, each step (create, append, response) is validated and
//! applied to the copies with [`concepts::ExecutionState::validate_append`],
//! [`concepts::ExecutionState::after_append`] and [`concepts::ExecutionState::after_response`],
//! and the events are collected beside them. Only when every step succeeded are the logs
//! extended and the indexes replaced; a step that fails drops the transaction, so a failing
//! batch writes nothing. The pending state is never recomputed from the log on a write: it is
//! carried forward by those transitions, and the differential test checks it against
//! [`concepts::derive_pending_state`].
//!
//! **Indexes.**
//! - per execution: next version, pending state, temporary event count, `JoinNext` count and
//!   response arrival times per join set, answered delays and children (duplicate responses are
//!   refused), open delays;
//! - pending: per function, a `BTreeSet` of `(scheduled_at, execution_id)` of every `PendingAt`
//!   execution, so `lock_pending` reads the front of a few ordered sets instead of scanning,
//!   and ties are broken by execution id deterministically. Locked executions are not in it,
//!   so an expired lease is never locked again before the timers watcher resolves it;
//! - timers: a `BTreeSet` of `(expires_at, execution_id, Lock | Delay(delay_id))`: a lease and
//!   any number of delays of one execution at the same instant never collide, and
//!   `get_expired_timers(at)` is a range scan up to `at` inclusive. A delay is open from its
//!   `DelayRequest` until a `DelayFinished` response for it is stored (whether the execution
//!   is finished or not); a delay answered before it was requested never opens;
//! - `(created_at, execution_id)` of every execution, for `list_executions` (newest first).
//!
//! **Notifications.** A waiter checks its condition and registers a `oneshot` sender under the
//! same lock, so a write that commits after the check necessarily finds the registration: no
//! wake-up is lost. A write fires (and removes) the senders of the waiters it concerns right
//! after it applied its changes, still under the lock: a new `PendingAt` state of a function at
//! or before a `wait_for_pending` waiter's time, a new response for `subscribe_to_next_responses`,
//! a `Finished` for `wait_for_finished_result`. A waiter that leaves (woken, timed out, or its
//! future dropped) removes its entry through a drop guard, and an execution's entry is removed
//! with its last waiter, so no registry grows without bound. `close` drops every sender, which
//! releases every waiter.
//!
//! [`MemoryStore::waiter_counts`] exposes the size of the registries, for tests.
//!
//! ```
//! use concepts::{CreateRequest, DbClient, ExecutionId, PendingState, Version};
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
//! assert_eq!(store.create(req).await.unwrap(), Version(1));
//! let log = store.get(&execution_id).await.unwrap();
//! assert_eq!(log.pending_state, PendingState::PendingAt { scheduled_at: at });
//! # });
//! ```
//!
//! # Choices where the contract leaves room
//!
//! - `lock_pending` refuses a lease that expires at or before `now` with
//!   `InvalidExpiryDate` even when nothing is due; it selects executions due at
//!   `pending_at_or_sooner` and validates each lock with the locking rules at `now`; if
//!   any is refused, the call fails and locks nothing.
//! - `append_batch` with `children`: every `CreateRequest` must be announced by an event of
//!   the batch: a child (with `parent = Some((execution_id, J))`) by a
//!   `JoinSetRequest { join_set_id: J, request: ChildExecutionRequest { child_execution_id } }`,
//!   a top-level execution (`parent = None`) by a `Schedule { execution_id }`. Otherwise the
//!   request is `InvalidRequest` and nothing is written. Events with no request (a child created
//!   elsewhere) are allowed.
//! - A second `DelayRequest` with a delay id the execution already requested is
//!   `InvalidRequest`.

mod state;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, CreateRequest, DbClient, DbConnection, DbError, DbExecutor, DbTimers,
    DbWorkflow, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog, ExecutionSummary,
    ExpiredDelay, ExpiredLock, ExpiredTimer, FinishedExecutionResult, FunctionFqn,
    JoinSetResponseEvent, JoinSetResponseEventOuter, ListExecutionsFilter, LockPendingRequest,
    Locked, LockedExecution, OutcomeWrite, Pagination, RunId, ValidationError, Version,
};
use state::{PendingWaiter, State, TimerKind, Tx};
use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};
use tokio::sync::oneshot;

/// The in-memory store. Clones share the same data.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

impl MemoryStore {
    /// A new, empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write (writes are staged
        // first), so the data behind a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the open state.
    fn with_state<R>(
        &self,
        f: impl FnOnce(&mut State) -> Result<R, DbError>,
    ) -> Result<R, DbError> {
        let mut state = self.lock_state();
        if state.closed {
            return Err(DbError::Closed);
        }
        f(&mut state)
    }

    /// Runs a write: `f` stages it in a transaction; it is applied only if `f` succeeds.
    fn write<R>(&self, f: impl FnOnce(&mut Tx<'_>) -> Result<R, DbError>) -> Result<R, DbError> {
        self.with_state(|state| {
            let mut tx = Tx::new(state);
            let result = f(&mut tx)?;
            let staged = tx.into_staged();
            state.apply(staged);
            Ok(result)
        })
    }

    /// The number of registered waiters: `(wait_for_pending, subscribe_to_next_responses
    /// entries, wait_for_finished_result entries)`, counting individual waiters.
    #[must_use]
    pub fn waiter_counts(&self) -> (usize, usize, usize) {
        let state = self.lock_state();
        (
            state.pending_waiters.len(),
            state
                .response_waiters
                .values()
                .map(std::collections::BTreeMap::len)
                .sum(),
            state
                .finished_waiters
                .values()
                .map(std::collections::BTreeMap::len)
                .sum(),
        )
    }
}

/// Which registration a [`WaiterGuard`] removes.
enum WaiterKey {
    Pending(u64),
    Responses(ExecutionId, u64),
    Finished(ExecutionId, u64),
}

/// Removes a waiter's registration when the waiter leaves, however it leaves.
struct WaiterGuard<'a> {
    store: &'a MemoryStore,
    key: WaiterKey,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.store.lock_state();
        match &self.key {
            WaiterKey::Pending(id) => {
                state.pending_waiters.remove(id);
            }
            WaiterKey::Responses(execution_id, id) => {
                State::unregister(&mut state.response_waiters, *id, execution_id);
            }
            WaiterKey::Finished(execution_id, id) => {
                State::unregister(&mut state.finished_waiters, *id, execution_id);
            }
        }
    }
}

fn stage_batch(
    tx: &mut Tx<'_>,
    execution_id: &ExecutionId,
    mut version: Version,
    now: DateTime<Utc>,
    batch: Vec<ExecutionEventInner>,
) -> Result<Version, DbError> {
    for event in batch {
        version = tx.append(execution_id, version, now, event)?;
    }
    Ok(version)
}

#[async_trait]
impl DbExecutor for MemoryStore {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        let LockPendingRequest {
            batch_size,
            pending_at_or_sooner,
            ffqns,
            now,
            component_id,
            executor_id,
            lock_expires_at,
        } = req;
        self.with_state(|state| {
            if lock_expires_at <= now {
                return Err(ValidationError::InvalidExpiryDate {
                    lock_expires_at,
                    now,
                }
                .into());
            }
            let due = state.due(&ffqns, pending_at_or_sooner, batch_size);
            if due.is_empty() {
                return Ok(Vec::new());
            }
            let mut tx = Tx::new(state);
            let mut locked = Vec::with_capacity(due.len());
            for (_, execution_id) in due {
                let version = tx.next_version(&execution_id)?;
                let locked_event = Locked {
                    component_id: component_id.clone(),
                    executor_id,
                    run_id: RunId::generate_at(now),
                    lock_expires_at,
                };
                let next_version = tx.append(
                    &execution_id,
                    version,
                    now,
                    ExecutionEventInner::Locked(locked_event.clone()),
                )?;
                locked.push((execution_id, next_version, locked_event));
            }
            let staged = tx.into_staged();
            state.apply(staged);
            locked
                .into_iter()
                .map(|(execution_id, next_version, locked_event)| {
                    let record = state.record(&execution_id)?;
                    let created = &record.created;
                    Ok(LockedExecution {
                        next_version,
                        metadata: created.metadata.clone(),
                        locked_event,
                        ffqn: created.ffqn.clone(),
                        params: created.params.clone(),
                        event_history: record.event_history(),
                        responses: record.responses.clone(),
                        scheduled_at: created.scheduled_at,
                        retry_exp_backoff: created.retry_exp_backoff,
                        max_retries: created.max_retries,
                        parent: created.parent.clone(),
                        temporary_event_count: record.index.temporary_event_count,
                        execution_id,
                    })
                })
                .collect()
        })
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        let parent_response = write.parent_response();
        self.write(|tx| {
            let next_version =
                tx.append(&write.execution_id, write.version, write.now, write.event)?;
            if let Some((parent_id, response)) = parent_response {
                tx.append_response(response.created_at, &parent_id, response.event)?;
            }
            Ok(next_version)
        })
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        let registered = {
            let mut state = self.lock_state();
            if state.closed || state.any_due(&ffqns, pending_at_or_sooner) {
                None
            } else {
                let id = state.waiter_id();
                let (tx, rx) = oneshot::channel();
                state.pending_waiters.insert(
                    id,
                    PendingWaiter {
                        ffqns,
                        pending_at_or_sooner,
                        since: tokio::time::Instant::now(),
                        tx,
                    },
                );
                Some((id, rx))
            }
        };
        if let Some((id, rx)) = registered {
            let _guard = WaiterGuard {
                store: self,
                key: WaiterKey::Pending(id),
            };
            // Woken, closed (sender dropped) or timed out: all mean "look again".
            let _ = tokio::time::timeout(max_wait, rx).await;
        }
    }
}

#[async_trait]
impl DbWorkflow for MemoryStore {
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError> {
        concepts::kernel::validate_append_batch(&req)?;
        let AppendBatchRequest {
            execution_id,
            version,
            now,
            events,
            children,
        } = req;
        self.write(|tx| {
            let next_version = stage_batch(tx, &execution_id, version, now, events)?;
            for child in children {
                tx.create(child)?;
            }
            Ok(next_version)
        })
    }

    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        loop {
            let check = self.with_state(|state| {
                let record = state.record(execution_id)?;
                if record.responses.len() > start_idx {
                    return Ok(Check::Ready(record.responses[start_idx..].to_vec()));
                }
                let id = state.waiter_id();
                Ok(Check::Wait(
                    id,
                    State::register(&mut state.response_waiters, id, execution_id),
                ))
            })?;
            match check {
                Check::Ready(responses) => return Ok(responses),
                Check::Wait(id, rx) => {
                    let _guard = WaiterGuard {
                        store: self,
                        key: WaiterKey::Responses(execution_id.clone(), id),
                    };
                    // Woken or closed (sender dropped): look again.
                    let _ = rx.await;
                }
            }
        }
    }
}

/// The outcome of a waiter's check under the lock.
enum Check<T> {
    /// What the waiter waits for is there.
    Ready(T),
    /// Not yet: the registration to await.
    Wait(u64, oneshot::Receiver<()>),
}

#[async_trait]
impl DbTimers for MemoryStore {
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        self.with_state(|state| {
            state
                .timers
                .iter()
                .take_while(|(expires_at, _, _)| *expires_at <= at)
                .map(|(expires_at, execution_id, kind)| {
                    let record = state.record(execution_id)?;
                    Ok(match kind {
                        TimerKind::Lock => ExpiredTimer::Lock(ExpiredLock {
                            execution_id: execution_id.clone(),
                            next_version: record.index.state.next_version,
                            temporary_event_count: record.index.temporary_event_count,
                            max_retries: record.created.max_retries,
                            retry_exp_backoff: record.created.retry_exp_backoff,
                            parent: record.created.parent.clone(),
                            lock_expires_at: *expires_at,
                        }),
                        TimerKind::Delay(delay_id) => {
                            let join_set_id = record
                                .index
                                .open_delays
                                .get(delay_id)
                                .map(|(join_set_id, _)| join_set_id.clone())
                                .ok_or_else(|| {
                                    DbError::NotFound(format!(
                                        "open delay {delay_id} of execution {execution_id}"
                                    ))
                                })?;
                            ExpiredTimer::Delay(ExpiredDelay {
                                execution_id: execution_id.clone(),
                                join_set_id,
                                delay_id: *delay_id,
                                expires_at: *expires_at,
                            })
                        }
                    })
                })
                .collect()
        })
    }

    async fn append_response(
        &self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        self.write(|tx| tx.append_response(now, execution_id, response))
    }
}

#[async_trait]
impl DbClient for MemoryStore {
    async fn create(&self, req: CreateRequest) -> Result<Version, DbError> {
        self.write(|tx| tx.create(req))
    }

    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        if reqs.is_empty() {
            return Err(ValidationError::EmptyBatch("create_batch").into());
        }
        self.write(|tx| {
            for req in reqs {
                tx.create(req)?;
            }
            Ok(())
        })
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        self.with_state(|state| {
            let record = state.record(execution_id)?;
            Ok(ExecutionLog {
                execution_id: execution_id.clone(),
                events: record.events.clone(),
                responses: record.responses.clone(),
                next_version: record.index.state.next_version,
                pending_state: record.index.state.pending_state.clone(),
            })
        })
    }

    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        self.with_state(|state| {
            let record = state.record(execution_id)?;
            usize::try_from(version.0)
                .ok()
                .and_then(|idx| record.events.get(idx))
                .cloned()
                .ok_or_else(|| {
                    DbError::NotFound(format!("event at version {version} of {execution_id}"))
                })
        })
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        self.with_state(|state| {
            let rows: Box<dyn Iterator<Item = &(DateTime<Utc>, ExecutionId)>> =
                match &pagination.cursor {
                    Some(cursor) => Box::new(state.by_created.range(..cursor.clone()).rev()),
                    None => Box::new(state.by_created.iter().rev()),
                };
            let mut out = Vec::new();
            for (created_at, execution_id) in rows {
                if out.len() >= pagination.length {
                    break;
                }
                let record = state.record(execution_id)?;
                let pending_state = &record.index.state.pending_state;
                if filter
                    .ffqn
                    .as_ref()
                    .is_some_and(|ffqn| *ffqn != record.created.ffqn)
                    || filter
                        .state
                        .is_some_and(|kind| kind != pending_state.kind())
                    || (filter.top_level_only && !execution_id.is_top_level())
                {
                    continue;
                }
                out.push(ExecutionSummary {
                    execution_id: execution_id.clone(),
                    ffqn: record.created.ffqn.clone(),
                    created_at: *created_at,
                    scheduled_at: record.created.scheduled_at,
                    pending_state: pending_state.clone(),
                    next_version: record.index.state.next_version,
                });
            }
            Ok(out)
        })
    }

    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        let wait = async {
            loop {
                let check = self.with_state(|state| {
                    let record = state.record(execution_id)?;
                    if let Some(result) = record.finished_result() {
                        return Ok(Check::Ready(result));
                    }
                    let id = state.waiter_id();
                    Ok(Check::Wait(
                        id,
                        State::register(&mut state.finished_waiters, id, execution_id),
                    ))
                })?;
                match check {
                    Check::Ready(result) => return Ok(result),
                    Check::Wait(id, rx) => {
                        let _guard = WaiterGuard {
                            store: self,
                            key: WaiterKey::Finished(execution_id.clone(), id),
                        };
                        // Woken or closed (sender dropped): look again.
                        let _ = rx.await;
                    }
                }
            }
        };
        match timeout {
            Some(timeout) => tokio::time::timeout(timeout, wait)
                .await
                .unwrap_or(Err(DbError::Timeout)),
            None => wait.await,
        }
    }
}

#[async_trait]
impl DbConnection for MemoryStore {
    async fn close(&self) {
        self.lock_state().close();
    }
}
