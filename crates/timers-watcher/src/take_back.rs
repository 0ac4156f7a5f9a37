//! Taking back the leases a restarted node's previous process left unfinished.

use crate::{LEASES_PER_WRITE, WRITES_IN_FLIGHT, taken_back_lock_write, time_out};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, DbClient, DbClientExt as _, DbError, DbExecutor, DbTimers, ExecutionLog,
    ExecutionSummary, ExecutorId, ExpiredTimer, ListExecutionsFilter, PendingState,
    PendingStateKind, is_lost_race,
};
use futures_util::StreamExt as _;
use std::time::Duration;
use tracing::warn;

/// Times out at `now`, each retry due at once ([`taken_back_lock_write`]), every lease that
/// `executor_id` holds and that expires before `expiring_before`; returns how many it wrote.
///
/// A node restarted under the same identity gives its executors the same ids, so the leases
/// of its previous process are found by id and need not be waited out. `expiring_before`
/// keeps the leases the restarted executor took itself: give the time it started plus its
/// lease duration, before which none of its own leases expires (a clock stepped back can
/// break that; then a new run of its own loses its lease, as a run past its lease does).
/// Each write is fenced by the version it read, as every timeout is: a run that wrote its
/// outcome in the meantime wins, and one of another live process under the same identity (a
/// misconfiguration) loses its lease and its outcome is refused. A lease whose version moved
/// on is not counted.
///
/// # Errors
/// The leases could not be read. A write that fails is logged and its lease left to expire.
pub async fn take_back_leases<D>(
    db: &D,
    executor_id: ExecutorId,
    expiring_before: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<usize, DbError>
where
    D: DbTimers + DbExecutor + ?Sized,
{
    let locks: Vec<_> = db
        .get_expired_timers(expiring_before)
        .await?
        .into_iter()
        .filter_map(|timer| match timer {
            ExpiredTimer::Lock(lock)
                if lock.executor_id == executor_id && lock.lock_expires_at < expiring_before =>
            {
                Some(lock)
            }
            _ => None,
        })
        .collect();
    let writes: Vec<_> = locks
        .chunks(LEASES_PER_WRITE)
        .map(|chunk| time_out(db, chunk, now, taken_back_lock_write))
        .collect();
    let mut writes = futures_util::stream::iter(writes).buffered(WRITES_IN_FLIGHT);
    let mut taken = 0;
    while let Some(resolved) = writes.next().await {
        taken += resolved;
    }
    Ok(taken)
}

/// How often [`take_back_warm_runs`] looks again at the warm waits still blocked.
pub const WARM_RUNS_POLL: Duration = Duration::from_millis(100);

/// Hands back at once every execution that a run of `executor_id` in the node's previous
/// process keeps waiting warm ([`concepts::warm_run`]) until a deadline before
/// `expiring_before`: such an execution, its responses arrived, is due only at the dead run's
/// deadline. Each is written `Unlocked`, due at the clock's present and no retry used, at the
/// version read, so the write is fenced as any other. Those still blocked on a join set are
/// looked at again every [`WARM_RUNS_POLL`] and handed back when their responses have
/// arrived; the call returns when none is left (each one leaves at its deadline at the
/// latest), with how many it handed back.
///
/// Finding them reads the pending and blocked executions once, a page at a time, and the log
/// of those due within the window: a cost paid once, at the start of a node with an identity.
///
/// # Errors
/// The executions could not be read. A write that fails is logged and its execution left to
/// its deadline.
pub async fn take_back_warm_runs<D, C>(
    db: &D,
    executor_id: ExecutorId,
    expiring_before: DateTime<Utc>,
    clock: &C,
) -> Result<usize, DbError>
where
    D: DbClient + DbExecutor + ?Sized,
    C: ClockFn,
{
    let now = clock.now();
    let mut waiting = Vec::new();
    // Blocked first: one answered while the two are read moves to `PendingAt` and is found
    // there (and the other way round no warm wait moves).
    for state in [
        PendingStateKind::BlockedByJoinSet,
        PendingStateKind::PendingAt,
    ] {
        let filter = ListExecutionsFilter {
            state: Some(state),
            ..ListExecutionsFilter::default()
        };
        let mut in_window = |row: &ExecutionSummary| match row.pending_state {
            PendingState::PendingAt { scheduled_at: at }
            | PendingState::BlockedByJoinSet {
                lock_expires_at: at,
                ..
            } => now < at && at < expiring_before,
            PendingState::Locked { .. } | PendingState::Finished { .. } => false,
        };
        let rows = db.list_executions_kept(filter, &mut in_window).await?;
        waiting.extend(rows.into_iter().map(|row| row.execution_id));
    }
    waiting.sort();
    waiting.dedup();
    let mut handed_back = 0;
    while !waiting.is_empty() {
        let mut still_blocked = Vec::new();
        for execution_id in waiting {
            let log = db.get(&execution_id).await?;
            let now = clock.now();
            let mine = concepts::warm_run(&log.events, &log.pending_state, now).filter(|run| {
                run.executor_id == executor_id && run.run_expires_at < expiring_before
            });
            match (mine, &log.pending_state) {
                (Some(_), PendingState::PendingAt { .. }) => {
                    if hand_back(db, &log, now).await {
                        handed_back += 1;
                    }
                }
                (Some(_), _) => still_blocked.push(execution_id),
                (None, _) => {}
            }
        }
        waiting = still_blocked;
        if !waiting.is_empty() {
            tokio::time::sleep(WARM_RUNS_POLL).await;
        }
    }
    Ok(handed_back)
}

/// Writes `Unlocked`, due at `now`, at the version of `log`; true when it was accepted.
async fn hand_back<D: DbExecutor + ?Sized>(db: &D, log: &ExecutionLog, now: DateTime<Utc>) -> bool {
    let write = log.unlock_now(now, TAKEN_BACK.to_string());
    match db.append_outcome(write).await {
        Ok(_) => true,
        Err(err) if is_lost_race(&err) => false,
        Err(err) => {
            warn!(
                execution_id = %log.execution_id,
                "cannot hand back the execution the previous process kept waiting warm; it is \
                 due at that run's deadline: {err}"
            );
            false
        }
    }
}

/// The `reason` of the `Unlocked` event that hands back a warm wait.
pub const TAKEN_BACK: &str =
    "taken back at the node's restart: the run waiting warm for it died with the previous process";
