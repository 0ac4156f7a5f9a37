//! The workflow scenarios (W1..W23): every operation of `docs/SEMANTICS.md` §15 run through the
//! `workflow` crate on a real executor, so that every backend shows it records, replays and
//! waits as the contract says; W14..W17 (in `lifecycle`) add promises, cancellation and
//! retention as a workflow meets them (`docs/SEMANTICS.md` §10-§13).
//!
//! Executors run as spawned loops on a [`test_utils::SimClock`]; the scenario moves the clock
//! and ticks the timers watcher by hand wherever time matters, and controls when children
//! finish through [`fixture::Gates`].

mod answers;
pub mod fixture;
mod lifecycle;
mod stale;
mod versioning;

pub use answers::w21_children_answer_their_parent_in_its_next_write;
pub use lifecycle::{
    w14_promise_completed_before_it_is_awaited, w15_workflow_cancelled_while_waiting,
    w16_activity_stops_early_when_cancelled,
    w17_promise_given_up_at_its_deadline_is_cancelled_and_pruned, w18_typed_schedules_client,
};
pub use stale::{
    w22_a_child_answer_after_its_lease_is_not_consumed,
    w23_a_cancelled_child_answer_is_not_consumed,
};
pub use versioning::{
    w19_a_patch_changes_the_code_with_executions_in_flight,
    w20_typed_joins_per_call_options_and_status,
};

use crate::StoreFactory;
use concepts::{
    ClockFn, FinishedExecutionError, HistoryEvent, JoinSetRequest, PermanentFailureKind,
    PersistKind,
};
use fixture::{DOUBLE, Fixture, GATED, LEASE, REFUSE, SAFETY, history, is_blocked, runs, shape};
use serde_json::json;
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};
use workflow::{
    ClientError, Function, FunctionFailure, NondeterminismPolicy, Response, WorkflowCtx,
    WorkflowError,
};

type Result<T> = std::result::Result<T, WorkflowError<String>>;

const CALLS: Function<u64, u64> = Function::new("test:workflow/flows.calls");
const SLEEPS: Function<u64, u64> = Function::new("test:workflow/flows.sleeps");
const ARRIVALS: Function<u64, Vec<u64>> = Function::new("test:workflow/flows.arrivals");
const TIMES_OUT: Function<u64, u64> = Function::new("test:workflow/flows.times-out");
const LEAVES_CHILDREN: Function<u64, u64> = Function::new("test:workflow/flows.leaves-children");
const HANDLES: Function<u64, u64> = Function::new("test:workflow/flows.handles");
const PROPAGATES: Function<u64, u64> = Function::new("test:workflow/flows.propagates");
const PERSISTS: Function<u64, serde_json::Value> = Function::new("test:workflow/flows.persists");
const FANS_OUT: Function<u64, u64> = Function::new("test:workflow/flows.fans-out");
const EVOLVES: Function<u64, u64> = Function::new("test:workflow/flows.evolves");
const AWAITS_TOKIO: Function<u64, u64> = Function::new("test:workflow/flows.awaits-tokio");

async fn calls(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    Ok(ctx.call(&DOUBLE, &n).await?)
}

/// Sleeps `n` seconds, then doubles 1.
async fn sleeps(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    ctx.sleep(Duration::from_secs(n)).await;
    Ok(ctx.call(&DOUBLE, &1).await?)
}

async fn arrivals(ctx: WorkflowCtx, n: u64) -> Result<Vec<u64>> {
    let js = ctx.join_set();
    for k in 1..=n {
        js.submit(&GATED, &k);
    }
    let mut order = Vec::new();
    while let Some(Response::Child(child)) = js.next().await {
        order.push(child.into_result::<u64>()?);
    }
    Ok(order)
}

/// Waits for a gated child at most `n` seconds; 0 means it timed out.
async fn times_out(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let js = ctx.join_set_named("deadline");
    js.submit(&GATED, &5);
    js.submit_delay(Duration::from_secs(n));
    match js.next().await {
        Some(Response::Child(child)) => Ok(child.into_result::<u64>()?),
        _ => Ok(0),
    }
}

/// Submits a succeeding and a failing child and returns without consuming either.
async fn leaves_children(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let js = ctx.join_set();
    js.submit(&DOUBLE, &n);
    js.submit(&REFUSE, &n);
    Ok(n)
}

async fn handles(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    match ctx.call(&REFUSE, &n).await {
        Ok(_) => Err(WorkflowError::Failed("REFUSE succeeded".to_string())),
        Err(err) => match err.failure.returned_error::<String>() {
            Some(message) if message == format!("refused {n}") => Ok(ctx.call(&DOUBLE, &n).await?),
            _ => Err(WorkflowError::Failed(format!("unexpected failure {err}"))),
        },
    }
}

async fn propagates(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    Ok(ctx.call(&REFUSE, &n).await?)
}

async fn fans_out(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let js = ctx.join_set();
    for k in 0..n {
        js.submit(&DOUBLE, &k);
    }
    let mut sum = 0;
    while let Some(Response::Child(child)) = js.next().await {
        sum += child.into_result::<u64>()?;
    }
    Ok(sum)
}

/// The first version: sleeps an hour, then calls DOUBLE.
async fn evolves_v1(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    ctx.sleep(Duration::from_secs(3600)).await;
    Ok(ctx.call(&DOUBLE, &n).await?)
}

/// The line of `evolves_v2`'s call, which its divergence names.
const EVOLVES_V2_CALL_AT: u32 = line!() + 4;

/// A changed version: calls DOUBLE first.
async fn evolves_v2(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let doubled = ctx.call(&DOUBLE, &n).await?;
    ctx.sleep(Duration::from_secs(3600)).await;
    Ok(doubled)
}

async fn awaits_tokio(_ctx: WorkflowCtx, n: u64) -> Result<u64> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(n)
}

/// The error an execution finished with, as a client's wait reports it.
fn finished_error<T: std::fmt::Debug>(
    waited: std::result::Result<T, ClientError>,
) -> FinishedExecutionError {
    match waited {
        Err(ClientError::Failed {
            failure: FunctionFailure::Failed(err),
            ..
        }) => err,
        other => panic!("expected a failed execution, got {other:?}"),
    }
}

/// The child and root cause of an `UnhandledChildExecutionError`.
fn unhandled<T: std::fmt::Debug>(
    waited: std::result::Result<T, ClientError>,
) -> (concepts::ExecutionId, concepts::ExecutionId) {
    match finished_error(waited) {
        FinishedExecutionError::UnhandledChildExecutionError {
            child_execution_id,
            root_cause_id,
        } => (child_execution_id, root_cause_id),
        other => panic!("expected an unhandled child error, got {other}"),
    }
}

/// The reason of a `PermanentFailure { kind: NondeterminismDetected }`.
fn nondeterminism<T: std::fmt::Debug>(waited: std::result::Result<T, ClientError>) -> String {
    match finished_error(waited) {
        FinishedExecutionError::PermanentFailure {
            kind: PermanentFailureKind::NondeterminismDetected,
            reason_inner,
            ..
        } => reason_inner,
        other => panic!("expected NondeterminismDetected, got {other}"),
    }
}

/// W1: `call` records `JoinSetCreate`, the child request and `JoinNext`, creates the child
/// `<parent>.o:1-double_1` in the same write, and finishes in one warm run.
pub async fn w1_call<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows().register(&CALLS, calls).expect("register"),
    ));
    let handle = f.client().submit(&CALLS, &21).await.expect("submit");
    assert_eq!(handle.result_within(SAFETY).await.expect("result"), 42);
    let log = f.log(handle.execution_id()).await;
    assert_eq!(shape(&log), "JoinSetCreate JoinSetRequest JoinNext");
    let child = handle
        .execution_id()
        .next_level(&"o:1-double".parse().expect("id"), 1);
    let HistoryEvent::JoinSetRequest { request, .. } = &history(&log)[1] else {
        panic!("a request");
    };
    assert_eq!(
        *request,
        JoinSetRequest::ChildExecutionRequest {
            child_execution_id: child.clone()
        }
    );
    let child_log = f.log(&child).await;
    let Some(concepts::Created { parent, ffqn, .. }) =
        child_log.events.first().and_then(|e| e.event.created())
    else {
        panic!("the child exists");
    };
    assert_eq!(ffqn, &DOUBLE.ffqn().expect("ffqn"));
    assert_eq!(parent.as_ref().map(|p| &p.0), Some(handle.execution_id()));
    assert_eq!(runs(&log), 1, "the call was awaited warm, without a replay");
    f.close().await;
}

/// W2: a sleep that ends within the lease is awaited warm: one run, its `JoinNext` expiring
/// at the lease's end.
pub async fn w2_sleep_within_the_lease_is_warm<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows().register(&SLEEPS, sleeps).expect("register"),
    ));
    let locked_at = f.clock.now();
    let handle = f.client().submit(&SLEEPS, &1).await.expect("submit");
    f.until("the sleep is requested", handle.execution_id(), is_blocked)
        .await;
    f.clock.move_time_forward(Duration::from_secs(1)).await;
    f.fire_timers().await;
    assert_eq!(handle.result_within(SAFETY).await.expect("result"), 2);
    let log = f.log(handle.execution_id()).await;
    assert_eq!(runs(&log), 1, "warm: no replay");
    let HistoryEvent::JoinNext { run_expires_at, .. } = history(&log)[2] else {
        panic!("a JoinNext");
    };
    assert_eq!(run_expires_at, concepts::add_saturating(locked_at, LEASE));
    f.close().await;
}

/// W3: a sleep beyond the lease gives up the run at once (cold) and is replayed by the run
/// its `DelayFinished` makes due.
pub async fn w3_sleep_beyond_the_lease_is_cold<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows().register(&SLEEPS, sleeps).expect("register"),
    ));
    let asleep_at = f.clock.now();
    let handle = f.client().submit(&SLEEPS, &3600).await.expect("submit");
    let log = f
        .until("the sleep is requested", handle.execution_id(), is_blocked)
        .await;
    let HistoryEvent::JoinNext { run_expires_at, .. } = history(&log)[2] else {
        panic!("a JoinNext");
    };
    assert_eq!(
        run_expires_at, asleep_at,
        "cold: the run is given up at once"
    );
    f.clock.move_time_forward(Duration::from_secs(3600)).await;
    f.fire_timers().await;
    assert_eq!(handle.result_within(SAFETY).await.expect("result"), 2);
    let log = f.log(handle.execution_id()).await;
    assert_eq!(runs(&log), 2, "one run before the sleep, one replay after");
    assert_eq!(
        shape(&log),
        "JoinSetCreate JoinSetRequest JoinNext JoinSetCreate JoinSetRequest JoinNext"
    );
    f.close().await;
}

/// W4: a join set's responses come back in arrival order, not submission order.
pub async fn w4_join_set_in_arrival_order<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows()
            .register(&ARRIVALS, arrivals)
            .expect("register"),
    ));
    let handle = f.client().submit(&ARRIVALS, &3).await.expect("submit");
    let id = handle.execution_id().clone();
    f.until("the children are submitted", &id, is_blocked).await;
    for (arrived, k) in [3, 1, 2].into_iter().enumerate() {
        f.gates.open(k);
        f.until("the child answers", &id, |log| {
            log.responses.len() > arrived
        })
        .await;
    }
    assert_eq!(
        handle.result_within(SAFETY).await.expect("result"),
        [3, 1, 2]
    );
    f.close().await;
}

/// W5: a timeout is a join set of a child and a delay: the delay answers first, and the
/// closing of the join set still awaits the child.
pub async fn w5_timeout_by_join_set<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows()
            .register(&TIMES_OUT, times_out)
            .expect("register"),
    ));
    let handle = f.client().submit(&TIMES_OUT, &2).await.expect("submit");
    let id = handle.execution_id().clone();
    f.until("the child and the delay are requested", &id, is_blocked)
        .await;
    f.clock.move_time_forward(Duration::from_secs(2)).await;
    f.fire_timers().await;
    let delay_fired = |log: &concepts::ExecutionLog| !log.responses.is_empty();
    f.until("the delay answers first", &id, delay_fired).await;
    // The workflow returned at the delay, but its closing awaits the running child.
    let early = handle.result_within(Duration::from_millis(200)).await;
    assert!(
        matches!(early, Err(ClientError::Timeout(_))),
        "a running child holds its parent open: {early:?}"
    );
    f.gates.open(5);
    assert_eq!(
        handle.result_within(SAFETY).await.expect("result"),
        0,
        "timed out"
    );
    let log = f.log(&id).await;
    assert_eq!(
        shape(&log),
        "JoinSetCreate JoinSetRequest JoinSetRequest JoinNext JoinNext(closing)"
    );
    f.close().await;
}

/// W6: children left unconsumed are awaited when the workflow returns; a failed one makes it
/// fail with `UnhandledChildExecutionError` naming that child.
pub async fn w6_closing_with_an_unconsumed_failed_child<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let worker = f
        .workflows()
        .register(&LEAVES_CHILDREN, leaves_children)
        .expect("register");
    f.spawn(Arc::new(worker));
    let handle = f
        .client()
        .submit(&LEAVES_CHILDREN, &4)
        .await
        .expect("submit");
    let failed = handle
        .execution_id()
        .next_level(&"g:1".parse().expect("id"), 2);
    let (child_execution_id, root_cause_id) = unhandled(handle.result_within(SAFETY).await);
    assert_eq!(
        (child_execution_id, root_cause_id),
        (failed.clone(), failed)
    );
    let log = f.log(handle.execution_id()).await;
    assert_eq!(
        shape(&log),
        "JoinSetCreate JoinSetRequest JoinSetRequest JoinNext(closing) JoinNext(closing)"
    );
    f.close().await;
}

/// W7: a failed child is an error the workflow can handle (and go on), or propagate with `?`
/// (and fail with `UnhandledChildExecutionError`).
pub async fn w7_child_failure_handled_or_propagated<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let worker = f
        .workflows()
        .register(&HANDLES, handles)
        .and_then(|w| w.register(&PROPAGATES, propagates))
        .expect("register");
    f.spawn(Arc::new(worker));
    let client = f.client();
    let handled = client.submit(&HANDLES, &3).await.expect("submit");
    assert_eq!(handled.result_within(SAFETY).await.expect("handled"), 6);
    let propagated = client.submit(&PROPAGATES, &3).await.expect("submit");
    let child = propagated
        .execution_id()
        .next_level(&"o:1-refuse".parse().expect("id"), 1);
    let (child_execution_id, _) = unhandled(propagated.result_within(SAFETY).await);
    assert_eq!(child_execution_id, child);
    f.close().await;
}

/// W8: `now`, `random_*`, `uuid` and `step` are recorded as `Persist` and identical across a
/// replay; a step's side effect runs once.
pub async fn w8_persist_is_stable_across_replay<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let side_effects = Arc::new(AtomicU64::new(0));
    let counter = side_effects.clone();
    let persists = move |ctx: WorkflowCtx, _: u64| {
        let counter = counter.clone();
        async move {
            let now = ctx.now().await;
            let random = ctx.random_u64(1..=1_000_000).await;
            let text = ctx.random_string(5..10).await;
            let uuid = ctx.uuid().await;
            let step = ctx
                .step("count", || counter.fetch_add(1, Ordering::SeqCst) + 100)
                .await;
            ctx.sleep(Duration::from_secs(3600)).await; // cold: the rest is a replay
            Ok::<_, WorkflowError<String>>(json!([now, random, text, uuid, step]))
        }
    };
    f.spawn(Arc::new(
        f.workflows()
            .register(&PERSISTS, persists)
            .expect("register"),
    ));
    let handle = f.client().submit(&PERSISTS, &0).await.expect("submit");
    f.until("the sleep is requested", handle.execution_id(), is_blocked)
        .await;
    f.clock.move_time_forward(Duration::from_secs(3600)).await;
    f.fire_timers().await;
    let value = handle.result_within(SAFETY).await.expect("result");
    let log = f.log(handle.execution_id()).await;
    assert_eq!(
        runs(&log),
        2,
        "the second run replayed the persisted values"
    );
    let recorded: Vec<serde_json::Value> = history(&log)
        .into_iter()
        .filter_map(|event| match event {
            HistoryEvent::Persist { value, kind } => {
                if let PersistKind::Custom(name) = &kind {
                    assert!(["stele:now", "stele:uuid", "count"].contains(&name.as_str()));
                }
                Some(value.0)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        serde_json::Value::Array(recorded),
        value,
        "the replay returned what was recorded"
    );
    assert_eq!(side_effects.load(Ordering::SeqCst), 1, "the step ran once");
    f.close().await;
}

/// W9: the two problems of the hand-written fan-out are gone: with children finishing within
/// the lease the parent runs once whatever their number, and its last step is not replayed
/// (no `JoinNext` gives up the run before the result; `Finished` is written once).
pub async fn w9_fan_out_runs_once_and_never_replays_its_last_step<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows()
            .register(&FANS_OUT, fans_out)
            .expect("register"),
    ));
    let locked_at = f.clock.now();
    let handle = f.client().submit(&FANS_OUT, &50).await.expect("submit");
    assert_eq!(
        handle.result_within(SAFETY).await.expect("result"),
        2 * (0..50).sum::<u64>()
    );
    let log = f.log(handle.execution_id()).await;
    assert_eq!(
        runs(&log),
        1,
        "children finishing within the lease cost no run"
    );
    let deadline = concepts::add_saturating(locked_at, LEASE);
    for event in history(&log) {
        if let HistoryEvent::JoinNext { run_expires_at, .. } = event {
            assert_eq!(run_expires_at, deadline, "no JoinNext gives up the run");
        }
    }
    assert_eq!(
        log.events.len(),
        1 + 1 + 1 + 50 + 50 + 1,
        "Created, Locked, history, Finished"
    );
    f.close().await;
}

/// Runs `evolves_v1` to its sleep, redeploys the worker with `evolves_v2` under `policy` and
/// wakes the sleep; returns the fixture and the execution.
async fn replayed_by_changed_code<F: StoreFactory>(
    factory: &F,
    policy: NondeterminismPolicy,
) -> (Fixture, workflow::ExecutionHandle<u64>) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows()
            .register(&EVOLVES, evolves_v1)
            .expect("register"),
    ));
    let handle = f.client().submit(&EVOLVES, &5).await.expect("submit");
    f.until("the sleep is requested", handle.execution_id(), is_blocked)
        .await;
    f.stop_last().await;
    let changed = f
        .workflows()
        .nondeterminism_policy(policy)
        .register(&EVOLVES, evolves_v2);
    f.spawn(Arc::new(changed.expect("register")));
    f.clock.move_time_forward(Duration::from_secs(3600)).await;
    f.fire_timers().await;
    (f, handle)
}

/// How `evolves_v2` diverges from a log of `evolves_v1`, and where in its source.
fn divergence() -> String {
    format!(
        "the replay diverged at version 2: the log holds the opening of join set o:1, the code \
         opened join set o:1-double (at {}:{EVOLVES_V2_CALL_AT}:23)",
        file!()
    )
}

/// W10: changed code replaying a recorded history, under the `Fail` policy, finishes the
/// execution with `NondeterminismDetected`, naming the version and both sides.
pub async fn w10_nondeterminism_fails_under_the_fail_policy<F: StoreFactory>(factory: &F) {
    let (f, handle) = replayed_by_changed_code(factory, NondeterminismPolicy::Fail).await;
    let reason = nondeterminism(handle.result_within(SAFETY).await);
    assert_eq!(reason, divergence());
    f.close().await;
}

/// W11: under `Park` (the default) changed code that diverges parks the execution: one
/// `Unlocked` with the reason, pending until `PARKED_UNTIL`, no retry used. No executor locks it
/// however late it gets, and probes of the diverging code write nothing however often they
/// run; a probe of code that agrees with the log unparks it (due at once, still no retry
/// used), and the fixed deployment finishes it.
pub async fn w11_nondeterminism_parks_under_the_default_policy<F: StoreFactory>(factory: &F) {
    let (mut f, handle) = replayed_by_changed_code(factory, NondeterminismPolicy::Park).await;
    let id = handle.execution_id().clone();
    let log = f
        .until("the changed code parks it", &id, |log| {
            log.pending_state.is_parked()
        })
        .await;
    assert_eq!(
        log.parked().map(|(reason, _)| reason.to_owned()),
        Some(divergence())
    );
    assert_eq!(
        concepts::temporary_event_count(&log.events),
        0,
        "no retry used"
    );
    let parked_events = log.events.len();
    let changed: Arc<dyn executor::Worker> = Arc::new(
        f.workflows()
            .register(&EVOLVES, evolves_v2)
            .expect("register"),
    );
    for _ in 0..3 {
        f.clock
            .move_time_forward(Duration::from_secs(24 * 3600))
            .await;
        f.fire_timers().await;
        let pass = executor::unpark(f.db.as_ref(), changed.as_ref(), &f.clock)
            .await
            .expect("probe");
        assert_eq!(
            pass,
            executor::Unparked {
                probed: 1,
                unlocked: 0
            }
        );
        let tick = f.executor(changed.clone()).tick(f.clock.now()).await;
        assert!(tick.expect("tick").executions.is_empty(), "nobody locks it");
    }
    let log = f.log(&id).await;
    assert_eq!(log.events.len(), parked_events, "its log does not grow");
    assert!(log.pending_state.is_parked());
    f.stop_last().await;
    let fixed: Arc<dyn executor::Worker> = Arc::new(
        f.workflows()
            .register(&EVOLVES, evolves_v1)
            .expect("register"),
    );
    let pass = executor::unpark(f.db.as_ref(), fixed.as_ref(), &f.clock)
        .await
        .expect("probe");
    assert_eq!(
        pass,
        executor::Unparked {
            probed: 1,
            unlocked: 1
        }
    );
    let log = f.log(&id).await;
    assert_eq!(
        log.pending_state.pending_at(),
        Some(f.clock.now()),
        "due at once"
    );
    assert_eq!(
        concepts::temporary_event_count(&log.events),
        0,
        "no retry used"
    );
    f.spawn(fixed);
    assert_eq!(
        handle
            .result_within(SAFETY)
            .await
            .expect("the fixed code finishes"),
        10
    );
    f.close().await;
}

/// W12: a workflow that awaits a tokio sleep is reported as a determinism violation at once,
/// not left hanging.
pub async fn w12_awaiting_a_tokio_sleep_is_reported<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let worker = f
        .workflows()
        .nondeterminism_policy(NondeterminismPolicy::Fail)
        .register(&AWAITS_TOKIO, awaits_tokio)
        .expect("register");
    f.spawn(Arc::new(worker));
    let handle = f.client().submit(&AWAITS_TOKIO, &1).await.expect("submit");
    let reason = nondeterminism(handle.result_within(SAFETY).await);
    assert!(reason.contains("not a workflow operation"), "{reason}");
    f.close().await;
}

/// W13: the typed client submits under a caller-chosen id (the same submission again is
/// answered as not created, other parameters under it are a conflict naming what differs),
/// and a result wait ends with `Timeout` when the execution does not finish.
pub async fn w13_client_ids_and_timeouts<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    f.spawn(Arc::new(
        f.workflows()
            .register(&ARRIVALS, arrivals)
            .expect("register"),
    ));
    let client = f.client();
    let id = concepts::ExecutionId::generate_at(f.clock.now());
    let submitted = client
        .submit_with_id(id.clone(), &ARRIVALS, &1)
        .await
        .expect("submit");
    assert!(submitted.created);
    let handle = submitted.handle;
    assert_eq!(handle.execution_id(), &id);
    // The id is the caller's idempotency key: the same submission again is answered with the
    // same execution (not created again), other parameters under it are a conflict naming
    // what differs (`docs/SEMANTICS.md` §10).
    let repeated = client
        .submit_with_id(id.clone(), &ARRIVALS, &1)
        .await
        .expect("a repeated submission is accepted");
    assert!(!repeated.created);
    assert_eq!(repeated.handle.execution_id(), &id);
    let top_level = concepts::ListExecutionsFilter {
        top_level_only: true,
        ..concepts::ListExecutionsFilter::default()
    };
    let listed = concepts::DbClientExt::list_all_executions(f.db.as_ref(), top_level).await;
    assert_eq!(listed.expect("list").len(), 1, "one execution");
    match client.submit_with_id(id.clone(), &ARRIVALS, &2).await {
        Err(ClientError::Conflict {
            execution_id,
            differences,
        }) => {
            assert_eq!(execution_id, id);
            assert_eq!(differences, [concepts::CreateConflict::Params]);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let waited = handle.result_within(Duration::from_millis(50)).await;
    assert!(
        matches!(waited, Err(ClientError::Timeout(ref timed_out)) if *timed_out == id),
        "{waited:?}"
    );
    f.gates.open(1);
    let again = client.handle::<Vec<u64>>(id);
    assert_eq!(again.result_within(SAFETY).await.expect("result"), [1]);
    f.close().await;
}

/// Expands to one `#[tokio::test]` per workflow scenario for the given factory.
#[macro_export]
macro_rules! workflow_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; workflow_scenarios;
            w1_call,
            w2_sleep_within_the_lease_is_warm,
            w3_sleep_beyond_the_lease_is_cold,
            w4_join_set_in_arrival_order,
            w5_timeout_by_join_set,
            w6_closing_with_an_unconsumed_failed_child,
            w7_child_failure_handled_or_propagated,
            w8_persist_is_stable_across_replay,
            w9_fan_out_runs_once_and_never_replays_its_last_step,
            w10_nondeterminism_fails_under_the_fail_policy,
            w11_nondeterminism_parks_under_the_default_policy,
            w12_awaiting_a_tokio_sleep_is_reported,
            w13_client_ids_and_timeouts,
            w14_promise_completed_before_it_is_awaited,
            w15_workflow_cancelled_while_waiting,
            w16_activity_stops_early_when_cancelled,
            w17_promise_given_up_at_its_deadline_is_cancelled_and_pruned,
            w18_typed_schedules_client,
            w19_a_patch_changes_the_code_with_executions_in_flight,
            w20_typed_joins_per_call_options_and_status,
            w21_children_answer_their_parent_in_its_next_write,
            w22_a_child_answer_after_its_lease_is_not_consumed,
            w23_a_cancelled_child_answer_is_not_consumed,
        );
    };
}
