//! The executor and watcher scenarios (E1..E19 of `SCENARIOS.md`): the executor's table, the
//! watcher's recovery of expired leases and delays, join sets across parent and child, the
//! task limiter, and several executors sharing a store.
//!
//! Time is a [`SimClock`] and executors are driven with manual ticks wherever time matters; the
//! few scenarios about the spawned loop (E2, E14, E16, E17) measure real time only to check
//! that waits end on notifications.

pub mod workers;

use crate::{StoreFactory, TestStore};
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, CreateRequest, DbConnection, ExecutionEventInner, ExecutionId, ExecutionLog,
    ExecutionMetadata, FinishedExecutionError, FinishedExecutionResult, FunctionFqn, HistoryEvent,
    JoinSetResponse, JoinSetResponseEventOuter, Json, Locked, PendingState, PermanentFailureKind,
    ResultKind, SupportedFunctionReturnValue, Version, add_saturating,
};
use executor::{ExecConfig, ExecTask, Worker};
use serde_json::json;
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;
use timers_watcher::TickProgress;
use tokio::sync::Semaphore;
use workers::{
    CountingWorker, GatedWorker, ParentWorker, PersistingWorker, ScriptedWorker, SleepingWorker,
    Step, child_join_set, test_component_id,
};

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

/// E1: `Created`, `Locked`, `Finished(Ok)` in one tick, with timestamps in order.
pub async fn e1_simple_lifecycle<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let value = json_value(json!({"b": 1, "a": [true, null]}));
    let worker = Arc::new(
        ScriptedWorker::new(ffqn("e1"), vec![Step::Ok(value.clone())])
            .with_work_duration(f.clock.clone(), ms(250)),
    );
    let req = f.request(ffqn("e1"), 3);
    let created_at = req.created_at;
    let execution_id = f.create(req.clone()).await;
    f.clock.move_time_forward(ms(500)).await;
    let exec = f.executor(worker.clone(), config());
    let locked_at = f.clock.now();

    assert_eq!(tick(&exec, locked_at).await, vec![execution_id.clone()]);

    let log = f.log(&execution_id).await;
    let [ctx] = worker.contexts().try_into().expect("one run");
    let lock_expires_at = plus(locked_at, LOCK_EXPIRY);
    assert_eq!(ctx.execution_id, execution_id);
    assert_eq!(ctx.ffqn, ffqn("e1"));
    assert_eq!(ctx.params, req.params);
    assert_eq!(ctx.metadata, req.metadata);
    assert_eq!(ctx.version, Version(2));
    assert_eq!(ctx.execution_deadline, lock_expires_at);
    assert!(ctx.can_be_retried);
    assert!(ctx.event_history.is_empty() && ctx.responses.is_empty());
    let events: Vec<_> = log.events.iter().map(|e| e.event.clone()).collect();
    assert_eq!(
        events,
        vec![
            req.to_created_event().event,
            ExecutionEventInner::Locked(Locked {
                component_id: test_component_id(),
                executor_id: exec.executor_id(),
                run_id: ctx.run_id,
                lock_expires_at,
            }),
            finished(ok(&value)),
        ]
    );
    let finished_at = plus(locked_at, ms(250));
    let times: Vec<_> = log.events.iter().map(|e| e.created_at).collect();
    assert_eq!(times, vec![created_at, locked_at, finished_at]);
    assert_eq!(
        log.pending_state,
        PendingState::Finished {
            version: Version(2),
            finished_at,
            result_kind: ResultKind::Ok
        }
    );
    assert_eq!(log.next_version, Version(2));
    assert!(
        tick(&exec, f.clock.now()).await.is_empty(),
        "a finished execution is not locked"
    );
}

/// E2: a spawned executor with a 10 s `tick_sleep` runs a new execution within 2 s: it was
/// woken by a notification, not by polling.
pub async fn e2_spawned_executor_wakes_on_notification<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let value = json_value(json!("done"));
    let worker = Arc::new(ScriptedWorker::new(
        ffqn("e2"),
        vec![Step::Ok(value.clone())],
    ));
    let config = ExecConfig {
        tick_sleep: Duration::from_secs(10),
        ..config()
    };
    let mut handle = ExecTask::spawn_new(worker, config, f.clock.clone(), f.db.clone());
    // Let the loop find the store empty and go to sleep in `wait_for_pending`. Should it not
    // be asleep yet, a correct executor still passes; only the check gets weaker.
    wait_until("the executor ticked", || handle.tick_count() >= 1).await;
    tokio::time::sleep(ms(100)).await;

    let started = std::time::Instant::now();
    let execution_id = f.create(f.request(ffqn("e2"), 0)).await;
    let result =
        f.db.wait_for_finished_result(&execution_id, Some(SAFETY))
            .await;
    let elapsed = started.elapsed();
    assert_eq!(result.expect("finished"), ok(&value));
    assert!(
        elapsed < Duration::from_secs(2),
        "finished after {elapsed:?}: a poll, not a wake-up"
    );

    let started = std::time::Instant::now();
    handle.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
}

/// E3: a trap with a retry left is `TemporarilyFailed` with its reasons, detail and backoff;
/// the execution is not locked before the backoff, and is at it.
pub async fn e3_trap_with_retry_left<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let value = json_value(json!(1));
    let worker = Arc::new(ScriptedWorker::new(
        ffqn("e3"),
        vec![Step::Trap("boom"), Step::Ok(value.clone())],
    ));
    let exec = f.executor(worker.clone(), config());
    let execution_id = f.create(f.request(ffqn("e3"), 1)).await;
    let t0 = f.clock.now();

    assert_eq!(tick(&exec, t0).await, vec![execution_id.clone()]);
    let retry_at = plus(t0, BACKOFF);
    assert_eq!(
        f.last_event(&execution_id).await,
        trap_event("boom", retry_at)
    );
    assert_eq!(
        f.state(&execution_id).await,
        PendingState::PendingAt {
            scheduled_at: retry_at
        }
    );

    f.clock.move_time_to(plus(t0, BACKOFF - ms(1)));
    assert!(
        tick(&exec, f.clock.now()).await.is_empty(),
        "locked before the backoff"
    );
    f.clock.move_time_to(retry_at);
    assert_eq!(tick(&exec, retry_at).await, vec![execution_id.clone()]);
    assert_eq!(f.last_event(&execution_id).await, finished(ok(&value)));

    let contexts = worker.contexts();
    assert_eq!(contexts.len(), 2);
    assert!(contexts[0].can_be_retried);
    assert!(!contexts[1].can_be_retried, "the only retry is used up");
    assert_ne!(
        contexts[0].run_id, contexts[1].run_id,
        "a fresh run id per lock"
    );
    assert_eq!(contexts[1].version, Version(4));
}

/// E4: a trap without a retry is a permanent `ActivityTrap` failure.
pub async fn e4_trap_without_retry<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(ScriptedWorker::new(ffqn("e4"), vec![Step::Trap("boom")]));
    let exec = f.executor(worker.clone(), config());
    let execution_id = f.create(f.request(ffqn("e4"), 0)).await;

    tick(&exec, f.clock.now()).await;
    assert_eq!(
        f.last_event(&execution_id).await,
        finished(Err(trap_failure("boom")))
    );
    assert!(!worker.contexts()[0].can_be_retried);
    assert!(matches!(
        f.state(&execution_id).await,
        PendingState::Finished {
            version: Version(2),
            result_kind: ResultKind::PermanentFailure,
            ..
        }
    ));
}

/// E5: max_retries 3 with a 100 ms backoff: retries after 100, 200 and 400 ms; the fourth
/// failure is permanent.
pub async fn e5_exponential_backoff<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(ScriptedWorker::new(ffqn("e5"), vec![Step::Trap("again")]));
    let exec = f.executor(worker, config());
    let req = CreateRequest {
        retry_exp_backoff: ms(100),
        ..f.request(ffqn("e5"), 3)
    };
    let execution_id = f.create(req).await;

    for backoff in [ms(100), ms(200), ms(400)] {
        let now = f.clock.now();
        assert_eq!(tick(&exec, now).await, vec![execution_id.clone()]);
        let retry_at = plus(now, backoff);
        assert_eq!(
            f.last_event(&execution_id).await,
            trap_event("again", retry_at)
        );
        f.clock.move_time_to(plus(now, backoff - ms(1)));
        assert!(
            tick(&exec, f.clock.now()).await.is_empty(),
            "locked before {retry_at}"
        );
        f.clock.move_time_to(retry_at);
    }
    tick(&exec, f.clock.now()).await;
    assert_eq!(
        f.last_event(&execution_id).await,
        finished(Err(trap_failure("again")))
    );
    let log = f.log(&execution_id).await;
    assert_eq!(concepts::temporary_event_count(&log.events), 3);
}

/// A parent (run by `parent_exec`) that has submitted its child and gave up its run; returns
/// the parent's and the child's ids and the parent's executor.
async fn parent_awaiting_child(
    f: &Fixture,
    child_ffqn: FunctionFqn,
    child_max_retries: u32,
) -> (ExecutionId, ExecutionId, ExecTask<SimClock>) {
    let parent_worker = ParentWorker::new(
        ffqn("parent"),
        child_ffqn.clone(),
        child_max_retries,
        f.db.clone(),
        f.clock.clone(),
    );
    let parent_exec = f.executor(Arc::new(parent_worker), config());
    let parent_id = f.create(f.request(ffqn("parent"), 0)).await;
    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    let child_id = ParentWorker::child_of(&parent_id);
    assert!(matches!(
        f.state(&parent_id).await,
        PendingState::BlockedByJoinSet { ref join_set_id, .. } if *join_set_id == child_join_set()
    ));
    let child = f.log(&child_id).await;
    assert_eq!(child.ffqn(), Some(&child_ffqn));
    assert!(matches!(
        child.pending_state,
        PendingState::PendingAt { .. }
    ));
    (parent_id, child_id, parent_exec)
}

/// E6: a child's permanent failure is written with its parent's response; the parent becomes
/// pending, and the response carries the child's id, finished version and error.
pub async fn e6_child_failure_notifies_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let child_worker = ScriptedWorker::new(ffqn("child"), vec![Step::Trap("child boom")]);
    let child_exec = f.executor(Arc::new(child_worker), config());
    f.clock.move_time_forward(ms(300)).await;
    let responded_at = f.clock.now();

    assert_eq!(
        tick(&child_exec, responded_at).await,
        vec![child_id.clone()]
    );

    let child = f.log(&child_id).await;
    let child_result = child.finished_result().expect("child finished").clone();
    assert_eq!(child_result, Err(trap_failure("child boom")));
    let parent = f.log(&parent_id).await;
    let (response, responder, version, result) = only_child_response(&parent);
    assert_eq!(response.created_at, responded_at);
    assert_eq!(responder, &child_id);
    assert_eq!(version, finished_version(&child));
    assert_eq!(result, &child_result);
    assert_eq!(
        parent.pending_state,
        PendingState::PendingAt {
            scheduled_at: responded_at
        }
    );

    // The parent does not handle the error: it fails with the child as the root cause.
    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    let unhandled = FinishedExecutionError::UnhandledChildExecutionError {
        child_execution_id: child_id.clone(),
        root_cause_id: child_id,
    };
    assert_eq!(f.last_event(&parent_id).await, finished(Err(unhandled)));
}

/// E7: a child that leaves the timeout to the watcher: after its lease expires, one watcher
/// tick writes `PermanentTimeout` and notifies the parent.
pub async fn e7_child_timeout_by_watcher_notifies_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, _parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let child_worker = ScriptedWorker::new(ffqn("child"), vec![Step::TimeoutHandledByWatcher]);
    let child_exec = f.executor(Arc::new(child_worker), config());
    let locked_at = f.clock.now();

    tick(&child_exec, locked_at).await;
    let lock_expires_at = plus(locked_at, LOCK_EXPIRY);
    assert!(matches!(
        f.last_event(&child_id).await,
        ExecutionEventInner::Locked(_)
    ));
    f.clock.move_time_to(plus(locked_at, LOCK_EXPIRY - ms(1)));
    assert_eq!(
        f.watcher_tick().await,
        TickProgress::default(),
        "the lease has not expired"
    );

    f.clock.move_time_to(lock_expires_at);
    assert_eq!(
        f.watcher_tick().await,
        TickProgress {
            expired_locks: 1,
            expired_async_timers: 0
        }
    );
    let child = f.log(&child_id).await;
    assert_eq!(
        child.finished_result(),
        Some(&Err(FinishedExecutionError::PermanentTimeout))
    );
    assert_eq!(finished_version(&child), Version(2));
    let parent = f.log(&parent_id).await;
    let (response, responder, version, result) = only_child_response(&parent);
    assert_eq!(response.created_at, lock_expires_at);
    assert_eq!((responder, version), (&child_id, Version(2)));
    assert_eq!(result, &Err(FinishedExecutionError::PermanentTimeout));
    assert_eq!(
        parent.pending_state,
        PendingState::PendingAt {
            scheduled_at: lock_expires_at
        }
    );
    assert_eq!(
        f.watcher_tick().await,
        TickProgress::default(),
        "resolved once"
    );
}

/// E8: a child's fatal `UnhandledChildExecutionError` reaches its parent with the same child
/// and root-cause ids (grandchild fails, child does not handle it, parent sees the root cause).
pub async fn e8_unhandled_child_error_reaches_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let child_worker = ParentWorker::new(
        ffqn("child"),
        ffqn("grandchild"),
        0,
        f.db.clone(),
        f.clock.clone(),
    );
    let child_exec = f.executor(Arc::new(child_worker), config());
    let grandchild_worker = ScriptedWorker::new(ffqn("grandchild"), vec![Step::Trap("deep boom")]);
    let grandchild_exec = f.executor(Arc::new(grandchild_worker), config());
    let grandchild_id = ParentWorker::child_of(&child_id);

    assert_eq!(
        tick(&child_exec, f.clock.now()).await,
        vec![child_id.clone()]
    );
    assert_eq!(
        tick(&grandchild_exec, f.clock.now()).await,
        vec![grandchild_id.clone()]
    );
    assert_eq!(
        tick(&child_exec, f.clock.now()).await,
        vec![child_id.clone()]
    );

    let child_error = FinishedExecutionError::UnhandledChildExecutionError {
        child_execution_id: grandchild_id.clone(),
        root_cause_id: grandchild_id.clone(),
    };
    let child = f.log(&child_id).await;
    assert_eq!(child.finished_result(), Some(&Err(child_error.clone())));
    let parent = f.log(&parent_id).await;
    let (_, responder, version, result) = only_child_response(&parent);
    assert_eq!((responder, version), (&child_id, finished_version(&child)));
    assert_eq!(result, &Err(child_error));

    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    let parent_error = FinishedExecutionError::UnhandledChildExecutionError {
        child_execution_id: child_id,
        root_cause_id: grandchild_id,
    };
    assert_eq!(f.last_event(&parent_id).await, finished(Err(parent_error)));
}

/// E9: a child that succeeds notifies its parent with its value.
pub async fn e9_child_success_notifies_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let value = json_value(json!({"answer": 42}));
    let child_worker = ScriptedWorker::new(ffqn("child"), vec![Step::Ok(value.clone())]);
    let child_exec = f.executor(Arc::new(child_worker), config());

    assert_eq!(
        tick(&child_exec, f.clock.now()).await,
        vec![child_id.clone()]
    );
    let child = f.log(&child_id).await;
    let parent = f.log(&parent_id).await;
    let (_, responder, version, result) = only_child_response(&parent);
    assert_eq!((responder, version), (&child_id, finished_version(&child)));
    assert_eq!(result, &ok(&value));
    assert!(matches!(
        parent.pending_state,
        PendingState::PendingAt { .. }
    ));

    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    assert_eq!(f.last_event(&parent_id).await, finished(ok(&value)));
}

/// E10: a hanging worker. The executor does not relock the expired lease; the watcher times it
/// out once; after the backoff it is locked again; the second expiry is permanent.
pub async fn e10_hanging_worker_recovered_by_watcher<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(GatedWorker::new(ffqn("e10")));
    let exec = f.executor(worker.clone(), config());
    let execution_id = f.create(f.request(ffqn("e10"), 1)).await;
    let t0 = f.clock.now();

    let _hanging = exec.tick(t0).await.expect("tick");
    let first = worker.next_started(SAFETY).await;
    let expiry = plus(t0, LOCK_EXPIRY);
    f.clock.move_time_to(expiry);
    assert!(
        tick(&exec, expiry).await.is_empty(),
        "an expired lease is not taken over"
    );
    let leeway = timers_watcher::tick(f.db.as_ref(), expiry, ms(1))
        .await
        .expect("tick");
    assert_eq!(
        leeway,
        TickProgress::default(),
        "the leeway lets the worker finish first"
    );

    assert_eq!(
        f.watcher_tick().await,
        TickProgress {
            expired_locks: 1,
            expired_async_timers: 0
        }
    );
    let retry_at = plus(expiry, BACKOFF);
    assert_eq!(
        f.last_event(&execution_id).await,
        ExecutionEventInner::TemporarilyTimedOut {
            backoff_expires_at: retry_at
        }
    );
    assert_eq!(
        f.watcher_tick().await,
        TickProgress::default(),
        "timed out once"
    );

    f.clock.move_time_to(minus(retry_at, ms(1)));
    assert!(
        tick(&exec, f.clock.now()).await.is_empty(),
        "locked before the backoff"
    );
    f.clock.move_time_to(retry_at);
    let _hanging_again = exec.tick(retry_at).await.expect("tick");
    let second = worker.next_started(SAFETY).await;
    assert_ne!(first.run_id, second.run_id);
    assert!(!second.can_be_retried);

    f.clock.move_time_to(plus(retry_at, LOCK_EXPIRY));
    assert_eq!(
        f.watcher_tick().await,
        TickProgress {
            expired_locks: 1,
            expired_async_timers: 0
        }
    );
    assert_eq!(
        f.last_event(&execution_id).await,
        finished(Err(FinishedExecutionError::PermanentTimeout))
    );
    assert!(matches!(
        f.state(&execution_id).await,
        PendingState::Finished {
            result_kind: ResultKind::Timeout,
            ..
        }
    ));
}

/// E11: a late worker finishing after the watcher resolved its lease: its write is refused by
/// the version check, the log is unchanged, nothing panics, and there is one `Finished`.
pub async fn e11_late_worker_loses_to_watcher<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(GatedWorker::new(ffqn("e11")));
    let exec = f.executor(worker.clone(), config());
    let execution_id = f.create(f.request(ffqn("e11"), 1)).await;

    // First run: the watcher times it out with a retry left, then the worker returns `Ok` at
    // its stale version (a version mismatch).
    let late = exec.tick(f.clock.now()).await.expect("tick");
    worker.next_started(SAFETY).await;
    f.clock.move_time_forward(LOCK_EXPIRY).await;
    assert_eq!(f.watcher_tick().await.expired_locks, 1);
    let before = f.log(&execution_id).await;
    worker.release_one();
    tokio::time::timeout(SAFETY, late.wait_for_tasks())
        .await
        .expect("the late worker ends")
        .expect("the late write does not panic");
    assert_eq!(
        f.log(&execution_id).await,
        before,
        "the stale `Finished` was refused"
    );

    // Second run: the watcher finishes it for good, then the worker returns `Ok` to a
    // finished execution.
    f.clock.move_time_forward(BACKOFF).await;
    let late = exec.tick(f.clock.now()).await.expect("tick");
    assert_eq!(late.execution_ids(), vec![execution_id.clone()]);
    worker.next_started(SAFETY).await;
    f.clock.move_time_forward(LOCK_EXPIRY).await;
    assert_eq!(f.watcher_tick().await.expired_locks, 1);
    let before = f.log(&execution_id).await;
    worker.release_one();
    tokio::time::timeout(SAFETY, late.wait_for_tasks())
        .await
        .expect("the late worker ends")
        .expect("the late write does not panic");
    let after = f.log(&execution_id).await;
    assert_eq!(
        after, before,
        "a finished execution takes no late `Finished`"
    );
    let finished_events = after
        .events
        .iter()
        .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }));
    assert_eq!(finished_events.count(), 1);
    assert_eq!(
        after.finished_result(),
        Some(&Err(FinishedExecutionError::PermanentTimeout))
    );
}

/// Ticks at the clock's time, expects `execution_id` to be locked and returns its last event.
async fn run_once(
    f: &Fixture,
    exec: &ExecTask<SimClock>,
    execution_id: &ExecutionId,
) -> ExecutionEventInner {
    assert_eq!(tick(exec, f.clock.now()).await, vec![execution_id.clone()]);
    f.last_event(execution_id).await
}

/// Moves the clock to just before `due` (where nothing is locked), then to `due`.
async fn advance_to_due(f: &Fixture, exec: &ExecTask<SimClock>, due: DateTime<Utc>) {
    f.clock.move_time_to(minus(due, ms(1)));
    assert!(
        tick(exec, f.clock.now()).await.is_empty(),
        "locked before {due}"
    );
    f.clock.move_time_to(due);
}

/// E12: `LimitReached` appends `Unlocked` with backoff `retry_exp_backoff *
/// 2^temporary_event_count` and uses up no retry.
pub async fn e12_limit_reached_unlocks<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let steps = vec![
        Step::LimitReached("memory"),
        Step::LimitReached("memory"),
        Step::Trap("first"),
        Step::LimitReached("memory"),
        Step::Trap("second"),
        Step::Trap("third"),
    ];
    let worker = Arc::new(ScriptedWorker::new(ffqn("e12"), steps));
    let exec = f.executor(worker.clone(), config());
    let req = CreateRequest {
        retry_exp_backoff: ms(100),
        ..f.request(ffqn("e12"), 2)
    };
    let execution_id = f.create(req).await;
    let unlocked = |backoff_expires_at| ExecutionEventInner::Unlocked {
        backoff_expires_at,
        reason: "memory".to_string(),
    };

    // No failure yet: 100 ms * 2^0, twice; unlocking does not double the backoff.
    for _ in 0..2 {
        let due = plus(f.clock.now(), ms(100));
        assert_eq!(run_once(&f, &exec, &execution_id).await, unlocked(due));
        advance_to_due(&f, &exec, due).await;
    }
    let due = plus(f.clock.now(), ms(100));
    assert_eq!(
        run_once(&f, &exec, &execution_id).await,
        trap_event("first", due)
    );
    advance_to_due(&f, &exec, due).await;
    // One failure: 100 ms * 2^1.
    let due = plus(f.clock.now(), ms(200));
    assert_eq!(run_once(&f, &exec, &execution_id).await, unlocked(due));
    advance_to_due(&f, &exec, due).await;
    // The second failure is still retried: the unlocks used up nothing.
    let due = plus(f.clock.now(), ms(200));
    assert_eq!(
        run_once(&f, &exec, &execution_id).await,
        trap_event("second", due)
    );
    advance_to_due(&f, &exec, due).await;
    assert_eq!(
        run_once(&f, &exec, &execution_id).await,
        finished(Err(trap_failure("third")))
    );

    let retriable: Vec<_> = worker
        .contexts()
        .iter()
        .map(|ctx| ctx.can_be_retried)
        .collect();
    assert_eq!(retriable, vec![true, true, true, true, true, false]);
}

/// E13: `ActivityReturnedError` with a retry left is `TemporarilyFailed`; without one, the
/// error value becomes the result.
pub async fn e13_returned_error<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let value = json_value(json!({"code": "E_NOPE", "retry": false}));
    let worker = Arc::new(ScriptedWorker::new(
        ffqn("e13"),
        vec![Step::ReturnedError(value.clone())],
    ));
    let exec = f.executor(worker, config());
    let execution_id = f.create(f.request(ffqn("e13"), 1)).await;

    let due = plus(f.clock.now(), BACKOFF);
    assert_eq!(
        run_once(&f, &exec, &execution_id).await,
        ExecutionEventInner::TemporarilyFailed {
            backoff_expires_at: due,
            reason_full: format!("activity returned error: {value}"),
            reason_inner: "activity returned error".to_string(),
            detail: None,
        }
    );
    advance_to_due(&f, &exec, due).await;
    let result = Ok(SupportedFunctionReturnValue::FallibleResultErr(value));
    assert_eq!(run_once(&f, &exec, &execution_id).await, finished(result));
    assert!(matches!(
        f.state(&execution_id).await,
        PendingState::Finished {
            result_kind: ResultKind::FallibleError,
            ..
        }
    ));
}

/// E14: a task limiter of 2 permits and 20 executions: never more than 2 workers at once, all
/// finish, and the loop does not spin while the permits are taken.
pub async fn e14_task_limiter_without_spinning<F: StoreFactory>(factory: &F) {
    const EXECUTIONS: usize = 20;
    let f = Fixture::new(factory).await;
    // Each run holds its permit for 20 ms of real time: a loop that spins while the permits
    // are taken would tick thousands of times meanwhile.
    let worker = Arc::new(CountingWorker::new(ffqn("e14"), ms(20)));
    let reqs: Vec<_> = (0..EXECUTIONS).map(|_| f.request(ffqn("e14"), 0)).collect();
    let ids: Vec<_> = reqs.iter().map(|req| req.execution_id.clone()).collect();
    f.db.create_batch(reqs).await.expect("create_batch");
    let limiter = Arc::new(Semaphore::new(2));
    let config = ExecConfig {
        // Long, so that every tick but the last is driven by work (a freed permit or a due
        // execution), never by the timeout.
        tick_sleep: Duration::from_secs(10),
        lock_expiry: Duration::from_secs(60),
        task_limiter: Some(limiter.clone()),
        ..config()
    };
    let mut handle = ExecTask::spawn_new(worker.clone(), config, f.clock.clone(), f.db.clone());

    for id in &ids {
        let result = f.db.wait_for_finished_result(id, Some(SAFETY)).await;
        assert_eq!(
            result.expect("finished"),
            Ok(SupportedFunctionReturnValue::None)
        );
    }
    handle.close().await;

    let max_running = worker.max_running();
    assert!(
        max_running <= 2,
        "{max_running} workers at once with two permits"
    );
    let runs = worker.runs();
    assert_eq!(runs.len(), EXECUTIONS);
    assert!(runs.values().all(|&n| n == 1), "each ran once: {runs:?}");
    // Every tick locks at least one execution, except after a timeout (10 s, none here) and
    // the last one that finds nothing left; allow twice that.
    let ticks = handle.tick_count();
    let bound = 2 * EXECUTIONS as u64 + 2;
    assert!(
        ticks <= bound,
        "{ticks} ticks for {EXECUTIONS} executions: the loop spins"
    );
    wait_until("every permit is released", || {
        limiter.available_permits() == 2
    })
    .await;
}

/// E15: an executor locks only the functions its worker exports, and only executions whose
/// `scheduled_at` has come.
pub async fn e15_locks_only_exported_and_due<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(ScriptedWorker::new(
        ffqn("mine"),
        vec![Step::Ok(json_value(json!(0)))],
    ));
    let exec = f.executor(worker, config());
    let now = f.clock.now();
    let mine_now = f.create(f.request(ffqn("mine"), 0)).await;
    let other_now = f.create(f.request(ffqn("other"), 0)).await;
    let later = plus(now, ms(500));
    let mine_later = f
        .create(CreateRequest {
            scheduled_at: later,
            ..f.request(ffqn("mine"), 0)
        })
        .await;

    assert_eq!(tick(&exec, now).await, vec![mine_now.clone()]);
    f.clock.move_time_to(minus(later, ms(1)));
    assert!(tick(&exec, f.clock.now()).await.is_empty());
    f.clock.move_time_to(later);
    assert_eq!(tick(&exec, later).await, vec![mine_later.clone()]);
    assert!(tick(&exec, later).await.is_empty());

    assert!(f.state(&mine_now).await.is_finished());
    assert!(f.state(&mine_later).await.is_finished());
    assert_eq!(
        f.state(&other_now).await,
        PendingState::PendingAt { scheduled_at: now }
    );
    assert_eq!(f.log(&other_now).await.events.len(), 1, "never locked");
}

/// E16: `close` returns promptly (from a wait for due executions, and from a wait for a
/// permit), and no execution is locked after it; the watcher closes promptly too.
pub async fn e16_close_is_prompt<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(CountingWorker::new(ffqn("e16"), Duration::ZERO));
    let config = ExecConfig {
        tick_sleep: Duration::from_secs(10),
        ..config()
    };
    let mut handle = ExecTask::spawn_new(
        worker.clone(),
        config.clone(),
        f.clock.clone(),
        f.db.clone(),
    );
    let first = f.create(f.request(ffqn("e16"), 0)).await;
    let result = f.db.wait_for_finished_result(&first, Some(SAFETY)).await;
    assert_eq!(
        result.expect("the executor runs"),
        Ok(SupportedFunctionReturnValue::None)
    );

    let started = std::time::Instant::now();
    handle.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
    let ticks = handle.tick_count();
    let second = f.create(f.request(ffqn("e16"), 0)).await;
    // Nothing can be awaited for "nothing happens": give a loop that wrongly outlived `close`
    // time to lock the new execution.
    tokio::time::sleep(ms(200)).await;
    assert_eq!(handle.tick_count(), ticks, "the loop ticked after close");
    assert!(matches!(
        f.state(&second).await,
        PendingState::PendingAt { .. }
    ));
    assert_eq!(worker.runs().len(), 1);
    handle.close().await; // idempotent

    // A loop that waits for a permit closes promptly too.
    let limiter = Arc::new(Semaphore::new(1));
    let _taken = limiter.clone().try_acquire_owned().expect("a free permit");
    let config = ExecConfig {
        task_limiter: Some(limiter),
        ..config
    };
    let mut handle = ExecTask::spawn_new(worker.clone(), config, f.clock.clone(), f.db.clone());
    wait_until("the executor ticked", || handle.tick_count() >= 1).await;
    let started = std::time::Instant::now();
    handle.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
    assert!(matches!(
        f.state(&second).await,
        PendingState::PendingAt { .. }
    ));

    let watcher_config = timers_watcher::TimersWatcherConfig {
        tick_sleep: Duration::from_secs(10),
        leeway: ms(0),
    };
    let mut watcher = timers_watcher::spawn_new(f.db.clone(), watcher_config, f.clock.clone());
    let started = std::time::Instant::now();
    watcher.close().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "close took {:?}",
        started.elapsed()
    );
}

/// E17: four executors over 2,000 executions: every execution runs and finishes exactly once.
pub async fn e17_four_executors_run_each_once<F: StoreFactory>(factory: &F) {
    const EXECUTIONS: usize = 2_000;
    let f = Fixture::new(factory).await;
    let worker = Arc::new(CountingWorker::new(ffqn("e17"), Duration::ZERO));
    let reqs: Vec<_> = (0..EXECUTIONS).map(|_| f.request(ffqn("e17"), 0)).collect();
    let ids: Vec<_> = reqs.iter().map(|req| req.execution_id.clone()).collect();
    let config = ExecConfig {
        tick_sleep: ms(200),
        lock_expiry: Duration::from_secs(60),
        ..config()
    };
    let mut handles: Vec<_> = (0..4)
        .map(|_| {
            ExecTask::spawn_new(
                worker.clone(),
                config.clone(),
                f.clock.clone(),
                f.db.clone(),
            )
        })
        .collect();
    f.db.create_batch(reqs).await.expect("create_batch");

    for id in &ids {
        let result =
            f.db.wait_for_finished_result(id, Some(Duration::from_secs(60)))
                .await;
        assert_eq!(
            result.expect("finished"),
            Ok(SupportedFunctionReturnValue::None)
        );
    }
    for handle in &mut handles {
        handle.close().await;
    }
    let runs = worker.runs();
    assert_eq!(runs.len(), EXECUTIONS);
    assert!(runs.values().all(|&n| n == 1), "an execution ran twice");
    for id in &ids {
        let log = f.log(id).await;
        let locks = log
            .events
            .iter()
            .filter(|e| matches!(e.event, ExecutionEventInner::Locked(_)));
        assert_eq!(locks.count(), 1, "{id} was locked more than once");
        assert_eq!(log.events.len(), 3, "{id}: {:?}", log.events);
    }
}

/// E18: `DbUpdatedByWorker`: the executor writes nothing (the worker wrote its own event).
pub async fn e18_db_updated_by_worker_writes_nothing<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(PersistingWorker::new(
        ffqn("e18"),
        f.db.clone(),
        f.clock.clone(),
    ));
    let exec = f.executor(worker, config());
    let execution_id = f.create(f.request(ffqn("e18"), 0)).await;

    tick(&exec, f.clock.now()).await;
    let log = f.log(&execution_id).await;
    let events: Vec<_> = log.events.iter().map(|e| e.event.variant_name()).collect();
    assert_eq!(events, vec!["Created", "Locked", "HistoryEvent"]);
    assert_eq!(log.events[2].event, PersistingWorker::persisted());
    assert_eq!(log.next_version, Version(3));
    assert!(
        matches!(log.pending_state, PendingState::Locked { .. }),
        "still under its lease"
    );
}

/// E19: a durable sleep: `DelayRequest`, `JoinNext`, and after the delay one watcher tick
/// delivers `DelayFinished` and the execution becomes pending (and then finishes).
pub async fn e19_durable_sleep<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = Arc::new(SleepingWorker::new(
        ffqn("e19"),
        ms(1_500),
        f.db.clone(),
        f.clock.clone(),
    ));
    let exec = f.executor(worker.clone(), config());
    let execution_id = f.create(f.request(ffqn("e19"), 0)).await;
    let slept_at = f.clock.now();
    let wakes_at = worker.expires_at(slept_at);

    tick(&exec, slept_at).await;
    let log = f.log(&execution_id).await;
    let delay_id = log
        .events
        .iter()
        .find_map(|e| match &e.event {
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinSetRequest {
                        request:
                            concepts::JoinSetRequest::DelayRequest {
                                delay_id,
                                expires_at,
                            },
                        ..
                    },
            } => {
                assert_eq!(*expires_at, wakes_at);
                Some(*delay_id)
            }
            _ => None,
        })
        .expect("a delay request");
    assert!(matches!(
        log.pending_state,
        PendingState::BlockedByJoinSet { .. }
    ));

    f.clock.move_time_to(minus(wakes_at, ms(1)));
    assert_eq!(
        f.watcher_tick().await,
        TickProgress::default(),
        "the delay has not expired"
    );
    f.clock.move_time_to(wakes_at);
    assert_eq!(
        f.watcher_tick().await,
        TickProgress {
            expired_locks: 0,
            expired_async_timers: 1
        }
    );
    let log = f.log(&execution_id).await;
    assert_eq!(log.responses.len(), 1);
    assert_eq!(log.responses[0].created_at, wakes_at);
    assert_eq!(
        log.responses[0].event.join_set_id,
        SleepingWorker::join_set()
    );
    assert_eq!(
        log.responses[0].event.event,
        JoinSetResponse::DelayFinished { delay_id }
    );
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt {
            scheduled_at: wakes_at
        }
    );
    assert_eq!(
        f.watcher_tick().await,
        TickProgress::default(),
        "delivered once"
    );

    assert_eq!(tick(&exec, wakes_at).await, vec![execution_id.clone()]);
    assert_eq!(
        f.last_event(&execution_id).await,
        finished(Ok(SupportedFunctionReturnValue::None))
    );
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
        );
    };
}
