//! A node's identity ([`NodeBuilder::identity`](crate::NodeBuilder::identity)): the executor
//! ids derived from it, and the leases of the node's previous process taken back at start.

use chrono::{DateTime, Utc};
use concepts::{ComponentId, DbConnection, ExecutorId, add_saturating};
use std::{sync::Arc, time::Duration};
use tracing::{info, warn};

/// The id of the `ordinal`-th executor of `component` (counted from 0) on the node named
/// `identity`: the same in every process and every release of Stele, since it is FNV-1a of
/// the three, not the standard library's hasher (whose output may change between releases).
pub(crate) fn executor_id(identity: &str, component: &ComponentId, ordinal: u64) -> ExecutorId {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let component = component.to_string();
    let bytes = identity
        .bytes()
        .chain([0xff])
        .chain(component.bytes())
        .chain([0xff])
        .chain(ordinal.to_le_bytes());
    let hash = bytes.fold(OFFSET, |hash, byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    });
    ExecutorId::from_parts(0, hash)
}

/// An executor whose leases of the previous process are taken back at start.
pub(crate) struct Takeback {
    pub(crate) executor_id: ExecutorId,
    pub(crate) lock_expiry: Duration,
}

/// Takes back what `executors` held in the node's previous process, started at `started_at`
/// (before the executors): every lease of theirs that expires before `started_at` plus their
/// lease duration is older than this process and timed out at once; then every execution
/// their dead runs kept waiting warm is handed back as soon as its responses have arrived.
pub(crate) async fn take_back<C: concepts::ClockFn>(
    db: Arc<dyn DbConnection>,
    clock: C,
    started_at: DateTime<Utc>,
    executors: Vec<Takeback>,
) {
    let bound = |executor: &Takeback| add_saturating(started_at, executor.lock_expiry);
    for executor in &executors {
        let executor_id = executor.executor_id;
        match timers_watcher::take_back_leases(
            db.as_ref(),
            executor_id,
            bound(executor),
            clock.now(),
        )
        .await
        {
            Ok(0) => {}
            Ok(taken) => info!(
                %executor_id,
                "took back {taken} leases the previous process under this identity left: \
                 their executions are due now"
            ),
            Err(err) => warn!(
                %executor_id,
                "cannot read the leases the previous process under this identity left; they \
                 are timed out when they expire: {err}"
            ),
        }
    }
    let warm = executors.iter().map(|executor| {
        let (db, clock) = (db.clone(), clock.clone());
        let executor_id = executor.executor_id;
        let bound = bound(executor);
        async move {
            match timers_watcher::take_back_warm_runs(db.as_ref(), executor_id, bound, &clock).await
            {
                Ok(0) => {}
                Ok(taken) => info!(
                    %executor_id,
                    "handed back {taken} executions the previous process under this identity \
                     kept waiting warm: they were due at once"
                ),
                Err(err) => warn!(
                    %executor_id,
                    "cannot read the executions the previous process under this identity kept \
                     waiting warm; they are due at its runs' deadlines: {err}"
                ),
            }
        }
    });
    futures_util::future::join_all(warm).await;
}
