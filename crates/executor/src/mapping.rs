//! The executor's table: which single write records a worker's result (`docs/SEMANTICS.md`
//! §6).

use crate::worker::{WorkerError, WorkerResult};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEventInner, ExecutionId, FinishedExecutionError, JoinSetId, LockedExecution,
    OutcomeWrite, PARKED_UNTIL, PermanentFailureKind, SupportedFunctionReturnValue,
    ValidationError, Version, add_saturating, is_lost_race, retry,
};
use std::time::Duration;

/// What the table needs to know about a run besides its result: taken from the
/// [`LockedExecution`] before the worker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The version after the `Locked` event: where an activity's outcome is appended.
    pub version: Version,
    /// `TemporarilyFailed` + `TemporarilyTimedOut` events before this run.
    pub temporary_event_count: u32,
    /// How many failures are retried.
    pub max_retries: u32,
    /// The first retry's backoff.
    pub retry_exp_backoff: Duration,
    /// The parent and join set, for a child.
    pub parent: Option<(ExecutionId, JoinSetId)>,
}

impl From<&LockedExecution> for RunInfo {
    fn from(locked: &LockedExecution) -> Self {
        Self {
            execution_id: locked.execution_id.clone(),
            version: locked.next_version,
            temporary_event_count: locked.temporary_event_count,
            max_retries: locked.max_retries,
            retry_exp_backoff: locked.retry_exp_backoff,
            parent: locked.parent.clone(),
        }
    }
}

/// The one write that records `result` of `run`, at time `now`; `None` when nothing is written
/// (the worker wrote its own events, left the timeout to the watcher, or lost the database).
///
/// | worker result | retry left | written |
/// |---|---|---|
/// | `Ok(value, v)` | - | `Finished(Ok(value))` at `v` |
/// | `DbUpdatedByWorker` | - | nothing |
/// | `TemporaryTimeoutHandledByWatcher` | - | nothing |
/// | `TemporaryTimeout` | yes / no | `TemporarilyTimedOut` / `Finished(Err(PermanentTimeout))` |
/// | `ActivityTrap` | yes / no | `TemporarilyFailed` / `Finished(Err(PermanentFailure(ActivityTrap)))` |
/// | `ActivityReturnedError` | yes / no | `TemporarilyFailed` / `Finished(Ok(FallibleResultErr(value)))` |
/// | `TemporaryWorkflowTrap` | yes / no | `TemporarilyFailed` / `Finished(Err(PermanentFailure(WorkflowTrap)))` at `v` |
/// | `LimitReached` | - | `Unlocked` at `v`, using up no retry |
/// | `Parked` | - | `Unlocked` at `v` until [`concepts::PARKED_UNTIL`], using up no retry |
/// | `FatalError(f, v)` | - | `Finished(Err(f))` at `v` |
/// | `DbError` | - | nothing (logged; a lost race, as below) |
///
/// Activity variants are appended at `run.version`. Backoffs come from [`concepts::retry`] and
/// start at `now`. Every `Finished` of a child carries the response to its parent (see
/// [`OutcomeWrite`]).
///
/// A workflow trap is retried while retries are left, like any failure; once none is left it
/// is permanent, since a `TemporarilyFailed` always uses up a retry (`docs/SEMANTICS.md` §5).
#[must_use]
pub fn map_worker_result(
    result: WorkerResult,
    run: &RunInfo,
    now: DateTime<Utc>,
) -> Option<OutcomeWrite> {
    // Computed only for the failures that may be retried, not for the common `Ok`.
    let retry_at = || {
        retry::retry_backoff(
            run.temporary_event_count,
            run.max_retries,
            run.retry_exp_backoff,
        )
        .map(|backoff| add_saturating(now, backoff))
    };
    let error = match result {
        WorkerResult::Ok(value, version) => {
            let event = ExecutionEventInner::Finished { result: Ok(value) };
            return Some(write(run, version, now, event));
        }
        WorkerResult::DbUpdatedByWorker => return None,
        WorkerResult::Err(error) => error,
    };
    let (version, event) = match error {
        WorkerError::TemporaryTimeoutHandledByWatcher => return None,
        WorkerError::DbError(err) if is_lost_race(&err) => {
            log_lost_race("the worker's own write", &err);
            return None;
        }
        WorkerError::DbError(err) => {
            tracing::warn!(
                execution_id = %run.execution_id,
                "worker lost the database, nothing written; the lease expiry recovers: {err}"
            );
            return None;
        }
        WorkerError::TemporaryTimeout => {
            let event = match retry_at() {
                Some(backoff_expires_at) => {
                    ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at }
                }
                None => finished_err(FinishedExecutionError::PermanentTimeout),
            };
            (run.version, event)
        }
        WorkerError::ActivityTrap { reason, detail } => {
            let reason_full = format!("activity trap: {reason}");
            let kind = PermanentFailureKind::ActivityTrap;
            (
                run.version,
                failed(retry_at(), reason, reason_full, detail, kind),
            )
        }
        WorkerError::ActivityReturnedError { value, detail } => {
            let event = match retry_at() {
                Some(backoff_expires_at) => ExecutionEventInner::TemporarilyFailed {
                    backoff_expires_at,
                    reason_full: format!("activity returned error: {value}"),
                    reason_inner: "activity returned error".to_string(),
                    detail,
                },
                None => ExecutionEventInner::Finished {
                    result: Ok(SupportedFunctionReturnValue::FallibleResultErr(value)),
                },
            };
            (run.version, event)
        }
        WorkerError::TemporaryWorkflowTrap {
            reason,
            detail,
            version,
        } => {
            let reason_full = format!("workflow trap: {reason}");
            let kind = PermanentFailureKind::WorkflowTrap;
            (
                version,
                failed(retry_at(), reason, reason_full, detail, kind),
            )
        }
        WorkerError::LimitReached { reason, version } => {
            let backoff = retry::unlock_backoff(run.temporary_event_count, run.retry_exp_backoff);
            let backoff_expires_at = add_saturating(now, backoff);
            (
                version,
                ExecutionEventInner::Unlocked {
                    backoff_expires_at,
                    reason,
                },
            )
        }
        WorkerError::Parked { reason, version } => (
            version,
            ExecutionEventInner::Unlocked {
                backoff_expires_at: PARKED_UNTIL,
                reason,
            },
        ),
        WorkerError::FatalError(fatal, version) => (version, finished_err(fatal.into())),
    };
    Some(write(run, version, now, event))
}

/// Logs a write refused because someone else wrote first ([`is_lost_race`]): nothing is
/// lost, the log already says what happened. A cancellation (or the watcher's permanent
/// timeout) finished the execution: expected, `info`. The log moved on under a live lease
/// holder (the watcher timed out a run that outlived its lease): `warn`, since a longer
/// `lock_expiry` would have avoided the wasted run.
pub(crate) fn log_lost_race(what: &str, err: &DbError) {
    if matches!(err, DbError::Validation(ValidationError::AlreadyFinished)) {
        tracing::info!(
            "{what} was refused, the execution was already finished by someone else \
             (cancelled, or timed out by the watcher); nothing more is written: {err}"
        );
    } else {
        tracing::warn!(
            "{what} was refused, the log moved on (the watcher resolved the lease); nothing \
             more is written: {err}"
        );
    }
}

fn write(
    run: &RunInfo,
    version: Version,
    now: DateTime<Utc>,
    event: ExecutionEventInner,
) -> OutcomeWrite {
    OutcomeWrite::new(
        run.execution_id.clone(),
        version,
        now,
        event,
        run.parent.as_ref(),
    )
}

fn finished_err(error: FinishedExecutionError) -> ExecutionEventInner {
    ExecutionEventInner::Finished { result: Err(error) }
}

/// `TemporarilyFailed` while a retry is left, else a permanent failure of `kind`.
fn failed(
    retry_at: Option<DateTime<Utc>>,
    reason_inner: String,
    reason_full: String,
    detail: Option<String>,
    kind: PermanentFailureKind,
) -> ExecutionEventInner {
    match retry_at {
        Some(backoff_expires_at) => ExecutionEventInner::TemporarilyFailed {
            backoff_expires_at,
            reason_full,
            reason_inner,
            detail,
        },
        None => finished_err(FinishedExecutionError::PermanentFailure {
            reason_inner,
            reason_full,
            kind,
            detail,
        }),
    }
}

#[cfg(test)]
mod tests;
