//! `sleeper`: a workflow that sleeps durably and reports how late it woke.
//!
//! `ctx.sleep` records a delay request; a sleep longer than the run's lease gives up the run
//! at once, so the execution holds no worker, task or lease while it sleeps and survives a
//! restart of every process. The timers watcher delivers the delay when it is due, and the
//! next run replays the log up to the sleep and goes on. The two `ctx.now()` calls are
//! recorded too: a replay sees the times of the first run.

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use workflow::{Function, WorkflowCtx, WorkflowError};

/// The workflow: `{"sleep_ms": 2000}` in, a [`SleeperValue`] out.
pub const SLEEPER: Function<SleeperParams, SleeperValue> =
    Function::new("stele:demo/workflows.sleeper");

/// The parameters of `sleeper`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SleeperParams {
    /// How long to sleep.
    pub sleep_ms: u64,
}

/// The value of `sleeper`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SleeperValue {
    /// How long it slept.
    pub slept_ms: u64,
    /// How much later than asked the run after the sleep began.
    pub woke_late_ms: i64,
}

/// The workflow's code.
///
/// # Errors
/// None of its own.
pub async fn sleeper(
    ctx: WorkflowCtx,
    params: SleeperParams,
) -> Result<SleeperValue, WorkflowError<String>> {
    let asleep_at = ctx.now().await;
    ctx.sleep(Duration::from_millis(params.sleep_ms)).await;
    let woke_at = ctx.now().await;
    let asked = TimeDelta::milliseconds(i64::try_from(params.sleep_ms).unwrap_or(i64::MAX));
    Ok(SleeperValue {
        slept_ms: params.sleep_ms,
        woke_late_ms: (woke_at - asleep_at - asked).num_milliseconds(),
    })
}
