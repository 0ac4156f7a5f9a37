//! Running writes: one write in one transaction ([`Writer::transact`]), and the group writer
//! ([`Groups`]) that lets concurrent writes share one transaction and one commit, planned
//! together by the kernel's [`GroupPlanner`] (`docs/ARCHITECTURE.md` describes both).

use crate::{
    error::{is_transaction_retriable, map_pool_error},
    load,
    persist::{self, Commit, NotCommitted},
    pipeline::Trips,
    reads,
};
use concepts::{
    DbError, LockedExecution,
    kernel::{
        self, GroupPlanner, Keys, KnownRows, LockGrant, Queued, Snapshot, WaiterHub, WritePlan,
    },
};
use deadpool_postgres::{ClientWrapper, Object, Pool};
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc};

/// At most this many writes share one transaction.
pub(crate) const MAX_GROUP: usize = 512;

/// What runs writes; `known` holds the rows this store wrote itself, for writes planned
/// without a load.
pub(crate) struct Writer {
    pub(crate) pool: Pool,
    pub(crate) hub: Arc<WaiterHub>,
    pub(crate) max_transaction_retries: u32,
    pub(crate) trips: Trips,
    pub(crate) known: KnownRows,
}

/// A pooled connection inside a write transaction, from the `BEGIN` that goes out with the
/// first loads to its `COMMIT` or `ROLLBACK`. Dropped in between (a caller that gave up on
/// the write), it takes the connection out of the pool: closing the session ends the
/// transaction, and no open transaction is ever handed to the next caller.
struct WriteTx {
    /// `None` only once `commit` or `rollback` took it.
    client: Option<Object>,
}

impl WriteTx {
    fn client(&self) -> &ClientWrapper {
        self.client
            .as_deref()
            .expect("only `commit` and `rollback` take the connection, and they consume self")
    }

    /// Persists `plan` (after the `BEGIN` and the check of what it `assumed`, when the write
    /// loaded nothing), commits, publishes its wake-ups and reads the histories of the leases
    /// `granted`, in one pipeline.
    async fn commit(
        mut self,
        trips: &Trips,
        assumed: Option<&kernel::Assumption>,
        plan: &WritePlan,
        granted: Vec<LockGrant>,
    ) -> Result<Result<Vec<LockedExecution>, DbError>, NotCommitted> {
        let client = self.client.take().expect("taken by nothing else");
        let commit = Commit { assumed, plan };
        // Sends nothing when nothing was granted.
        let hand_over = reads::locked_executions(&client, granted);
        let result = persist::persist_and_commit(&client, trips, commit, hand_over).await;
        if matches!(result, Err(NotCommitted::Unknown(_))) {
            drop(Object::take(client));
        }
        result
    }

    /// Rolls back; a connection that cannot even do that leaves the pool.
    async fn rollback(mut self, trips: &Trips) {
        trips.one();
        let client = self.client.take().expect("taken by nothing else");
        if let Err(e) = client.batch_execute("ROLLBACK").await {
            tracing::debug!(error = %e, "cannot roll back; dropping the connection");
            drop(Object::take(client));
        }
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}

impl Writer {
    async fn begin(&self) -> Result<WriteTx, DbError> {
        self.hub.ensure_open()?;
        Ok(WriteTx {
            client: Some(self.pool.get().await.map_err(map_pool_error)?),
        })
    }

    /// How many groups may be in flight at once: half the pool (the rest serves
    /// `lock_pending`, reads and waits), at least one, at most two: the fewer the slots, the
    /// more a group holds (with eight, 10,000 no-op executions took about 360 outcome
    /// transactions, with two about 110, and ran faster).
    pub(crate) fn groups_in_flight(pool_size: usize) -> usize {
        (pool_size / 2).clamp(1, 2)
    }

    /// One job alone, answered with its reply or its error.
    pub(crate) async fn run_alone(&self, mut job: Box<dyn Queued>, use_known: bool) {
        match self.transact(&mut job, use_known).await {
            Ok(_) => job.answer(),
            Err(e) => job.fail(e),
        }
    }

    /// One write alone, answering the leases it granted with their histories: first planned
    /// without a load when [`KnownRows::assume`] allows (a refuted assumption runs it again with
    /// the load, without counting a retry); a deadlock, a serialization failure or a raced
    /// create runs it again from the load.
    pub(crate) async fn transact(
        &self,
        write: &mut Box<dyn Queued>,
        use_known: bool,
    ) -> Result<(WritePlan, Vec<LockedExecution>), DbError> {
        let mut attempt: u32 = 0;
        let mut assumed = self.known.assume(write.keys(), use_known);
        loop {
            match self.transact_once(write, assumed.as_ref()).await {
                // Refuted by the check, or by a unique key (an insert raced by another one).
                Ok(None) => assumed = None,
                Err(e) if assumed.as_ref().is_some_and(|(_, a)| a.refuted_by(&e)) => {
                    assumed = None;
                }
                Err(e)
                    if attempt < self.max_transaction_retries
                        && (is_transaction_retriable(&e) || raced(write.keys(), &e)) =>
                {
                    attempt += 1;
                    tracing::debug!(attempt, error = %e, "retrying a transaction");
                }
                Err(e) => return Err(e),
                Ok(Some((plan, handed_over))) => return Ok((plan, handed_over?)),
            }
        }
    }

    /// One attempt; the hand-over's own result inside (the write committed either way), `None`
    /// when the check refuted its assumption (nothing was stored).
    async fn transact_once(
        &self,
        write: &mut Box<dyn Queued>,
        assumed: Option<&(Snapshot, kernel::Assumption)>,
    ) -> Result<Option<(WritePlan, Result<Vec<LockedExecution>, DbError>)>, DbError> {
        // A plan the assumed snapshot refuses is made again on what the load finds.
        let on_assumption = assumed
            .and_then(|(snapshot, assumption)| Some((write.plan(snapshot).ok()?, assumption)));
        let tx = self.begin().await?;
        let (plan, checked) = match on_assumption {
            Some((planned, checked)) => (planned, Some(checked)),
            None => {
                let planned = async {
                    let (client, trips) = (tx.client(), &self.trips);
                    let mut snapshot = Snapshot::default();
                    load::load(client, trips, write.keys(), true, &mut snapshot).await?;
                    if let Some(more) = write.follow_up_keys(&snapshot) {
                        load::load(client, trips, &more, false, &mut snapshot).await?;
                    }
                    write.plan(&snapshot)
                }
                .await;
                match planned {
                    Ok(planned) => (planned, None),
                    Err(e) => {
                        tx.rollback(&self.trips).await;
                        return Err(e);
                    }
                }
            }
        };
        let granted = write.granted();
        match tx.commit(&self.trips, checked, &plan, granted).await {
            Ok(handed_over) => {
                // Committed: from here on nothing turns the call into an error.
                self.hub.deliver(&plan.wakeups);
                Ok(Some((plan, handed_over)))
            }
            Err(NotCommitted::Refuted) => Ok(None),
            Err(NotCommitted::RolledBack(e) | NotCommitted::Unknown(e)) => Err(e),
        }
    }

    /// A group of jobs in one transaction, planned by the kernel's [`GroupPlanner`]; `Err` when
    /// the database refused it (then nothing of it was stored) or its commit failed.
    async fn write_group(&self, jobs: &mut [Box<dyn Queued>]) -> Result<(), NotCommitted> {
        let tx = self.begin().await.map_err(NotCommitted::RolledBack)?;
        let keys = Keys::union(jobs.iter().map(|job| job.keys()));
        let mut snapshot = Snapshot::default();
        if let Err(e) = load::load(tx.client(), &self.trips, &keys, true, &mut snapshot).await {
            tx.rollback(&self.trips).await;
            return Err(NotCommitted::RolledBack(e));
        }
        let mut group = GroupPlanner::owning(snapshot);
        for job in jobs.iter_mut() {
            job.plan_in(&mut group);
        }
        let plan = group.finish();
        (tx.commit(&self.trips, None, &plan, Vec::new()).await?).map_err(NotCommitted::Unknown)?;
        self.hub.deliver(&plan.wakeups);
        Ok(())
    }

    /// Runs a group and answers each of its jobs.
    async fn run_group(self: &Arc<Self>, mut jobs: Vec<Box<dyn Queued>>) {
        if jobs.len() == 1 {
            let job = jobs.remove(0);
            self.run_alone(job, false).await;
            return;
        }
        match self.write_group(&mut jobs).await {
            Ok(()) => jobs.into_iter().for_each(Queued::answer),
            Err(NotCommitted::Unknown(e)) => jobs.into_iter().for_each(|job| job.fail(e.clone())),
            Err(refused) => {
                tracing::debug!(
                    ?refused,
                    writes = jobs.len(),
                    "a group was refused; each write runs alone"
                );
                let alone: Vec<_> = jobs
                    .into_iter()
                    .map(|job| {
                        let writer = Arc::clone(self);
                        tokio::spawn(async move { writer.run_alone(job, false).await })
                    })
                    .collect();
                for task in alone {
                    let _ = task.await;
                }
            }
        }
    }
}

/// True when the database found a row that `keys` create, which the load found absent
/// ([`Keys::raced_by`]).
fn raced(keys: &Keys, err: &DbError) -> bool {
    keys.raced_by(err)
}

/// The group writer's side of a store: its queue and its slots.
pub(crate) struct Groups {
    queue: mpsc::UnboundedSender<Box<dyn Queued>>,
    slots: Arc<Semaphore>,
    all_slots: usize,
}

impl Groups {
    /// Starts the group writer; it stops once this is dropped and its groups are done.
    pub(crate) fn spawn(writer: Arc<Writer>, slots: usize) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        let all_slots = slots.max(1);
        let slots = Arc::new(Semaphore::new(all_slots));
        tokio::spawn(run(writer, rx, Arc::clone(&slots)));
        Self {
            queue,
            slots,
            all_slots,
        }
    }

    /// True when no write of the group writer is in flight.
    pub(crate) fn idle(&self) -> bool {
        self.slots.available_permits() == self.all_slots
    }

    /// Runs `job` at once on the caller's task when it cannot share a transaction, or when a
    /// slot is free; otherwise queues it for the next group. It is planned on rows this store
    /// knows only when no other write is in flight: under load a write that ends a round trip
    /// sooner would only make the next groups smaller.
    pub(crate) async fn write(&self, writer: &Writer, job: Box<dyn Queued>) {
        if !job.keys().shares_a_transaction() {
            return writer.run_alone(job, false).await;
        }
        if let Ok(_slot) = self.slots.try_acquire() {
            let idle = self.slots.available_permits() + 1 == self.all_slots;
            return writer.run_alone(job, idle).await;
        }
        if let Err(mpsc::error::SendError(job)) = self.queue.send(job) {
            job.fail(DbError::Closed);
        }
    }
}

async fn run(
    writer: Arc<Writer>,
    mut queue: mpsc::UnboundedReceiver<Box<dyn Queued>>,
    slots: Arc<Semaphore>,
) {
    // A job first, then a slot: what queues meanwhile joins the group.
    while let Some(first) = queue.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            first.fail(DbError::Closed);
            return;
        };
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            let Ok(job) = queue.try_recv() else {
                break;
            };
            jobs.push(job);
        }
        let writer = Arc::clone(&writer);
        tokio::spawn(async move {
            writer.run_group(jobs).await;
            drop(slot);
        });
    }
}
