//! The executor and watcher scenarios E1..E24 (`docs/SEMANTICS.md` §5-§8): the executor's
//! table, the watcher's recovery of expired leases and delays, join sets across parent and
//! child, the task limiter, retried outcome writes, the bound on runs in flight without a
//! limiter, and several executors sharing a store. Each scenario's documentation says what it
//! checks.
//!
//! One module per subject: `outcomes` (one executor on manual ticks: E1, E3, E4, E5, E12, E13,
//! E15, E18), `children` (E6..E9), `watcher` (E10, E11, E19), `faults` (E20: a store that
//! fails outcome writes), `bound` (E21: runs in flight without a task limiter), `expiry`
//! (E22..E24: many leases expiring at once, a sleep due among them, a stale entry among them)
//! and `spawned` (the spawned loop: E2, E14, E16, E17); the fixture they share is here, the
//! workers they run in `workers`, and the scenarios are re-exported here, where the
//! [`executor_scenario_tests!`](crate::executor_scenario_tests) macro finds them.
//!
//! Time is a [`SimClock`] and executors are driven with manual ticks wherever time matters; the
//! few scenarios about the spawned loop (E2, E14, E16, E17) measure real time only to check
//! that waits end on notifications.

pub mod workers;

mod bound;
mod children;
mod expiry;
mod faults;
mod outcomes;
mod spawned;
mod watcher;

pub use bound::e21_runs_in_flight_are_bounded_without_a_limiter;
pub use children::{
    e6_child_failure_notifies_parent, e7_child_timeout_by_watcher_notifies_parent,
    e8_unhandled_child_error_reaches_parent, e9_child_success_notifies_parent,
};
pub use expiry::{
    e22_many_leases_time_out_in_one_pass, e23_sleep_fires_before_ten_thousand_expiries,
    e24_stale_entry_among_expired_leases, e25_restarted_node_takes_back_its_leases,
    e26_restarted_node_hands_back_its_warm_waits,
};
pub use faults::e20_retriable_outcome_write_is_retried;
pub use outcomes::{
    e1_simple_lifecycle, e3_trap_with_retry_left, e4_trap_without_retry, e5_exponential_backoff,
    e12_limit_reached_unlocks, e13_returned_error, e15_locks_only_exported_and_due,
    e18_db_updated_by_worker_writes_nothing,
};
pub use spawned::{
    e2_spawned_executor_wakes_on_notification, e14_task_limiter_without_spinning,
    e16_close_is_prompt, e17_four_executors_run_each_once,
};
pub use watcher::{
    e10_hanging_worker_recovered_by_watcher, e11_late_worker_loses_to_watcher, e19_durable_sleep,
};

use crate::{StoreFactory, TestStore};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, CreateRequest, DbConnection, ExecutionEventInner, ExecutionId, ExecutionLog,
    ExecutionMetadata, FinishedExecutionError, FinishedExecutionResult, FunctionFqn,
    JoinSetResponse, JoinSetResponseEventOuter, Json, PendingState, PermanentFailureKind,
    SupportedFunctionReturnValue, Version, add_saturating,
};
use executor::{ExecConfig, ExecTask, Worker};
use serde_json::json;
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;
use timers_watcher::TickProgress;
use workers::{child_join_set, test_component_id};

/// A real-time safety net for awaiting workers and notifications: far longer than any correct
/// wait, so that only a lost wake-up or a hang hits it.
const SAFETY: Duration = Duration::from_secs(10);
/// The lease of the executors of these scenarios.
const LOCK_EXPIRY: Duration = Duration::from_secs(1);
/// The first retry's backoff of the executions of these scenarios.
const BACKOFF: Duration = Duration::from_secs(1);

fn ffqn(name: &str) -> FunctionFqn {
    format!("test:executor/ifc@1.0.0.{name}")
        .parse()
        .expect("legal ffqn")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn plus(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    add_saturating(at, duration)
}

fn minus(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    concepts::sub_saturating(at, duration)
}

fn json_value(value: serde_json::Value) -> Json {
    Json(value)
}

/// An executor configuration for manual ticks: one-second leases, batches of 10, no limiter.
fn config() -> ExecConfig {
    ExecConfig {
        lock_expiry: LOCK_EXPIRY,
        tick_sleep: ms(50),
        batch_size: 10,
        component_id: test_component_id(),
        task_limiter: None,
    }
}

/// A fresh store and a simulated clock.
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

    /// A top-level execution of `ffqn`, due now, with `max_retries` and [`BACKOFF`].
    fn request(&self, ffqn: FunctionFqn, max_retries: u32) -> CreateRequest {
        let now = self.clock.now();
        let mut metadata = ExecutionMetadata::default();
        metadata.0.insert(
            ExecutionMetadata::TRACEPARENT.to_string(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
        );
        CreateRequest {
            created_at: now,
            execution_id: ExecutionId::generate_at(now),
            ffqn,
            params: json_value(json!([{"z": 1, "a": 2}])),
            parent: None,
            scheduled_at: now,
            retry_exp_backoff: BACKOFF,
            max_retries,
            component_id: test_component_id(),
            metadata,
            scheduled_by: None,
        }
    }

    async fn create(&self, req: CreateRequest) -> ExecutionId {
        let execution_id = req.execution_id.clone();
        self.db.create(req).await.expect("create");
        execution_id
    }

    fn executor(&self, worker: Arc<dyn Worker>, config: ExecConfig) -> ExecTask<SimClock> {
        ExecTask::new(worker, config, self.clock.clone(), self.db.clone())
    }

    /// The log, after checking that its pending state equals the reference derivation.
    async fn log(&self, execution_id: &ExecutionId) -> ExecutionLog {
        crate::checked_log(self.db.as_ref(), execution_id).await
    }

    async fn last_event(&self, execution_id: &ExecutionId) -> ExecutionEventInner {
        let log = self.log(execution_id).await;
        log.events
            .last()
            .expect("a log has `Created`")
            .event
            .clone()
    }

    async fn state(&self, execution_id: &ExecutionId) -> PendingState {
        self.log(execution_id).await.pending_state
    }

    /// One watcher tick at the clock's time, without leeway.
    async fn watcher_tick(&self) -> TickProgress {
        timers_watcher::tick(self.db.as_ref(), self.clock.now(), Duration::ZERO)
            .await
            .expect("watcher tick")
    }
}

/// One manual tick at `at`; waits until the locked executions' workers ran and their outcomes
/// were written, and returns the locked executions.
async fn tick(exec: &ExecTask<SimClock>, at: DateTime<Utc>) -> Vec<ExecutionId> {
    let progress = exec.tick(at).await.expect("tick");
    tokio::time::timeout(SAFETY, progress.wait_for_tasks())
        .await
        .expect("workers finish")
        .expect("worker tasks do not panic")
}

/// Waits (polling, bounded by [`SAFETY`]) until `condition` holds.
async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(SAFETY, async {
        while !condition() {
            tokio::time::sleep(ms(1)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting until {what}");
}

fn finished(result: FinishedExecutionResult) -> ExecutionEventInner {
    ExecutionEventInner::Finished { result }
}

fn ok(value: &Json) -> FinishedExecutionResult {
    Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(
        value.clone(),
    ))
}

fn trap_failure(reason: &str) -> FinishedExecutionError {
    FinishedExecutionError::PermanentFailure {
        reason_inner: reason.to_string(),
        reason_full: format!("activity trap: {reason}"),
        kind: PermanentFailureKind::ActivityTrap,
        detail: Some(format!("detail of {reason}")),
    }
}

fn trap_event(reason: &str, backoff_expires_at: DateTime<Utc>) -> ExecutionEventInner {
    ExecutionEventInner::TemporarilyFailed {
        backoff_expires_at,
        reason_full: format!("activity trap: {reason}"),
        reason_inner: reason.to_string(),
        detail: Some(format!("detail of {reason}")),
    }
}

/// The single response of `log`, which must be a child's.
fn only_child_response(
    log: &ExecutionLog,
) -> (
    &JoinSetResponseEventOuter,
    &ExecutionId,
    Version,
    &FinishedExecutionResult,
) {
    assert_eq!(log.responses.len(), 1, "one response: {:?}", log.responses);
    let response = &log.responses[0];
    assert_eq!(response.event.join_set_id, child_join_set());
    match &response.event.event {
        JoinSetResponse::ChildExecutionFinished {
            child_execution_id,
            finished_version,
            result,
        } => (response, child_execution_id, *finished_version, result),
        other => panic!("expected a child's response, got {other:?}"),
    }
}

fn finished_version(log: &ExecutionLog) -> Version {
    match log.pending_state {
        PendingState::Finished { version, .. } => version,
        ref other => panic!("expected a finished execution, got {other:?}"),
    }
}

/// Expands to one test per scenario of this module.
#[macro_export]
macro_rules! executor_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; executor_scenarios;
            e1_simple_lifecycle,
            e2_spawned_executor_wakes_on_notification,
            e3_trap_with_retry_left,
            e4_trap_without_retry,
            e5_exponential_backoff,
            e6_child_failure_notifies_parent,
            e7_child_timeout_by_watcher_notifies_parent,
            e8_unhandled_child_error_reaches_parent,
            e9_child_success_notifies_parent,
            e10_hanging_worker_recovered_by_watcher,
            e11_late_worker_loses_to_watcher,
            e12_limit_reached_unlocks,
            e13_returned_error,
            e14_task_limiter_without_spinning,
            e15_locks_only_exported_and_due,
            e16_close_is_prompt,
            e17_four_executors_run_each_once,
            e18_db_updated_by_worker_writes_nothing,
            e19_durable_sleep,
            e20_retriable_outcome_write_is_retried,
            e21_runs_in_flight_are_bounded_without_a_limiter,
            e22_many_leases_time_out_in_one_pass,
            e23_sleep_fires_before_ten_thousand_expiries,
            e24_stale_entry_among_expired_leases,
            e25_restarted_node_takes_back_its_leases,
            e26_restarted_node_hands_back_its_warm_waits,
        );
    };
}
