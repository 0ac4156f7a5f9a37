//! Two stores opened on one file, as two processes would: the waits of one hear the commits
//! of the other (`changes.rs`). Without the detector none of them is woken: each would run to
//! its own timeout, a minute here, and fail the test's ten-second guard.

use super::{create_request, delay_finished, id, join_set_create, open, t0};
use crate::SqlitePool;
use concepts::kernel::WaiterCounts;
use concepts::{
    AppendBatchRequest, DbAwait, DbClient, DbConnection, DbExecutor, DbTimers, DbWorkflow, DelayId,
    ExecutionEventInner, ExecutorId, HistoryEvent, JoinSetId, JoinSetRequest, Json,
    LockPendingRequest, OutcomeWrite, SupportedFunctionReturnValue, Version,
};
use std::{sync::Arc, time::Duration};

/// Far longer than any wake-up takes, far shorter than the waits' own timeouts.
const GUARD: Duration = Duration::from_secs(10);
/// The waits' own timeouts: reaching one fails the guard.
const OWN_TIMEOUT: Duration = Duration::from_secs(60);

/// Returns once `store` has the waiters `expected` registered (each registers before its first
/// look at the store, which then finds nothing: the other store writes only after).
async fn registered(store: &SqlitePool, expected: WaiterCounts) {
    for _ in 0..10_000 {
        if store.waiter_counts() == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the waiter never registered: {:?}", store.waiter_counts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waits_of_one_store_hear_the_commits_of_another_on_the_same_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("db.sqlite");
    let (waiting, writing) = (open(&path).await, open(&path).await);
    let ffqns: Arc<[_]> = Arc::from([super::ffqn()]);

    // Work submitted elsewhere wakes an idle executor.
    let waiter = waiting.clone();
    let idle = tokio::spawn({
        let ffqns = ffqns.clone();
        async move { waiter.wait_for_pending(t0(), ffqns, OWN_TIMEOUT).await }
    });
    registered(
        &waiting,
        WaiterCounts {
            pending: 1,
            ..WaiterCounts::default()
        },
    )
    .await;
    writing
        .create(create_request(id(1), t0()))
        .await
        .expect("creates");
    tokio::time::timeout(GUARD, idle)
        .await
        .expect("the idle executor is woken by the other store's submit")
        .expect("joins");

    // A finish elsewhere (a cancel, a completed promise) reaches its waiter.
    let waiter = waiting.clone();
    let finished = tokio::spawn(async move {
        waiter
            .wait_for_finished_result(&id(1), Some(OWN_TIMEOUT))
            .await
    });
    registered(
        &waiting,
        WaiterCounts {
            finished: 1,
            ..WaiterCounts::default()
        },
    )
    .await;
    let locked = writing
        .lock_pending(LockPendingRequest {
            batch_size: 1,
            pending_at_or_sooner: t0(),
            ffqns: ffqns.clone(),
            now: t0(),
            component_id: create_request(id(1), t0()).component_id,
            executor_id: ExecutorId::from_parts(0, 1),
            lock_expires_at: t0() + chrono::Duration::seconds(60),
        })
        .await
        .expect("locks");
    assert_eq!(locked.len(), 1);
    let value = SupportedFunctionReturnValue::InfallibleOrResultOk(Json(serde_json::json!(7)));
    writing
        .append_outcome(OutcomeWrite::new(
            id(1),
            locked[0].next_version,
            t0(),
            ExecutionEventInner::Finished {
                result: Ok(value.clone()),
            },
            None,
        ))
        .await
        .expect("finishes");
    let result = tokio::time::timeout(GUARD, finished)
        .await
        .expect("the waiter hears the other store's finish")
        .expect("joins");
    assert_eq!(result.expect("the result"), Ok(value));

    // A response stored elsewhere (a child's result, a delay) reaches a warm workflow.
    writing
        .create(create_request(id(2), t0()))
        .await
        .expect("creates");
    let join_set: JoinSetId = "o:1".parse().expect("a join set id");
    let delay_id = DelayId::generate_at(t0());
    let events = vec![
        join_set_create(&join_set),
        super::history(HistoryEvent::JoinSetRequest {
            join_set_id: join_set.clone(),
            request: JoinSetRequest::DelayRequest {
                delay_id,
                expires_at: t0(),
            },
        }),
    ];
    writing
        .append_batch(AppendBatchRequest::events(id(2), Version(1), t0(), events))
        .await
        .expect("appends");
    let waiter = waiting.clone();
    let responses =
        tokio::spawn(async move { waiter.subscribe_to_next_responses(&id(2), 0).await });
    registered(
        &waiting,
        WaiterCounts {
            responses: 1,
            ..WaiterCounts::default()
        },
    )
    .await;
    writing
        .append_response(t0(), &id(2), delay_finished(&join_set, delay_id))
        .await
        .expect("stores");
    let responses = tokio::time::timeout(GUARD, responses)
        .await
        .expect("the workflow hears the other store's response")
        .expect("joins")
        .expect("the responses");
    assert_eq!(responses.len(), 1);

    DbConnection::close(&waiting).await;
    DbConnection::close(&writing).await;
}
