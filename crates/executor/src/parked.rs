//! Parked executions and their prober.
//!
//! A worker that cannot get further by running an execution again (a workflow whose replay
//! diverges from its log) answers [`WorkerError::Parked`](crate::WorkerError::Parked): the
//! execution is written `Unlocked` until [`concepts::PARKED_UNTIL`], one event, and no executor
//! locks it by itself. [`unpark`] is the retry that writes nothing while it fails: it reads
//! each parked execution of a worker's functions, asks [`Worker::probe`] whether a run would
//! proceed now, and unlocks only those, due at once. A node runs it for each of its executors
//! with the pauses of [`probe_pauses`], from its start: a node started with fixed code takes
//! its executions up within its first pass, and a node whose code still diverges costs reads
//! only, fewer and fewer of them.

use crate::worker::{Probe, Worker};
use concepts::{
    ClockFn, DbClient, DbClientExt as _, DbError, DbExecutor, ListExecutionsFilter, PARKED_UNTIL,
    is_lost_race,
};
use std::time::Duration;
use tracing::{debug, info};

/// The first pause between two passes of [`unpark`].
pub const PROBE_PAUSE_FIRST: Duration = Duration::from_secs(1);

/// The longest pause between two passes of [`unpark`].
pub const PROBE_PAUSE_CAP: Duration = Duration::from_secs(300);

/// The pauses between the passes of [`unpark`]: [`PROBE_PAUSE_FIRST`], doubling up to
/// [`PROBE_PAUSE_CAP`], then the cap for ever.
pub fn probe_pauses() -> impl Iterator<Item = Duration> {
    std::iter::successors(Some(PROBE_PAUSE_FIRST), |pause| {
        Some(pause.saturating_mul(2).min(PROBE_PAUSE_CAP))
    })
}

/// What one pass of [`unpark`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unparked {
    /// Parked executions probed.
    pub probed: usize,
    /// Of those, the ones unlocked.
    pub unlocked: usize,
}

/// The `reason` of the `Unlocked` event that takes a parked execution up again.
pub const UNPARKED: &str = "unparked: a probe found that a run gets further now (other code, or \
                            other responses, than when it was parked)";

/// One pass: every parked execution of `worker`'s functions is read and probed
/// ([`Worker::probe`]); each that proceeds is written `Unlocked`, due at the clock's present and
/// no retry used, at the version read, so that a write made since (a cancellation, another
/// node's unparking) refuses it. One that stays parked is not written to.
///
/// Finding them is one indexed read per function (the executions pending from
/// [`PARKED_UNTIL`]), a page at a time.
///
/// # Errors
/// The store could not be read or written; what was unlocked before stays unlocked.
pub async fn unpark<D, C>(db: &D, worker: &dyn Worker, clock: &C) -> Result<Unparked, DbError>
where
    D: DbClient + DbExecutor + ?Sized,
    C: ClockFn,
{
    let mut pass = Unparked::default();
    for ffqn in worker.exported_functions() {
        let filter = ListExecutionsFilter {
            ffqn: Some(ffqn.clone()),
            pending_from: Some(PARKED_UNTIL),
            ..ListExecutionsFilter::default()
        };
        let parked = db.list_all_executions(filter).await?;
        for row in parked {
            let log = db.get(&row.execution_id).await?;
            if !log.pending_state.is_parked() {
                continue;
            }
            pass.probed += 1;
            match worker.probe(&log).await {
                Probe::Stays(reason) => {
                    debug!(execution_id = %log.execution_id, "stays parked: {reason}");
                }
                Probe::Proceeds => {
                    let write = log.unlock_now(clock.now(), UNPARKED.to_owned());
                    match db.append_outcome(write).await {
                        Ok(_) => {
                            info!(execution_id = %log.execution_id, "{UNPARKED}");
                            pass.unlocked += 1;
                        }
                        Err(err) if is_lost_race(&err) => {}
                        Err(err) => return Err(err),
                    }
                }
            }
        }
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pauses_double_from_one_second_up_to_five_minutes() {
        let pauses: Vec<u64> = probe_pauses().take(12).map(|p| p.as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
    }
}
