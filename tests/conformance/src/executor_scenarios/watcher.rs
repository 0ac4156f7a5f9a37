//! E10, E11 and E19: what the timers watcher resolves: a hanging worker's expired lease, a late
//! worker's refused write, and a durable sleep.

use super::{
    BACKOFF, Fixture, LOCK_EXPIRY, SAFETY, config, ffqn, finished, minus, ms, plus, tick,
    workers::{GatedWorker, SleepingWorker},
};
use crate::StoreFactory;
use concepts::{
    ClockFn, ExecutionEventInner, FinishedExecutionError, HistoryEvent, JoinSetResponse,
    PendingState, ResultKind, SupportedFunctionReturnValue,
};
use std::sync::Arc;
use timers_watcher::TickProgress;

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
