//! `flaky`: an activity that fails at random and is retried with exponential backoff.
//!
//! The pattern: an activity that hits a transient failure returns
//! [`WorkerError::ActivityTrap`]. It writes nothing itself; the executor appends
//! `TemporarilyFailed` with `backoff_expires_at = now + retry_exp_backoff * 2^(n-1)` while the
//! execution has retries left (so the n-th retry waits twice as long as the one before), and
//! `Finished(Err(PermanentFailure))` when it has none. A successful attempt returns
//! [`WorkerResult::Ok`] at the context's version and the executor appends `Finished`.
//!
//! Whether an attempt fails is decided by [`dice::chance`] from the execution id and the
//! attempt number, so the same attempt fails the same way if it is ever run again.

use super::{decode_params, dice, ok};
use async_trait::async_trait;
use concepts::FunctionFqn;
use executor::{Worker, WorkerContext, WorkerError, WorkerResult};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The parameters of `flaky`: `{"fail_probability": 0.35, "work_ms": 20}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlakyParams {
    /// The probability that an attempt fails, in `[0, 1]`.
    pub fail_probability: f64,
    /// How long an attempt works (sleeps) before it succeeds or fails.
    #[serde(default)]
    pub work_ms: u64,
}

/// The worker of `flaky`. Its value is `{"attempts": n, "work_ms": w}`: the attempt that
/// succeeded, counting from 1.
#[derive(Debug, Clone)]
pub struct FlakyWorker {
    ffqns: Vec<FunctionFqn>,
}

impl FlakyWorker {
    /// A worker that runs `ffqn` as `flaky`.
    #[must_use]
    pub fn new(ffqn: FunctionFqn) -> Self {
        Self { ffqns: vec![ffqn] }
    }
}

#[async_trait]
impl Worker for FlakyWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let params: FlakyParams = match decode_params(&ctx) {
            Ok(params) => params,
            Err(fatal) => return fatal,
        };
        let attempt = ctx.temporary_event_count;
        if params.work_ms > 0 {
            tokio::time::sleep(Duration::from_millis(params.work_ms)).await;
        }
        if dice::chance(&ctx.execution_id, attempt, "flaky", params.fail_probability) {
            return WorkerResult::Err(WorkerError::ActivityTrap {
                reason: format!("simulated failure on attempt {}", attempt + 1),
                detail: Some(format!(
                    "the attempt's roll fell below fail_probability {}",
                    params.fail_probability
                )),
            });
        }
        ok(
            serde_json::json!({ "attempts": attempt + 1, "work_ms": params.work_ms }),
            ctx.version,
        )
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}
