//! Concurrent writes that share transactions, for a backend that runs several transactions at
//! once (PostgreSQL, one per pooled connection): [`Groups`] runs a write on its caller's task
//! while one of its slots is free and queues it otherwise, and what queued runs as one group in
//! one transaction. The backend gives it its [`Transactions`]: one attempt of one write, and one
//! of a group. What a failed attempt means is decided here, once: a refuted assumption runs the
//! write again with the load, without counting a retry; a conflict that may simply run again (a
//! deadlock, a serialization failure) and a `create` raced by another transaction run it again,
//! up to the backend's budget; a group the database refused runs each of its writes alone.

use super::{
    assume::{Assumption, KnownRows, is_step},
    plan::WritePlan,
    queued::{Queued, queue},
    write::Write,
};
use crate::{DbError, LockPendingRequest, LockedExecution};
use std::{future::Future, sync::Arc};
use tokio::sync::{Semaphore, mpsc};

/// At most this many writes share one transaction.
pub const MAX_GROUP: usize = 512;

/// At most this many rows of the leases a store took and of its workflows' last steps are kept,
/// for their next writes to be planned on (a lease whose outcome another process writes is
/// never taken out): past it, they are all dropped.
const MAX_KNOWN_ROWS: usize = 4_096;

/// Why a transaction did not commit.
#[derive(Debug)]
pub enum NotCommitted {
    /// Nothing of it was stored: the database refused a statement (and the transaction was
    /// rolled back), or it failed before anything was sent.
    RolledBack(DbError),
    /// Its `COMMIT` failed (a lost connection): whether it committed is unknown.
    Unknown(DbError),
    /// The backend's check refuted what the write assumed ([`Assumption`]): nothing of it was
    /// stored.
    Refuted,
}

/// How a backend runs writes in transactions of its own, for [`Groups`].
pub trait Transactions: Send + Sync + 'static {
    /// The store's waiter hub: the kernel delivers each committed plan to it
    /// ([`WaiterHub::deliver_plans`](super::WaiterHub::deliver_plans)), once it kept the rows
    /// the next write is planned on.
    fn hub(&self) -> &super::WaiterHub;

    /// How many times a write runs again after a conflict ([`Transactions::reruns`]) or a raced
    /// create before its error is returned.
    fn max_retries(&self) -> u32;

    /// True when `err` ended an attempt that may simply run again: a deadlock, a serialization
    /// failure.
    fn reruns(&self, err: &DbError) -> bool;

    /// One attempt at `write` alone, in a transaction of its own: commits `planned`, the plan
    /// made on the [`Assumption`] (which the backend checks as it writes), or else loads the
    /// write's keys and follow-up keys and plans it on what it found. Answers the plan committed
    /// and the leases it handed over with their histories (read after the commit, so their
    /// error does not undo it), or why it did not commit.
    fn attempt(
        &self,
        write: &mut Box<dyn Queued>,
        planned: Option<(WritePlan, &Assumption)>,
    ) -> impl Future<Output = Result<Attempted, NotCommitted>> + Send;

    /// `writes` in one transaction: loaded for the [`union`](super::Keys::union) of their keys
    /// and planned by a [`GroupPlanner`](super::GroupPlanner), each write's reply kept in it.
    /// Answers the plan committed.
    fn attempt_group(
        &self,
        writes: &mut [Box<dyn Queued>],
    ) -> impl Future<Output = Result<WritePlan, NotCommitted>> + Send;
}

/// What an attempt committed: its plan, and the leases it handed over (or why reading their
/// histories after the commit failed).
pub type Attempted = (WritePlan, Result<Vec<LockedExecution>, DbError>);

/// Runs one write alone until it commits or fails for good: first planned without a load when
/// [`KnownRows::assume`] allows (with `use_known`, on the rows of `known`), then with the load
/// as often as an attempt is refuted or may run again (see the module docs). Once it commits,
/// keeps its plan's rows in `known` when `keep` says so, then delivers the plan to the
/// waiters, who may write next. Answers the leases it handed over.
async fn transact<T: Transactions>(
    backend: &T,
    known: &KnownRows,
    write: &mut Box<dyn Queued>,
    use_known: bool,
    keep: impl FnOnce(&WritePlan) -> bool,
) -> Result<Vec<LockedExecution>, DbError> {
    let mut retries: u32 = 0;
    let mut assumed = known.assume(write.keys(), use_known);
    loop {
        // A plan the assumed snapshot refuses is made again on what the load finds.
        let planned = (assumed.as_ref())
            .and_then(|(snapshot, assumption)| Some((write.plan(snapshot).ok()?, assumption)));
        // Boxed: a backend's attempt (a transaction of several round trips) is a future of
        // kilobytes, which every future awaiting it would hold inline and move at each layer
        // (the caller's write, its metering, the public trait's box).
        let e = match Box::pin(backend.attempt(write, planned)).await {
            Ok((plan, handed_over)) => {
                if keep(&plan) {
                    known.remember(&plan);
                }
                backend.hub().deliver_plans([&plan]);
                return handed_over;
            }
            Err(NotCommitted::Refuted) => {
                assumed = None;
                continue;
            }
            Err(NotCommitted::RolledBack(e) | NotCommitted::Unknown(e)) => e,
        };
        if assumed.as_ref().is_some_and(|(_, a)| a.refuted_by(&e)) {
            // Refuted by a unique key: an insert raced by another transaction's.
            assumed = None;
        } else if retries < backend.max_retries()
            && (backend.reruns(&e) || write.keys().raced_by(&e))
        {
            retries += 1;
            tracing::debug!(retries, error = %e, "running a write again");
        } else {
            return Err(e);
        }
    }
}

/// One write alone, answered with its reply or its error.
async fn run_alone<T: Transactions>(
    backend: &T,
    shared: &Shared,
    mut write: Box<dyn Queued>,
    use_known: bool,
) {
    // A workflow's step, while nothing else is in flight.
    let keep = |plan: &WritePlan| use_known && is_step(plan);
    match transact(backend, &shared.known, &mut write, use_known, keep).await {
        Ok(_) => write.answer(),
        Err(e) => write.fail(e),
    }
}

/// A backend's queue of writes that share transactions, its slots, and the rows it wrote
/// itself (the leases its `lock_pending` took), on which their next write is planned.
#[derive(Debug)]
pub struct Groups {
    queue: mpsc::UnboundedSender<Box<dyn Queued>>,
    shared: Arc<Shared>,
}

/// What the queue's task shares with the callers.
#[derive(Debug)]
struct Shared {
    slots: Arc<Semaphore>,
    all_slots: usize,
    known: KnownRows,
}

impl Groups {
    /// Starts the task that runs the queued groups, at most `slots` groups or writes alone in
    /// flight; it stops once this is dropped and its groups are done.
    #[must_use]
    pub fn spawn<T: Transactions>(backend: Arc<T>, slots: usize) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let all_slots = slots.max(1);
        let shared = Arc::new(Shared {
            slots: Arc::new(Semaphore::new(all_slots)),
            all_slots,
            known: KnownRows::new(MAX_KNOWN_ROWS),
        });
        tokio::spawn(run(backend, rx, Arc::clone(&shared)));
        Self { queue, shared }
    }

    /// Runs `write` at once on the caller's task when it cannot share a transaction, or when a
    /// slot is free; otherwise queues it for the next group. It is planned on rows the store
    /// knows only when no other write is in flight: under load a write that ends a round trip
    /// sooner would only make the next groups smaller.
    pub async fn write<T: Transactions, W: Write>(
        &self,
        backend: &T,
        write: W,
    ) -> Result<W::Reply, DbError> {
        let keys = write.keys()?;
        let (write, answer) = queue(write, keys);
        let slots = &self.shared.slots;
        if !write.keys().shares_a_transaction() {
            run_alone(backend, &self.shared, write, false).await;
        } else if let Ok(_slot) = slots.try_acquire() {
            let idle = slots.available_permits() + 1 == self.shared.all_slots;
            run_alone(backend, &self.shared, write, idle).await;
        } else if let Err(mpsc::error::SendError(write)) = self.queue.send(write) {
            write.fail(DbError::Closed);
        }
        answer.get().await
    }

    /// `lock_pending` alone, answered with the leases it granted and their histories; their
    /// rows are kept for the outcomes of the leases when no write is in flight (a lock taken
    /// while writes are in flight would fill the table for nothing: an outcome is planned on
    /// its leased row only when it runs alone).
    pub async fn lock<T: Transactions>(
        &self,
        backend: &T,
        req: LockPendingRequest,
    ) -> Result<Vec<LockedExecution>, DbError> {
        let keys = req.keys()?;
        if req.locks_nothing() {
            return Ok(Vec::new());
        }
        let (mut lock, _) = queue(req, keys);
        let shared = &self.shared;
        let idle = |_: &WritePlan| shared.slots.available_permits() == shared.all_slots;
        transact(backend, &shared.known, &mut lock, false, idle).await
    }
}

async fn run<T: Transactions>(
    backend: Arc<T>,
    mut queue: mpsc::UnboundedReceiver<Box<dyn Queued>>,
    shared: Arc<Shared>,
) {
    // A write first, then a slot: what queues meanwhile joins the group.
    while let Some(first) = queue.recv().await {
        let Ok(slot) = Arc::clone(&shared.slots).acquire_owned().await else {
            first.fail(DbError::Closed);
            return;
        };
        let mut writes = vec![first];
        while writes.len() < MAX_GROUP {
            let Ok(write) = queue.try_recv() else {
                break;
            };
            writes.push(write);
        }
        let (backend, shared) = (Arc::clone(&backend), Arc::clone(&shared));
        tokio::spawn(async move {
            run_group(&backend, &shared, writes).await;
            drop(slot);
        });
    }
}

/// Runs a group and answers each of its writes.
async fn run_group<T: Transactions>(
    backend: &Arc<T>,
    shared: &Arc<Shared>,
    mut writes: Vec<Box<dyn Queued>>,
) {
    if writes.len() == 1 {
        let write = writes.remove(0);
        return run_alone(&**backend, shared, write, false).await;
    }
    match backend.attempt_group(&mut writes).await {
        Ok(plan) => {
            backend.hub().deliver_plans([&plan]);
            writes.into_iter().for_each(Queued::answer);
        }
        Err(NotCommitted::Unknown(e)) => writes.into_iter().for_each(|w| w.fail(e.clone())),
        // A group assumes nothing: only the database refuses it.
        Err(refused) => {
            tracing::debug!(
                ?refused,
                writes = writes.len(),
                "a group was refused; each write runs alone"
            );
            let alone: Vec<_> = (writes.into_iter())
                .map(|write| {
                    let (backend, shared) = (Arc::clone(backend), Arc::clone(shared));
                    tokio::spawn(async move { run_alone(&*backend, &shared, write, false).await })
                })
                .collect();
            for task in alone {
                let _ = task.await;
            }
        }
    }
}
