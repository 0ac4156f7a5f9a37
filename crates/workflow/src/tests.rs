//! Replay against recorded histories, without a store: a fake log records what a run appends,
//! and the next run replays it, by the same code or by changed code.

use crate::{
    ctx::{Clock, Shared, WorkflowCtx},
    driver::{NondeterminismPolicy, Probed, RunIo, RunLimits, drive, probe},
    error::WorkflowError,
    function::Function,
    state::{ChildDefaults, RunState},
    worker::workflow_start,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, ComponentId, CreateRequest, DbError, ExecutionId, ExecutionMetadata,
    FinishedExecutionError, FinishedExecutionResult, FunctionFqn, HistoryEvent, JoinSetRequest,
    JoinSetResponse, JoinSetResponseEvent, JoinSetResponseEventOuter, Json, RunId,
    SupportedFunctionReturnValue, Version,
};
use executor::{FatalError, WorkerError, WorkerResult};
use futures_util::future::BoxFuture;
use serde_json::json;
use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};
use test_utils::SimClock;

const A: Function<u64, u64> = Function::new("test:wf/api.a");
const B: Function<u64, u64> = Function::new("test:wf/api.b");

/// The log of one execution: `Created` and the first `Locked` at versions 0 and 1, then the
/// history events the runs append.
#[derive(Default)]
struct FakeLog {
    events: Mutex<Vec<HistoryEvent>>,
    children: Mutex<Vec<CreateRequest>>,
    appends: Mutex<usize>,
    /// Delivered to a warm wait, then the wait never ends.
    arriving: Mutex<Vec<JoinSetResponseEventOuter>>,
    /// Set when someone else finished the execution (a cancellation) before the run watches.
    finished_by_someone_else: Mutex<Option<FinishedExecutionResult>>,
    /// The children the runs cancelled, in order.
    cancelled: Mutex<Vec<ExecutionId>>,
    /// Whether each append asked for its child's answer to be handed to the run.
    answered: Mutex<Vec<bool>>,
}

impl FakeLog {
    fn history(&self) -> Vec<HistoryEvent> {
        self.events.lock().unwrap().clone()
    }

    fn next_version(&self) -> Version {
        Version(2 + u32::try_from(self.events.lock().unwrap().len()).unwrap())
    }
}

#[async_trait]
impl RunIo for FakeLog {
    async fn append(
        &self,
        version: Version,
        _now: DateTime<Utc>,
        events: Vec<HistoryEvent>,
        children: Vec<CreateRequest>,
        answered: bool,
    ) -> Result<Version, DbError> {
        self.answered.lock().unwrap().push(answered);
        let expected_version = self.next_version();
        if version != expected_version {
            return Err(DbError::VersionMismatch {
                appending_version: version,
                expected_version,
            });
        }
        self.events.lock().unwrap().extend(events);
        self.children.lock().unwrap().extend(children);
        *self.appends.lock().unwrap() += 1;
        Ok(self.next_version())
    }

    async fn next_responses(
        &self,
        _start: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        let arriving = std::mem::take(&mut *self.arriving.lock().unwrap());
        if arriving.is_empty() {
            std::future::pending::<()>().await;
        }
        Ok(arriving)
    }

    async fn history_event_version(&self, index: usize) -> Option<Version> {
        u32::try_from(index).ok().map(|index| Version(2 + index))
    }

    async fn children_created(
        &self,
        children: Vec<ExecutionId>,
    ) -> Result<HashMap<ExecutionId, (FunctionFqn, Json)>, DbError> {
        let created = self.children.lock().unwrap();
        Ok(created
            .iter()
            .filter(|child| children.contains(&child.execution_id))
            .map(|child| {
                (
                    child.execution_id.clone(),
                    (child.ffqn.clone(), child.params.clone()),
                )
            })
            .collect())
    }

    fn cancelled(&self) -> BoxFuture<'static, FinishedExecutionResult> {
        match self.finished_by_someone_else.lock().unwrap().clone() {
            Some(result) => Box::pin(std::future::ready(result)),
            None => Box::pin(std::future::pending()),
        }
    }

    async fn cancel(
        &self,
        children: Vec<ExecutionId>,
        _now: DateTime<Utc>,
        _reason: String,
    ) -> Result<(), DbError> {
        self.cancelled.lock().unwrap().extend(children);
        Ok(())
    }
}

fn parent() -> ExecutionId {
    "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap()
}

struct Harness {
    log: FakeLog,
    responses: Vec<JoinSetResponseEventOuter>,
    clock: SimClock,
    policy: NondeterminismPolicy,
    /// Warm: the run may wait this long; `None`: every wait is cold.
    warm: Option<Duration>,
}

impl Harness {
    fn new() -> Self {
        Self {
            log: FakeLog::default(),
            responses: Vec::new(),
            clock: SimClock::epoch(),
            policy: NondeterminismPolicy::Park,
            warm: None,
        }
    }

    /// One run of `workflow` over the log so far.
    async fn run<F, Fut>(&self, workflow: F) -> WorkerResult
    where
        F: Fn(WorkflowCtx, u64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<u64, WorkflowError<String>>> + Send + 'static,
    {
        let clock = self.clock.clone();
        let clock: Clock = Arc::new(move || clock.now());
        let now = clock();
        let state = RunState::new(
            parent(),
            RunId::generate_at(now),
            ExecutionMetadata::default(),
            ChildDefaults {
                component_id: ComponentId::new("activity", "test").unwrap(),
                max_retries: 0,
                retry_exp_backoff: Duration::from_secs(1),
            },
            self.log.history(),
            self.responses.clone(),
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            clock,
        });
        let future = workflow_start(workflow)(WorkflowCtx::new(shared.clone()), Json(json!(7)))
            .expect("params decode");
        let give_up_at = concepts::add_saturating(now, self.warm.unwrap_or_default());
        let limits = RunLimits {
            version: self.log.next_version(),
            deadline: concepts::add_saturating(give_up_at, Duration::from_secs(1)),
            give_up_at,
            wait_slice: Duration::from_millis(50),
            policy: self.policy,
        };
        tokio::time::timeout(
            Duration::from_secs(10),
            drive(shared, future, &self.log, limits),
        )
        .await
        .expect("a run never hangs")
    }

    /// A probe of `workflow` over the log so far: its replay, stopped where it would record.
    async fn probe<F, Fut>(&self, workflow: F) -> Probed
    where
        F: Fn(WorkflowCtx, u64) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<u64, WorkflowError<String>>> + Send + 'static,
    {
        let clock = self.clock.clone();
        let clock: Clock = Arc::new(move || clock.now());
        let mut state = RunState::new(
            parent(),
            RunId::generate_at(clock()),
            ExecutionMetadata::default(),
            ChildDefaults {
                component_id: ComponentId::new("activity", "test").unwrap(),
                max_retries: 0,
                retry_exp_backoff: Duration::from_secs(1),
            },
            self.log.history(),
            self.responses.clone(),
        )
        .probing();
        let requested = state.recorded_child_requests();
        state.recorded_children = self.log.children_created(requested).await.unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            clock,
        });
        let mut future = workflow_start(workflow)(WorkflowCtx::new(shared.clone()), Json(json!(7)))
            .expect("params decode");
        probe(&shared, &mut future)
    }

    fn child_finished(&mut self, child: &ExecutionId, result: concepts::FinishedExecutionResult) {
        let (_, join_set_id) = child.split_to_parent().unwrap();
        self.responses.push(JoinSetResponseEventOuter {
            created_at: self.clock.now(),
            event: JoinSetResponseEvent {
                join_set_id,
                event: JoinSetResponse::ChildExecutionFinished {
                    child_execution_id: child.clone(),
                    finished_version: Version(3),
                    result,
                },
            },
        });
    }

    fn child_ok(&mut self, child: &ExecutionId, value: u64) {
        let result = Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
            json!(value),
        )));
        self.child_finished(child, result);
    }

    /// Fires every delay of the log that has not fired.
    fn delays_fire(&mut self) {
        for event in self.log.history() {
            if let HistoryEvent::JoinSetRequest {
                join_set_id,
                request: JoinSetRequest::DelayRequest { delay_id, .. },
            } = event
            {
                let fired = JoinSetResponse::DelayFinished { delay_id };
                if !self.responses.iter().any(|r| r.event.event == fired) {
                    self.responses.push(JoinSetResponseEventOuter {
                        created_at: self.clock.now(),
                        event: JoinSetResponseEvent {
                            join_set_id,
                            event: fired,
                        },
                    });
                }
            }
        }
    }

    fn child_ids(&self) -> Vec<ExecutionId> {
        let children = self.log.children.lock().unwrap();
        children.iter().map(|c| c.execution_id.clone()).collect()
    }
}

/// Calls `first`, sleeps, draws a random number and runs a step; returns all three combined.
async fn version_one(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let doubled = ctx.call(&A, &n).await?;
    ctx.sleep(Duration::from_secs(3600)).await;
    let random = ctx.random_u64(1..=1_000_000).await;
    let stepped = ctx.step("side-effect", || 5u64).await;
    Ok(doubled * 1_000_000_000 + random * 10 + stepped)
}

/// The line of `calls_b_first`'s call, which a divergence names.
const CALLS_B_AT: u32 = line!() + 4;

/// Like `version_one`, but its first call is to another function.
async fn calls_b_first(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let doubled = ctx.call(&B, &n).await?;
    Ok(doubled)
}

/// Like `version_one`, but it stops after the call.
async fn stops_after_the_call(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    ctx.call(&A, &n).await.map_err(Into::into)
}

/// Records `version_one` to the end; returns the harness and the value.
async fn recorded_version_one() -> (Harness, SupportedFunctionReturnValue) {
    let mut h = Harness::new();
    let first = h.run(version_one).await;
    assert!(
        matches!(first, WorkerResult::DbUpdatedByWorker),
        "{first:?}"
    );
    let children = h.child_ids();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].to_string(), format!("{}.o:1-a_1", parent()));
    h.child_ok(&children[0], 14);
    let second = h.run(version_one).await;
    assert!(
        matches!(second, WorkerResult::DbUpdatedByWorker),
        "{second:?}"
    );
    h.delays_fire();
    let WorkerResult::Ok(value, version) = h.run(version_one).await else {
        panic!("the third run finishes");
    };
    assert_eq!(version, h.log.next_version());
    (h, value)
}

#[tokio::test]
async fn the_same_code_replays_its_own_history_to_the_same_value_without_writing() {
    let (h, value) = recorded_version_one().await;
    let kinds: Vec<&str> = h
        .log
        .history()
        .iter()
        .map(|event| match event {
            HistoryEvent::Persist { .. } => "Persist",
            HistoryEvent::JoinSetCreate { .. } => "JoinSetCreate",
            HistoryEvent::JoinSetRequest { .. } => "JoinSetRequest",
            HistoryEvent::JoinNext { .. } => "JoinNext",
            HistoryEvent::Schedule { .. } => "Schedule",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "JoinSetCreate",
            "JoinSetRequest",
            "JoinNext",
            "JoinSetCreate",
            "JoinSetRequest",
            "JoinNext",
            "Persist",
            "Persist",
        ]
    );
    let appends = *h.log.appends.lock().unwrap();
    assert_eq!(appends, 3, "one append per step");
    // A fourth run (say, after the `Finished` write was lost) replays everything.
    let WorkerResult::Ok(again, _) = h.run(version_one).await else {
        panic!("the replay finishes");
    };
    assert_eq!(again, value, "persisted values are the same on replay");
    assert_eq!(*h.log.appends.lock().unwrap(), 3, "a replay writes nothing");
}

#[tokio::test]
async fn changed_code_is_nondeterminism_at_the_first_diverging_version() {
    let (mut h, _) = recorded_version_one().await;
    let WorkerResult::Err(WorkerError::Parked { reason, version }) = h.run(calls_b_first).await
    else {
        panic!("parking is the default policy");
    };
    assert_eq!(
        reason,
        format!(
            "the replay diverged at version 2: the log holds the opening of join set o:1-a, the \
             code opened join set o:1-b (at {}:{CALLS_B_AT}:23)",
            file!()
        )
    );
    assert_eq!(version, h.log.next_version(), "nothing was written");

    h.policy = NondeterminismPolicy::Fail;
    let WorkerResult::Err(WorkerError::FatalError(
        FatalError::NondeterminismDetected { reason },
        _,
    )) = h.run(stops_after_the_call).await
    else {
        panic!("the fail policy finishes the execution");
    };
    assert!(
        reason.starts_with(
            "the replay diverged at version 5: the log holds the opening of join set o:2, the code \
             returned"
        ),
        "{reason}"
    );
}

#[tokio::test]
async fn awaiting_a_tokio_sleep_is_a_reported_determinism_violation() {
    let mut h = Harness::new();
    h.policy = NondeterminismPolicy::Fail;
    let result = h
        .run(|_ctx, n| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(n)
        })
        .await;
    let WorkerResult::Err(WorkerError::FatalError(
        FatalError::NondeterminismDetected { reason },
        _,
    )) = result
    else {
        panic!("reported: {result:?}");
    };
    assert!(reason.contains("not a workflow operation"), "{reason}");
}

#[tokio::test]
async fn two_operations_awaited_at_once_are_a_determinism_violation() {
    let h = Harness::new();
    let result = h
        .run(|ctx, n| async move {
            let (a, b) = futures_util::future::join(ctx.call(&A, &n), ctx.call(&B, &n)).await;
            Ok(a? + b?)
        })
        .await;
    let WorkerResult::Err(WorkerError::Parked { reason, .. }) = result else {
        panic!("reported: {result:?}");
    };
    assert!(reason.contains("awaited at once"), "{reason}");
}

#[tokio::test]
async fn a_join_set_answers_in_arrival_order_and_finishes_without_replaying_the_last_step() {
    let mut h = Harness::new();
    let fan_out = |ctx: WorkflowCtx, n: u64| async move {
        let js = ctx.join_set();
        for i in 0..n {
            js.submit(&A, &i);
        }
        let mut order = 0;
        while let Some(crate::Response::Child(child)) = js.next().await {
            order = order * 10 + child.into_result::<u64>()?;
        }
        Ok(order)
    };
    h.warm = Some(Duration::from_secs(10));
    // Children 3, 1 and 2 finish while the parent waits warm.
    let children: Vec<ExecutionId> = (1..=3)
        .map(|k| parent().next_level(&"g:1".parse().unwrap(), k))
        .collect();
    for (k, child) in [(3, &children[2]), (1, &children[0]), (2, &children[1])] {
        let before = h.responses.len();
        h.child_ok(child, k);
        let arrived = h.responses.split_off(before);
        h.log.arriving.lock().unwrap().extend(arrived);
    }
    // The parent's first run submits, waits once and finishes.
    let result = h.run(move |ctx, _| fan_out(ctx, 3)).await;
    let WorkerResult::Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(value), version) =
        result
    else {
        panic!("finished in one run: {result:?}");
    };
    assert_eq!(value, Json(json!(312)), "arrival order");
    assert_eq!(version, h.log.next_version());
    // No `JoinNext` gives up the run right before the result: each expires at the deadline.
    let history = h.log.history();
    let join_nexts: Vec<DateTime<Utc>> = history
        .iter()
        .filter_map(|event| match event {
            HistoryEvent::JoinNext { run_expires_at, .. } => Some(*run_expires_at),
            _ => None,
        })
        .collect();
    assert_eq!(join_nexts.len(), 3);
    let now = h.clock.now();
    assert!(join_nexts.iter().all(|at| *at > now), "{join_nexts:?}");
}

#[tokio::test]
async fn an_unconsumed_failed_child_fails_the_parent_after_closing_its_join_set() {
    let mut h = Harness::new();
    let submits_two = |ctx: WorkflowCtx, _: u64| async move {
        let js = ctx.join_set_named("pair");
        js.submit(&A, &1);
        js.submit(&A, &2);
        Ok(0)
    };
    let first = h.run(submits_two).await;
    assert!(
        matches!(first, WorkerResult::DbUpdatedByWorker),
        "{first:?}"
    );
    let children = h.child_ids();
    h.child_ok(&children[1], 4);
    h.child_finished(&children[0], Err(FinishedExecutionError::PermanentTimeout));
    let WorkerResult::Err(WorkerError::FatalError(
        FatalError::UnhandledChildExecutionError {
            child_execution_id,
            root_cause_id,
        },
        _,
    )) = h.run(submits_two).await
    else {
        panic!("unhandled child error");
    };
    assert_eq!(child_execution_id, children[0]);
    assert_eq!(root_cause_id, children[0]);
    let closing = h
        .log
        .history()
        .iter()
        .filter(|event| matches!(event, HistoryEvent::JoinNext { closing: true, .. }))
        .count();
    assert_eq!(
        closing, 2,
        "both children were awaited by closing JoinNexts"
    );
}

#[tokio::test]
async fn a_sleep_longer_than_the_lease_gives_up_the_run_at_once() {
    let mut h = Harness::new();
    h.warm = Some(Duration::from_secs(10));
    let sleeps = |ctx: WorkflowCtx, _: u64| async move {
        ctx.sleep(Duration::from_secs(3600)).await;
        Ok(1)
    };
    let result = h.run(sleeps).await;
    assert!(
        matches!(result, WorkerResult::DbUpdatedByWorker),
        "{result:?}"
    );
    let Some(HistoryEvent::JoinNext { run_expires_at, .. }) = h.log.history().last().cloned()
    else {
        panic!("the run ends awaiting the delay");
    };
    assert_eq!(
        run_expires_at,
        h.clock.now(),
        "cold: the run is given up at once"
    );
}

/// The line of `submits`' submit, which a divergence names.
const SUBMITS_AT: u32 = line!() + 9;

/// Submits `function(n)` into the join set `n:work` and awaits it.
async fn submits(
    ctx: WorkflowCtx,
    function: &'static Function<u64, u64>,
    n: u64,
) -> Result<u64, WorkflowError<String>> {
    let js = ctx.join_set_named("work");
    js.submit(function, &n);
    match js.next().await {
        Some(crate::Response::Child(child)) => Ok(child.into_result::<u64>()?),
        _ => Err(WorkflowError::Failed("no child".to_string())),
    }
}

#[tokio::test]
async fn a_replayed_child_request_must_name_the_same_function_and_parameters() {
    let h = Harness::new();
    let first = h.run(|ctx, n| submits(ctx, &A, n)).await;
    assert!(
        matches!(first, WorkerResult::DbUpdatedByWorker),
        "{first:?}"
    );
    // Same join set, same child id: only the child's `Created` event tells them apart.
    let WorkerResult::Err(WorkerError::Parked { reason, .. }) =
        h.run(|ctx, n| submits(ctx, &B, n)).await
    else {
        panic!("another function is nondeterminism");
    };
    let child = format!("{}.n:work_1", parent());
    assert_eq!(
        reason,
        format!(
            "the replay diverged at version 3: the log holds a request for child {child} of \
             test:wf/api.a with parameters 7, the code called test:wf/api.b with parameters 7 \
             (at {}:{SUBMITS_AT}:8)",
            file!()
        )
    );
    let WorkerResult::Err(WorkerError::Parked { reason, .. }) =
        h.run(|ctx, n| submits(ctx, &A, n + 1)).await
    else {
        panic!("other parameters are nondeterminism");
    };
    assert!(
        reason.contains("the code called test:wf/api.a with parameters 8 (at "),
        "{reason}"
    );
    // The same code replays the request.
    let again = h.run(|ctx, n| submits(ctx, &A, n)).await;
    // Nothing to write and nothing arrived: the run ends, the watcher acts on its lease.
    assert!(
        matches!(
            again,
            WorkerResult::Err(WorkerError::TemporaryTimeoutHandledByWatcher)
        ),
        "{again:?}"
    );
}

#[tokio::test]
async fn a_step_whose_output_cannot_be_recorded_is_a_trap_that_records_nothing() {
    let h = Harness::new();
    let result = h
        .run(|ctx, n| async move {
            // JSON object keys must be strings: this map cannot be recorded.
            let map: HashMap<(u8, u8), u8> =
                ctx.step("pairs", || HashMap::from([((1, 2), 3)])).await;
            Ok(n + u64::from(map.len() as u8))
        })
        .await;
    let WorkerResult::Err(WorkerError::TemporaryWorkflowTrap { reason, .. }) = result else {
        panic!("a trap: {result:?}");
    };
    assert!(
        reason.contains("cannot record a value of kind Custom(\"pairs\")"),
        "{reason}"
    );
    assert!(h.log.history().is_empty(), "nothing recorded");
}

#[tokio::test]
async fn a_step_may_use_the_context_and_runs_only_when_recording() {
    let h = Harness::new();
    let counted = Arc::new(Mutex::new(0u64));
    let workflow = {
        let counted = counted.clone();
        move |ctx: WorkflowCtx, n: u64| {
            let counted = counted.clone();
            async move {
                let inner = ctx.clone();
                let id = ctx
                    .step("whoami", move || {
                        *counted.lock().unwrap() += 1;
                        inner.execution_id().to_string()
                    })
                    .await;
                assert_eq!(id, parent().to_string());
                ctx.sleep(Duration::from_secs(3600)).await;
                Ok(n)
            }
        }
    };
    let first = h.run(workflow.clone()).await;
    assert!(
        matches!(first, WorkerResult::DbUpdatedByWorker),
        "{first:?}"
    );
    let mut h = h;
    h.delays_fire();
    let WorkerResult::Ok(..) = h.run(workflow).await else {
        panic!("the replay finishes");
    };
    assert_eq!(
        *counted.lock().unwrap(),
        1,
        "the step ran once, the replay read it"
    );
}

#[tokio::test]
async fn a_panic_after_a_write_is_a_workflow_trap_at_the_version_reached() {
    let mut h = Harness::new();
    h.warm = Some(Duration::from_secs(10));
    let js = "g:1".parse().unwrap();
    let child = parent().next_level(&js, 1);
    h.child_ok(&child, 1);
    let arrived = std::mem::take(&mut h.responses);
    h.log.arriving.lock().unwrap().extend(arrived);
    let result = h
        .run(|ctx, n| async move {
            let js = ctx.join_set();
            js.submit(&A, &n);
            let _ = js.next().await;
            panic!("the code has a bug");
        })
        .await;
    let WorkerResult::Err(WorkerError::TemporaryWorkflowTrap {
        reason, version, ..
    }) = result
    else {
        panic!("a workflow trap: {result:?}");
    };
    assert_eq!(reason, "the workflow panicked: the code has a bug");
    assert_eq!(
        version,
        h.log.next_version(),
        "at the version after the run's write"
    );
    assert_eq!(version, Version(5));
}

mod lifecycle;

/// The reason of a probe that diverged.
fn diverged(probed: Probed) -> String {
    match probed {
        Probed::Diverges(fault) => fault.reason("version ?"),
        Probed::Agrees => panic!("the probe agreed"),
    }
}

#[tokio::test]
async fn a_probe_agrees_with_the_code_that_recorded_the_log_and_runs_no_step() {
    let mut h = Harness::new();
    assert!(matches!(
        h.run(version_one).await,
        WorkerResult::DbUpdatedByWorker
    ));
    let child = h.child_ids()[0].clone();
    h.child_ok(&child, 14);
    // The log ends with the call's `JoinNext`: the code replays to it and would go on.
    assert!(matches!(h.probe(version_one).await, Probed::Agrees));
    // Code that differs only after the recorded history agrees too; a probe records nothing
    // and runs no step's closure there.
    let stepped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = stepped.clone();
    let probed = h
        .probe(move |ctx, n| {
            let counter = counter.clone();
            async move {
                let doubled = ctx.call(&A, &n).await?;
                ctx.step("new", || {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                })
                .await;
                Ok(doubled)
            }
        })
        .await;
    assert!(
        matches!(probed, Probed::Agrees),
        "the change comes after the log"
    );
    assert_eq!(stepped.load(std::sync::atomic::Ordering::SeqCst), 0);
    let appends = *h.log.appends.lock().unwrap();
    let (h, _) = recorded_version_one().await;
    assert!(
        matches!(h.probe(version_one).await, Probed::Agrees),
        "a finished replay agrees"
    );
    assert_eq!(*h.log.appends.lock().unwrap(), 3, "a probe writes nothing");
    assert!(appends > 0);
}

#[tokio::test]
async fn a_probe_of_changed_code_names_where_it_diverges() {
    let (h, _) = recorded_version_one().await;
    assert_eq!(
        diverged(h.probe(calls_b_first).await),
        format!(
            "the replay diverged at version ?: the log holds the opening of join set o:1-a, the \
             code opened join set o:1-b (at {}:{CALLS_B_AT}:23)",
            file!()
        )
    );
    assert!(
        diverged(h.probe(stops_after_the_call).await).ends_with("the code returned"),
        "a shorter code returns where the log holds more"
    );
    let reason = diverged(
        h.probe(|ctx, n| async move {
            let doubled = ctx.call(&A, &n).await?;
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(doubled)
        })
        .await,
    );
    assert!(reason.contains("not a workflow operation"), "{reason}");
}

const FLOW: Function<u64, u64> = Function::new("test:wf/flows.flow");

impl Harness {
    /// The log so far as an export holds it: `Created` (of `FLOW`, parameters 7), a `Locked`,
    /// the history, the responses and the children's functions and parameters.
    fn recorded(&self) -> crate::RecordedHistory {
        let at = self.clock.now();
        let event = |event| concepts::ExecutionEvent {
            created_at: at,
            event,
        };
        let created = CreateRequest {
            created_at: at,
            execution_id: parent(),
            ffqn: FLOW.ffqn().unwrap(),
            params: Json(json!(7)),
            parent: None,
            scheduled_at: at,
            retry_exp_backoff: Duration::from_secs(1),
            max_retries: 0,
            component_id: ComponentId::new("test", "flows").unwrap(),
            metadata: ExecutionMetadata::default(),
            scheduled_by: None,
        };
        let locked = concepts::ExecutionEventInner::Locked(concepts::Locked {
            component_id: ComponentId::new("test", "flows").unwrap(),
            executor_id: concepts::ExecutorId::generate_at(at),
            run_id: RunId::generate_at(at),
            lock_expires_at: at,
        });
        let mut events = vec![created.to_created_event(), event(locked)];
        events.extend(
            self.log.history().into_iter().map(|history| {
                event(concepts::ExecutionEventInner::HistoryEvent { event: history })
            }),
        );
        let children = (self.log.children.lock().unwrap().iter())
            .map(|child| crate::RecordedChild {
                execution_id: child.execution_id.clone(),
                function: child.ffqn.clone(),
                params: child.params.clone(),
            })
            .collect();
        crate::RecordedHistory {
            execution_id: parent(),
            events,
            responses: self.responses.clone(),
            children,
        }
    }
}

fn replayer<F, Fut>(workflow: F) -> crate::Replayer
where
    F: Fn(WorkflowCtx, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, WorkflowError<String>>> + Send + 'static,
{
    crate::Replayer::new().register(&FLOW, workflow).unwrap()
}

#[tokio::test]
async fn a_recorded_history_replays_through_its_own_code_and_through_json() {
    let (h, _) = recorded_version_one().await;
    let history = h.recorded();
    replayer(version_one)
        .replay(&history)
        .expect("the same code agrees");
    let text = serde_json::to_string(&history).unwrap();
    let read: crate::RecordedHistory = serde_json::from_str(&text).unwrap();
    assert_eq!(read, history);
    replayer(version_one)
        .replay(&read)
        .expect("and after a JSON round trip");
    // Half a history (a run that waits) replays too.
    let mut half = Harness::new();
    assert!(matches!(
        half.run(version_one).await,
        WorkerResult::DbUpdatedByWorker
    ));
    let child = half.child_ids()[0].clone();
    half.child_ok(&child, 14);
    replayer(version_one)
        .replay(&half.recorded())
        .expect("agrees up to its end");
}

#[tokio::test]
async fn a_replay_of_changed_code_names_the_event_the_operation_and_the_call_site() {
    let (h, _) = recorded_version_one().await;
    let history = h.recorded();
    let Err(crate::ReplayError::Nondeterminism {
        version,
        reason,
        at,
        ..
    }) = replayer(calls_b_first).replay(&history)
    else {
        panic!("another function diverges");
    };
    let site = format!("{}:{CALLS_B_AT}:23", file!());
    assert_eq!(version, Some(Version(2)));
    assert_eq!(at.as_deref(), Some(site.as_str()));
    assert_eq!(
        reason,
        format!(
            "the replay diverged at version 2: the log holds the opening of join set o:1-a, the \
             code opened join set o:1-b (at {site})"
        )
    );
    // The same function with other parameters: the child's `Created` event tells them apart.
    let submitted = Harness::new();
    assert!(matches!(
        submitted.run(|ctx, n| submits(ctx, &A, n)).await,
        WorkerResult::DbUpdatedByWorker
    ));
    let Err(crate::ReplayError::Nondeterminism {
        version,
        reason,
        at,
        ..
    }) = replayer(|ctx, n| submits(ctx, &A, n + 1)).replay(&submitted.recorded())
    else {
        panic!("other parameters diverge");
    };
    assert_eq!(version, Some(Version(3)));
    assert_eq!(at, Some(format!("{}:{SUBMITS_AT}:8", file!())));
    assert!(
        reason.contains("the log holds a request for child")
            && reason
                .contains("with parameters 7, the code called test:wf/api.a with parameters 8"),
        "{reason}"
    );
    // A history of a workflow the replayer does not know.
    let unknown = crate::Replayer::new()
        .register(
            &Function::<u64, u64>::new("test:wf/flows.other"),
            version_one,
        )
        .unwrap()
        .replay(&history);
    assert!(
        matches!(unknown, Err(crate::ReplayError::NotRegistered { .. })),
        "{unknown:?}"
    );
}

/// A run that started one child and waits for nothing else asks for the child's answer to be
/// handed over (no other response can take its place); a batch of several children, or a child
/// beside a sleep, does not.
#[tokio::test]
async fn only_a_child_awaited_alone_hands_its_answer_to_the_run() {
    let alone = |ctx: WorkflowCtx, n: u64| submits(ctx, &A, n);
    let two = |ctx: WorkflowCtx, n: u64| async move {
        let js = ctx.join_set_named("work");
        js.submit(&A, &n);
        js.submit(&B, &n);
        js.next().await;
        Ok(0)
    };
    let beside_a_sleep = |ctx: WorkflowCtx, n: u64| async move {
        let js = ctx.join_set_named("work");
        js.submit(&A, &n);
        js.submit_delay(Duration::from_secs(1));
        js.next().await;
        Ok(0)
    };
    let h = Harness::new();
    h.run(alone).await;
    assert_eq!(*h.log.answered.lock().unwrap(), vec![true]);
    let h = Harness::new();
    h.run(two).await;
    assert_eq!(*h.log.answered.lock().unwrap(), vec![false]);
    let h = Harness::new();
    h.run(beside_a_sleep).await;
    assert_eq!(*h.log.answered.lock().unwrap(), vec![false]);
}
