//! `sleeper`: a workflow that sleeps durably and finishes when the timers watcher wakes it.
//!
//! The pattern: the first run records `JoinSetCreate`, a
//! `JoinSetRequest::DelayRequest { delay_id, expires_at }` and a `JoinNext` with
//! `run_expires_at = now`, in one `append_batch`, and gives up its run
//! ([`WorkerResult::DbUpdatedByWorker`]). The execution is now `BlockedByJoinSet` and holds no
//! worker, no task, no lease: the sleep survives a restart of every process. When the delay
//! expires, the timers watcher stores a `DelayFinished` response (once: a duplicate is
//! refused), the execution becomes pending, and the next run replays the history, finds the
//! response and finishes.
//!
//! The delay id is derived from the execution id and the time of the request, so it names
//! this one request; the value reports how late the wake-up came (`woke_late_ms`: the
//! response's time minus `expires_at`, both read from the log).

use super::{decode_params, dice, history_batch, nondeterminism, ok};
use async_trait::async_trait;
use concepts::{
    ClockFn, ClosingStrategy, DbWorkflow, DelayId, FunctionFqn, HistoryEvent, JoinSetId,
    JoinSetRequest, JoinSetResponse, add_saturating,
};
use executor::{Worker, WorkerContext, WorkerError, WorkerResult};
use serde::{Deserialize, Serialize};
use std::{sync::Arc, time::Duration};

/// The parameters of `sleeper`: `{"sleep_ms": 2000}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SleeperParams {
    /// How long to sleep.
    pub sleep_ms: u64,
}

/// The worker of `sleeper`. Its value is `{"slept_ms": s, "woke_late_ms": l}`.
pub struct SleeperWorker<C: ClockFn> {
    ffqns: Vec<FunctionFqn>,
    db: Arc<dyn DbWorkflow>,
    clock: C,
}

impl<C: ClockFn> SleeperWorker<C> {
    /// A worker that runs `ffqn` as `sleeper`, writing its history to `db`.
    #[must_use]
    pub fn new(ffqn: FunctionFqn, db: Arc<dyn DbWorkflow>, clock: C) -> Self {
        Self {
            ffqns: vec![ffqn],
            db,
            clock,
        }
    }

    /// The join set of the delay: `o:sleep`.
    ///
    /// # Panics
    /// Never: the id is fixed and legal.
    #[must_use]
    pub fn join_set() -> JoinSetId {
        "o:sleep".parse().expect("a legal join set id")
    }

    async fn fall_asleep(&self, ctx: &WorkerContext, sleep: Duration) -> WorkerResult {
        let now = self.clock.now();
        let join_set_id = Self::join_set();
        let id = ctx.execution_id.as_str().as_bytes();
        let random = (u128::from(dice::hash64(&[id, b"delay-hi"])) << 64)
            | u128::from(dice::hash64(&[id, b"delay-lo"]));
        let timestamp_ms = u64::try_from(now.timestamp_millis()).unwrap_or(0);
        let events = vec![
            HistoryEvent::JoinSetCreate {
                join_set_id: join_set_id.clone(),
                closing_strategy: ClosingStrategy::Complete,
            },
            HistoryEvent::JoinSetRequest {
                join_set_id: join_set_id.clone(),
                request: JoinSetRequest::DelayRequest {
                    delay_id: DelayId::from_parts(timestamp_ms, random),
                    expires_at: add_saturating(now, sleep),
                },
            },
            HistoryEvent::JoinNext {
                join_set_id,
                run_expires_at: now,
                closing: false,
            },
        ];
        match self
            .db
            .append_batch(history_batch(ctx, now, events, Vec::new()))
            .await
        {
            Ok(_) => WorkerResult::DbUpdatedByWorker,
            Err(err) => WorkerResult::Err(WorkerError::DbError(err)),
        }
    }
}

#[async_trait]
impl<C: ClockFn> Worker for SleeperWorker<C> {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let params: SleeperParams = match decode_params(&ctx) {
            Ok(params) => params,
            Err(fatal) => return fatal,
        };
        let join_set_id = Self::join_set();
        let recorded = match ctx.event_history.as_slice() {
            [] => {
                return self
                    .fall_asleep(&ctx, Duration::from_millis(params.sleep_ms))
                    .await;
            }
            [
                HistoryEvent::JoinSetCreate {
                    join_set_id: created,
                    ..
                },
                HistoryEvent::JoinSetRequest {
                    join_set_id: requested,
                    request:
                        JoinSetRequest::DelayRequest {
                            delay_id,
                            expires_at,
                        },
                },
                HistoryEvent::JoinNext {
                    join_set_id: awaited,
                    ..
                },
            ] if *created == join_set_id
                && *requested == join_set_id
                && *awaited == join_set_id =>
            {
                Some((*delay_id, *expires_at))
            }
            _ => None,
        };
        let Some((delay_id, expires_at)) = recorded else {
            return nondeterminism(
                "the recorded history is not one delay request and its JoinNext".to_string(),
                ctx.version,
            );
        };
        let woke_at = ctx.responses.iter().find_map(|response| {
            let fired = response.event.join_set_id == join_set_id
                && response.event.event == JoinSetResponse::DelayFinished { delay_id };
            fired.then_some(response.created_at)
        });
        match woke_at {
            Some(woke_at) => ok(
                serde_json::json!({
                    "slept_ms": params.sleep_ms,
                    "woke_late_ms": (woke_at - expires_at).num_milliseconds(),
                }),
                ctx.version,
            ),
            None => nondeterminism(
                format!("replayed before delay {delay_id} fired"),
                ctx.version,
            ),
        }
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}
