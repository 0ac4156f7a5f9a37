//! S4, S5, S6 and S13: `lock_pending`, its order, batch size and filters, expired leases,
//! locks after history events, and concurrent callers.

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use concepts::{
    ClockFn, ExecutionEventInner, ExecutionId, FunctionFqn, LockPendingRequest, PendingState,
    PendingStateKind, Version,
};
use std::{collections::BTreeSet, sync::Arc, time::Duration};
use test_utils::SimClock;

/// S4: `lock_pending` takes the oldest `scheduled_at` first, ties by execution id, at most
/// `batch_size`, only due executions of the asked functions.
pub async fn s4_lock_pending_order_and_batch_size<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let t = clock.now();
    let f = ffqn("ordered");
    let other = ffqn("other");
    let plan = [
        (30, plus(t, ms(0))),
        (10, plus(t, ms(2))),
        (20, plus(t, ms(0))),
        (40, plus(t, ms(1))),
        (50, plus(t, Duration::from_secs(3600))),
    ];
    for (n, scheduled_at) in plan {
        let req = concepts::CreateRequest {
            scheduled_at,
            ..create_request(execution_id(n), f.clone(), t)
        };
        db.create(req).await.unwrap();
    }
    let early_other = concepts::CreateRequest {
        scheduled_at: t - chrono::TimeDelta::seconds(1),
        ..create_request(execution_id(5), other.clone(), t)
    };
    db.create(early_other).await.unwrap();

    clock.move_time_forward(ms(10)).await;
    let now = clock.now();
    let ffqns = ffqns_of(&f);
    let first = lock_pending_now(db, &ffqns, 3, now, executor_id(1), LEASE).await;
    assert_eq!(
        ids_of(&first),
        vec![execution_id(20), execution_id(30), execution_id(40)]
    );
    let second = lock_pending_now(db, &ffqns, 3, now, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&second), vec![execution_id(10)]);
    assert!(
        lock_pending_now(db, &ffqns, 3, now, executor_id(1), LEASE)
            .await
            .is_empty()
    );
    assert!(
        db.lock_pending(LockPendingRequest {
            batch_size: 0,
            pending_at_or_sooner: now,
            ffqns: ffqns_of(&other),
            now,
            component_id: component_id(),
            executor_id: executor_id(1),
            lock_expires_at: plus(now, LEASE),
        })
        .await
        .unwrap()
        .is_empty(),
        "batch size 0 locks nothing"
    );
    for n in [5, 10, 20, 30, 40, 50] {
        assert_state_matches_derivation(db, &execution_id(n)).await;
    }
    // Several functions at once merge in the same order.
    let both: Arc<[FunctionFqn]> = Arc::from([f.clone(), other.clone()]);
    clock.move_time_forward(Duration::from_secs(3600)).await;
    let now = clock.now();
    let last = lock_pending_now(db, &both, 10, now, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&last), vec![execution_id(5), execution_id(50)]);
}

/// S5: `lock_pending` never returns an execution whose lease merely expired (before, at and
/// after the expiry), and locking it directly is `AlreadyLocked`; once the watcher resolved the
/// lease with a `TemporarilyTimedOut`, it is locked again after the backoff, with one temporary
/// event.
pub async fn s5_expired_lease_never_relocked<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let start = clock.now();
    let f = ffqn("expiring");
    let ffqns = ffqns_of(&f);
    let id = execution_id(1);
    db.create(create_request(id.clone(), f.clone(), start))
        .await
        .unwrap();
    let expiry = plus(start, LEASE);
    let (_, version) = lock(
        db,
        start,
        &id,
        run_id(1),
        Version(1),
        executor_id(1),
        expiry,
    )
    .await
    .unwrap();
    for offset in [ms(500), ms(1000), ms(2000)] {
        let now = plus(start, offset);
        assert!(
            lock_pending_now(db, &ffqns, 10, now, executor_id(2), LEASE)
                .await
                .is_empty(),
            "an expired lease is not lockable at {offset:?}"
        );
        assert_state_matches_derivation(db, &id).await;
    }
    let now = plus(start, ms(2000));
    expect_already_locked(
        lock(
            db,
            now,
            &id,
            run_id(2),
            version,
            executor_id(2),
            plus(now, LEASE),
        )
        .await,
    );
    let timed_out = ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: now,
    };
    append(db, &id, version, now, timed_out).await.unwrap();
    assert_state_matches_derivation(db, &id).await;
    let locked = lock_pending_now(db, &ffqns, 10, now, executor_id(2), LEASE).await;
    assert_eq!(ids_of(&locked), vec![id.clone()]);
    assert_eq!(locked[0].temporary_event_count, 1);
}

/// S6: history events bump the version without changing the state, and locking works after
/// them.
pub async fn s6_lock_after_history_event<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("history");
    let ffqns = ffqns_of(&f);
    let id = execution_id(1);
    db.create(create_request(id.clone(), f.clone(), now))
        .await
        .unwrap();
    // No lock is needed for other appends: the version is the guard.
    assert_eq!(
        append(db, &id, Version(1), now, persist(1)).await.unwrap(),
        Version(2)
    );
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt { scheduled_at: now }
    );

    let locked = lock_pending_now(db, &ffqns, 1, now, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&locked), vec![id.clone()]);
    assert_eq!(locked[0].next_version, Version(3));
    assert_eq!(locked[0].event_history.len(), 1);
    let run = locked[0].locked_event.run_id;

    let j = join_set("n:later");
    let version = db
        .append_batch(batch(
            &id,
            Version(3),
            now,
            vec![persist(2), join_set_create(&j)],
        ))
        .await
        .unwrap();
    assert_eq!(version, Version(5));
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(log.pending_state.kind(), PendingStateKind::Locked);
    let (history, version) = lock(
        db,
        now,
        &id,
        run,
        version,
        executor_id(1),
        plus(now, LEASE * 2),
    )
    .await
    .unwrap();
    assert_eq!(version, Version(6));
    assert_eq!(history.len(), 3);
    assert_state_matches_derivation(db, &id).await;

    let unlocked = ExecutionEventInner::Unlocked {
        backoff_expires_at: now,
        reason: "limit".to_string(),
    };
    let version = append(db, &id, version, now, unlocked).await.unwrap();
    let version = append(db, &id, version, now, persist(3)).await.unwrap();
    assert_state_matches_derivation(db, &id).await;
    let (history, version) = lock(
        db,
        now,
        &id,
        run_id(9),
        version,
        executor_id(2),
        plus(now, LEASE),
    )
    .await
    .unwrap();
    assert_eq!(version, Version(9));
    assert_eq!(history.len(), 4);
    assert_state_matches_derivation(db, &id).await;
}

/// S13: eight concurrent `lock_pending` callers over 1,000 due executions lock disjoint sets
/// whose union is all of them.
pub async fn s13_concurrent_lock_pending<F: StoreFactory>(factory: &F) {
    const EXECUTIONS: u128 = 1_000;
    const TASKS: u128 = 8;
    let store = factory.fresh().await;
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("contended");
    let reqs: Vec<_> = (1..=EXECUTIONS)
        .map(|n| create_request(execution_id(n), f.clone(), now))
        .collect();
    store.db.create_batch(reqs).await.unwrap();

    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let db = Arc::clone(&store.db);
        let ffqns = ffqns_of(&f);
        let batch_size = usize::try_from(task % 5 + 1).unwrap_or(1) * 3;
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let locked = lock_pending_now(
                    db.as_ref(),
                    &ffqns,
                    batch_size,
                    now,
                    executor_id(task + 1),
                    LEASE,
                )
                .await;
                if locked.is_empty() {
                    return mine;
                }
                assert!(locked.len() <= batch_size);
                for l in locked {
                    assert_eq!(l.locked_event.executor_id, executor_id(task + 1));
                    mine.push(l.execution_id);
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut all = BTreeSet::new();
    let mut per_task = Vec::new();
    for task in tasks {
        let mine = tokio::time::timeout(SAFETY * 6, task)
            .await
            .expect("tasks finish")
            .unwrap();
        per_task.push(mine.len());
        for id in mine {
            assert!(all.insert(id.clone()), "{id} was locked twice");
        }
    }
    let expected: BTreeSet<ExecutionId> = (1..=EXECUTIONS).map(execution_id).collect();
    assert_eq!(all, expected, "per task: {per_task:?}");
    for n in [1, 500, 1_000] {
        let log = assert_state_matches_derivation(store.db.as_ref(), &execution_id(n)).await;
        assert_eq!(log.pending_state.kind(), PendingStateKind::Locked);
    }
}

/// S30: a `lock_pending` that names a function twice locks each of its due executions once, up
/// to the batch size, as a request naming it once does.
pub async fn s30_function_named_twice_locks_once<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let t = clock.now();
    let f = ffqn("twice");
    for n in [1, 2] {
        db.create(create_request(execution_id(n), f.clone(), t))
            .await
            .expect("creates");
    }
    let twice: Arc<[FunctionFqn]> = Arc::from([f.clone(), f.clone()]);
    let locked = lock_pending_now(db, &twice, 2, t, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&locked), vec![execution_id(1), execution_id(2)]);
}
