//! The timers watcher of Stele: it resolves leases that expired (the worker hung, or its
//! process died) and fires durable sleeps that are due; and the [`Pruner`], which deletes
//! finished executions once their retention period is over.
//!
//! Every `tick_sleep`, at `now - leeway` (the leeway lets a worker that is about to finish
//! write its own outcome first), one [`tick`]:
//! - delivers `DelayFinished` to the join set of each expired delay, first: a long list of
//!   expired leases never holds up a due sleep. A duplicate (another watcher was faster) is
//!   not an error and is not counted.
//! - times out the expired leases, [`LEASES_PER_WRITE`] to a transaction
//!   (`DbTimers::append_outcomes`, each lease accepted or refused on its own; if the whole
//!   write fails, lease by lease), a few such writes in flight at once: each: `TemporarilyTimedOut` with `backoff_expires_at = now +
//!   backoff` while a retry is left, else `Finished(Err(PermanentTimeout))` together with the
//!   parent's response, at the version it read. If the version moved on, the worker won the
//!   race; that is not an error and is not counted.
//!
//! A node restarted under the same identity calls [`take_back_leases`] for each of its
//! executors: the leases its previous process left are timed out at once, each retry due at
//! the restart, instead of when the lease would expire; and [`take_back_warm_runs`]: the
//! executions that the previous process's runs kept waiting warm are handed back (`Unlocked`,
//! due at once) as soon as their responses have arrived, instead of at the dead run's
//! deadline.
//!
//! After each tick, one pass of the scheduler ([`fire_schedules`]): the due ticks of every schedule
//! fired as their executions, [`SCHEDULES_PER_WRITE`] schedules to a transaction until none is
//! left due, and the previous runs that `cancel-other` schedules replace cancelled before
//! their ticks fire. Which ticks are due, what the overlap policy does and how two processes
//! passing at once fire each tick once are the storage kernel's rules (`docs/SEMANTICS.md`
//! §19); a watcher on every node is safe.
//!
//! ```
//! use concepts::DbConnection;
//! use std::{sync::Arc, time::Duration};
//! use timers_watcher::{TimersWatcherConfig, TimersWatcherHandle, spawn_new};
//!
//! fn start<C: concepts::ClockFn>(db: Arc<dyn DbConnection>, clock: C) -> TimersWatcherHandle {
//!     let config = TimersWatcherConfig {
//!         tick_sleep: Duration::from_secs(1),
//!         leeway: Duration::from_millis(500),
//!     };
//!     spawn_new(db, config, clock)
//! }
//! ```
//!
//! # Retention
//!
//! The [`Pruner`] is the other periodic task that runs next to executors: every `interval`
//! (the first time at once) it deletes the trees of executions that finished more than
//! `retention` ago, one [`prune_finished`] pass at `now - retention`: `DbClient::prune` calls of
//! `batch` top-level executions each, following the cursor each call returns until no
//! candidate is left, yielding to the runtime between calls, so that no transaction holds the
//! store for long. Which trees may go (whole trees, every member finished, each all or
//! nothing) is the storage kernel's rule, not the pruner's. A [`PrunerConfig`] with a zero
//! `batch` or `interval` is refused ([`PrunerConfigError`]).
//!
//! ```
//! use concepts::DbConnection;
//! use std::{sync::Arc, time::Duration};
//! use timers_watcher::{Pruner, PrunerConfig, PrunerConfigError};
//!
//! fn start<C: concepts::ClockFn>(db: Arc<dyn DbConnection>, clock: C) -> Result<Pruner, PrunerConfigError> {
//!     let config = PrunerConfig {
//!         retention: Duration::from_secs(7 * 24 * 3600),
//!         interval: Duration::from_secs(60),
//!         batch: 100,
//!     };
//!     Pruner::spawn_new(db, config, clock) // later: `pruner.close().await`
//! }
//! ```
//!
//! [`watcher_loop`] and [`pruner_loop`] are the two loops themselves, for a caller that polls
//! them rather than spawning them: the deterministic simulation (`tests/simulation`) kills
//! them by dropping them at any await point.
//!
//! This crate knows no storage backend and does not depend on the executor: the write that
//! finishes a child and notifies its parent is [`concepts::OutcomeWrite`], shared with it.

mod meters;
mod pruner;
mod scheduler;
mod take_back;

pub use pruner::{
    PruneTotals, Pruner, PrunerConfig, PrunerConfigError, prune_finished, pruner_loop,
};
pub use scheduler::{SCHEDULES_PER_WRITE, SchedulePass, fire_schedules};
pub use take_back::{TAKEN_BACK, WARM_RUNS_POLL, take_back_leases, take_back_warm_runs};

use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, DbClient, DbError, DbExecutor, DbSchedules, DbTimers, ExecutionEventInner,
    ExpiredDelay, ExpiredLock, ExpiredTimer, FinishedExecutionError, JoinSetResponse,
    JoinSetResponseEvent, OutcomeWrite, add_saturating, is_lost_race, retry, sub_saturating,
};
use futures_util::StreamExt as _;
use std::{future::Future, sync::Arc, time::Duration};
use tokio::{sync::watch, task::JoinHandle};
use tracing::{Instrument, debug, info_span, warn};

/// How the watcher works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimersWatcherConfig {
    /// How often it looks for expired timers (real time).
    pub tick_sleep: Duration,
    /// How long after expiry a timer is acted upon.
    pub leeway: Duration,
}

/// What one tick did: the appends that succeeded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickProgress {
    /// Expired leases resolved (timed out, or finished with a permanent timeout).
    pub expired_locks: usize,
    /// Durable sleeps delivered.
    pub expired_async_timers: usize,
}

/// How many expired leases one `append_outcomes` call times out: one transaction each.
pub const LEASES_PER_WRITE: usize = 1_000;

/// How many of those writes a tick has in flight at once.
const WRITES_IN_FLIGHT: usize = 4;

/// One pass at `now`: acts on every timer that expired at or before `now - leeway`.
///
/// Due durable sleeps go first, so that a long list of expired leases (a dead process's)
/// never holds one up; the leases follow, [`LEASES_PER_WRITE`] to a transaction
/// (`DbTimers::append_outcomes`), each accepted or refused on its own.
///
/// Fails only when the expired timers cannot be read; a write that fails for another reason
/// than a lost race is logged and retried by the next tick.
pub async fn tick<D>(db: &D, now: DateTime<Utc>, leeway: Duration) -> Result<TickProgress, DbError>
where
    D: DbTimers + DbExecutor + ?Sized,
{
    let mut progress = TickProgress::default();
    let mut locks = Vec::new();
    for timer in db.get_expired_timers(sub_saturating(now, leeway)).await? {
        match timer {
            ExpiredTimer::Lock(lock) => locks.push(lock),
            ExpiredTimer::Delay(delay) => {
                let response = delay_response(&delay);
                match db.append_response(now, &delay.execution_id, response).await {
                    Ok(()) => {
                        progress.expired_async_timers += 1;
                        if concepts::metrics::enabled() {
                            metrics::counter!(concepts::metrics::SLEEPS_FIRED).increment(1);
                        }
                    }
                    Err(DbError::Duplicate(err)) => debug!("delay already delivered: {err}"),
                    Err(err) => warn!(
                        execution_id = %delay.execution_id,
                        delay_id = %delay.delay_id,
                        "cannot deliver the expired delay: {err}"
                    ),
                }
            }
        }
    }
    // A few writes in flight at once: SQLite's writer commits them together, PostgreSQL runs
    // them on as many connections (each locks its rows in id order, so they never deadlock).
    let writes: Vec<_> = locks
        .chunks(LEASES_PER_WRITE)
        .map(|chunk| time_out(db, chunk, now, expired_lock_write))
        .collect();
    let mut writes = futures_util::stream::iter(writes).buffered(WRITES_IN_FLIGHT);
    while let Some(resolved) = writes.next().await {
        progress.expired_locks += resolved;
        if concepts::metrics::enabled() && resolved > 0 {
            metrics::counter!(concepts::metrics::LEASES_EXPIRED)
                .increment(u64::try_from(resolved).unwrap_or(u64::MAX));
        }
    }
    Ok(progress)
}

/// Times out `locks` in one write; returns how many were resolved. When the write as a whole
/// fails, each lease is written on its own, so that one lease the store cannot write does not
/// keep the others waiting.
async fn time_out<D>(
    db: &D,
    locks: &[ExpiredLock],
    now: DateTime<Utc>,
    write: fn(&ExpiredLock, DateTime<Utc>) -> OutcomeWrite,
) -> usize
where
    D: DbTimers + DbExecutor + ?Sized,
{
    let writes: Vec<_> = locks.iter().map(|lock| write(lock, now)).collect();
    // Whether each write finishes its execution (else it schedules a retry), for the metrics.
    let finishes: Vec<bool> = (writes.iter())
        .map(|write| matches!(write.event, ExecutionEventInner::Finished { .. }))
        .collect();
    let results = match db.append_outcomes(writes).await {
        Ok(results) => results,
        Err(err) => {
            warn!(
                leases = locks.len(),
                "cannot time out expired leases together, one by one: {err}"
            );
            let mut results = Vec::with_capacity(locks.len());
            for lock in locks {
                results.push(db.append_outcome(write(lock, now)).await);
            }
            results
        }
    };
    let mut resolved = 0;
    let mut expired = meters::Expired::default();
    for ((lock, result), finishes) in locks.iter().zip(results).zip(finishes) {
        let execution_id = &lock.execution_id;
        match result {
            Ok(_) => {
                resolved += 1;
                expired.add(&lock.ffqn, finishes);
            }
            Err(err) if is_lost_race(&err) => {
                debug!(%execution_id, "the worker wrote first: {err}");
            }
            Err(err) => warn!(%execution_id, "cannot time out the expired lease: {err}"),
        }
    }
    expired.record();
    resolved
}

/// The write that resolves an expired lease at `now`: a timeout while a retry is left, else a
/// permanent timeout that also notifies the parent.
#[must_use]
pub fn expired_lock_write(lock: &ExpiredLock, now: DateTime<Utc>) -> OutcomeWrite {
    timeout_write(lock, now, |backoff| add_saturating(now, backoff))
}

/// The write that takes back a lease of a restarted node's previous process at `now`
/// ([`take_back_leases`]): the timeout of [`expired_lock_write`], a retry used or a permanent
/// timeout when none is left, but with the retry due at once: the restart was the pause.
#[must_use]
pub fn taken_back_lock_write(lock: &ExpiredLock, now: DateTime<Utc>) -> OutcomeWrite {
    timeout_write(lock, now, |_| now)
}

/// A lease's timeout at `now`: the retry due at `retry_at(backoff)` while one is left.
fn timeout_write(
    lock: &ExpiredLock,
    now: DateTime<Utc>,
    retry_at: impl FnOnce(Duration) -> DateTime<Utc>,
) -> OutcomeWrite {
    let event = match retry::retry_backoff(
        lock.temporary_event_count,
        lock.max_retries,
        lock.retry_exp_backoff,
    ) {
        Some(backoff) => ExecutionEventInner::TemporarilyTimedOut {
            backoff_expires_at: retry_at(backoff),
        },
        None => ExecutionEventInner::Finished {
            result: Err(FinishedExecutionError::PermanentTimeout),
        },
    };
    OutcomeWrite::new(
        lock.execution_id.clone(),
        lock.next_version,
        now,
        event,
        lock.parent.as_ref(),
    )
}

fn delay_response(delay: &ExpiredDelay) -> JoinSetResponseEvent {
    JoinSetResponseEvent {
        join_set_id: delay.join_set_id.clone(),
        event: JoinSetResponse::DelayFinished {
            delay_id: delay.delay_id,
        },
    }
}

/// Spawns the watcher loop on the current tokio runtime: a [`tick`] and a pass over the due
/// schedules ([`fire_schedules`]) every `tick_sleep`.
///
/// `db` is any store that serves timers, appends and schedules, such as
/// `Arc<dyn DbConnection>`.
#[must_use]
pub fn spawn_new<D, C>(db: Arc<D>, config: TimersWatcherConfig, clock: C) -> TimersWatcherHandle
where
    D: DbTimers + DbExecutor + DbSchedules + DbClient + ?Sized + 'static,
    C: ClockFn,
{
    let task = Task::spawn("timers watcher", info_span!("timers_watcher"), |closing| {
        watcher_loop(db, config, clock, closing)
    });
    TimersWatcherHandle { task }
}

/// The loop [`spawn_new`] spawns: a [`tick`] and a pass over the due schedules
/// ([`fire_schedules`]) every `tick_sleep`, until `closing` turns true (or its sender is
/// dropped). For a caller that polls the loop itself, such as the deterministic simulation,
/// which kills it by dropping it at any await point.
pub async fn watcher_loop<D, C>(
    db: Arc<D>,
    config: TimersWatcherConfig,
    clock: C,
    mut closing: watch::Receiver<bool>,
) where
    D: DbTimers + DbExecutor + DbSchedules + DbClient + ?Sized,
    C: ClockFn,
{
    loop {
        match tick(db.as_ref(), clock.now(), config.leeway).await {
            Ok(progress) if progress != TickProgress::default() => debug!(?progress),
            Ok(_) => {}
            Err(err) => warn!("cannot read expired timers: {err}"),
        }
        match fire_schedules(db.as_ref(), clock.now()).await {
            Ok(pass) if pass != SchedulePass::default() => debug!(?pass),
            Ok(_) => {}
            Err(err) => warn!("cannot fire the due schedules: {err}"),
        }
        tokio::select! {
            _ = closing.wait_for(|closing| *closing) => break,
            () = tokio::time::sleep(config.tick_sleep) => {}
        }
    }
}

/// A running watcher loop. [`TimersWatcherHandle::close`] stops it gracefully; dropping the
/// handle without closing aborts the loop and logs a warning.
#[derive(Debug)]
pub struct TimersWatcherHandle {
    task: Task,
}

impl TimersWatcherHandle {
    /// Stops the loop and returns once it has ended (a tick in flight completes first).
    /// Idempotent.
    pub async fn close(&mut self) {
        self.task.close().await;
    }
}

/// A spawned loop that stops when its closing flag is set: the watcher's and the pruner's.
#[derive(Debug)]
struct Task {
    name: &'static str,
    closing: watch::Sender<bool>,
    join: Option<JoinHandle<()>>,
}

impl Task {
    /// Spawns `body(closing)` in `span`; `body` ends its loop once `closing` turns true.
    fn spawn<F, Fut>(name: &'static str, span: tracing::Span, body: F) -> Self
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (closing, receiver) = watch::channel(false);
        let body = body(receiver);
        let task = async move {
            debug!("{name} started");
            body.await;
            debug!("{name} stopped");
        };
        Self {
            name,
            closing,
            join: Some(tokio::spawn(task.instrument(span))),
        }
    }

    /// Sets the closing flag and waits for the loop to end. Idempotent.
    async fn close(&mut self) {
        self.closing.send_replace(true);
        if let Some(join) = self.join.take()
            && let Err(err) = join.await
        {
            warn!("{} ended abnormally: {err}", self.name);
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if let Some(join) = self.join.take() {
            if !join.is_finished() {
                warn!("{} dropped without `close`, aborting", self.name);
            }
            join.abort();
        }
    }
}

#[cfg(test)]
mod tests;
