//! Example workers: one template per pattern of durable execution.
//!
//! | module | kind | pattern |
//! |---|---|---|
//! | [`flaky`] | activity | fails at random; the executor retries it with exponential backoff |
//! | [`slow`] | activity | sometimes outlives its lease; the timers watcher times it out, a later run finishes it |
//! | [`fanout`] | workflow | opens a join set, submits child executions, awaits them all, summarizes |
//! | [`sleeper`] | workflow | sleeps durably: a delay request that the timers watcher fires |
//! | [`approval`] | workflow | awaits a durable promise that an outside caller completes (`stele executions complete`) |
//!
//! An *activity* does its work and reports a [`executor::WorkerResult`]; the executor writes
//! the outcome (one event) for it. `flaky` and `slow` implement [`executor::Worker`] by hand
//! to show that contract; the `workflow` crate's `ActivityWorker` does the same for an
//! `async fn`. A *workflow* (`fanout`, `sleeper`, `approval`) is an `async fn(WorkflowCtx, P)` run by
//! `workflow::WorkflowWorker`, which records each step in the log, waits for responses and
//! replays the log after an interruption; the example `order` (`cargo run --example order`)
//! is a larger one.
//!
//! Randomness is reproducible: it is drawn from a hash of the execution id, the attempt and a
//! label ([`dice`]), so a run that is repeated after a crash makes the same choice. Time comes
//! only from the [`concepts::ClockFn`] a worker is given.

pub mod approval;
pub mod dice;
pub mod fanout;
pub mod flaky;
pub mod sleeper;
pub mod slow;

use concepts::{Json, SupportedFunctionReturnValue, Version};
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

#[cfg(test)]
mod tests;
