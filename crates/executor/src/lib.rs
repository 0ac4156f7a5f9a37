//! The executor of Stele: it locks due executions of the functions its [`Worker`] exports, runs
//! the worker for each one under a lease, and records how each run ended.
//!
//! # Writing a worker
//!
//! A worker implements [`Worker`]: it names the functions it runs and, for each run, turns a
//! [`WorkerContext`] (the execution's id, parameters, history, responses, the version its next
//! append must carry and its deadline) into a [`WorkerResult`]. The executor maps that result
//! to exactly one write (see [`map_worker_result`] for the whole table): a `Finished` event,
//! a retry (`TemporarilyFailed`, `TemporarilyTimedOut`), an `Unlocked`, or nothing at all when
//! the worker wrote its own events. When a child execution finishes, its parent's response is
//! written in the same transaction.
//!
//! ```
//! use async_trait::async_trait;
//! use concepts::{ComponentId, DbExecutor, FunctionFqn, Json, SupportedFunctionReturnValue};
//! use executor::{ExecConfig, ExecTask, ExecutorTaskHandle, Now, Worker, WorkerContext,
//!     WorkerError, WorkerResult};
//! use std::{sync::Arc, time::Duration};
//!
//! /// Greets the name given as the first parameter.
//! struct Greeter {
//!     ffqns: Vec<FunctionFqn>,
//! }
//!
//! #[async_trait]
//! impl Worker for Greeter {
//!     async fn run(&self, ctx: WorkerContext) -> WorkerResult {
//!         match ctx.params.0.get(0).and_then(|name| name.as_str()) {
//!             // An activity reports the context's version; the executor appends `Finished`.
//!             Some(name) => WorkerResult::Ok(
//!                 SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
//!                     format!("hello, {name}").into(),
//!                 )),
//!                 ctx.version,
//!             ),
//!             // Retried with exponential backoff while retries are left.
//!             None => WorkerResult::Err(WorkerError::ActivityTrap {
//!                 reason: "expected a name".to_string(),
//!                 detail: None,
//!             }),
//!         }
//!     }
//!
//!     fn exported_functions(&self) -> &[FunctionFqn] {
//!         &self.ffqns
//!     }
//! }
//!
//! /// Runs greeters against `db` until the returned handle is closed.
//! fn start(db: Arc<dyn DbExecutor>) -> ExecutorTaskHandle {
//!     let worker = Greeter { ffqns: vec!["demo:greet/api.greet".parse().unwrap()] };
//!     let config = ExecConfig {
//!         lock_expiry: Duration::from_secs(10),
//!         tick_sleep: Duration::from_secs(1),
//!         batch_size: 16,
//!         component_id: ComponentId::new("activity", "greeter").unwrap(),
//!         task_limiter: None,
//!     };
//!     ExecTask::spawn_new(Arc::new(worker), config, Now, db)
//! }
//! # let _ = start;
//! ```
//!
//! # The loop
//!
//! A spawned executor repeats: take up to `batch_size` permits of the task limiter (waiting for
//! a batch of its own limiter, or one of a given limiter, or `tick_sleep`, never spinning), lock at most that many due executions with a
//! lease of `lock_expiry`, run each worker in its own task with the lease expiry as its
//! deadline, write its outcome (again with backoff until the lease is over,
//! [`outcome_retry_pauses`], when the store fails it with a retriable error), and wait for the next due execution
//! (`wait_for_pending`, woken by the store's notifications, at most `tick_sleep`). Leases that
//! expire because a worker hung or its process died are resolved by the timers watcher, never
//! by the executor; the leases of a lock whose reply was lost (a retriable error: it may have
//! committed) are given back by the executor before it locks again
//! ([`concepts::DbExecutor::unlock_lost`]).
//!
//! Each run in flight holds its permit until its outcome is written, so the task limiter
//! bounds how many leases the executor holds at once. Without a `task_limiter` in its
//! [`ExecConfig`], an executor makes its own of two batches (`2 × batch_size` permits), and the
//! loop locks once a whole batch of them is free: the next batch is locked while the previous
//! one runs and writes its outcomes (the lock's commit overlaps the outcomes' instead of
//! following them, and a lock is never a handful of leases freed by the first outcomes), and
//! the executor is never more than one batch ahead of its runs: it does not take leases faster
//! than its runs end, and the work it cannot keep up with stays pending for other executors.
//! The bound follows `batch_size` because it already says how much one executor takes on at
//! once; a fixed number would be too much for small batches and too little for large ones. A
//! `task_limiter`, when given, is the only bound (the loop locks as soon as one of its permits
//! is free): give several executors the same one to share it, or one executor its own to
//! allow more (or fewer) runs in flight.
//!
//! # Stopping
//!
//! [`ExecutorTaskHandle::drain`] is the graceful stop: the loop stops locking at once, the runs
//! in flight finish and write their outcomes until a deadline (on tokio's clock), and the runs
//! still going then are aborted and counted ([`DrainOutcome`]); their executions stay locked
//! until the lease expires, and the timers watcher recovers them. [`ExecutorTaskHandle::close`]
//! stops only the loop and lets the runs go on in the background. A program seldom calls
//! either itself: the `node` crate spawns one executor per worker next to the timers watcher
//! and drains them all together.
//!
//! # Cancellation and other lost races
//!
//! An execution can be finished by someone else while its worker runs: `DbClient::cancel`
//! finishes it with `Err(Cancelled { reason })`, and the timers watcher finishes it with
//! `Err(PermanentTimeout)` when its lease expired without a retry left. The worker learns it
//! through [`WorkerContext::cancelled`], a future that completes with that result; it is
//! built on the executor's store (`DbAwait::wait_for_finished_result`), and the wait is
//! registered only when the worker first polls it, so a worker that never asks costs the
//! executor nothing more (the [`Cancellation`] handle holds two reference counts).
//!
//! Whether the worker stops early or not, whatever it reports afterwards is refused by the
//! store like any stale writer's write: `AlreadyFinished` for a finished execution,
//! `VersionMismatch` when the watcher moved the log on. [`concepts::is_lost_race`] is what
//! the executor asks: such a refusal is logged (`info` when the execution was finished by
//! someone else, `warn` when the watcher took over a run that outlived its lease) and never
//! retried; nothing is lost, the log already says what happened. The same holds for a
//! workflow-style worker whose own write was refused (`WorkerError::DbError`).
//!
//! Each run is a tracing span (`worker`, with the function as `otel.name`) carrying the
//! execution id, run id, function, executor id, component id and the submitter's
//! `traceparent` when its metadata has one. Linking that span to the remote OpenTelemetry
//! parent is out of scope for this crate.
//!
//! This crate knows no storage backend: it talks to `concepts::DbExecutor` only.

mod cancel;
mod exec_task;
mod local;
mod mapping;
mod metrics;
mod parked;
mod worker;

pub use cancel::Cancellation;
pub use exec_task::{
    DrainOutcome, ExecConfig, ExecTask, ExecutionProgress, ExecutorTaskHandle, LocallyServed,
    OUTCOME_WRITE_ATTEMPTS, Run, outcome_retry_pauses, outcome_write_attempts,
};
pub use local::{Answer, LocalExecutors, Reservation, start_if_written};
pub use mapping::{RunInfo, map_worker_result};
pub use parked::{PROBE_PAUSE_CAP, PROBE_PAUSE_FIRST, UNPARKED, Unparked, probe_pauses, unpark};
pub use worker::{FatalError, Probe, Worker, WorkerContext, WorkerError, WorkerResult};

use chrono::{DateTime, Utc};
use concepts::ClockFn;

/// The real clock: `chrono::Utc::now()`, truncated to whole microseconds (the precision every
/// backend stores, see [`concepts::truncate_to_micros`]). Everything else takes time from a [`ClockFn`], so
/// tests can substitute a simulated one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Now;

impl ClockFn for Now {
    #[expect(
        clippy::disallowed_methods,
        reason = "the one real clock of the workspace"
    )]
    fn now(&self) -> DateTime<Utc> {
        // Whole microseconds straight from the system clock: one conversion, where
        // `truncate_to_micros(Utc::now())` makes three. The date is the day's, kept from the
        // previous reading of this thread: turning a day number into a date is most of what
        // a conversion costs, and nearly every reading falls on the same day as the last.
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok();
        since_epoch
            .and_then(|elapsed| {
                let secs = elapsed.as_secs();
                let date = date_of_day(secs / SECONDS_PER_DAY)?;
                let time = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
                    u32::try_from(secs % SECONDS_PER_DAY).ok()?,
                    elapsed.subsec_micros() * 1_000,
                )?;
                Some(date.and_time(time).and_utc())
            })
            .unwrap_or_else(|| concepts::truncate_to_micros(Utc::now()))
    }
}

const SECONDS_PER_DAY: u64 = 86_400;

thread_local! {
    /// The day (since the Unix epoch) of this thread's last reading of [`Now`], and its date.
    static LAST_DAY: std::cell::Cell<(u64, chrono::NaiveDate)> =
        const { std::cell::Cell::new((u64::MAX, chrono::NaiveDate::MIN)) };
}

/// The date of `day` days after the Unix epoch.
fn date_of_day(day: u64) -> Option<chrono::NaiveDate> {
    LAST_DAY.with(|last| match last.get() {
        (last_day, date) if last_day == day => Some(date),
        _ => {
            // The epoch is day 719,163 of the common era (counted from 1 January of year 1
            // as day 1).
            let date = chrono::NaiveDate::from_num_days_from_ce_opt(
                i32::try_from(day.checked_add(719_163)?).ok()?,
            )?;
            last.set((day, date));
            Some(date)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{Now, SECONDS_PER_DAY, date_of_day};
    use chrono::DateTime;
    use concepts::ClockFn as _;

    #[test]
    fn the_kept_date_is_the_days_own() {
        // Days in any order, each asked twice: the kept date is replaced when the day changes.
        for day in [0, 20_000, 20_001, 0, 19_999, 20_000, 2_932_896] {
            for _ in 0..2 {
                let secs = i64::try_from(day * SECONDS_PER_DAY).unwrap();
                let expected = DateTime::from_timestamp(secs, 0).unwrap().date_naive();
                assert_eq!(date_of_day(day), Some(expected), "day {day}");
            }
        }
        // Past chrono's last date.
        assert_eq!(date_of_day(u64::MAX / SECONDS_PER_DAY), None);
    }

    #[test]
    fn now_is_whole_microseconds() {
        let now = Now.now();
        assert_eq!(now, concepts::truncate_to_micros(now));
        assert!(now.timestamp() > 1_700_000_000);
    }
}
