//! S14, S15, S16 and S20: the waits (`wait_for_pending`, `subscribe_to_next_responses`,
//! `wait_for_finished_result`): at once, woken by a write, or timed out; and the moving horizon
//! of `wait_for_pending`.

use super::{LEASE, assert_still_waiting, ffqns_of, helpers::*, join_within_safety};
use crate::StoreFactory;
use concepts::{ClockFn, DbErrorKind, ExecutionEventInner, FunctionFqn, Version};
use std::{sync::Arc, time::Duration};
use test_utils::SimClock;

/// S14: `wait_for_pending` returns at once when something is due, wakes on a write that makes
/// something due, and returns after `max_wait` otherwise; a stress loop of create/wait races
/// loses no wake-up.
pub async fn s14_wait_for_pending<F: StoreFactory>(factory: &F) {
    const LONG_WAIT: Duration = Duration::from_secs(60);
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();

    // Something due: at once.
    let due = ffqn("due");
    db.create(create_request(execution_id(1), due.clone(), now))
        .await
        .unwrap();
    tokio::time::timeout(SAFETY, db.wait_for_pending(now, ffqns_of(&due), LONG_WAIT))
        .await
        .expect("returns at once when something is due");

    // Nothing due (only a future execution): after `max_wait`, not before.
    let later = ffqn("later");
    let future = concepts::CreateRequest {
        scheduled_at: plus(now, Duration::from_secs(3600)),
        ..create_request(execution_id(2), later.clone(), now)
    };
    db.create(future).await.unwrap();
    let started = tokio::time::Instant::now();
    tokio::time::timeout(SAFETY, db.wait_for_pending(now, ffqns_of(&later), ms(100)))
        .await
        .expect("returns after max_wait");
    assert!(
        started.elapsed() >= ms(100),
        "returned before max_wait: {:?}",
        started.elapsed()
    );

    // Woken by a create.
    let created = ffqn("created");
    let mut waiter = tokio::spawn({
        let db = Arc::clone(&store.db);
        let ffqns = ffqns_of(&created);
        async move { db.wait_for_pending(now, ffqns, LONG_WAIT).await }
    });
    assert_still_waiting(&mut waiter, "wait_for_pending with nothing due").await;
    let started = tokio::time::Instant::now();
    db.create(create_request(execution_id(3), created.clone(), now))
        .await
        .unwrap();
    join_within_safety(waiter, "wait_for_pending woken by create").await;
    assert!(started.elapsed() < LONG_WAIT / 2);

    // Woken by an unlock that makes a locked execution due.
    let unlocking = ffqn("unlocking");
    db.create(create_request(execution_id(4), unlocking.clone(), now))
        .await
        .unwrap();
    let locked = lock_pending_now(db, &ffqns_of(&unlocking), 1, now, executor_id(1), LEASE).await;
    let mut waiter = tokio::spawn({
        let db = Arc::clone(&store.db);
        let ffqns = ffqns_of(&unlocking);
        async move { db.wait_for_pending(now, ffqns, LONG_WAIT).await }
    });
    assert_still_waiting(&mut waiter, "wait_for_pending with the execution locked").await;
    let unlocked = ExecutionEventInner::Unlocked {
        backoff_expires_at: now,
        reason: "limit".to_string(),
    };
    append(db, &execution_id(4), locked[0].next_version, now, unlocked)
        .await
        .unwrap();
    join_within_safety(waiter, "wait_for_pending woken by unlock").await;

    // Woken by a response that unblocks an execution.
    let blocked = ffqn("blocked");
    let b = execution_id(5);
    let j = join_set("o:wake");
    db.create(create_request(b.clone(), blocked.clone(), now))
        .await
        .unwrap();
    append(db, &b, Version(1), now, join_next(&j, now))
        .await
        .unwrap();
    let mut waiter = tokio::spawn({
        let db = Arc::clone(&store.db);
        let ffqns = ffqns_of(&blocked);
        async move { db.wait_for_pending(now, ffqns, LONG_WAIT).await }
    });
    assert_still_waiting(&mut waiter, "wait_for_pending with the execution blocked").await;
    db.append_response(now, &b, delay_finished(&j, delay_id(1)))
        .await
        .unwrap();
    join_within_safety(waiter, "wait_for_pending woken by a response").await;
    assert_state_matches_derivation(db, &b).await;

    // Stress: create and wait race; a lost wake-up hangs the waiter for LONG_WAIT.
    for i in 0..300u32 {
        let f = ffqn(&format!("stress{i}"));
        let waiter = tokio::spawn({
            let db = Arc::clone(&store.db);
            let ffqns = ffqns_of(&f);
            async move { db.wait_for_pending(now, ffqns, LONG_WAIT).await }
        });
        for _ in 0..(i % 4) {
            tokio::task::yield_now().await;
        }
        db.create(create_request(execution_id(1_000 + u128::from(i)), f, now))
            .await
            .unwrap();
        join_within_safety(waiter, &format!("stress iteration {i}")).await;
    }
}

/// S15: `subscribe_to_next_responses` returns the responses from `start_idx` at once, or waits
/// for the next one.
pub async fn s15_subscribe_to_next_responses<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let p = execution_id(1);
    db.create(create_request(p.clone(), ffqn("subscriber"), now))
        .await
        .unwrap();
    let j = join_set("g:sleeps");
    db.append_response(now, &p, delay_finished(&j, delay_id(1)))
        .await
        .unwrap();
    clock.move_time_forward(ms(1)).await;
    db.append_response(clock.now(), &p, delay_finished(&j, delay_id(2)))
        .await
        .unwrap();
    let stored = db.get(&p).await.unwrap().responses;
    assert_eq!(stored.len(), 2);

    let from_0 = tokio::time::timeout(SAFETY, db.subscribe_to_next_responses(&p, 0))
        .await
        .expect("at once")
        .unwrap();
    assert_eq!(from_0, stored);
    let from_1 = tokio::time::timeout(SAFETY, db.subscribe_to_next_responses(&p, 1))
        .await
        .expect("at once")
        .unwrap();
    assert_eq!(from_1, stored[1..].to_vec());

    let mut waiter = tokio::spawn({
        let db = Arc::clone(&store.db);
        let p = p.clone();
        async move { db.subscribe_to_next_responses(&p, 2).await }
    });
    assert_still_waiting(
        &mut waiter,
        "subscribe_to_next_responses past the last response",
    )
    .await;
    clock.move_time_forward(ms(1)).await;
    db.append_response(clock.now(), &p, delay_finished(&j, delay_id(3)))
        .await
        .unwrap();
    let next = join_within_safety(waiter, "subscribe_to_next_responses")
        .await
        .unwrap();
    let stored = db.get(&p).await.unwrap().responses;
    assert_eq!(next, stored[2..].to_vec());
    assert_eq!(next.len(), 1);
    assert_state_matches_derivation(db, &p).await;
}

/// S16: `wait_for_finished_result` returns at once for a finished execution, wakes when one
/// finishes, and times out with a typed error.
pub async fn s16_wait_for_finished_result<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("waited");
    let (done, running, slow) = (execution_id(1), execution_id(2), execution_id(3));
    for id in [&done, &running, &slow] {
        db.create(create_request(id.clone(), f.clone(), now))
            .await
            .unwrap();
    }
    let finished = finished_ok(serde_json::json!({"ok": true}));
    let ExecutionEventInner::Finished { result: expected } = finished.clone() else {
        unreachable!("finished_ok() makes a Finished event")
    };
    append(db, &done, Version(1), now, finished.clone())
        .await
        .unwrap();
    for timeout in [None, Some(Duration::from_secs(60))] {
        let result = tokio::time::timeout(SAFETY, db.wait_for_finished_result(&done, timeout))
            .await
            .expect("at once")
            .unwrap();
        assert_eq!(result, expected);
    }

    let mut waiter = tokio::spawn({
        let db = Arc::clone(&store.db);
        let running = running.clone();
        async move {
            db.wait_for_finished_result(&running, Some(Duration::from_secs(60)))
                .await
        }
    });
    assert_still_waiting(
        &mut waiter,
        "wait_for_finished_result of a running execution",
    )
    .await;
    append(db, &running, Version(1), now, finished)
        .await
        .unwrap();
    assert_eq!(
        join_within_safety(waiter, "wait_for_finished_result")
            .await
            .unwrap(),
        expected
    );

    let started = tokio::time::Instant::now();
    let timed_out = tokio::time::timeout(SAFETY, db.wait_for_finished_result(&slow, Some(ms(100))))
        .await
        .expect("the wait's own timeout fires first");
    expect_kind(timed_out, DbErrorKind::Timeout);
    assert!(started.elapsed() >= ms(100));
    for id in [&done, &running, &slow] {
        assert_state_matches_derivation(db, id).await;
    }
}

/// S20: `pending_at_or_sooner` is the waiter's present, and its horizon moves on with the time
/// it waits (`docs/SEMANTICS.md` §4.9). Another process that submits work due at its own, later,
/// present must wake the waiter: without that, a sleeping executor of one process would find
/// work submitted by another only at its next poll. This is the one storage scenario on real
/// time, because the simulated clock cannot show the gap between two processes' presents.
pub async fn s20_wait_for_pending_horizon_moves_on<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.clone();
    let waiters_present = SimClock::epoch().now();
    let f = ffqn("horizon");
    let max_wait = Duration::from_secs(30);
    let waiter = {
        let db = db.clone();
        let ffqns: Arc<[FunctionFqn]> = Arc::from(vec![f.clone()]);
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            db.wait_for_pending(waiters_present, ffqns, max_wait).await;
            started.elapsed()
        })
    };
    // Real time passes (and the waiter registers); then a writer whose present is 50 ms after
    // the waiter's submits an execution due at once, by its own clock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writers_present = plus(waiters_present, Duration::from_millis(50));
    db.create(create_request(execution_id(1), f, writers_present))
        .await
        .expect("create");
    let waited = tokio::time::timeout(SAFETY, waiter)
        .await
        .expect("woken well before max_wait")
        .expect("the waiter does not panic");
    assert!(
        waited < Duration::from_secs(10),
        "woken after {waited:?}: the write's notification did not reach a waiter whose present \
         was 50 ms earlier than the writer's"
    );
}

/// S24: the waits of one handle hear the commits of a second handle on the same data, opened
/// as another process would (`StoreFactory::another_process`; a backend that lives in one
/// process has none and passes): work submitted elsewhere wakes `wait_for_pending`, a finish
/// elsewhere (a cancel, a completed promise) `wait_for_finished_result`, and a response stored
/// elsewhere (a child's result, a delay) `subscribe_to_next_responses`, each long before its
/// own timeout.
pub async fn s24_waits_hear_another_process<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let Some(other) = factory.another_process(&store).await else {
        return;
    };
    let db = store.db.clone();
    let now = SimClock::epoch().now();
    let work = ffqn("work");
    let own_timeout = SAFETY * 6;

    let mut idle = {
        let (db, ffqns) = (db.clone(), ffqns_of(&work));
        tokio::spawn(async move { db.wait_for_pending(now, ffqns, own_timeout).await })
    };
    assert_still_waiting(&mut idle, "wait_for_pending").await;
    let id = execution_id(1);
    other
        .create(create_request(id.clone(), work.clone(), now))
        .await
        .expect("created by the other process");
    join_within_safety(
        idle,
        "wait_for_pending, woken by the other process's submit",
    )
    .await;

    let mut finished = {
        let (db, id) = (db.clone(), id.clone());
        tokio::spawn(async move { db.wait_for_finished_result(&id, Some(own_timeout)).await })
    };
    assert_still_waiting(&mut finished, "wait_for_finished_result").await;
    let locked = lock_pending_now(
        other.as_ref(),
        &ffqns_of(&work),
        1,
        now,
        executor_id(1),
        LEASE,
    )
    .await;
    assert_eq!(locked.len(), 1);
    let value = serde_json::json!(7);
    let finish = concepts::OutcomeWrite::new(
        id.clone(),
        locked[0].next_version,
        now,
        finished_ok(value.clone()),
        None,
    );
    other
        .append_outcome(finish)
        .await
        .expect("finished by the other process");
    let result = join_within_safety(finished, "wait_for_finished_result").await;
    assert_eq!(
        result.expect("the result"),
        Ok(concepts::SupportedFunctionReturnValue::InfallibleOrResultOk(concepts::Json(value)))
    );

    let parent = execution_id(2);
    other
        .create(create_request(parent.clone(), ffqn("parent"), now))
        .await
        .expect("created");
    let j = join_set("o:1");
    let delay_id = concepts::DelayId::generate_at(now);
    let events = vec![join_set_create(&j), delay_request(&j, delay_id, now)];
    other
        .append_batch(batch(&parent, Version(1), now, events))
        .await
        .expect("appended");
    let mut responses = {
        let (db, parent) = (db.clone(), parent.clone());
        tokio::spawn(async move { db.subscribe_to_next_responses(&parent, 0).await })
    };
    assert_still_waiting(&mut responses, "subscribe_to_next_responses").await;
    other
        .append_response(now, &parent, delay_finished(&j, delay_id))
        .await
        .expect("stored by the other process");
    let responses = join_within_safety(responses, "subscribe_to_next_responses").await;
    assert_eq!(responses.expect("the responses").len(), 1);
    other.close().await;
    db.close().await;
}
