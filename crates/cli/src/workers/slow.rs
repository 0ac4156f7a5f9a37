//! `slow`: an activity that sometimes outlives its lease, is timed out by the timers watcher,
//! and is finished by a later run.
//!
//! The pattern: every run holds a lease until [`WorkerContext::execution_deadline`]. A run
//! that is still busy past it (a hung call, a stalled machine, a process that died) is
//! resolved by the timers watcher, never by the executor: once the lease has expired (plus
//! the watcher's leeway), the watcher appends `TemporarilyTimedOut` with an exponential
//! backoff while retries are left, or `Finished(Err(PermanentTimeout))` when none are. The
//! execution becomes pending again and a later run does the work.
//!
//! The stale run does not know it lost its lease: when it finally returns, the executor tries
//! to append its `Finished` at the version the run was given, and the store refuses it
//! (`VersionMismatch`: the watcher appended first). Nothing is overwritten and nothing is
//! finished twice; the executor logs the refusal and moves on. That optimistic version check
//! is the whole fencing mechanism.
//!
//! Which attempts overrun is decided by [`dice::chance`] from the execution id and the attempt.

use super::{decode_params, dice, ok};
use async_trait::async_trait;
use concepts::{ClockFn, FunctionFqn};
use executor::{Worker, WorkerContext, WorkerResult};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The parameters of `slow`: `{"timeout_probability": 0.3, "work_ms": 80}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowParams {
    /// The probability that an attempt overruns its lease, in `[0, 1]`.
    pub timeout_probability: f64,
    /// How long an attempt that does not overrun works (sleeps).
    #[serde(default)]
    pub work_ms: u64,
}

/// The worker of `slow`. Its value is `{"attempts": n, "work_ms": w}`: the attempt that
/// finished in time, counting from 1.
#[derive(Debug, Clone)]
pub struct SlowWorker<C: ClockFn> {
    ffqns: Vec<FunctionFqn>,
    clock: C,
    overrun: Duration,
}

impl<C: ClockFn> SlowWorker<C> {
    /// A worker that runs `ffqn` as `slow`. An attempt that overruns works until `overrun`
    /// after its deadline: choose more than the timers watcher's leeway plus its tick, so that
    /// the watcher always acts first.
    #[must_use]
    pub fn new(ffqn: FunctionFqn, clock: C, overrun: Duration) -> Self {
        Self {
            ffqns: vec![ffqn],
            clock,
            overrun,
        }
    }
}

#[async_trait]
impl<C: ClockFn> Worker for SlowWorker<C> {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let params: SlowParams = match decode_params(&ctx) {
            Ok(params) => params,
            Err(fatal) => return fatal,
        };
        let attempt = ctx.temporary_event_count;
        let overruns = dice::chance(
            &ctx.execution_id,
            attempt,
            "slow",
            params.timeout_probability,
        );
        let work = if overruns {
            let until_deadline = (ctx.execution_deadline - self.clock.now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            until_deadline + self.overrun
        } else {
            Duration::from_millis(params.work_ms)
        };
        tokio::time::sleep(work).await;
        // After an overrun this result is stale: the executor's write of it is refused by the
        // version check, because the watcher already timed the run out.
        ok(
            serde_json::json!({ "attempts": attempt + 1, "work_ms": params.work_ms }),
            ctx.version,
        )
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}
