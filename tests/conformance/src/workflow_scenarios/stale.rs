//! W22 and W23: a child's run that hands its answer to its waiting parent after the child was
//! resolved otherwise (its lease expired and the watcher finished it, or it was cancelled).

use super::fixture::{SAFETY, component, spawn_local};
use crate::StoreFactory;
use concepts::{ClockFn, DbConnection, ExecutionEventInner, ExecutionId};
use executor::{LocalExecutors, Worker};
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;
use tokio::sync::watch;
use workflow::{ActivityCtx, ActivityWorker, Client, Function, WorkflowCtx, WorkflowError};

const SLOW: Function<u64, u64> = Function::new("test:workflow/stale.slow");
const CALLS_SLOW: Function<u64, u64> = Function::new("test:workflow/stale.calls-slow");

async fn calls_slow(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    Ok(ctx.call(&SLOW, &n).await?)
}

/// W22: a child run in the parent's process goes on past its (short) lease; the watcher
/// finishes the child with a permanent timeout (no retry left), which answers the parent
/// through the store. Then the stale run returns `Ok`: it writes its outcome (refused, the
/// lease is over) instead of handing it to the parent's run, and the parent never finishes
/// with a result its child's log contradicts: its run ends writing nothing, and the lease's
/// expiry finishes it.
pub async fn w22_a_child_answer_after_its_lease_is_not_consumed<F: StoreFactory>(factory: &F) {
    stale_answer(factory, false).await;
}

/// W23: as W22, with the child cancelled on its own while its run goes on, within its lease:
/// the stale run hands its `Ok` over, the parent's run takes it, and recording it is refused
/// (the child's log ends with the cancellation): the run ends writing nothing, where it used to
/// take the refusal for an earlier attempt's success and finish the parent with `Ok`.
pub async fn w23_a_cancelled_child_answer_is_not_consumed<F: StoreFactory>(factory: &F) {
    stale_answer(factory, true).await;
}

async fn stale_answer<F: StoreFactory>(factory: &F, cancel: bool) {
    let store = factory.fresh().await;
    let db: Arc<dyn DbConnection> = store.db.clone();
    let clock = SimClock::epoch();
    let local = LocalExecutors::new();
    let (gate_tx, gate_rx) = watch::channel(false);
    let spawn = |worker: Arc<dyn Worker>, lease| spawn_local((&db, &clock, &local), worker, lease);
    let activities = ActivityWorker::new()
        .register(&SLOW, move |_: ActivityCtx, n: u64| {
            let mut gate = gate_rx.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok::<_, String>(n)
            }
        })
        .expect("a legal registration");
    let workflows = || {
        let worker = workflow::WorkflowWorker::new(db.clone(), clock.clone())
            .child_settings(component(), 0, Duration::from_secs(1))
            .register(&CALLS_SLOW, calls_slow)
            .expect("a legal registration");
        spawn(Arc::new(worker), Duration::from_secs(100))
    };
    let mut executors = vec![
        spawn(Arc::new(activities), Duration::from_secs(2)),
        workflows(),
    ];
    let client =
        Client::new(db.clone(), clock.clone(), component()).retries(0, Duration::from_secs(1));
    let handle = client.submit(&CALLS_SLOW, &7).await.expect("submitted");
    let parent = handle.execution_id().clone();
    let child: ExecutionId = parent.next_level(&"o:1-slow".parse().expect("a join set id"), 1);
    // The child runs (locked under the activity executor's lease, in this process).
    tokio::time::timeout(SAFETY, async {
        loop {
            if let Ok(log) = db.get(&child).await
                && matches!(log.pending_state, concepts::PendingState::Locked { .. })
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the child locked");
    if cancel {
        let request = concepts::CancelRequest {
            execution_id: child.clone(),
            now: clock.now(),
            reason: "the audit cancels the child".to_string(),
        };
        db.cancel(request).await.expect("cancelled");
    } else {
        // Its lease expires, and the watcher finishes it: no retry left.
        clock.move_time_forward(Duration::from_secs(3)).await;
        timers_watcher::tick(db.as_ref(), clock.now(), Duration::ZERO)
            .await
            .expect("the watcher's tick");
    }
    let child_log = db.get(&child).await.expect("the child");
    assert!(
        matches!(
            child_log.events.last().map(|e| &e.event),
            Some(ExecutionEventInner::Finished { result: Err(_) })
        ),
        "{:?}",
        child_log.events
    );
    // The stale run now returns. Draining the workflow executor waits for the parent's run to
    // end, with whatever it did with the answer.
    gate_tx.send_replace(true);
    let drained = executors[1].drain(SAFETY).await;
    assert_eq!(drained.left, 0, "the parent's run ended");
    // Whatever the run did with the stale answer, it finished nothing with it: the parent
    // finished with its child's failure (seen in the store), or a new run replays it from its
    // log, where the child's response is that failure.
    executors.push(workflows());
    clock.move_time_forward(Duration::from_secs(200)).await;
    timers_watcher::tick(db.as_ref(), clock.now(), Duration::ZERO)
        .await
        .expect("the watcher's tick");
    let result = handle.result_within(SAFETY).await;
    assert!(
        matches!(result, Err(ref err) if !matches!(err, workflow::ClientError::Timeout(_))),
        "the parent finished with {result:?}"
    );
    let parent_log = db.get(&parent).await.expect("the parent");
    assert!(
        matches!(
            parent_log.events.last().map(|e| &e.event),
            Some(ExecutionEventInner::Finished { result: Err(_) })
        ),
        "{:?}",
        parent_log.events.last()
    );
    for executor in &mut executors {
        executor.close().await;
    }
}
