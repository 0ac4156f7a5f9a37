//! The executors of one process on one store, by the functions they run: where an execution
//! that a workflow's write creates, or that a client of the process submits
//! ([`LocalExecutors::create`]), is handed to run at once. A workflow about to create a
//! child asks [`LocalExecutors::reserve`] for a free permit of an executor of the child's
//! function; with one, its write creates the child already locked under that executor's lease
//! ([`concepts::Lease`]), and once the write committed [`Reservation::start`] runs the child in
//! that executor, as if its `lock_pending` had returned it, and nobody waits for the executor to
//! be woken, lock and hand the child over. A child the parent's run waits for alone is started
//! with an [`Answer`] ([`Reservation::start_answering`]): its run hands its `Finished` to the
//! parent's run, which records it with its next write, so that a step of a workflow calling an
//! activity commits once (the parent's write, with the previous child's answer and the next
//! child created locked) instead of twice.
//!
//! The lease is one like any other: the `Locked` event, with the executor's id and a fresh run
//! id, is in the child's log from its first commit; its executor's task limiter holds a permit
//! for it from before the write until its outcome is written (the reservation holds it, and
//! gives it back if the write fails); and if the process dies before the outcome, the timers
//! watcher times the lease out like any other. Without a registered executor of the function,
//! or without a free permit, nothing is reserved, and the child is created due and locked by
//! whichever executor's `lock_pending` finds it first.

use crate::exec_task::Run;
use chrono::{DateTime, Utc};
use concepts::{
    ComponentId, CreateOutcome, CreateRequest, DbClient, DbError, ExecutionEventInner, ExecutorId,
    FunctionFqn, Locked, OutcomeWrite, RunId, Version, add_saturating,
};
use std::{
    fmt,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The executors of one process that write to one store, which workflows of that process
/// hand the executions they create to (see the module docs). Cheap to clone: clones share the
/// registry. A node makes one and gives it to each of its executors
/// ([`ExecTask::with_local_executors`](crate::ExecTask::with_local_executors)), which register
/// while their loops run and hand it to each run's worker ([`crate::WorkerContext`]).
#[derive(Clone, Default)]
pub struct LocalExecutors {
    registry: Arc<Registry>,
}

#[derive(Default)]
struct Registry {
    /// The registered executors, with the ids that unregister them.
    entries: RwLock<Vec<(u64, Arc<Entry>)>>,
    next_id: std::sync::atomic::AtomicU64,
}

/// One registered executor.
pub(crate) struct Entry {
    /// The functions it runs.
    pub(crate) ffqns: Arc<[FunctionFqn]>,
    /// Its task limiter: a reservation holds one of its permits.
    pub(crate) limiter: Arc<Semaphore>,
    /// Written into the leases it is given.
    pub(crate) executor_id: ExecutorId,
    pub(crate) component_id: ComponentId,
    /// How long its leases last.
    pub(crate) lock_expiry: Duration,
    /// Runs an execution created under one of its leases.
    pub(crate) starter: Box<dyn Start>,
}

/// How a registered executor runs an execution created under its lease: makes its run (the
/// worker, then the outcome write, holding the permit) and spawns it, or hands it to whoever
/// polls the executor's runs. A run given an [`Answer`] hands its `Finished` there instead of
/// writing it.
pub(crate) trait Start: Send + Sync {
    fn start(
        &self,
        created: CreateRequest,
        locked: Locked,
        permit: OwnedSemaphorePermit,
        answer: Option<Answer>,
    );
}

/// Where the run of a child started by its parent's run ([`Reservation::start_answering`])
/// hands its `Finished` instead of writing it. The parent's run takes it as the child's
/// response at once and records it with its next write
/// ([`AppendBatchRequest::answers`](concepts::AppendBatchRequest::answers)): a step of a
/// workflow calling an activity commits once. The child's lease stays in its log until then;
/// if the parent's process dies first, the watcher times it out like any other, and the child
/// runs again. When the parent's run no longer listens (the receiver is gone), the child's
/// run writes its outcome itself; a receiver that holds an outcome it will not record must
/// write it ([`concepts::DbExecutor::append_outcome`]).
pub type Answer = tokio::sync::oneshot::Sender<OutcomeWrite>;

impl LocalExecutors {
    /// A registry with no executor.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A lease for a new execution of `ffqn` created at `now`, from a registered executor of
    /// that function with a free permit of its task limiter, taken now: the `Locked` event to
    /// create the execution with (this executor's id and component, a fresh run id, the
    /// executor's lease duration from `now`). `None` when no registered executor runs `ffqn`
    /// (or it is a stub, which no executor runs) or none has a free permit: the execution is
    /// then created due, as without a registry.
    ///
    /// The permit is held by the reservation: [`Reservation::start`] hands it to the run once
    /// the write that created the execution committed, and dropping the reservation (the write
    /// failed) gives it back.
    #[must_use]
    pub fn reserve(&self, ffqn: &FunctionFqn, now: DateTime<Utc>) -> Option<Reservation> {
        if ffqn.is_stub() {
            return None;
        }
        let entries = (self.registry.entries.read()).unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .filter(|(_, entry)| !entry.lock_expiry.is_zero() && entry.ffqns.contains(ffqn))
            .find_map(|(_, entry)| {
                let permit = entry.limiter.clone().try_acquire_owned().ok()?;
                let locked = Locked {
                    component_id: entry.component_id.clone(),
                    executor_id: entry.executor_id,
                    run_id: RunId::generate_at(now),
                    lock_expires_at: add_saturating(now, entry.lock_expiry),
                };
                Some(Reservation {
                    entry: Arc::clone(entry),
                    permit,
                    locked,
                })
            })
    }

    /// Creates the top-level execution `request` (`DbClient::create`, idempotent); when it is
    /// due at its `created_at` and a registered executor runs its function with a permit
    /// free, already locked under that executor's lease (`DbClient::create_locked`), which
    /// runs it at once: one commit and one wake-up fewer than its `lock_pending`. Answers the
    /// store's outcome and the lease the execution was created under, if any; a repeat is
    /// answered as by `create`, and the permit given back. If the write failed with an error
    /// that may hide its commit (a lost reply), the execution runs at once all the same when its
    /// log holds the lease ([`start_if_written`]).
    ///
    /// # Errors
    /// The store's.
    pub async fn create(
        &self,
        db: &dyn DbClient,
        request: CreateRequest,
    ) -> Result<(CreateOutcome, Option<Locked>), DbError> {
        let due_now = request.scheduled_at <= request.created_at;
        let reserved = due_now
            .then(|| self.reserve(&request.ffqn, request.created_at))
            .flatten();
        let Some(reservation) = reserved else {
            return Ok((db.create(request).await?, None));
        };
        let locked = reservation.locked.clone();
        let outcome = match db.create_locked(request.clone(), locked.clone()).await {
            Ok(outcome) => outcome,
            Err(err) => {
                if err.is_retriable() {
                    start_if_written(db, vec![(reservation, request)]).await;
                }
                return Err(err);
            }
        };
        if !matches!(outcome, CreateOutcome::Created) {
            return Ok((outcome, None));
        }
        reservation.start(request);
        Ok((outcome, Some(locked)))
    }

    /// Registers `entry` until the returned guard is dropped.
    pub(crate) fn register(&self, entry: Entry) -> Registered {
        let id = (self.registry.next_id).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (self.registry.entries.write())
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, Arc::new(entry)));
        Registered {
            registry: Arc::clone(&self.registry),
            id,
        }
    }

    /// How many executors are registered.
    #[must_use]
    pub fn len(&self) -> usize {
        (self.registry.entries.read())
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when no executor is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for LocalExecutors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalExecutors")
            .field("registered", &self.len())
            .finish()
    }
}

/// An executor's registration; dropping it unregisters the executor.
pub(crate) struct Registered {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        (self.registry.entries.write())
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(id, _)| *id != self.id);
    }
}

/// After a write that created `leased` executions under their reservations' leases failed
/// with an error that may hide its commit (a lost reply): starts each whose log holds its lease
/// at version 1, since the write did commit, so that it runs now instead of once its lease
/// expired. The other reservations are dropped, their permits given back.
pub async fn start_if_written(db: &dyn DbClient, leased: Vec<(Reservation, CreateRequest)>) {
    for (reservation, created) in leased {
        let lease = (db.get_execution_event(&created.execution_id, Version(1))).await;
        let written = matches!(
            lease.map(|event| event.event),
            Ok(ExecutionEventInner::Locked(locked)) if locked == reservation.locked
        );
        if written {
            tracing::debug!(
                execution_id = %created.execution_id,
                "the write that failed had committed: the execution runs under its lease"
            );
            reservation.start(created);
        }
    }
}

/// A permit of a local executor and the lease it gives a new execution
/// ([`LocalExecutors::reserve`]).
pub struct Reservation {
    entry: Arc<Entry>,
    permit: OwnedSemaphorePermit,
    locked: Locked,
}

impl Reservation {
    /// The `Locked` event to create the execution with ([`concepts::Lease::locked`]).
    #[must_use]
    pub fn locked(&self) -> &Locked {
        &self.locked
    }

    /// Runs the execution `created` (the request exactly as the write created it, under this
    /// reservation's lease) in the reserved executor, at once: call it only after the write
    /// committed. The run holds the reserved permit until its outcome is written, as a run of
    /// the executor's own `lock_pending` does.
    pub fn start(self, created: CreateRequest) {
        self.entry
            .starter
            .start(created, self.locked, self.permit, None);
    }

    /// [`Reservation::start`] for a child of the caller's run: the child's run hands its
    /// `Finished` to `answer` instead of writing it, while the receiver listens (see
    /// [`Answer`]).
    pub fn start_answering(self, created: CreateRequest, answer: Answer) {
        (self.entry.starter).start(created, self.locked, self.permit, Some(answer));
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("locked", &self.locked)
            .finish_non_exhaustive()
    }
}

/// What a registered executor does with a run it is handed: spawn it, or pass it to the one
/// who polls its runs.
pub(crate) type RunSink = Box<dyn Fn(Run) + Send + Sync>;
