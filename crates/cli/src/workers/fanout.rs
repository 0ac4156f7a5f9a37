//! `fanout`: a workflow that submits child executions into a join set, awaits them all, and
//! finishes with a summary of their results.
//!
//! The pattern, run by run:
//!
//! 1. The first run (empty `event_history`) records `JoinSetCreate`, one
//!    `JoinSetRequest::ChildExecutionRequest` per child and a first `JoinNext`, and creates the
//!    children, all in ONE transaction (one `append_batch` with `children`): either the
//!    parent's history and every child exist, or none of it does. The `JoinNext` carries
//!    `run_expires_at = now`: the worker gives up its run (returns
//!    [`WorkerResult::DbUpdatedByWorker`]) and the execution is `BlockedByJoinSet` until the
//!    first child finishes.
//! 2. A child that finishes, for any reason, appends `ChildExecutionFinished` to the parent in
//!    the same transaction as its own `Finished`, which makes the parent pending again.
//! 3. Each later run replays: it checks that the recorded history is what it would have
//!    written (otherwise the code changed under a running workflow: nondeterminism), counts
//!    the `JoinNext` events it recorded (the k-th `JoinNext` is answered by the k-th response),
//!    records one `JoinNext` for every response that has arrived since, and either awaits the
//!    next one (another `JoinNext`, giving up its run again) or, once every child has
//!    answered, returns the summary as its result.
//!
//! Children that fail permanently are handled, not propagated: they are counted as failed in
//! the summary. A parent that cannot go on without them would return
//! [`executor::FatalError::UnhandledChildExecutionError`] instead.
//!
//! Child ids are derived from the parent's (`<parent>.n:children_<i>`), so a replay finds them
//! again without reading anything.

use super::{decode_params, history_batch, nondeterminism, ok};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, ClosingStrategy, ComponentId, CreateRequest, DbWorkflow, ExecutionId,
    FinishedExecutionResult, FunctionFqn, HistoryEvent, JoinSetId, JoinSetRequest, JoinSetResponse,
    Json, SupportedFunctionReturnValue, Version,
};
use executor::{Worker, WorkerContext, WorkerError, WorkerResult};
use serde::{Deserialize, Serialize};
use std::{sync::Arc, time::Duration};

/// The parameters of `fanout`: `{"children": 4, "fail_probability": 0.35, "work_ms": 20}`;
/// each child gets `{"fail_probability", "work_ms"}` (the parameters of `flaky`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanoutParams {
    /// How many children to submit.
    pub children: u32,
    /// The children's probability of failing an attempt.
    pub fail_probability: f64,
    /// How long each child attempt works.
    #[serde(default)]
    pub work_ms: u64,
}

/// How the children are created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSettings {
    /// The children's function (in the demo, `flaky`).
    pub ffqn: FunctionFqn,
    /// The component that runs them.
    pub component_id: ComponentId,
    /// Their retries.
    pub max_retries: u32,
    /// Their first retry's backoff.
    pub retry_exp_backoff: Duration,
}

/// The worker of `fanout`. Its value is
/// `{"children": n, "succeeded": s, "failed": f, "child_attempts": a}`.
pub struct FanoutWorker<C: ClockFn> {
    ffqns: Vec<FunctionFqn>,
    child: ChildSettings,
    db: Arc<dyn DbWorkflow>,
    clock: C,
}

impl<C: ClockFn> FanoutWorker<C> {
    /// A worker that runs `ffqn` as `fanout`, creating children as `child` says, writing its
    /// history to `db`.
    #[must_use]
    pub fn new(ffqn: FunctionFqn, child: ChildSettings, db: Arc<dyn DbWorkflow>, clock: C) -> Self {
        Self {
            ffqns: vec![ffqn],
            child,
            db,
            clock,
        }
    }

    /// The join set the children are submitted into: `n:children`.
    ///
    /// # Panics
    /// Never: the id is fixed and legal.
    #[must_use]
    pub fn join_set() -> JoinSetId {
        "n:children".parse().expect("a legal join set id")
    }

    /// The id of the `index`-th child (from 1) of `parent`.
    #[must_use]
    pub fn child_id(parent: &ExecutionId, index: u32) -> ExecutionId {
        parent.next_level(&Self::join_set(), u64::from(index))
    }

    /// The history the first run records before its first `JoinNext`; a replay must find it.
    fn submission(parent: &ExecutionId, children: u32) -> Vec<HistoryEvent> {
        let join_set_id = Self::join_set();
        let create = HistoryEvent::JoinSetCreate {
            join_set_id: join_set_id.clone(),
            closing_strategy: ClosingStrategy::Complete,
        };
        let requests = (1..=children).map(|index| HistoryEvent::JoinSetRequest {
            join_set_id: join_set_id.clone(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: Self::child_id(parent, index),
            },
        });
        std::iter::once(create).chain(requests).collect()
    }

    /// Awaits the next response of the join set, giving up the run at `now`.
    fn join_next(now: DateTime<Utc>) -> HistoryEvent {
        HistoryEvent::JoinNext {
            join_set_id: Self::join_set(),
            run_expires_at: now,
            closing: false,
        }
    }

    /// The first run: the join set, the requests, the children and the first `JoinNext`, in
    /// one transaction.
    async fn submit(&self, ctx: &WorkerContext, params: &FanoutParams) -> WorkerResult {
        let now = self.clock.now();
        let mut events = Self::submission(&ctx.execution_id, params.children);
        events.push(Self::join_next(now));
        let child_params = Json(serde_json::json!({
            "fail_probability": params.fail_probability,
            "work_ms": params.work_ms,
        }));
        let children = (1..=params.children)
            .map(|index| CreateRequest {
                created_at: now,
                execution_id: Self::child_id(&ctx.execution_id, index),
                ffqn: self.child.ffqn.clone(),
                params: child_params.clone(),
                parent: Some((ctx.execution_id.clone(), Self::join_set())),
                scheduled_at: now,
                retry_exp_backoff: self.child.retry_exp_backoff,
                max_retries: self.child.max_retries,
                component_id: self.child.component_id.clone(),
                metadata: ctx.metadata.clone(),
                scheduled_by: None,
            })
            .collect();
        match self
            .db
            .append_batch(history_batch(ctx, now, events, children))
            .await
        {
            Ok(_) => WorkerResult::DbUpdatedByWorker,
            Err(err) => WorkerResult::Err(WorkerError::DbError(err)),
        }
    }

    /// A replay: consume the responses that arrived, then await the next one or finish.
    async fn resume(&self, ctx: &WorkerContext, params: &FanoutParams) -> WorkerResult {
        let children = params.children;
        let expected = Self::submission(&ctx.execution_id, children);
        let Some(awaits) = ctx.event_history.strip_prefix(expected.as_slice()) else {
            return nondeterminism(
                format!(
                    "the recorded history does not start with the submission of {children} children"
                ),
                ctx.version,
            );
        };
        let join_set_id = Self::join_set();
        let is_join_next = |event: &HistoryEvent| matches!(event, HistoryEvent::JoinNext { join_set_id: j, .. } if *j == join_set_id);
        if !awaits.iter().all(is_join_next) {
            return nondeterminism(
                "the recorded history has events other than JoinNext after the submission"
                    .to_string(),
                ctx.version,
            );
        }
        let results: Vec<&FinishedExecutionResult> = ctx
            .responses
            .iter()
            .filter(|response| response.event.join_set_id == join_set_id)
            .filter_map(|response| match &response.event.event {
                JoinSetResponse::ChildExecutionFinished { result, .. } => Some(result),
                JoinSetResponse::DelayFinished { .. } => None,
            })
            .collect();
        let awaited = awaits.len();
        if results.len() < awaited {
            return nondeterminism(
                format!(
                    "replayed while awaiting response {awaited}, but only {} arrived",
                    results.len()
                ),
                ctx.version,
            );
        }
        let total = usize::try_from(children).unwrap_or(usize::MAX);
        let available = results.len().min(total);
        let now = self.clock.now();
        // One `JoinNext` per response that arrived since the last run, answered at once.
        let mut events: Vec<HistoryEvent> =
            (awaited..available).map(|_| Self::join_next(now)).collect();
        if available == total {
            let version = if events.is_empty() {
                ctx.version
            } else {
                match self.append(ctx, now, events).await {
                    Ok(version) => version,
                    Err(err) => return err,
                }
            };
            return ok(summary(children, &results), version);
        }
        // Await the next child: this `JoinNext` blocks until it answers.
        events.push(Self::join_next(now));
        match self.append(ctx, now, events).await {
            Ok(_) => WorkerResult::DbUpdatedByWorker,
            Err(err) => err,
        }
    }

    async fn append(
        &self,
        ctx: &WorkerContext,
        now: DateTime<Utc>,
        events: Vec<HistoryEvent>,
    ) -> Result<Version, WorkerResult> {
        self.db
            .append_batch(history_batch(ctx, now, events, Vec::new()))
            .await
            .map_err(|err| WorkerResult::Err(WorkerError::DbError(err)))
    }
}

/// The parent's value: how many children succeeded, how many failed, and how many attempts
/// the successful ones took in all.
fn summary(children: u32, results: &[&FinishedExecutionResult]) -> serde_json::Value {
    let mut succeeded = 0u64;
    let mut attempts = 0u64;
    for result in results {
        match result {
            Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(value))) => {
                succeeded += 1;
                attempts += value
                    .get("attempts")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(1);
            }
            Ok(SupportedFunctionReturnValue::None) => {
                succeeded += 1;
                attempts += 1;
            }
            Ok(SupportedFunctionReturnValue::FallibleResultErr(_)) | Err(_) => {}
        }
    }
    let failed = u64::try_from(results.len()).unwrap_or(u64::MAX) - succeeded;
    serde_json::json!({
        "children": children,
        "succeeded": succeeded,
        "failed": failed,
        "child_attempts": attempts,
    })
}

#[async_trait]
impl<C: ClockFn> Worker for FanoutWorker<C> {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let params: FanoutParams = match decode_params(&ctx) {
            Ok(params) => params,
            Err(fatal) => return fatal,
        };
        if params.children == 0 {
            return ok(summary(0, &[]), ctx.version);
        }
        if ctx.event_history.is_empty() {
            self.submit(&ctx, &params).await
        } else {
            self.resume(&ctx, &params).await
        }
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}
