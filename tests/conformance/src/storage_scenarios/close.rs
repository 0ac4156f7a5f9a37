//! S17: `close` is idempotent, every later call is "closed", and waiters are released.

use super::{LEASE, assert_still_waiting, ffqns_of, helpers::*, join_within_safety};
use crate::StoreFactory;
use concepts::{
    ClockFn, DbErrorKind, ListExecutionsFilter, LockPendingRequest, OutcomeWrite, Pagination,
    Version,
};
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;

/// S17: `close` is idempotent (twice is fine); it releases waiters (`wait_for_finished_result`
/// and `subscribe_to_next_responses` end with `Closed`); afterwards every operation, read or
/// write, is `Closed`, and `wait_for_pending` returns at once.
pub async fn s17_close<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("closing");
    let id = execution_id(1);
    let req = create_request(id.clone(), f.clone(), now);
    db.create(req.clone()).await.unwrap();
    let mut finished_waiter = tokio::spawn({
        let db = Arc::clone(&store.db);
        let id = id.clone();
        async move { db.wait_for_finished_result(&id, None).await }
    });
    let mut responses_waiter = tokio::spawn({
        let db = Arc::clone(&store.db);
        let id = id.clone();
        async move { db.subscribe_to_next_responses(&id, 0).await }
    });
    assert_still_waiting(&mut finished_waiter, "wait_for_finished_result").await;
    assert_still_waiting(&mut responses_waiter, "subscribe_to_next_responses").await;

    db.close().await;
    db.close().await;
    expect_kind(
        join_within_safety(finished_waiter, "close releases wait_for_finished_result").await,
        DbErrorKind::Closed,
    );
    expect_kind(
        join_within_safety(
            responses_waiter,
            "close releases subscribe_to_next_responses",
        )
        .await,
        DbErrorKind::Closed,
    );

    let closed = DbErrorKind::Closed;
    let ffqns = ffqns_of(&f);
    let j = join_set("o:x");
    expect_kind(
        db.create(create_request(execution_id(2), f.clone(), now))
            .await,
        closed,
    );
    expect_kind(
        db.create_batch(vec![create_request(execution_id(3), f.clone(), now)])
            .await,
        closed,
    );
    expect_kind(db.get(&id).await, closed);
    expect_kind(db.get_execution_event(&id, Version(0)).await, closed);
    expect_kind(
        db.list_executions(ListExecutionsFilter::default(), Pagination::default())
            .await,
        closed,
    );
    expect_kind(append(db, &id, Version(1), now, persist(1)).await, closed);
    expect_kind(
        db.append_batch(batch(&id, Version(1), now, vec![persist(1)]))
            .await,
        closed,
    );
    let kids = join_set("n:kids");
    let child = child_request(&id, &kids, 1, f.clone(), now);
    expect_kind(
        db.append_batch(batch_creating(
            &id,
            Version(1),
            now,
            vec![child_execution_request(&kids, &child.execution_id)],
            vec![child],
        ))
        .await,
        closed,
    );
    expect_kind(
        db.append_outcome(OutcomeWrite::new(
            id.clone(),
            Version(1),
            now,
            finished_ok(serde_json::json!(1)),
            Some(&(execution_id(9), j.clone())),
        ))
        .await,
        closed,
    );
    expect_kind(
        db.append_response(now, &id, delay_finished(&j, delay_id(1)))
            .await,
        closed,
    );
    expect_kind(
        lock(
            db,
            now,
            &id,
            run_id(1),
            Version(1),
            executor_id(1),
            plus(now, LEASE),
        )
        .await,
        closed,
    );
    expect_kind(
        db.lock_pending(LockPendingRequest {
            batch_size: 10,
            pending_at_or_sooner: now,
            ffqns: ffqns.clone(),
            now,
            component_id: component_id(),
            executor_id: executor_id(1),
            lock_expires_at: plus(now, LEASE),
        })
        .await,
        closed,
    );
    expect_kind(db.get_expired_timers(now).await, closed);
    expect_kind(
        tokio::time::timeout(SAFETY, db.subscribe_to_next_responses(&id, 0))
            .await
            .expect("at once"),
        closed,
    );
    expect_kind(
        tokio::time::timeout(SAFETY, db.wait_for_finished_result(&id, None))
            .await
            .expect("at once"),
        closed,
    );
    tokio::time::timeout(
        SAFETY,
        db.wait_for_pending(now, ffqns, Duration::from_secs(60)),
    )
    .await
    .expect("wait_for_pending returns at once on a closed store");
}
