//! The scheduler's pass: the due ticks of every schedule fired (`DbSchedules::fire_schedules`,
//! a thousand schedules to a transaction, until none is left due), and the previous runs that
//! `cancel-other` schedules replace cancelled, so that the next round fires their ticks. Any
//! number of processes may pass at once: the store fires each tick once.

use chrono::{DateTime, Utc};
use concepts::{
    CancelRequest, DbClient, DbError, DbSchedules,
    schedule::{FireOutcome, FireSchedulesRequest},
};
use tracing::warn;

/// How many schedules one `fire_schedules` write handles.
pub const SCHEDULES_PER_WRITE: usize = 1_000;

/// The most rounds of one pass (a round is a write, and the cancellations it asked for):
/// past it the rest waits for the next pass.
const MAX_ROUNDS: usize = 100;

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulePass {
    /// Executions fired.
    pub fired: usize,
    /// Ticks recorded as skipped.
    pub skipped: u64,
    /// Previous runs cancelled for a `cancel-other` schedule's tick.
    pub cancelled: usize,
}

/// One pass at `now` over the due schedules. Fails when a `fire_schedules` write fails; a
/// cancellation that fails is logged, and its tick waits for the next pass.
pub async fn fire_schedules<D>(db: &D, now: DateTime<Utc>) -> Result<SchedulePass, DbError>
where
    D: DbSchedules + DbClient + ?Sized,
{
    let mut pass = SchedulePass::default();
    for _ in 0..MAX_ROUNDS {
        let req = FireSchedulesRequest {
            now,
            limit: SCHEDULES_PER_WRITE,
        };
        let FireOutcome {
            fired,
            skipped,
            to_cancel,
            more,
            ..
        } = db.fire_schedules(req).await?;
        pass.fired += fired.len();
        pass.skipped += skipped;
        let (mut cancelled, mut failed) = (0, false);
        for (name, execution_id) in to_cancel {
            let req = CancelRequest {
                execution_id: execution_id.clone(),
                now,
                reason: format!(
                    "schedule {name} fired its next tick (overlap policy cancel-other)"
                ),
            };
            match db.cancel(req).await {
                Ok(_) => cancelled += 1,
                Err(err) => {
                    failed = true;
                    warn!(schedule = %name, %execution_id, "cannot cancel the previous run: {err}");
                }
            }
        }
        pass.cancelled += cancelled;
        // Another round fires what the cancellations freed, unless one failed: its tick
        // waits for the next pass.
        if failed || (!more && cancelled == 0) {
            break;
        }
    }
    if concepts::metrics::enabled() && pass.fired > 0 {
        metrics::counter!(concepts::metrics::SCHEDULE_FIRES)
            .increment(u64::try_from(pass.fired).unwrap_or(u64::MAX));
    }
    Ok(pass)
}
