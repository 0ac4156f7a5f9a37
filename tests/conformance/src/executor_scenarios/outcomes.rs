//! E1, E3, E4, E5, E12, E13, E15 and E18: one executor driven by manual ticks: what it locks,
//! and how it writes the end of each run (the executor's table, `docs/SEMANTICS.md` §6): a result,
//! a trap with or without a retry left, exponential backoff, a limit reached, a returned error,
//! and a worker that wrote its own event.

use super::{
    BACKOFF, Fixture, LOCK_EXPIRY, config, ffqn, finished, json_value, minus, ms, ok, plus, tick,
    trap_event, trap_failure,
    workers::{PersistingWorker, ScriptedWorker, Step, test_component_id},
};
use crate::StoreFactory;
use chrono::{DateTime, Utc};
use concepts::{
    ClockFn, CreateRequest, ExecutionEventInner, ExecutionId, Locked, PendingState, ResultKind,
    SupportedFunctionReturnValue, Version,
};
use executor::ExecTask;
use serde_json::json;
use std::sync::Arc;
use test_utils::SimClock;

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
