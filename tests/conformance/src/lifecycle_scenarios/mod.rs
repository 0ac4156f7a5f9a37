//! The lifecycle scenarios L1..L23: every rule of `docs/SEMANTICS.md` §10-§13 (idempotent
//! submit, cancellation, durable promises, retention) and what an ambiguous commit leaves
//! behind (§4.11), on every backend through the same code. Each scenario's documentation says
//! what it checks.
//!
//! One module per topic: `submit` (L1..L4: a repeated `create`, a conflicting one,
//! `create_batch`, derived child ids), `cancel` (L5..L10: a pending, locked, blocked and finished
//! execution, a tree, the watcher afterwards), `cancel_running` (L11: a worker still running
//! when its execution is cancelled, under a real executor), `promise` (L12..L14: completing a
//! stub), `prune` (L15..L17: finished trees only, limits and the cursor), `ambiguous`
//! (L18..L20, L23: a write that lands and reports a lost connection, for the executor, the
//! watcher and a client, and an executor's lock) and `workflows` (L21, L22: a cancelled child and a promise as a workflow sees
//! them, through the `workflow` crate). The fixture they share is here, and the scenarios are
//! re-exported here, where the [`lifecycle_scenario_tests!`](crate::lifecycle_scenario_tests)
//! macro finds them.
//!
//! Time is a [`SimClock`]; every expected outcome comes from `docs/SEMANTICS.md` §10-§13 and
//! the kernel's documented rules, and every log read is checked against the reference
//! derivation (S18).

mod ambiguous;
mod cancel;
mod cancel_running;
mod promise;
mod prune;
mod submit;
mod workflows;

pub use ambiguous::{
    l18_ambiguous_outcome_write_is_not_repeated, l19_ambiguous_watcher_write_is_not_repeated,
    l20_ambiguous_client_writes_are_safe_to_retry,
    l23_executions_of_a_lost_lock_answer_run_at_the_next_tick,
};
pub use cancel::{
    l5_cancel_pending, l6_cancel_locked, l7_cancel_blocked_by_join_set,
    l8_cancel_finished_writes_nothing, l9_cancel_recurses_over_a_tree,
    l10_watcher_ignores_what_was_cancelled,
};
pub use cancel_running::l11_worker_of_a_cancelled_execution_loses_its_race;
pub use promise::{
    l12_promise_completed_once_answers_its_parent, l13_promise_completed_twice,
    l14_promise_refusals,
};
pub use prune::{
    l15_prune_deletes_finished_trees_only, l16_pruned_trees_are_gone, l17_prune_limit_and_cursor,
};
pub use submit::{
    l1_repeated_create_writes_nothing, l2_conflicting_create_names_what_differs,
    l3_create_batch_item_by_item, l4_child_ids_derive_from_parent,
};
pub use workflows::{
    l21_workflow_gets_a_cancelled_childs_result, l22_workflow_promise_completed_by_a_client,
};

use crate::{
    StoreFactory, TestStore,
    storage_scenarios::helpers::{
        assert_state_matches_derivation, batch_creating, child_execution_request, child_request,
        create_request, delay_request, ffqn, join_next, join_set_create,
    },
};
use chrono::{DateTime, Utc};
use concepts::{
    CancelOutcome, CancelRequest, ClockFn, CreateRequest, DbConnection, DelayId,
    ExecutionEventInner, ExecutionId, ExecutionLog, FinishedExecutionError,
    FinishedExecutionResult, FunctionFqn, JoinSetId, JoinSetResponse, Json, OutcomeWrite,
    PendingState, SupportedFunctionReturnValue, Version,
};
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;

/// The lease of the scenarios' locks.
const LEASE: Duration = Duration::from_secs(1);

/// A fresh store and a simulated clock, with the writes the lifecycle scenarios build on.
struct Fixture {
    _store: TestStore,
    db: Arc<dyn DbConnection>,
    clock: SimClock,
}

impl Fixture {
    async fn new<F: StoreFactory>(factory: &F) -> Self {
        let store = factory.fresh().await;
        Self {
            db: store.db.clone(),
            _store: store,
            clock: SimClock::epoch(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Creates the top-level execution of `req`.
    async fn create(&self, req: CreateRequest) -> ExecutionId {
        let execution_id = req.execution_id.clone();
        let created = self.db.create(req).await.expect("create");
        assert!(created.is_created(), "{execution_id} is new: {created:?}");
        execution_id
    }

    /// Creates a top-level execution of `test:pkg/ifc@1.0.0.<name>` with id `n`, due now.
    async fn top(&self, n: u128, name: &str) -> ExecutionId {
        let id = crate::storage_scenarios::helpers::execution_id(n);
        self.create(create_request(id, ffqn(name), self.now()))
            .await
    }

    /// `parent` opens join set `join_set_id`, submits one child per function of `children`
    /// (indexes 1, 2, ...) and, with `delay`, a delay in the same join set, then blocks on
    /// `JoinNext`: one `append_batch`. Returns the children's ids.
    async fn await_children(
        &self,
        parent: &ExecutionId,
        join_set_id: &JoinSetId,
        children: &[FunctionFqn],
        delay: Option<(DelayId, DateTime<Utc>)>,
    ) -> Vec<ExecutionId> {
        let now = self.now();
        let requests = (1..)
            .zip(children)
            .map(|(idx, f)| child_request(parent, join_set_id, idx, f.clone(), now))
            .collect();
        self.await_requests(parent, join_set_id, requests, delay)
            .await
    }

    /// As [`Fixture::await_children`], with the children's requests.
    async fn await_requests(
        &self,
        parent: &ExecutionId,
        join_set_id: &JoinSetId,
        requests: Vec<CreateRequest>,
        delay: Option<(DelayId, DateTime<Utc>)>,
    ) -> Vec<ExecutionId> {
        let now = self.now();
        let version = self.log(parent).await.next_version;
        let mut events = vec![join_set_create(join_set_id)];
        events.extend(
            requests
                .iter()
                .map(|c| child_execution_request(join_set_id, &c.execution_id)),
        );
        if let Some((delay_id, expires_at)) = delay {
            events.push(delay_request(join_set_id, delay_id, expires_at));
        }
        events.push(join_next(join_set_id, now));
        let ids = requests.iter().map(|c| c.execution_id.clone()).collect();
        self.db
            .append_batch(batch_creating(parent, version, now, events, requests))
            .await
            .expect("append_batch creating children");
        assert!(
            matches!(
                self.log(parent).await.pending_state,
                PendingState::BlockedByJoinSet { .. }
            ),
            "{parent} awaits its join set"
        );
        ids
    }

    /// Finishes `execution_id` with `result` through `append_outcome` at its next version,
    /// answering its parent.
    async fn finish(&self, execution_id: &ExecutionId, result: FinishedExecutionResult) {
        let log = self.log(execution_id).await;
        let parent = match &log.events[0].event {
            ExecutionEventInner::Created(created) => created.parent.clone(),
            other => panic!("version 0 of {execution_id} is {other:?}"),
        };
        let write = OutcomeWrite::new(
            execution_id.clone(),
            log.next_version,
            self.now(),
            ExecutionEventInner::Finished { result },
            parent.as_ref(),
        );
        self.db.append_outcome(write).await.expect("append_outcome");
    }

    /// Locks, now and for [`LEASE`], the due executions of `name` (up to 10); returns their ids.
    async fn lock_due(&self, name: &str) -> Vec<ExecutionId> {
        let locked = crate::storage_scenarios::helpers::lock_pending_now(
            self.db.as_ref(),
            &Arc::from([ffqn(name)]),
            10,
            self.now(),
            crate::storage_scenarios::helpers::executor_id(1),
            LEASE,
        )
        .await;
        crate::storage_scenarios::helpers::ids_of(&locked)
    }

    /// A manually ticked executor of `worker` over `db` (this store, or a wrapper of it), on
    /// this clock, with [`LEASE`] leases.
    fn executor(
        &self,
        worker: Arc<dyn executor::Worker>,
        db: Arc<dyn concepts::DbExecutor>,
    ) -> executor::ExecTask<SimClock> {
        let config = executor::ExecConfig {
            lock_expiry: LEASE,
            tick_sleep: Duration::from_millis(50),
            batch_size: 10,
            component_id: crate::executor_scenarios::workers::test_component_id(),
            task_limiter: None,
        };
        executor::ExecTask::new(worker, config, self.clock.clone(), db)
    }

    /// Cancels `execution_id` now with `reason`.
    async fn cancel(&self, execution_id: &ExecutionId, reason: &str) -> CancelOutcome {
        self.db
            .cancel(CancelRequest {
                execution_id: execution_id.clone(),
                now: self.now(),
                reason: reason.to_owned(),
            })
            .await
            .unwrap_or_else(|err| panic!("cancel {execution_id}: {err}"))
    }

    /// The log, after checking its pending state against the reference derivation (S18).
    async fn log(&self, execution_id: &ExecutionId) -> ExecutionLog {
        assert_state_matches_derivation(self.db.as_ref(), execution_id).await
    }

    /// The logs of `ids`, in order.
    async fn logs(&self, ids: &[ExecutionId]) -> Vec<ExecutionLog> {
        let mut logs = Vec::with_capacity(ids.len());
        for id in ids {
            logs.push(self.log(id).await);
        }
        logs
    }
}

/// `Ok(value)` with a JSON value.
fn ok(value: serde_json::Value) -> FinishedExecutionResult {
    Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
        value,
    )))
}

/// The result of a cancellation for `reason`.
fn cancelled(reason: &str) -> FinishedExecutionResult {
    Err(FinishedExecutionError::Cancelled {
        reason: reason.to_owned(),
    })
}

/// Asserts that `log` ends with `Finished(result)` written at `at`, at the version its
/// pending state names.
#[track_caller]
fn assert_finished_with(log: &ExecutionLog, result: &FinishedExecutionResult, at: DateTime<Utc>) {
    let last = log.events.last().expect("a log has `Created`");
    assert_eq!(
        last.event,
        ExecutionEventInner::Finished {
            result: result.clone()
        },
        "{} ends with its result",
        log.execution_id
    );
    assert_eq!(last.created_at, at, "{} finished then", log.execution_id);
    let finished_at_version = Version(u32::try_from(log.events.len() - 1).expect("short log"));
    assert!(
        matches!(
            log.pending_state,
            PendingState::Finished { version, finished_at, result_kind }
                if version == finished_at_version
                    && finished_at == at
                    && result_kind == concepts::ResultKind::of(result)
        ),
        "{}: {:?}",
        log.execution_id,
        log.pending_state
    );
}

/// The responses from children in `log`: `(child, finished version, result, arrival)`.
fn child_responses(
    log: &ExecutionLog,
) -> Vec<(ExecutionId, Version, FinishedExecutionResult, DateTime<Utc>)> {
    log.responses
        .iter()
        .filter_map(|response| match &response.event.event {
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id,
                finished_version,
                result,
            } => Some((
                child_execution_id.clone(),
                *finished_version,
                result.clone(),
                response.created_at,
            )),
            JoinSetResponse::DelayFinished { .. } => None,
        })
        .collect()
}

/// The version of the `Finished` event of a finished log.
#[track_caller]
fn finished_version(log: &ExecutionLog) -> Version {
    match log.pending_state {
        PendingState::Finished { version, .. } => version,
        ref other => panic!("{} has not finished: {other:?}", log.execution_id),
    }
}

/// Expands to one test per scenario of this module.
#[macro_export]
macro_rules! lifecycle_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; lifecycle_scenarios;
            l1_repeated_create_writes_nothing,
            l2_conflicting_create_names_what_differs,
            l3_create_batch_item_by_item,
            l4_child_ids_derive_from_parent,
            l5_cancel_pending,
            l6_cancel_locked,
            l7_cancel_blocked_by_join_set,
            l8_cancel_finished_writes_nothing,
            l9_cancel_recurses_over_a_tree,
            l10_watcher_ignores_what_was_cancelled,
            l11_worker_of_a_cancelled_execution_loses_its_race,
            l12_promise_completed_once_answers_its_parent,
            l13_promise_completed_twice,
            l14_promise_refusals,
            l15_prune_deletes_finished_trees_only,
            l16_pruned_trees_are_gone,
            l17_prune_limit_and_cursor,
            l18_ambiguous_outcome_write_is_not_repeated,
            l19_ambiguous_watcher_write_is_not_repeated,
            l20_ambiguous_client_writes_are_safe_to_retry,
            l21_workflow_gets_a_cancelled_childs_result,
            l22_workflow_promise_completed_by_a_client,
            l23_executions_of_a_lost_lock_answer_run_at_the_next_tick,
        );
    };
}
