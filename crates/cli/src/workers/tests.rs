//! Tests of the example workers, each driven through a real executor over the in-memory store
//! on a simulated clock, with tokio's clock paused so that simulated work takes no real time.

use super::{
    approval::{APPROVAL, approval},
    dice::{self, chance, roll},
    fanout::{FANOUT, FLAKY, fanout},
    flaky::FlakyWorker,
    sleeper::{SLEEPER, sleeper},
    slow::SlowWorker,
};
use concepts::{
    ClockFn, ComponentId, CreateRequest, DbConnection, ExecutionEventInner, ExecutionId,
    ExecutionLog, FinishedExecutionError, FunctionFqn, HistoryEvent, Json, PendingState,
    PermanentFailureKind, SupportedFunctionReturnValue,
};
use executor::{ExecConfig, ExecTask, Worker};
use std::{sync::Arc, time::Duration};
use storage_memory::MemoryStore;
use test_utils::SimClock;
use workflow::{NondeterminismPolicy, WorkflowWorker};

fn flaky_ffqn() -> FunctionFqn {
    "test:demo/activities.flaky".parse().unwrap()
}

fn component(name: &str) -> ComponentId {
    ComponentId::new("activity", name).unwrap()
}

struct Harness {
    db: Arc<dyn DbConnection>,
    clock: SimClock,
}

impl Harness {
    fn new() -> Self {
        Self {
            db: Arc::new(MemoryStore::new()),
            clock: SimClock::epoch(),
        }
    }

    async fn create(
        &self,
        ffqn: &FunctionFqn,
        params: serde_json::Value,
        max_retries: u32,
    ) -> ExecutionId {
        let execution_id = ExecutionId::generate_at(self.clock.now());
        self.create_as(execution_id.clone(), ffqn, params, max_retries)
            .await;
        execution_id
    }

    async fn create_as(
        &self,
        execution_id: ExecutionId,
        ffqn: &FunctionFqn,
        params: serde_json::Value,
        max_retries: u32,
    ) {
        let now = self.clock.now();
        self.db
            .create(CreateRequest {
                created_at: now,
                execution_id,
                ffqn: ffqn.clone(),
                params: Json(params),
                parent: None,
                scheduled_at: now,
                retry_exp_backoff: Duration::from_millis(100),
                max_retries,
                component_id: component("test"),
                metadata: concepts::ExecutionMetadata::default(),
                scheduled_by: None,
            })
            .await
            .unwrap();
    }

    fn executor(
        &self,
        worker: Arc<dyn Worker>,
        lock_expiry: Duration,
        batch_size: usize,
    ) -> ExecTask<SimClock> {
        let config = ExecConfig {
            lock_expiry,
            tick_sleep: Duration::from_millis(10),
            batch_size,
            component_id: component("test"),
            task_limiter: None,
        };
        ExecTask::new(worker, config, self.clock.clone(), self.db.clone())
    }

    /// One executor tick at the current simulated time, waiting for every run it started.
    async fn tick(&self, exec: &ExecTask<SimClock>) -> usize {
        let progress = exec.tick(self.clock.now()).await.unwrap();
        progress.wait_for_tasks().await.unwrap().len()
    }

    async fn get(&self, execution_id: &ExecutionId) -> ExecutionLog {
        self.db.get(execution_id).await.unwrap()
    }
}

fn value(log: &ExecutionLog) -> serde_json::Value {
    match log.finished_result() {
        Some(Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(value)))) => value.clone(),
        other => panic!("expected a value, the log finished with {other:?}"),
    }
}

fn count(log: &ExecutionLog, pred: impl Fn(&ExecutionEventInner) -> bool) -> usize {
    log.events.iter().filter(|event| pred(&event.event)).count()
}

fn is_join_next(event: &ExecutionEventInner) -> bool {
    matches!(
        event,
        ExecutionEventInner::HistoryEvent {
            event: HistoryEvent::JoinNext { .. }
        }
    )
}

#[test]
fn dice_is_reproducible_and_spread() {
    let id: ExecutionId = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap();
    assert_eq!(roll(&id, 3, "flaky"), roll(&id, 3, "flaky"));
    assert_ne!(roll(&id, 3, "flaky"), roll(&id, 4, "flaky"));
    assert_ne!(roll(&id, 3, "flaky"), roll(&id, 3, "slow"));
    assert_ne!(dice::hash64(&[b"ab", b"c"]), dice::hash64(&[b"a", b"bc"]));
    let rolls: Vec<f64> = (0..1_000).map(|attempt| roll(&id, attempt, "x")).collect();
    assert!(rolls.iter().all(|r| (0.0..1.0).contains(r)));
    let below_half = rolls.iter().filter(|r| **r < 0.5).count();
    assert!(
        (400..600).contains(&below_half),
        "{below_half} of 1000 below 0.5"
    );
    assert!(!chance(&id, 0, "x", 0.0));
    assert!(chance(&id, 0, "x", 1.0));
    assert!(!chance(&id, 0, "x", -3.0), "probabilities are clamped");
}

#[tokio::test(start_paused = true)]
async fn flaky_fails_its_unlucky_attempts_and_is_retried_until_it_succeeds() {
    let h = Harness::new();
    let ffqn = flaky_ffqn();
    // The attempts that fail are known in advance: the dice depend on id and attempt only.
    // Take an execution whose first two attempts fail.
    let first_success = |id: &ExecutionId| {
        (0..50)
            .find(|attempt| !chance(id, *attempt, "flaky", 0.5))
            .expect("some attempt succeeds")
    };
    let id = std::iter::repeat_with(|| ExecutionId::generate_at(h.clock.now()))
        .take(1_000)
        .find(|id| first_success(id) >= 2)
        .expect("a quarter of all ids qualify");
    let first_success = first_success(&id);
    h.create_as(
        id.clone(),
        &ffqn,
        serde_json::json!({"fail_probability": 0.5, "work_ms": 5}),
        50,
    )
    .await;
    let exec = h.executor(Arc::new(FlakyWorker::new(ffqn)), Duration::from_secs(5), 1);
    for _ in 0..=first_success {
        assert_eq!(h.tick(&exec).await, 1);
        // Past any backoff: retry n waits 100 ms * 2^(n-1).
        h.clock.move_time_forward(Duration::from_secs(3_600)).await;
    }
    let log = h.get(&id).await;
    let failed = count(&log, |event| {
        matches!(event, ExecutionEventInner::TemporarilyFailed { .. })
    });
    assert_eq!(failed, first_success as usize);
    assert_eq!(
        value(&log),
        serde_json::json!({"attempts": first_success + 1, "work_ms": 5})
    );
}

#[tokio::test(start_paused = true)]
async fn flaky_without_retries_left_fails_permanently() {
    let h = Harness::new();
    let ffqn = flaky_ffqn();
    let id = h
        .create(&ffqn, serde_json::json!({"fail_probability": 1.0}), 0)
        .await;
    let exec = h.executor(Arc::new(FlakyWorker::new(ffqn)), Duration::from_secs(5), 1);
    h.tick(&exec).await;
    let log = h.get(&id).await;
    match log.finished_result() {
        Some(Err(FinishedExecutionError::PermanentFailure {
            kind, reason_inner, ..
        })) => {
            assert_eq!(*kind, PermanentFailureKind::ActivityTrap);
            assert_eq!(reason_inner, "simulated failure on attempt 1");
        }
        other => panic!("expected a permanent failure, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn parameters_that_do_not_fit_finish_the_execution_at_once() {
    let h = Harness::new();
    let ffqn = flaky_ffqn();
    let id = h
        .create(&ffqn, serde_json::json!({"fail": "often"}), 5)
        .await;
    let exec = h.executor(Arc::new(FlakyWorker::new(ffqn)), Duration::from_secs(5), 1);
    h.tick(&exec).await;
    let log = h.get(&id).await;
    match log.finished_result() {
        Some(Err(FinishedExecutionError::PermanentFailure { kind, .. })) => {
            assert_eq!(*kind, PermanentFailureKind::ParamsParsingError);
        }
        other => panic!("expected a params parsing error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn slow_overrun_is_timed_out_by_the_watcher_and_its_late_result_is_refused() {
    let h = Harness::new();
    let ffqn: FunctionFqn = "test:demo/activities.slow".parse().unwrap();
    let id = h
        .create(
            &ffqn,
            serde_json::json!({"timeout_probability": 1.0, "work_ms": 1}),
            3,
        )
        .await;
    let lease = Duration::from_secs(1);
    let worker = SlowWorker::new(ffqn, h.clock.clone(), Duration::from_secs(30));
    let exec = h.executor(Arc::new(worker), lease, 1);
    let progress = exec.tick(h.clock.now()).await.unwrap();
    // The run sleeps on tokio's paused clock, which moves only once every task waits: the
    // watcher below always acts while the run is still asleep.
    h.clock.move_time_forward(lease).await;
    let resolved = timers_watcher::tick(h.db.as_ref(), h.clock.now(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(resolved.expired_locks, 1);
    progress.wait_for_tasks().await.unwrap(); // The run wakes up and reports `Ok`, too late.
    let log = h.get(&id).await;
    let kinds: Vec<&str> = log.events.iter().map(|e| e.event.variant_name()).collect();
    assert_eq!(kinds, ["Created", "Locked", "TemporarilyTimedOut"]);
    assert!(matches!(log.pending_state, PendingState::PendingAt { .. }));
}

#[tokio::test(start_paused = true)]
async fn slow_in_time_finishes_with_its_attempt() {
    let h = Harness::new();
    let ffqn: FunctionFqn = "test:demo/activities.slow".parse().unwrap();
    let id = h
        .create(
            &ffqn,
            serde_json::json!({"timeout_probability": 0.0, "work_ms": 20}),
            3,
        )
        .await;
    let worker = SlowWorker::new(ffqn, h.clock.clone(), Duration::from_secs(30));
    let exec = h.executor(Arc::new(worker), Duration::from_secs(1), 1);
    h.tick(&exec).await;
    assert_eq!(
        value(&h.get(&id).await),
        serde_json::json!({"attempts": 1, "work_ms": 20})
    );
}

/// The parent `FANOUT` with `children` flaky children, run to its end by spawned executors;
/// returns the parent's log.
async fn run_fanout(h: &Harness, children: u32, fail_probability: f64) -> ExecutionLog {
    let parent_ffqn = FANOUT.ffqn().unwrap();
    let params = serde_json::json!({"children": children, "fail_probability": fail_probability});
    let parent = h.create(&parent_ffqn, params, 1).await;
    let workflows = WorkflowWorker::new(h.db.clone(), h.clock.clone())
        .child_settings(component("flaky"), 0, Duration::from_millis(100))
        .register(&FANOUT, fanout)
        .unwrap();
    let lease = Duration::from_secs(5);
    let mut parent_exec = h.executor(Arc::new(workflows), lease, 1).spawn();
    let flaky = Arc::new(FlakyWorker::new(FLAKY.ffqn().unwrap()));
    let mut child_exec = h.executor(flaky, lease, 10).spawn();
    let _finished =
        h.db.wait_for_finished_result(&parent, Some(Duration::from_secs(60)))
            .await
            .unwrap();
    parent_exec.close().await;
    child_exec.close().await;
    h.get(&parent).await
}

fn runs(log: &ExecutionLog) -> usize {
    count(log, |event| matches!(event, ExecutionEventInner::Locked(_)))
}

#[tokio::test(start_paused = true)]
async fn fanout_submits_its_children_at_once_and_awaits_each_response_in_one_run() {
    let h = Harness::new();
    let log = run_fanout(&h, 3, 0.0).await;
    assert_eq!(
        value(&log),
        serde_json::json!({"children": 3, "succeeded": 3, "failed": 0, "child_attempts": 3})
    );
    assert_eq!(count(&log, is_join_next), 3, "one JoinNext per child");
    assert_eq!(
        runs(&log),
        1,
        "the children finished within the lease: no replay"
    );
    for index in 1..=3 {
        let child = log
            .execution_id
            .next_level(&"n:children".parse().unwrap(), index);
        assert!(h.get(&child).await.finished_result().is_some());
    }
}

#[tokio::test(start_paused = true)]
async fn fanout_counts_children_that_failed_for_good() {
    let h = Harness::new();
    let log = run_fanout(&h, 4, 1.0).await; // All fail, without retries: handled by the parent.
    assert_eq!(
        value(&log),
        serde_json::json!({"children": 4, "succeeded": 0, "failed": 4, "child_attempts": 0})
    );
}

#[tokio::test(start_paused = true)]
async fn sleeper_sleeps_durably_until_the_watcher_delivers_its_delay() {
    let h = Harness::new();
    let ffqn = SLEEPER.ffqn().unwrap();
    let id = h
        .create(&ffqn, serde_json::json!({"sleep_ms": 2_000}), 1)
        .await;
    let worker = WorkflowWorker::new(h.db.clone(), h.clock.clone())
        .register(&SLEEPER, sleeper)
        .unwrap();
    // A lease shorter than the sleep: the run gives the execution up while it sleeps.
    let exec = h.executor(Arc::new(worker), Duration::from_secs(1), 1);
    h.tick(&exec).await;
    assert!(matches!(
        h.get(&id).await.pending_state,
        PendingState::BlockedByJoinSet { .. }
    ));

    h.clock
        .move_time_forward(Duration::from_millis(1_999))
        .await;
    let early = timers_watcher::tick(h.db.as_ref(), h.clock.now(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(early.expired_async_timers, 0);
    assert_eq!(h.tick(&exec).await, 0, "still asleep");

    h.clock.move_time_forward(Duration::from_millis(1)).await;
    let due = timers_watcher::tick(h.db.as_ref(), h.clock.now(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(due.expired_async_timers, 1);
    assert_eq!(h.tick(&exec).await, 1);
    assert_eq!(
        value(&h.get(&id).await),
        serde_json::json!({"slept_ms": 2_000, "woke_late_ms": 0})
    );
}

#[tokio::test(start_paused = true)]
async fn approval_waits_for_its_promise_and_finishes_with_the_answer() {
    let h = Harness::new();
    let id = h
        .create(
            &APPROVAL.ffqn().unwrap(),
            serde_json::json!({"subject": "deploy"}),
            1,
        )
        .await;
    let worker = WorkflowWorker::new(h.db.clone(), h.clock.clone())
        .register(&APPROVAL, approval)
        .unwrap();
    let exec = h.executor(Arc::new(worker), Duration::from_secs(1), 1);
    // Nobody answers within the lease: the run gives the execution up, waiting.
    assert_eq!(h.tick(&exec).await, 1);
    assert!(matches!(
        h.get(&id).await.pending_state,
        PendingState::BlockedByJoinSet { .. }
    ));
    let promise = workflow::promise_id(&id, "approval").unwrap();
    let answer = serde_json::json!({"approved": true, "by": "ops"});
    let completed =
        h.db.complete(concepts::CompleteRequest {
            execution_id: promise,
            now: h.clock.now(),
            value: SupportedFunctionReturnValue::InfallibleOrResultOk(Json(answer.clone())),
        })
        .await
        .unwrap();
    assert_eq!(completed, concepts::CompleteOutcome::Completed);
    // The run waited warm, so its `JoinNext` expires at the end of its lease: due from then.
    h.clock.move_time_forward(Duration::from_secs(1)).await;
    assert_eq!(h.tick(&exec).await, 1, "the answer made it due");
    assert_eq!(value(&h.get(&id).await), answer);
}

#[tokio::test(start_paused = true)]
async fn a_replay_that_does_not_match_its_history_is_nondeterminism() {
    let h = Harness::new();
    // Recorded with 2 children, replayed with parameters that now say 3.
    let id = h
        .create(
            &FANOUT.ffqn().unwrap(),
            serde_json::json!({"children": 2, "fail_probability": 0.0}),
            1,
        )
        .await;
    let worker = || {
        WorkflowWorker::new(h.db.clone(), h.clock.clone())
            .nondeterminism_policy(NondeterminismPolicy::Fail)
            .register(&FANOUT, fanout)
            .unwrap()
    };
    // A lease that ends at once: the first run gives up at its first wait.
    let instant = Duration::from_millis(1);
    h.tick(&h.executor(Arc::new(worker()), instant, 1)).await;
    let flaky = Arc::new(FlakyWorker::new(FLAKY.ffqn().unwrap()));
    h.tick(&h.executor(flaky, Duration::from_secs(5), 10)).await;
    h.clock.move_time_forward(instant).await; // past the first run's lease

    struct Rewritten(WorkflowWorker<SimClock>);
    #[async_trait::async_trait]
    impl Worker for Rewritten {
        async fn run(&self, mut ctx: executor::WorkerContext) -> executor::WorkerResult {
            ctx.params = Json(serde_json::json!({"children": 3, "fail_probability": 0.0}));
            self.0.run(ctx).await
        }
        fn exported_functions(&self) -> &[FunctionFqn] {
            self.0.exported_functions()
        }
    }
    h.tick(&h.executor(Arc::new(Rewritten(worker())), Duration::from_secs(5), 1))
        .await;
    match h.get(&id).await.finished_result() {
        Some(Err(FinishedExecutionError::PermanentFailure {
            kind, reason_full, ..
        })) => {
            assert_eq!(*kind, PermanentFailureKind::NondeterminismDetected);
            assert!(
                reason_full.contains("the code submitted child"),
                "{reason_full}"
            );
        }
        other => panic!("expected nondeterminism, got {other:?}"),
    }
}
