//! Example workers: one template per pattern of durable execution.
//!
//! | module | kind | pattern |
//! |---|---|---|
//! | [`flaky`] | activity | fails at random; the executor retries it with exponential backoff |
//! | [`slow`] | activity | sometimes outlives its lease; the timers watcher times it out, a later run finishes it |
//! | [`fanout`] | workflow | opens a join set, submits child executions, awaits them all, summarizes |
//! | [`sleeper`] | workflow | sleeps durably: a delay request that the timers watcher fires |
//!
//! An *activity* does its work and reports a [`executor::WorkerResult`]; the executor writes
//! the outcome (one event) for it. A *workflow-style* worker records its own progress as
//! history events ([`concepts::DbWorkflow::append_batch`]), gives up its run while it waits
//! (`JoinNext` with `run_expires_at = now`, then [`executor::WorkerResult::DbUpdatedByWorker`]),
//! and is replayed from the start by whichever executor locks it next: its
//! [`executor::WorkerContext`] then carries the recorded `event_history` and the join set
//! `responses`, and the worker must make the same decisions again (deterministic replay).
//!
//! Randomness is reproducible: it is drawn from a hash of the execution id, the attempt and a
//! label ([`dice`]), so a run that is repeated after a crash makes the same choice. Time comes
//! only from the [`concepts::ClockFn`] a worker is given.

pub mod dice;
pub mod fanout;
pub mod flaky;
pub mod sleeper;
pub mod slow;

use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, CreateRequest, ExecutionEventInner, HistoryEvent, Json,
    SupportedFunctionReturnValue, Version,
};
use executor::{FatalError, WorkerContext, WorkerError, WorkerResult};
use serde::de::DeserializeOwned;

/// Decodes the execution's parameters (a JSON object) into `T`.
///
/// Parameters that do not fit are not worth retrying: the result is a
/// [`FatalError::ParamsParsingError`] that finishes the execution at once.
///
/// # Errors
/// The fatal [`WorkerResult`] to return when the parameters do not decode.
pub fn decode_params<T: DeserializeOwned>(ctx: &WorkerContext) -> Result<T, WorkerResult> {
    serde_json::from_value(ctx.params.0.clone()).map_err(|err| {
        let fatal = FatalError::ParamsParsingError {
            reason: format!("{} expects other parameters: {err}", ctx.ffqn),
        };
        WorkerResult::Err(WorkerError::FatalError(fatal, ctx.version))
    })
}

/// A successful result carrying `value`, to be written at `version`.
#[must_use]
pub fn ok(value: serde_json::Value, version: Version) -> WorkerResult {
    WorkerResult::Ok(
        SupportedFunctionReturnValue::InfallibleOrResultOk(Json(value)),
        version,
    )
}

/// A fatal "the replay diverged from the recorded history" result.
#[must_use]
pub fn nondeterminism(reason: String, version: Version) -> WorkerResult {
    let fatal = FatalError::NondeterminismDetected { reason };
    WorkerResult::Err(WorkerError::FatalError(fatal, version))
}

/// Wraps history events as log events, for `append_batch`.
#[must_use]
pub fn history(events: Vec<HistoryEvent>) -> Vec<ExecutionEventInner> {
    events
        .into_iter()
        .map(|event| ExecutionEventInner::HistoryEvent { event })
        .collect()
}

/// The `append_batch` request of a run: `events` (history events) appended at the run's
/// version, at `now`, creating `children` in the same transaction.
#[must_use]
pub fn history_batch(
    ctx: &WorkerContext,
    now: DateTime<Utc>,
    events: Vec<HistoryEvent>,
    children: Vec<CreateRequest>,
) -> AppendBatchRequest {
    AppendBatchRequest {
        execution_id: ctx.execution_id.clone(),
        version: ctx.version,
        now,
        events: history(events),
        children,
    }
}

#[cfg(test)]
mod tests;
