//! W14..W17: the life of a workflow after submission (`docs/SEMANTICS.md` §11-§13) through the
//! `workflow` crate: a promise completed while the workflow does not run, a workflow cancelled
//! while it waits, an activity that stops early when cancelled, and a promise given up at its
//! deadline, whose tree the `Pruner` then removes; W18, the typed schedules client. (A promise completed while the workflow
//! waits, and a cancelled child, are L22 and L21.)

use super::fixture::{DOUBLE, Fixture, GATED, SAFETY, is_blocked, runs, shape};
use crate::StoreFactory;
use concepts::{
    CancelOutcome, ClockFn, CompleteOutcome, DbError, ExecutionId, ExecutionLog,
    FinishedExecutionError,
};
use std::{sync::Arc, time::Duration};
use timers_watcher::{Pruner, PrunerConfig};
use tokio::sync::mpsc;
use workflow::{
    ActivityCtx, ActivityWorker, ClientError, Function, FunctionFailure, Response, WorkflowCtx,
    WorkflowError, promise_id,
};

type Result<T> = std::result::Result<T, WorkflowError<String>>;

const COMPLETED_EARLY: Function<u64, u64> =
    Function::new("test:workflow/lifecycle.completed-early");
const WAITS_ON_TWO: Function<u64, u64> = Function::new("test:workflow/lifecycle.waits-on-two");
const STOPS_EARLY: Function<u64, u64> = Function::new("test:workflow/lifecycle.stops-early");
const GIVES_UP: Function<u64, u64> = Function::new("test:workflow/lifecycle.gives-up");

/// Creates the promise `early`, sleeps an hour (a cold wait), then awaits the promise.
async fn completed_early(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let early = ctx.promise::<u64>("early");
    ctx.sleep(Duration::from_secs(3600)).await;
    Ok(early.wait().await? + n)
}

/// Awaits the first of a `GATED` child and the promise `answer`.
async fn waits_on_two(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let both = ctx.join_set_named("both");
    both.submit(&GATED, &n);
    both.submit_promise("answer");
    match both.next().await {
        Some(Response::Child(child)) => Ok(child.into_result::<u64>()?),
        other => Err(WorkflowError::Failed(format!("{other:?}"))),
    }
}

/// Awaits the promise `late` for a minute; 0 when nobody completed it by then.
async fn gives_up(ctx: WorkflowCtx, _: u64) -> Result<u64> {
    let late = ctx.promise::<u64>("late");
    Ok(late
        .wait_within(Duration::from_secs(60))
        .await?
        .unwrap_or(0))
}

fn cancelled(reason: &str) -> FinishedExecutionError {
    FinishedExecutionError::Cancelled {
        reason: reason.to_string(),
    }
}

fn finished_error(log: &ExecutionLog) -> Option<&FinishedExecutionError> {
    log.finished_result()
        .and_then(|result| result.as_ref().err())
}

/// W14: a promise completed while its workflow is not running (given up cold in a long
/// sleep) answers it in the same transaction; the replay after the sleep finds the value
/// without waiting.
pub async fn w14_promise_completed_before_it_is_awaited<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let worker = f.workflows().register(&COMPLETED_EARLY, completed_early);
    f.spawn(Arc::new(worker.expect("register")));
    let client = f.client();
    let handle = client.submit(&COMPLETED_EARLY, &1).await.expect("submit");
    let id = handle.execution_id().clone();
    f.until("the workflow sleeps", &id, is_blocked).await;
    let early = promise_id(&id, "early").expect("a legal name");
    let completed = client.complete(&early, &41u64).await.expect("complete");
    assert_eq!(completed, CompleteOutcome::Completed);
    let log = f.log(&id).await;
    assert_eq!(
        log.responses.len(),
        1,
        "the completion answered the workflow"
    );
    assert!(
        is_blocked(&log),
        "still asleep: the promise is another join set"
    );
    f.clock.move_time_forward(Duration::from_secs(3600)).await;
    f.fire_timers().await;
    assert_eq!(handle.result_within(SAFETY).await.expect("result"), 42);
    let log = f.log(&id).await;
    assert_eq!(runs(&log), 2, "one run before the sleep, one replay after");
    assert_eq!(
        shape(&log),
        "JoinSetCreate JoinSetRequest JoinSetCreate JoinSetRequest JoinNext JoinNext"
    );
    f.close().await;
}

/// W15: a workflow cancelled while it waits warm is finished with its children (a running
/// child and a promise) in one transaction, and its run ends without writing anything more.
pub async fn w15_workflow_cancelled_while_waiting<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let worker = f.workflows().register(&WAITS_ON_TWO, waits_on_two);
    let workflows = f.executor(Arc::new(worker.expect("register")));
    let client = f.client();
    let handle = client.submit(&WAITS_ON_TWO, &7).await.expect("submit");
    let id = handle.execution_id().clone();
    let run = workflows.tick(f.clock.now()).await.expect("lock");
    assert_eq!(run.execution_ids(), std::slice::from_ref(&id));
    f.until("the workflow waits", &id, is_blocked).await;
    let outcome = client.cancel(&id, "operator").await.expect("cancel");
    assert_eq!(
        outcome,
        CancelOutcome::Cancelled { executions: 3 },
        "the workflow, its child and its promise"
    );
    let at_cancel = f.log(&id).await;
    let ended = tokio::time::timeout(SAFETY, run.wait_for_tasks()).await;
    ended.expect("the warm run ends").expect("the run's task");
    let after_run = f.log(&id).await;
    assert_eq!(after_run.events, at_cancel.events, "nothing written after");
    assert_eq!(finished_error(&after_run), Some(&cancelled("operator")));
    let both = "n:both".parse().expect("a join set id");
    for child in [id.next_level(&both, 1), id.next_level(&both, 2)] {
        let log = f.log(&child).await;
        assert_eq!(
            finished_error(&log),
            Some(&cancelled("operator")),
            "{child}"
        );
    }
    match handle.result_within(SAFETY).await {
        Err(ClientError::Failed {
            failure: FunctionFailure::Cancelled { reason },
            ..
        }) => assert_eq!(reason, "operator"),
        other => panic!("expected a cancelled execution, got {other:?}"),
    }
    f.close().await;
}

/// W16: an activity that races its work against `ActivityCtx::cancelled` stops as soon as
/// its execution is cancelled; what it returns then is refused, so the log ends with the
/// cancellation and holds no retry.
pub async fn w16_activity_stops_early_when_cancelled<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (observed_tx, mut observed) = mpsc::unbounded_channel();
    let activity = move |ctx: ActivityCtx, n: u64| {
        let observed = observed_tx.clone();
        async move {
            let finished = tokio::select! {
                finished = ctx.cancelled() => finished,
                () = std::future::pending::<()>() => unreachable!("the work never ends"),
            };
            let _ = observed.send(finished);
            Err::<u64, _>(format!("stopped early at {n}"))
        }
    };
    let worker = ActivityWorker::new().register(&STOPS_EARLY, activity);
    let activities = f.executor(Arc::new(worker.expect("register")));
    let client = f.client();
    let handle = client.submit(&STOPS_EARLY, &3).await.expect("submit");
    let id = handle.execution_id().clone();
    let run = activities.tick(f.clock.now()).await.expect("lock");
    assert_eq!(run.execution_ids(), std::slice::from_ref(&id));
    let outcome = client.cancel(&id, "enough").await.expect("cancel");
    assert_eq!(outcome, CancelOutcome::Cancelled { executions: 1 });
    let seen = tokio::time::timeout(SAFETY, observed.recv()).await;
    assert_eq!(
        seen.expect("the activity noticed"),
        Some(Err(cancelled("enough")))
    );
    let ended = tokio::time::timeout(SAFETY, run.wait_for_tasks()).await;
    ended.expect("the run ends").expect("the run's task");
    let log = f.log(&id).await;
    let kinds: Vec<&str> = log.events.iter().map(|e| e.event.variant_name()).collect();
    assert_eq!(
        kinds,
        ["Created", "Locked", "Finished"],
        "the refused write left nothing"
    );
    assert_eq!(finished_error(&log), Some(&cancelled("enough")));
    f.close().await;
}

/// W17: a promise whose deadline passes is cancelled when its workflow finishes, so the
/// whole tree is finished and a `Pruner` with a short retention removes it; completing the
/// promise afterwards is refused with what it holds.
pub async fn w17_promise_given_up_at_its_deadline_is_cancelled_and_pruned<F: StoreFactory>(
    factory: &F,
) {
    let mut f = Fixture::new(factory).await;
    let worker = f.workflows().register(&GIVES_UP, gives_up);
    f.spawn(Arc::new(worker.expect("register")));
    let client = f.client();
    let handle = client.submit(&GIVES_UP, &0).await.expect("submit");
    let id = handle.execution_id().clone();
    f.until("the workflow waits", &id, is_blocked).await;
    f.clock.move_time_forward(Duration::from_secs(60)).await;
    f.fire_timers().await;
    assert_eq!(handle.result_within(SAFETY).await.expect("result"), 0);
    let late = promise_id(&id, "late").expect("a legal name");
    let promise = f.log(&late).await;
    match finished_error(&promise) {
        Some(FinishedExecutionError::Cancelled { reason }) => {
            assert!(reason.contains("finished without awaiting"), "{reason}");
        }
        other => panic!("the promise was cancelled: {other:?}"),
    }
    match client.complete(&late, &5u64).await {
        Err(ClientError::DifferentResult { execution_id, .. }) => assert_eq!(execution_id, late),
        other => panic!("expected `DifferentResult`, got {other:?}"),
    }

    f.clock.move_time_forward(Duration::from_secs(2)).await;
    let config = PrunerConfig {
        retention: Duration::from_secs(1),
        interval: Duration::from_millis(10),
        batch: 1,
    };
    let mut pruner = Pruner::spawn_new(f.db.clone(), config, f.clock.clone()).expect("valid");
    gone(&f, &id).await;
    for member in [&id, &late] {
        let read = f.db.get(member).await;
        assert!(
            matches!(read, Err(DbError::NotFound(_))),
            "{member}: {read:?}"
        );
    }
    pruner.close().await;
    f.close().await;
}

/// Polls (bounded by [`SAFETY`]) until `execution_id` is gone from the store.
async fn gone(f: &Fixture, execution_id: &ExecutionId) {
    let waited = tokio::time::timeout(SAFETY, async {
        while f.db.get(execution_id).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    waited.unwrap_or_else(|_| panic!("{execution_id} was not pruned"));
}

/// W18: the typed schedules client (`workflow::Schedules`) over every backend: a schedule of a
/// typed function stored once (the same again answered as existing, another spec a typed
/// conflict naming it), read back with its next fire times, paused and resumed, triggered (its
/// execution created in the client's component and run to its typed result), backfilled, its
/// ticks read, deleted; an unknown name and an illegal one are typed refusals.
pub async fn w18_typed_schedules_client<F: StoreFactory>(factory: &F) {
    use concepts::schedule::{ScheduleChanged, ScheduleCreated, TickOutcome};
    let f = Fixture::new(factory).await;
    let schedules =
        workflow::Schedules::new(f.db.clone(), f.clock.clone(), super::fixture::component())
            .retries(0, Duration::from_secs(1));
    let hourly = DOUBLE
        .schedule("double-hourly", &21, "every 1h".parse().unwrap())
        .expect("a schedule");
    let name = hourly.name.clone();
    assert_eq!(
        schedules.create(hourly.clone()).await.unwrap(),
        ScheduleCreated::Created
    );
    assert_eq!(
        schedules.create(hourly.clone()).await.unwrap(),
        ScheduleCreated::AlreadyExisted
    );
    let mut other = hourly.clone();
    other.spec = "every 2h".parse().unwrap();
    match schedules.create(other).await {
        Err(ClientError::ScheduleConflict {
            name: conflict,
            differences,
        }) => {
            assert_eq!((conflict, differences), (name.clone(), vec!["spec"]));
        }
        other => panic!("a conflict: {other:?}"),
    }
    let row = schedules.get(&name).await.unwrap();
    let start = f.clock.now();
    let next = row.next_fire_times(start, 2);
    assert_eq!(next.len(), 2);
    assert!(
        next[0] > start && next[1] - next[0] == chrono::Duration::hours(1),
        "{next:?}"
    );

    let paused = schedules.pause(&name, "maintenance").await.unwrap();
    assert_eq!(paused, ScheduleChanged::Changed);
    assert!(schedules.get(&name).await.unwrap().paused.is_some());
    assert_eq!(
        schedules.resume(&name).await.unwrap(),
        ScheduleChanged::Changed
    );

    let triggered = schedules.trigger(&name).await.unwrap();
    let [fired] = triggered.fired.as_slice() else {
        panic!("one execution: {triggered:?}");
    };
    let log = f.log(fired).await;
    let Some(concepts::Created {
        component_id,
        max_retries,
        ..
    }) = log.events.first().and_then(|event| event.event.created())
    else {
        panic!("created");
    };
    assert_eq!(
        (component_id, *max_retries),
        (&super::fixture::component(), 0)
    );
    let result = f
        .client()
        .handle::<u64>(fired.clone())
        .result_within(SAFETY)
        .await;
    assert_eq!(result.expect("run by the activity executor"), 42);

    f.clock
        .move_time_forward(Duration::from_secs(3 * 3600))
        .await;
    let backfilled = schedules
        .backfill(&name, start, f.clock.now())
        .await
        .expect("backfill");
    assert_eq!(backfilled.fired.len(), 3, "{backfilled:?}");
    let ticks = schedules.ticks(&name, 10).await.unwrap();
    let fired_by_backfill = ticks
        .iter()
        .filter(|tick| matches!(tick.outcome, TickOutcome::Fired { .. }))
        .count();
    assert_eq!(
        fired_by_backfill, 4,
        "the trigger and three backfilled: {ticks:?}"
    );

    match schedules.delete(&name).await.unwrap() {
        ScheduleChanged::Deleted { .. } => {}
        other => panic!("deleted: {other:?}"),
    }
    assert!(
        matches!(schedules.get(&name).await, Err(ClientError::NoSuchSchedule(gone)) if gone == name)
    );
    assert!(matches!(
        DOUBLE.schedule("not a name", &1, "every 1h".parse().unwrap()),
        Err(ClientError::InvalidScheduleName(_))
    ));
    f.close().await;
}
