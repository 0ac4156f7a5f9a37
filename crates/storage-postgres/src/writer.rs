//! Running writes for the kernel's `Groups`: one attempt of one write in one transaction, or of
//! a group planned together by its [`GroupPlanner`] (`docs/ARCHITECTURE.md` describes both).

use crate::{
    error::{is_transaction_retriable, map_pool_error},
    load, persist,
    pipeline::Trips,
    reads,
};
use concepts::{
    DbError, LockedExecution,
    kernel::{
        Assumption, Attempted, GroupPlanner, Keys, LockGrant, NotCommitted, Queued, Snapshot,
        Transactions, WaiterHub, WritePlan,
    },
};
use deadpool_postgres::{ClientWrapper, Object, Pool};
use std::sync::Arc;

/// What runs writes.
pub(crate) struct Writer {
    pub(crate) pool: Pool,
    pub(crate) hub: Arc<WaiterHub>,
    pub(crate) max_transaction_retries: u32,
    pub(crate) trips: Trips,
}

/// A pooled connection inside a write transaction, from the `BEGIN` that goes out with the
/// first loads to its `COMMIT` or `ROLLBACK`. Dropped in between (a caller that gave up on
/// the write), it takes the connection out of the pool: closing the session ends the
/// transaction, and no open transaction is ever handed to the next caller.
struct WriteTx {
    /// `None` only once `commit` or `rollback` gave it back to the pool.
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
        assumed: Option<&Assumption>,
        plan: &WritePlan,
        granted: Vec<LockGrant>,
    ) -> Result<Result<Vec<LockedExecution>, DbError>, NotCommitted> {
        // The connection stays in the guard until the commit's answer: a caller that gives up
        // meanwhile (while a statement is prepared, before the `COMMIT` is sent) drops it.
        let client = self.client();
        // Sends nothing when nothing was granted.
        let hand_over = reads::locked_executions(client, granted);
        let result = persist::persist_and_commit(client, trips, assumed, plan, hand_over).await;
        if !matches!(result, Err(NotCommitted::Unknown(_))) {
            drop(self.client.take());
        }
        result
    }

    /// Rolls back after `err`, which the write answers; a connection that cannot even roll
    /// back (or whose caller gives up before the answer) leaves the pool.
    async fn rollback(mut self, trips: &Trips, err: DbError) -> NotCommitted {
        trips.one();
        match self.client().batch_execute("ROLLBACK").await {
            Ok(()) => drop(self.client.take()),
            Err(e) => tracing::debug!(error = %e, "cannot roll back; dropping the connection"),
        }
        NotCommitted::RolledBack(err)
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

    /// Loads what `write`'s keys and follow-up keys name in `tx` (after its `BEGIN`) and plans
    /// it.
    async fn load_and_plan(
        &self,
        tx: &WriteTx,
        write: &mut Box<dyn Queued>,
    ) -> Result<WritePlan, DbError> {
        let (client, trips) = (tx.client(), &self.trips);
        let mut snapshot = Snapshot::default();
        load::load(client, trips, write.keys(), true, &mut snapshot).await?;
        if let Some(more) = write.follow_up_keys(&snapshot) {
            load::load(client, trips, &more, false, &mut snapshot).await?;
        }
        write.plan(&snapshot)
    }
}

impl Transactions for Writer {
    fn hub(&self) -> &WaiterHub {
        &self.hub
    }

    fn max_retries(&self) -> u32 {
        self.max_transaction_retries
    }

    fn reruns(&self, err: &DbError) -> bool {
        is_transaction_retriable(err)
    }

    async fn attempt(
        &self,
        write: &mut Box<dyn Queued>,
        planned: Option<(WritePlan, &Assumption)>,
    ) -> Result<Attempted, NotCommitted> {
        let tx = self.begin().await.map_err(NotCommitted::RolledBack)?;
        let (plan, assumed) = match planned {
            Some((plan, assumed)) => (plan, Some(assumed)),
            None => match self.load_and_plan(&tx, write).await {
                Ok(plan) => (plan, None),
                Err(e) => return Err(tx.rollback(&self.trips, e).await),
            },
        };
        let granted = write.granted();
        let handed_over = tx.commit(&self.trips, assumed, &plan, granted).await?;
        // Committed: from here on nothing turns the call into an error.
        Ok((plan, handed_over))
    }

    async fn attempt_group(
        &self,
        writes: &mut [Box<dyn Queued>],
    ) -> Result<WritePlan, NotCommitted> {
        let tx = self.begin().await.map_err(NotCommitted::RolledBack)?;
        let keys = Keys::union(writes.iter().map(|write| write.keys()));
        let mut snapshot = Snapshot::default();
        if let Err(e) = load::load(tx.client(), &self.trips, &keys, true, &mut snapshot).await {
            return Err(tx.rollback(&self.trips, e).await);
        }
        let mut group = GroupPlanner::owning(snapshot);
        for write in writes.iter_mut() {
            write.plan_in(&mut group);
        }
        let plan = group.finish();
        (tx.commit(&self.trips, None, &plan, Vec::new()).await?).map_err(NotCommitted::Unknown)?;
        Ok(plan)
    }
}
