//! How a run ends once its worker returned ([`end_of_run`]), and its outcome write: its
//! retries with backoff while the run's lease lasts, and how a retry refused as a lost race
//! tells an earlier attempt that committed from a lost race.

use crate::{
    mapping::{RunInfo, log_lost_race, map_worker_result},
    worker::WorkerResult,
};
use chrono::{DateTime, Utc};
use concepts::{DbError, DbExecutor, ExecutionEventInner, OutcomeWrite, Version, is_lost_race};
use futures_util::future::BoxFuture;
use std::{sync::Arc, time::Duration};
use tracing::{debug, warn};

/// How a run ends once its worker returned: the outcome's write to finish, the `Finished`
/// handed to `answer` (taken only then: one left unused is dropped with the run, after its
/// write), the worker's own write, or nothing; with the metrics' outcome to record.
#[expect(
    clippy::large_enum_variant,
    reason = "held once, in place, in the run's future: boxed, the write would cost an \
              allocation per run"
)]
pub(super) enum RunEnd<'m> {
    /// The outcome's write, its first attempt made ([`Writing::finish`]).
    Write(Writing<'m>, Recorded<'m>),
    /// The `Finished` went to the parent's run.
    Answered(Recorded<'m>),
    /// The worker wrote its own events.
    ByWorker,
    /// Nothing to write.
    Nothing,
}

/// The meters of a run's function and its outcome, when metrics are recorded.
type Recorded<'m> = Option<(
    &'m Arc<crate::metrics::FunctionMeters>,
    crate::metrics::Outcome,
)>;

/// [`RunEnd`] of a run whose worker returned `result` at `now`.
pub(super) fn end_of_run<'a>(
    db: &'a dyn DbExecutor,
    result: WorkerResult,
    run: &RunInfo,
    now: DateTime<Utc>,
    lock_expires_at: DateTime<Utc>,
    answer: &mut Option<crate::local::Answer>,
    meters: Option<&'a Arc<crate::metrics::FunctionMeters>>,
) -> RunEnd<'a> {
    let by_worker = matches!(result, WorkerResult::DbUpdatedByWorker);
    let Some(write) = map_worker_result(result, run, now) else {
        return if by_worker {
            RunEnd::ByWorker
        } else {
            RunEnd::Nothing
        };
    };
    let recorded = meters.map(|meters| (meters, crate::metrics::Outcome::of(&write.event)));
    // Past its lease the watcher may have resolved it otherwise: written, the version check
    // fences it; handed over, nothing would.
    if now < lock_expires_at
        && matches!(write.event, ExecutionEventInner::Finished { .. })
        && let Some(to) = answer.take()
    {
        return match to.send(write) {
            Ok(()) => RunEnd::Answered(recorded),
            Err(write) => RunEnd::Write(Writing::start(db, write), recorded),
        };
    }
    RunEnd::Write(Writing::start(db, write), recorded)
}

/// What is left of a lease ending at `lock_expires_at` at `now`.
pub(super) fn lease_left(lock_expires_at: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (lock_expires_at - now).to_std().unwrap_or_default()
}

/// The fewest times a run's outcome is written when the store answers with a retriable error
/// (busy, connection lost), however little of its lease is left.
pub const OUTCOME_WRITE_ATTEMPTS: u32 = 4;
/// The pause before the first retry of an outcome write; it doubles with each retry.
const OUTCOME_RETRY_BACKOFF: Duration = Duration::from_millis(20);
/// The longest pause between two attempts of an outcome write.
const OUTCOME_RETRY_CAP: Duration = Duration::from_secs(1);

/// The pauses before the retries of an outcome write whose run has `lease_left` of its lease:
/// 20 ms, doubling up to 1 s, as long as their sum stays within the lease, and at least
/// [`OUTCOME_WRITE_ATTEMPTS`] attempts in all. A store that comes back before the lease ends
/// (a PostgreSQL server restarted, say) gets the outcome; after it the watcher times the
/// lease out, and a late retry is fenced by the version check like any other write.
pub fn outcome_retry_pauses(lease_left: Duration) -> impl Iterator<Item = Duration> {
    let pauses = std::iter::successors(Some(OUTCOME_RETRY_BACKOFF), |pause| {
        Some(pause.saturating_mul(2).min(OUTCOME_RETRY_CAP))
    });
    let mut waited = Duration::ZERO;
    pauses.enumerate().map_while(move |(retry, pause)| {
        waited = waited.saturating_add(pause);
        let within_minimum = retry + 1 < OUTCOME_WRITE_ATTEMPTS as usize;
        (within_minimum || waited <= lease_left).then_some(pause)
    })
}

/// How many times an outcome write is attempted when every attempt meets a retriable error,
/// with `lease_left` of its run's lease ([`outcome_retry_pauses`]).
#[must_use]
pub fn outcome_write_attempts(lease_left: Duration) -> u32 {
    let retries = outcome_retry_pauses(lease_left).count();
    u32::try_from(retries).unwrap_or(u32::MAX).saturating_add(1)
}

/// A run's outcome write: its first attempt (a boxed future, made when the write starts) and
/// the copy of the write kept for a retry.
///
/// Plain data, not a future: the run's future holds it once, in place, and awaits
/// [`Writing::finish`], which borrows it. A future holding the write would be moved into the
/// future awaiting it, its room taken twice; and the copy is not boxed, as an allocation and
/// its free cost more than its bytes in the run's future (which stays within the allocator's
/// small blocks, served much faster than large ones).
pub(super) struct Writing<'d> {
    first: BoxFuture<'d, Result<Version, DbError>>,
    write: OutcomeWrite,
}

impl<'d> Writing<'d> {
    /// Starts writing `write`: its first attempt is made (not awaited yet).
    pub(super) fn start(db: &'d dyn DbExecutor, write: OutcomeWrite) -> Self {
        let copy = write.clone();
        Self {
            first: db.append_outcome(write),
            write: copy,
        }
    }

    /// Awaits the first attempt and, if it failed, retries a retriable failure with backoff
    /// until the run's lease (`lease_left()` of it, asked only once an attempt failed: the
    /// usual first attempt needs no date arithmetic) is over ([`outcome_retry_pauses`]): a
    /// transient error must not cost the whole lease. A retry that finds the log moved on
    /// (`is_lost_race`) is done either way: the watcher resolved the lease, or an earlier
    /// attempt committed although its reply was lost. True when it was written.
    pub(super) async fn finish(
        &mut self,
        db: &'d dyn DbExecutor,
        lease_left: impl FnOnce() -> Duration + Send,
    ) -> bool {
        match (&mut self.first).await {
            Ok(_) => {
                debug!("wrote {}", self.write.event.variant_name());
                true
            }
            // Out of line and boxed: the retries (and their timers) cost the run's future
            // nothing on the common path.
            Err(err) => Box::pin(after_failed_write(db, &self.write, err, lease_left())).await,
        }
    }
}

/// True when a retry wrote it (or an earlier attempt whose reply was lost had).
async fn after_failed_write(
    db: &dyn DbExecutor,
    write: &OutcomeWrite,
    mut err: DbError,
    lease_left: Duration,
) -> bool {
    let event = write.event.variant_name();
    let mut pauses = outcome_retry_pauses(lease_left);
    let mut attempt = 1;
    loop {
        if is_lost_race(&err) {
            if attempt > 1 && written_earlier(db, write).await {
                debug!("{event} was written by an earlier attempt whose reply was lost");
                return true;
            }
            log_lost_race(&format!("the {event} write"), &err);
            return false;
        }
        let pause = match pauses.next() {
            Some(pause) if err.is_retriable() => pause,
            _ => {
                warn!(
                    "cannot write {event} after {attempt} attempts, the lease expiry recovers: \
                     {err}"
                );
                return false;
            }
        };
        debug!("cannot write {event} (attempt {attempt}), retrying in {pause:?}: {err}");
        tokio::time::sleep(pause).await;
        attempt += 1;
        match db.append_outcome(write.clone()).await {
            Ok(_) => {
                debug!("wrote {event} at attempt {attempt}");
                return true;
            }
            Err(next) => err = next,
        }
    }
}

/// True when the log holds `write` although a retry of it was refused as a lost race: an
/// earlier attempt committed and only its reply was lost (an ambiguous commit), so nobody
/// else resolved the lease. Known for a `Finished` (its result can be read back); any other
/// event counts as not known.
pub(super) async fn written_earlier(db: &dyn DbExecutor, write: &OutcomeWrite) -> bool {
    let ExecutionEventInner::Finished { result } = &write.event else {
        return false;
    };
    db.wait_for_finished_result(&write.execution_id, Some(Duration::ZERO))
        .await
        .is_ok_and(|stored| stored == *result)
}
