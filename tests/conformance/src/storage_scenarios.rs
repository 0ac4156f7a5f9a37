//! The storage contract scenarios S1..S19 of `SCENARIOS.md`: every backend runs them through
//! the same code and must agree on results and on error kinds.
//!
//! Every scenario checks, after each step that changes an execution, that the stored pending
//! state equals its reference derivation ([`helpers::assert_state_matches_derivation`], S18).
//! Timestamps come from a [`SimClock`]; real time is used only as a safety net when awaiting a
//! notification ([`helpers::SAFETY`]) and for `max_wait`/timeouts of the waits themselves.

pub mod helpers;

use crate::StoreFactory;
use concepts::{
    ClockFn, DbError, DbErrorKind, DuplicateKind, ExecutionEventInner, ExecutionId, ExpiredDelay,
    ExpiredLock, ExpiredTimer, FinishedExecutionError, FunctionFqn, HistoryEvent, JoinSetResponse,
    Json, ListExecutionsFilter, LockPendingRequest, OutcomeWrite, Pagination, PendingState,
    PendingStateKind, ResultKind, SupportedFunctionReturnValue, ValidationError, Version,
};
use helpers::*;
use std::{collections::BTreeSet, sync::Arc, time::Duration};
use test_utils::SimClock;

/// The lease of the scenarios' locks.
const LEASE: Duration = Duration::from_secs(1);

/// Expands to one test per scenario of this module.
#[macro_export]
macro_rules! storage_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; storage_scenarios;
            s1_lifecycle,
            s2_expired_lease_reported,
            s3_expired_delay_reported_once,
            s4_lock_pending_order_and_batch_size,
            s5_expired_lease_never_relocked,
            s6_lock_after_history_event,
            s7_versions_not_found_finished,
            s8_failing_batch_writes_nothing,
            s9_duplicate_responses_refused,
            s10_join_sets,
            s11_response_to_finished_execution,
            s12_json_key_order,
            s13_concurrent_lock_pending,
            s14_wait_for_pending,
            s15_subscribe_to_next_responses,
            s16_wait_for_finished_result,
            s17_close,
            s18_state_matches_derivation,
            s19_create_batch,
            s20_wait_for_pending_horizon_moves_on,
            s21_unexplained_creations_and_repeated_delays_refused,
        );
    };
}

fn ffqns_of(ffqn: &FunctionFqn) -> Arc<[FunctionFqn]> {
    Arc::from([ffqn.clone()])
}

/// S1: the life of one execution through locks, a timeout, an unlock and its end.
pub async fn s1_lifecycle<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let f = ffqn("lifecycle");
    let ffqns = ffqns_of(&f);
    let exr = executor_id(1);
    let id = execution_id(1);

    let now = clock.now();
    assert!(
        lock_pending_now(db, &ffqns, 10, now, exr, LEASE)
            .await
            .is_empty()
    );

    let req = create_request(id.clone(), f.clone(), now);
    assert_eq!(db.create(req.clone()).await.unwrap(), Version(1));
    assert_state_matches_derivation(db, &id).await;
    let dup = expect_kind(db.create(req.clone()).await, DbErrorKind::Duplicate);
    assert!(
        matches!(&dup, DbError::Duplicate(DuplicateKind::Execution(e)) if *e == id),
        "{dup:?}"
    );

    let locked = lock_pending_now(db, &ffqns, 10, now, exr, LEASE).await;
    assert_eq!(ids_of(&locked), vec![id.clone()]);
    let first = &locked[0];
    assert_eq!(first.next_version, Version(2));
    assert_eq!(first.ffqn, f);
    assert_eq!(first.params, req.params);
    assert_eq!(first.metadata, req.metadata);
    assert_eq!(first.scheduled_at, req.scheduled_at);
    assert_eq!(first.retry_exp_backoff, req.retry_exp_backoff);
    assert_eq!(first.max_retries, req.max_retries);
    assert_eq!(first.parent, None);
    assert_eq!(first.temporary_event_count, 0);
    assert!(first.event_history.is_empty());
    assert!(first.responses.is_empty());
    assert_eq!(first.locked_event.executor_id, exr);
    assert_eq!(first.locked_event.lock_expires_at, plus(now, LEASE));
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(
        log.pending_state,
        PendingState::Locked {
            executor_id: exr,
            run_id: first.locked_event.run_id,
            lock_expires_at: plus(now, LEASE),
        }
    );

    // A timeout with a backoff.
    let backoff_expires_at = plus(now, Duration::from_secs(1));
    let timed_out = ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at };
    assert_eq!(
        append(db, &id, Version(2), now, timed_out).await.unwrap(),
        Version(3)
    );
    assert_state_matches_derivation(db, &id).await;

    clock.move_time_forward(ms(500)).await;
    let now = clock.now();
    expect_not_yet_pending(
        lock(db, now, &id, run_id(10), Version(3), exr, plus(now, LEASE)).await,
        backoff_expires_at,
    );
    assert!(
        lock_pending_now(db, &ffqns, 10, now, exr, LEASE)
            .await
            .is_empty()
    );

    // Exactly at the backoff.
    clock.move_time_to(backoff_expires_at);
    let now = clock.now();
    let (history, version) = lock(db, now, &id, run_id(11), Version(3), exr, plus(now, LEASE))
        .await
        .unwrap();
    assert!(history.is_empty());
    assert_eq!(version, Version(4));
    assert_state_matches_derivation(db, &id).await;

    // Another executor, or the same executor with another run, cannot lock it.
    expect_already_locked(
        lock(
            db,
            now,
            &id,
            run_id(12),
            version,
            executor_id(2),
            plus(now, LEASE),
        )
        .await,
    );
    expect_already_locked(
        lock(
            db,
            now,
            &id,
            run_id(11),
            version,
            executor_id(2),
            plus(now, LEASE),
        )
        .await,
    );
    expect_already_locked(lock(db, now, &id, run_id(12), version, exr, plus(now, LEASE)).await);
    // The same executor and run extend the lease.
    let extended = plus(now, LEASE * 2);
    let (history, version) = lock(db, now, &id, run_id(11), version, exr, extended)
        .await
        .unwrap();
    assert!(history.is_empty());
    assert_eq!(version, Version(5));
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(
        log.pending_state,
        PendingState::Locked {
            executor_id: exr,
            run_id: run_id(11),
            lock_expires_at: extended
        }
    );

    // `Persist`, then `Unlocked`.
    let version = append(db, &id, version, now, persist(7)).await.unwrap();
    assert_eq!(version, Version(6));
    assert_state_matches_derivation(db, &id).await;
    let unlock_at = plus(now, Duration::from_secs(2));
    let unlocked = ExecutionEventInner::Unlocked {
        backoff_expires_at: unlock_at,
        reason: "limit reached".to_string(),
    };
    let version = append(db, &id, version, now, unlocked).await.unwrap();
    assert_eq!(version, Version(7));
    assert_state_matches_derivation(db, &id).await;

    clock.move_time_forward(Duration::from_secs(1)).await;
    let now = clock.now();
    expect_not_yet_pending(
        lock(db, now, &id, run_id(13), version, exr, plus(now, LEASE)).await,
        unlock_at,
    );
    assert!(
        lock_pending_now(db, &ffqns, 10, now, exr, LEASE)
            .await
            .is_empty()
    );

    clock.move_time_to(unlock_at);
    let now = clock.now();
    let locked = lock_pending_now(db, &ffqns, 10, now, exr, LEASE).await;
    assert_eq!(ids_of(&locked), vec![id.clone()]);
    assert_eq!(locked[0].next_version, Version(8));
    assert_eq!(locked[0].temporary_event_count, 1);
    let ExecutionEventInner::HistoryEvent {
        event: expected_persist,
    } = persist(7)
    else {
        unreachable!("persist() makes a history event")
    };
    assert_eq!(locked[0].event_history, vec![expected_persist]);
    assert_state_matches_derivation(db, &id).await;

    // `Finished`; a second one is refused.
    let finished = finished_ok(serde_json::json!("done"));
    let version = append(db, &id, Version(8), now, finished.clone())
        .await
        .unwrap();
    assert_eq!(
        version,
        Version(8),
        "`Finished` keeps the next version at its own"
    );
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(
        log.pending_state,
        PendingState::Finished {
            version: Version(8),
            finished_at: now,
            result_kind: ResultKind::Ok
        }
    );
    expect_already_finished(append(db, &id, Version(8), now, finished.clone()).await);
    expect_already_finished(append(db, &id, Version(9), now, finished.clone()).await);
    assert_eq!(db.get(&id).await.unwrap(), log);
    assert_eq!(
        db.get_execution_event(&id, Version(8)).await.unwrap().event,
        finished
    );
    assert_eq!(
        db.get_execution_event(&id, Version(0)).await.unwrap(),
        req.to_created_event()
    );
    expect_kind(
        db.get_execution_event(&id, Version(9)).await,
        DbErrorKind::NotFound,
    );
}

/// S2: an expired lease is reported with what the watcher needs; expiry is inclusive.
pub async fn s2_expired_lease_reported<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let parent = execution_id(1);
    let j = join_set("n:batch");
    let child_ffqn = ffqn("child");
    db.create(create_request(parent.clone(), ffqn("parent"), now))
        .await
        .unwrap();
    let child_req = CreateRequestExt::with_retries(
        child_request(&parent, &j, 1, child_ffqn.clone(), now),
        2,
        Duration::from_millis(300),
    );
    let child = child_req.execution_id.clone();
    db.create(child_req).await.unwrap();

    let ffqns = ffqns_of(&child_ffqn);
    let locked = lock_pending_now(db, &ffqns, 10, now, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&locked), vec![child.clone()]);
    let failed = ExecutionEventInner::TemporarilyFailed {
        backoff_expires_at: now,
        reason_full: "activity trap: boom".to_string(),
        reason_inner: "boom".to_string(),
        detail: None,
    };
    let version = append(db, &child, Version(2), now, failed).await.unwrap();
    assert_state_matches_derivation(db, &child).await;
    assert!(
        db.get_expired_timers(plus(now, Duration::from_secs(3600)))
            .await
            .unwrap()
            .is_empty()
    );

    let locked = lock_pending_now(db, &ffqns, 10, now, executor_id(2), LEASE).await;
    assert_eq!(ids_of(&locked), vec![child.clone()]);
    assert_eq!(locked[0].temporary_event_count, 1);
    let expiry = plus(now, LEASE);
    let next_version = locked[0].next_version;
    assert_eq!(next_version, version.next().unwrap());
    assert_state_matches_derivation(db, &child).await;

    let just_before = expiry - chrono::TimeDelta::milliseconds(1);
    assert!(db.get_expired_timers(just_before).await.unwrap().is_empty());
    let expected = vec![ExpiredTimer::Lock(ExpiredLock {
        execution_id: child.clone(),
        next_version,
        temporary_event_count: 1,
        max_retries: 2,
        retry_exp_backoff: Duration::from_millis(300),
        parent: Some((parent.clone(), j.clone())),
        lock_expires_at: expiry,
    })];
    assert_eq!(
        db.get_expired_timers(expiry).await.unwrap(),
        expected,
        "expiry is inclusive"
    );
    assert_eq!(
        db.get_expired_timers(plus(expiry, Duration::from_secs(3600)))
            .await
            .unwrap(),
        expected
    );

    // The watcher resolves it; it is not reported any more.
    clock.move_time_to(expiry);
    let now = clock.now();
    let timed_out = ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: plus(now, ms(600)),
    };
    append(db, &child, next_version, now, timed_out)
        .await
        .unwrap();
    assert_state_matches_derivation(db, &child).await;
    assert!(
        db.get_expired_timers(plus(now, Duration::from_secs(3600)))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Builder-style helpers on [`concepts::CreateRequest`] for the scenarios.
trait CreateRequestExt {
    fn with_retries(self, max_retries: u32, retry_exp_backoff: Duration) -> Self;
}

impl CreateRequestExt for concepts::CreateRequest {
    fn with_retries(self, max_retries: u32, retry_exp_backoff: Duration) -> Self {
        Self {
            max_retries,
            retry_exp_backoff,
            ..self
        }
    }
}

/// S3: an expired delay is reported once (until its response is stored); a lease that expires
/// later is not reported before its time.
pub async fn s3_expired_delay_reported_once<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("sleeper");
    let (a, b) = (execution_id(1), execution_id(2));
    db.create(create_request(a.clone(), f.clone(), now))
        .await
        .unwrap();
    db.create(create_request(b.clone(), f.clone(), now))
        .await
        .unwrap();
    let a_expiry = plus(now, Duration::from_secs(10));
    let b_expiry = plus(now, Duration::from_secs(5));
    let (_, a_version) = lock(db, now, &a, run_id(1), Version(1), executor_id(1), a_expiry)
        .await
        .unwrap();
    lock(db, now, &b, run_id(2), Version(1), executor_id(1), b_expiry)
        .await
        .unwrap();
    let j = join_set("o:sleep");
    let d = delay_id(1);
    let delay_expiry = plus(now, Duration::from_secs(1));
    db.append_batch(batch(
        &a,
        a_version,
        now,
        vec![join_set_create(&j), delay_request(&j, d, delay_expiry)],
    ))
    .await
    .unwrap();
    assert_state_matches_derivation(db, &a).await;
    assert_state_matches_derivation(db, &b).await;

    assert!(
        db.get_expired_timers(delay_expiry - chrono::TimeDelta::milliseconds(1))
            .await
            .unwrap()
            .is_empty()
    );
    let expected = vec![ExpiredTimer::Delay(ExpiredDelay {
        execution_id: a.clone(),
        join_set_id: j.clone(),
        delay_id: d,
        expires_at: delay_expiry,
    })];
    assert_eq!(db.get_expired_timers(delay_expiry).await.unwrap(), expected);

    clock.move_time_to(delay_expiry);
    let now = clock.now();
    db.append_response(now, &a, delay_finished(&j, d))
        .await
        .unwrap();
    assert_state_matches_derivation(db, &a).await;
    assert!(
        db.get_expired_timers(now).await.unwrap().is_empty(),
        "reported once"
    );
    expect_kind(
        db.append_response(now, &a, delay_finished(&j, d)).await,
        DbErrorKind::Duplicate,
    );

    let at_b_expiry = db.get_expired_timers(b_expiry).await.unwrap();
    assert_eq!(at_b_expiry.len(), 1, "{at_b_expiry:?}");
    assert!(matches!(&at_b_expiry[0], ExpiredTimer::Lock(l) if l.execution_id == b));
    let at_a_expiry = db.get_expired_timers(a_expiry).await.unwrap();
    let reported: Vec<_> = at_a_expiry
        .iter()
        .map(|t| match t {
            ExpiredTimer::Lock(l) => l.execution_id.clone(),
            ExpiredTimer::Delay(d) => panic!("the delay was answered: {d:?}"),
        })
        .collect();
    assert_eq!(reported, vec![b.clone(), a.clone()], "ordered by expiry");
}

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

/// S5: `lock_pending` never returns an execution whose lease merely expired; after the watcher
/// resolved it, it does.
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

/// S7: version mismatches carry both versions; unknown executions are "not found"; a finished
/// execution refuses every append; malformed requests are typed validation errors.
pub async fn s7_versions_not_found_finished<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("versions");
    let id = execution_id(1);
    let req = create_request(id.clone(), f.clone(), now);
    db.create(req.clone()).await.unwrap();

    for wrong in [Version(0), Version(2), Version(5)] {
        let err = append(db, &id, wrong, now, persist(1)).await.unwrap_err();
        assert!(
            matches!(err, DbError::VersionMismatch { appending_version, expected_version }
                if appending_version == wrong && expected_version == Version(1)),
            "{err:?}"
        );
    }
    let err = lock(
        db,
        now,
        &id,
        run_id(1),
        Version(3),
        executor_id(1),
        plus(now, LEASE),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            DbError::VersionMismatch {
                appending_version: Version(3),
                expected_version: Version(1)
            }
        ),
        "{err:?}"
    );
    expect_kind(
        db.append_batch(batch(&id, Version(2), now, vec![persist(1)]))
            .await,
        DbErrorKind::VersionMismatch,
    );
    assert_eq!(
        expect_validation(append(db, &id, Version(1), now, req.to_created_event().event).await),
        ValidationError::CreatedEventAppended
    );
    let err =
        expect_validation(lock(db, now, &id, run_id(1), Version(1), executor_id(1), now).await);
    assert_eq!(
        err,
        ValidationError::InvalidExpiryDate {
            lock_expires_at: now,
            now
        }
    );
    let err = expect_validation(
        db.lock_pending(LockPendingRequest {
            batch_size: 10,
            pending_at_or_sooner: now,
            ffqns: ffqns_of(&f),
            now,
            component_id: component_id(),
            executor_id: executor_id(1),
            lock_expires_at: now,
        })
        .await,
    );
    assert_eq!(
        err,
        ValidationError::InvalidExpiryDate {
            lock_expires_at: now,
            now
        }
    );
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(log.events.len(), 1, "nothing was written");

    // Empty batches.
    for result in [
        db.append_batch(batch(&id, Version(1), now, vec![])).await,
        db.append_batch(batch_creating(&id, Version(1), now, vec![], vec![]))
            .await,
        db.append_batch(batch_creating(
            &id,
            Version(1),
            now,
            vec![],
            vec![child_request(&id, &join_set("n:x"), 1, ffqn("child"), now)],
        ))
        .await,
    ] {
        assert!(matches!(
            expect_validation(result),
            ValidationError::EmptyBatch(_)
        ));
    }
    assert!(matches!(
        expect_validation(db.create_batch(vec![]).await),
        ValidationError::EmptyBatch(_)
    ));

    // Unknown executions.
    let unknown = execution_id(99);
    expect_kind(db.get(&unknown).await, DbErrorKind::NotFound);
    expect_kind(
        db.get_execution_event(&unknown, Version(0)).await,
        DbErrorKind::NotFound,
    );
    expect_kind(
        append(db, &unknown, Version(1), now, persist(1)).await,
        DbErrorKind::NotFound,
    );
    expect_kind(
        db.append_batch(batch(&unknown, Version(1), now, vec![persist(1)]))
            .await,
        DbErrorKind::NotFound,
    );
    expect_kind(
        db.append_outcome(OutcomeWrite::new(
            unknown.clone(),
            Version(1),
            now,
            finished_ok(serde_json::json!(1)),
            None,
        ))
        .await,
        DbErrorKind::NotFound,
    );
    expect_kind(
        lock(
            db,
            now,
            &unknown,
            run_id(1),
            Version(1),
            executor_id(1),
            plus(now, LEASE),
        )
        .await,
        DbErrorKind::NotFound,
    );
    expect_kind(
        db.append_response(now, &unknown, delay_finished(&join_set("o:x"), delay_id(1)))
            .await,
        DbErrorKind::NotFound,
    );
    expect_kind(
        tokio::time::timeout(SAFETY, db.subscribe_to_next_responses(&unknown, 0))
            .await
            .expect("not found at once"),
        DbErrorKind::NotFound,
    );
    expect_kind(
        tokio::time::timeout(SAFETY, db.wait_for_finished_result(&unknown, None))
            .await
            .expect("not found at once"),
        DbErrorKind::NotFound,
    );

    // After `Finished`, every append is "already finished", at any version.
    let finished = finished_ok(serde_json::json!(1));
    assert_eq!(
        append(db, &id, Version(1), now, finished.clone())
            .await
            .unwrap(),
        Version(1)
    );
    assert_state_matches_derivation(db, &id).await;
    for version in [Version(0), Version(1), Version(2), Version(100)] {
        expect_already_finished(append(db, &id, version, now, persist(1)).await);
        expect_already_finished(append(db, &id, version, now, finished.clone()).await);
    }
    expect_already_finished(
        db.append_batch(batch(&id, Version(1), now, vec![persist(1)]))
            .await,
    );
    expect_already_finished(
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
    );
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(log.events.len(), 2);
}

/// S8: a batch that fails half-way writes nothing, for every kind of batch.
pub async fn s8_failing_batch_writes_nothing<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("batch");
    let child_ffqn = ffqn("child");
    let id = execution_id(1);
    let created = create_request(id.clone(), f.clone(), now);
    db.create(created.clone()).await.unwrap();

    // append_batch
    let before = db.get(&id).await.unwrap();
    let err = db
        .append_batch(batch(
            &id,
            Version(1),
            now,
            vec![persist(1), persist(2), created.to_created_event().event],
        ))
        .await;
    assert_eq!(
        expect_validation(err),
        ValidationError::CreatedEventAppended
    );
    assert_eq!(db.get(&id).await.unwrap(), before);
    let err = db
        .append_batch(batch(
            &id,
            Version(1),
            now,
            vec![
                locked(executor_id(1), run_id(1), plus(now, LEASE)),
                persist(1),
                locked(executor_id(2), run_id(2), plus(now, LEASE)),
            ],
        ))
        .await;
    expect_already_locked(err);
    assert_eq!(db.get(&id).await.unwrap(), before);
    let err = db
        .append_batch(batch(
            &id,
            Version(1),
            now,
            vec![persist(1), finished_ok(serde_json::json!(1)), persist(2)],
        ))
        .await;
    expect_already_finished(err);
    assert_eq!(db.get(&id).await.unwrap(), before);
    assert_state_matches_derivation(db, &id).await;
    assert_eq!(
        ids_of(&lock_pending_now(db, &ffqns_of(&f), 10, now, executor_id(1), LEASE).await),
        vec![id.clone()]
    );
    let parent_version = Version(2);

    // append_batch creating children: the second child exists already.
    let j = join_set("n:kids");
    let c1 = child_request(&id, &j, 1, child_ffqn.clone(), now);
    let c2 = child_request(&id, &j, 2, child_ffqn.clone(), now);
    db.create(c2.clone()).await.unwrap();
    let c2_before = db.get(&c2.execution_id).await.unwrap();
    let before = db.get(&id).await.unwrap();
    let batch = vec![
        join_set_create(&j),
        child_execution_request(&j, &c1.execution_id),
        child_execution_request(&j, &c2.execution_id),
        join_next(&j, now),
    ];
    let err = db
        .append_batch(batch_creating(
            &id,
            parent_version,
            now,
            batch.clone(),
            vec![c1.clone(), c2.clone()],
        ))
        .await;
    expect_kind(err, DbErrorKind::Duplicate);
    assert_eq!(db.get(&id).await.unwrap(), before);
    expect_kind(db.get(&c1.execution_id).await, DbErrorKind::NotFound);
    assert_eq!(db.get(&c2.execution_id).await.unwrap(), c2_before);
    // ... and a failing parent event with valid children.
    let c3 = child_request(&id, &j, 3, child_ffqn.clone(), now);
    let err = db
        .append_batch(batch_creating(
            &id,
            parent_version,
            now,
            vec![
                child_execution_request(&j, &c3.execution_id),
                created.to_created_event().event,
            ],
            vec![c3.clone()],
        ))
        .await;
    assert_eq!(
        expect_validation(err),
        ValidationError::CreatedEventAppended
    );
    assert_eq!(db.get(&id).await.unwrap(), before);
    expect_kind(db.get(&c3.execution_id).await, DbErrorKind::NotFound);
    assert_state_matches_derivation(db, &id).await;

    // append_outcome that responds to the parent: the parent already has this child's response.
    let child = c2.execution_id.clone();
    let locked_child =
        lock_pending_now(db, &ffqns_of(&child_ffqn), 10, now, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&locked_child), vec![child.clone()]);
    let result = Ok(SupportedFunctionReturnValue::None);
    let response = child_finished(now, &j, &child, Version(2), result.clone());
    db.append_response(now, &id, response.event.clone())
        .await
        .unwrap();
    let parent_before = db.get(&id).await.unwrap();
    let child_before = db.get(&child).await.unwrap();
    let finished = ExecutionEventInner::Finished {
        result: result.clone(),
    };
    let write = OutcomeWrite::new(
        child.clone(),
        Version(2),
        now,
        finished.clone(),
        Some(&(id.clone(), j.clone())),
    );
    assert_eq!(
        write.parent_response(),
        Some((id.clone(), response.clone()))
    );
    let err = db.append_outcome(write).await;
    expect_kind(err, DbErrorKind::Duplicate);
    assert_eq!(db.get(&child).await.unwrap(), child_before);
    assert_eq!(db.get(&id).await.unwrap(), parent_before);
    // ... an unknown parent.
    let err = db
        .append_outcome(OutcomeWrite::new(
            child.clone(),
            Version(2),
            now,
            finished.clone(),
            Some(&(execution_id(77), j.clone())),
        ))
        .await;
    expect_kind(err, DbErrorKind::NotFound);
    assert_eq!(db.get(&child).await.unwrap(), child_before);
    // ... a child batch at a wrong version.
    let other_parent = execution_id(2);
    db.create(create_request(other_parent.clone(), f.clone(), now))
        .await
        .unwrap();
    let other_before = db.get(&other_parent).await.unwrap();
    let err = db
        .append_outcome(OutcomeWrite::new(
            child.clone(),
            Version(7),
            now,
            finished,
            Some(&(other_parent.clone(), j.clone())),
        ))
        .await;
    expect_kind(err, DbErrorKind::VersionMismatch);
    assert_eq!(db.get(&child).await.unwrap(), child_before);
    assert_eq!(db.get(&other_parent).await.unwrap(), other_before);
    for e in [&id, &child, &other_parent] {
        assert_state_matches_derivation(db, e).await;
    }
}

/// S9: a duplicate response (same delay id, or same child, for the same execution) is refused
/// and the log keeps one.
pub async fn s9_duplicate_responses_refused<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let f = ffqn("responses");
    let p = execution_id(1);
    let p2 = execution_id(2);
    db.create(create_request(p.clone(), f.clone(), now))
        .await
        .unwrap();
    db.create(create_request(p2.clone(), f.clone(), now))
        .await
        .unwrap();
    let j = join_set("g:sleep");
    let j2 = join_set("o:other");
    let d = delay_id(1);

    db.append_response(now, &p, delay_finished(&j, d))
        .await
        .unwrap();
    for join_set_id in [&j, &j2] {
        let err = expect_kind(
            db.append_response(now, &p, delay_finished(join_set_id, d))
                .await,
            DbErrorKind::Duplicate,
        );
        assert!(
            matches!(&err, DbError::Duplicate(DuplicateKind::DelayResponse { execution_id, delay_id })
                if *execution_id == p && *delay_id == d),
            "{err:?}"
        );
    }
    // The same delay id answered to another execution is not a duplicate.
    db.append_response(now, &p2, delay_finished(&j, d))
        .await
        .unwrap();

    let jc = join_set("n:kids");
    let child_req = child_request(&p, &jc, 1, ffqn("child"), now);
    let child = child_req.execution_id.clone();
    db.create(child_req).await.unwrap();
    let first = child_finished(
        now,
        &jc,
        &child,
        Version(2),
        Ok(SupportedFunctionReturnValue::None),
    );
    db.append_response(now, &p, first.event.clone())
        .await
        .unwrap();
    let other_result = child_finished(
        now,
        &jc,
        &child,
        Version(5),
        Err(FinishedExecutionError::PermanentTimeout),
    );
    let err = expect_kind(
        db.append_response(now, &p, other_result.event.clone())
            .await,
        DbErrorKind::Duplicate,
    );
    assert!(
        matches!(&err, DbError::Duplicate(DuplicateKind::ChildResponse { execution_id, child_execution_id })
            if *execution_id == p && *child_execution_id == child),
        "{err:?}"
    );
    // Through respond-to-parent as well.
    let (_, version) = lock(
        db,
        now,
        &child,
        run_id(1),
        Version(1),
        executor_id(1),
        plus(now, LEASE),
    )
    .await
    .unwrap();
    let err = db
        .append_outcome(OutcomeWrite::new(
            child.clone(),
            version,
            now,
            ExecutionEventInner::Finished {
                result: Ok(SupportedFunctionReturnValue::None),
            },
            Some(&(p.clone(), jc.clone())),
        ))
        .await;
    expect_kind(err, DbErrorKind::Duplicate);

    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(log.responses.len(), 2, "{:#?}", log.responses);
    assert_eq!(log.responses[0].event, delay_finished(&j, d));
    assert_eq!(log.responses[1], first);
    assert_eq!(
        assert_state_matches_derivation(db, &p2)
            .await
            .responses
            .len(),
        1
    );
    assert_eq!(
        assert_state_matches_derivation(db, &child)
            .await
            .events
            .len(),
        2
    );
}

/// S10: join sets block the parent until the matching response arrives; responses come back in
/// arrival order with the right finished versions.
pub async fn s10_join_sets<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let t0 = clock.now();
    let parent_ffqn = ffqn("parent");
    let child_ffqn = ffqn("child");
    let parents = ffqns_of(&parent_ffqn);
    let children = ffqns_of(&child_ffqn);
    let p = execution_id(1);
    db.create(create_request(p.clone(), parent_ffqn.clone(), t0))
        .await
        .unwrap();
    let locked = lock_pending_now(
        db,
        &parents,
        1,
        t0,
        executor_id(1),
        Duration::from_secs(100),
    )
    .await;
    assert_eq!(ids_of(&locked), vec![p.clone()]);

    // Two children, then the first `JoinNext`, giving up the run.
    let j = join_set("n:batch");
    let c1 = child_request(&p, &j, 1, child_ffqn.clone(), t0);
    let c2 = child_request(&p, &j, 2, child_ffqn.clone(), t0);
    let batch = vec![
        join_set_create(&j),
        child_execution_request(&j, &c1.execution_id),
        child_execution_request(&j, &c2.execution_id),
        join_next(&j, t0),
    ];
    let version = db
        .append_batch(batch_creating(
            &p,
            Version(2),
            t0,
            batch,
            vec![c1.clone(), c2.clone()],
        ))
        .await
        .unwrap();
    assert_eq!(version, Version(6));
    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(
        log.pending_state,
        PendingState::BlockedByJoinSet {
            join_set_id: j.clone(),
            lock_expires_at: t0,
            closing: false
        }
    );
    expect_validation(
        lock(
            db,
            t0,
            &p,
            run_id(9),
            version,
            executor_id(1),
            plus(t0, LEASE),
        )
        .await,
    );
    for c in [&c1, &c2] {
        let log = assert_state_matches_derivation(db, &c.execution_id).await;
        assert_eq!(log.events[0].event, c.to_created_event().event);
    }
    let locked_children = lock_pending_now(
        db,
        &children,
        10,
        t0,
        executor_id(2),
        Duration::from_secs(100),
    )
    .await;
    assert_eq!(
        ids_of(&locked_children),
        vec![c1.execution_id.clone(), c2.execution_id.clone()]
    );
    assert_eq!(locked_children[0].parent, Some((p.clone(), j.clone())));

    // A response for another join set changes nothing.
    let unrelated = join_set("o:unrelated");
    db.append_response(t0, &p, delay_finished(&unrelated, delay_id(1)))
        .await
        .unwrap();
    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(log.pending_state.kind(), PendingStateKind::BlockedByJoinSet);

    // The first child finishes at t0+1s: the parent is pending at max(t0, t0+1s).
    clock.move_time_forward(Duration::from_secs(1)).await;
    let t1 = clock.now();
    let r1 = Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
        serde_json::json!("one"),
    )));
    let c1_version = db
        .append_outcome(OutcomeWrite::new(
            c1.execution_id.clone(),
            Version(2),
            t1,
            ExecutionEventInner::Finished { result: r1.clone() },
            Some(&(p.clone(), j.clone())),
        ))
        .await
        .unwrap();
    assert_eq!(c1_version, Version(2));
    assert_state_matches_derivation(db, &c1.execution_id).await;
    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt { scheduled_at: t1 }
    );

    // The second child finishes before the parent's second `JoinNext`.
    clock.move_time_forward(Duration::from_secs(1)).await;
    let t2 = clock.now();
    let r2 = Err(FinishedExecutionError::PermanentFailure {
        reason_inner: "boom".to_string(),
        reason_full: "activity trap: boom".to_string(),
        kind: concepts::PermanentFailureKind::ActivityTrap,
        detail: Some("detail".to_string()),
    });
    let (_, c2_version) = lock(
        db,
        t2,
        &c2.execution_id,
        locked_children[1].locked_event.run_id,
        Version(2),
        executor_id(2),
        plus(t2, LEASE),
    )
    .await
    .unwrap();
    let c2_version = append(db, &c2.execution_id, c2_version, t2, persist(5))
        .await
        .unwrap();
    assert_eq!(c2_version, Version(4));
    db.append_outcome(OutcomeWrite::new(
        c2.execution_id.clone(),
        c2_version,
        t2,
        ExecutionEventInner::Finished { result: r2.clone() },
        Some(&(p.clone(), j.clone())),
    ))
    .await
    .unwrap();
    assert_state_matches_derivation(db, &c2.execution_id).await;
    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt { scheduled_at: t1 }
    );

    // The parent's second `JoinNext` finds its response: pending at once.
    clock.move_time_forward(Duration::from_secs(1)).await;
    let t3 = clock.now();
    let relocked = lock_pending_now(
        db,
        &parents,
        1,
        t3,
        executor_id(1),
        Duration::from_secs(100),
    )
    .await;
    assert_eq!(ids_of(&relocked), vec![p.clone()]);
    let responses: Vec<_> = relocked[0]
        .responses
        .iter()
        .map(|r| r.event.event.clone())
        .collect();
    assert_eq!(
        responses,
        vec![
            JoinSetResponse::DelayFinished {
                delay_id: delay_id(1)
            },
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id: c1.execution_id.clone(),
                finished_version: Version(2),
                result: r1.clone(),
            },
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id: c2.execution_id.clone(),
                finished_version: Version(4),
                result: r2.clone(),
            },
        ]
    );
    let version = append(db, &p, relocked[0].next_version, t3, join_next(&j, t3))
        .await
        .unwrap();
    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt { scheduled_at: t3 }
    );

    // A third child while the parent keeps its run warm until t0+20s.
    let relocked = lock_pending_now(
        db,
        &parents,
        1,
        t3,
        executor_id(1),
        Duration::from_secs(100),
    )
    .await;
    assert_eq!(relocked[0].next_version, version.next().unwrap());
    let warm_until = plus(t0, Duration::from_secs(20));
    let c3 = child_request(&p, &j, 3, child_ffqn.clone(), t3);
    db.append_batch(batch_creating(
        &p,
        relocked[0].next_version,
        t3,
        vec![
            child_execution_request(&j, &c3.execution_id),
            join_next(&j, warm_until),
        ],
        vec![c3.clone()],
    ))
    .await
    .unwrap();
    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(
        log.pending_state,
        PendingState::BlockedByJoinSet {
            join_set_id: j.clone(),
            lock_expires_at: warm_until,
            closing: false
        }
    );
    clock.move_time_forward(Duration::from_secs(1)).await;
    let t4 = clock.now();
    let locked_c3 = lock_pending_now(db, &children, 10, t4, executor_id(2), LEASE).await;
    assert_eq!(ids_of(&locked_c3), vec![c3.execution_id.clone()]);
    let r3 = Err(FinishedExecutionError::PermanentTimeout);
    db.append_outcome(OutcomeWrite::new(
        c3.execution_id.clone(),
        Version(2),
        t4,
        ExecutionEventInner::Finished { result: r3.clone() },
        Some(&(p.clone(), j.clone())),
    ))
    .await
    .unwrap();
    let log = assert_state_matches_derivation(db, &p).await;
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt {
            scheduled_at: warm_until
        }
    );

    let all = tokio::time::timeout(SAFETY, db.subscribe_to_next_responses(&p, 1))
        .await
        .expect("responses exist")
        .unwrap();
    let children_in_order: Vec<_> = all
        .iter()
        .map(|r| match &r.event.event {
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id,
                finished_version,
                ..
            } => (child_execution_id.clone(), *finished_version, r.created_at),
            other => panic!("unexpected response {other:?}"),
        })
        .collect();
    assert_eq!(
        children_in_order,
        vec![
            (c1.execution_id.clone(), Version(2), t1),
            (c2.execution_id.clone(), Version(4), t2),
            (c3.execution_id.clone(), Version(2), t4),
        ]
    );
}

/// S11: a response to a finished execution is stored and changes nothing else.
pub async fn s11_response_to_finished_execution<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let id = execution_id(1);
    db.create(create_request(id.clone(), ffqn("finished"), now))
        .await
        .unwrap();
    append(
        db,
        &id,
        Version(1),
        now,
        finished_ok(serde_json::json!(null)),
    )
    .await
    .unwrap();
    let before = assert_state_matches_derivation(db, &id).await;
    clock.move_time_forward(Duration::from_secs(1)).await;
    let later = clock.now();
    let j = join_set("o:late");
    db.append_response(later, &id, delay_finished(&j, delay_id(3)))
        .await
        .unwrap();
    let response = child_finished(
        later,
        &j,
        &execution_id(1).next_level(&j, 1),
        Version(2),
        Ok(SupportedFunctionReturnValue::None),
    );
    db.append_response(later, &id, response.event.clone())
        .await
        .unwrap();
    let after = assert_state_matches_derivation(db, &id).await;
    assert_eq!(after.events, before.events);
    assert_eq!(after.pending_state, before.pending_state);
    assert_eq!(after.next_version, before.next_version);
    assert_eq!(after.responses.len(), 2);
    assert_eq!(after.responses[1], response);
    assert_eq!(after.responses[0].created_at, later);
}

/// S12: JSON payloads keep their object key order through every path.
pub async fn s12_json_key_order<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let text = r#"{"zeta":1,"alpha":{"yak":[3,{"b":2,"a":1}],"xeno":null},"mid":"m"}"#;
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(
        value.to_string(),
        text,
        "serde_json must keep key order (feature preserve_order)"
    );
    let same_text = |json: &Json| assert_eq!(json.0.to_string(), text);

    let p = execution_id(1);
    db.create(create_request(p.clone(), ffqn("parent"), now))
        .await
        .unwrap();
    let j = join_set("n:json");
    let f = ffqn("json");
    let req = concepts::CreateRequest {
        params: Json(value.clone()),
        ..child_request(&p, &j, 1, f.clone(), now)
    };
    let id = req.execution_id.clone();
    db.create(req).await.unwrap();
    let log = db.get(&id).await.unwrap();
    match &log.events[0].event {
        ExecutionEventInner::Created { params, .. } => same_text(params),
        other => panic!("{other:?}"),
    }
    let locked = lock_pending_now(db, &ffqns_of(&f), 1, now, executor_id(1), LEASE).await;
    same_text(&locked[0].params);
    let persisted = ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::Persist {
            value: Json(value.clone()),
            kind: concepts::PersistKind::Custom("json".to_string()),
        },
    };
    let version = append(db, &id, Version(2), now, persisted).await.unwrap();
    let (history, version) = lock(
        db,
        now,
        &id,
        locked[0].locked_event.run_id,
        version,
        executor_id(1),
        plus(now, LEASE),
    )
    .await
    .unwrap();
    match &history[0] {
        HistoryEvent::Persist { value, .. } => same_text(value),
        other => panic!("{other:?}"),
    }
    let result = Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
        value.clone(),
    )));
    db.append_outcome(OutcomeWrite::new(
        id.clone(),
        version,
        now,
        ExecutionEventInner::Finished { result },
        Some(&(p.clone(), j.clone())),
    ))
    .await
    .unwrap();
    let check_result = |result: &concepts::FinishedExecutionResult| match result {
        Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(json)) => same_text(json),
        other => panic!("{other:?}"),
    };
    let finished = tokio::time::timeout(SAFETY, db.wait_for_finished_result(&id, Some(SAFETY)))
        .await
        .expect("finished")
        .unwrap();
    check_result(&finished);
    check_result(
        db.get(&id)
            .await
            .unwrap()
            .finished_result()
            .expect("finished"),
    );
    let parent_log = assert_state_matches_derivation(db, &p).await;
    match &parent_log.responses[0].event.event {
        JoinSetResponse::ChildExecutionFinished { result, .. } => check_result(result),
        other => panic!("{other:?}"),
    }
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

/// Asserts that `handle` is still running after a short real-time wait (it has nothing to
/// return yet), which also gives it time to subscribe.
async fn assert_still_waiting<T: std::fmt::Debug>(
    handle: &mut tokio::task::JoinHandle<T>,
    what: &str,
) {
    if let Ok(done) = tokio::time::timeout(ms(50), handle).await {
        panic!("{what} returned early: {done:?}");
    }
}

/// Awaits `handle` with the real-time safety net.
async fn join_within_safety<T>(handle: tokio::task::JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(SAFETY, handle)
        .await
        .unwrap_or_else(|_| panic!("{what}: no wake-up within {SAFETY:?}"))
        .unwrap_or_else(|err| panic!("{what}: task failed: {err}"))
}

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

/// S17: `close` is idempotent; every call afterwards is "closed"; waiters are released.
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

/// S18: the stored pending state equals its reference derivation after every step of a run
/// through every kind of event and response.
pub async fn s18_state_matches_derivation<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let f = ffqn("derived");
    let ffqns = ffqns_of(&f);
    let id = execution_id(1);
    let exr = executor_id(1);
    let now = clock.now();
    db.create(create_request(id.clone(), f.clone(), now))
        .await
        .unwrap();
    assert_state_matches_derivation(db, &id).await;

    let mut version = lock_pending_now(db, &ffqns, 1, now, exr, LEASE).await[0].next_version;
    assert_state_matches_derivation(db, &id).await;
    let failed = ExecutionEventInner::TemporarilyFailed {
        backoff_expires_at: plus(now, ms(10)),
        reason_full: "activity trap: x".to_string(),
        reason_inner: "x".to_string(),
        detail: None,
    };
    let next = append(db, &id, version, now, failed).await.unwrap();
    assert_eq!(next, version.next().unwrap());
    assert_state_matches_derivation(db, &id).await;

    clock.move_time_forward(ms(10)).await;
    let now = clock.now();
    let locked = lock_pending_now(db, &ffqns, 1, now, exr, LEASE).await;
    assert_eq!(locked[0].temporary_event_count, 1);
    version = locked[0].next_version;
    assert_state_matches_derivation(db, &id).await;

    let (j1, j2) = (join_set("n:a"), join_set("n:b"));
    let steps = vec![
        join_set_create(&j1),
        join_set_create(&j2),
        delay_request(&j1, delay_id(1), plus(now, ms(100))),
        delay_request(&j2, delay_id(2), plus(now, ms(50))),
        persist(1),
        join_next(&j1, plus(now, ms(30))),
    ];
    for step in steps {
        version = append(db, &id, version, now, step).await.unwrap();
        assert_state_matches_derivation(db, &id).await;
    }
    // The response of the other join set arrives first and changes nothing.
    clock.move_time_forward(ms(50)).await;
    db.append_response(clock.now(), &id, delay_finished(&j2, delay_id(2)))
        .await
        .unwrap();
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(log.pending_state.kind(), PendingStateKind::BlockedByJoinSet);
    clock.move_time_forward(ms(50)).await;
    let now = clock.now();
    db.append_response(now, &id, delay_finished(&j1, delay_id(1)))
        .await
        .unwrap();
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt { scheduled_at: now }
    );

    version = lock_pending_now(db, &ffqns, 1, now, exr, LEASE).await[0].next_version;
    assert_state_matches_derivation(db, &id).await;
    // j2 has one response and gets its first JoinNext now: pending at max(run expiry, arrival).
    version = append(db, &id, version, now, join_next(&j2, plus(now, ms(5))))
        .await
        .unwrap();
    let log = assert_state_matches_derivation(db, &id).await;
    assert_eq!(
        log.pending_state,
        PendingState::PendingAt {
            scheduled_at: plus(now, ms(5))
        }
    );
    // A second JoinNext on j1 with no second response blocks.
    let next = append(db, &id, version, now, join_next(&j1, now))
        .await
        .unwrap();
    assert_eq!(next, version.next().unwrap());
    assert_state_matches_derivation(db, &id).await;
    db.append_response(now, &id, delay_finished(&j1, delay_id(3)))
        .await
        .unwrap();
    assert_state_matches_derivation(db, &id).await;

    version = lock_pending_now(db, &ffqns, 1, now, exr, LEASE).await[0].next_version;
    let timed_out = ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: now,
    };
    let next = append(db, &id, version, now, timed_out).await.unwrap();
    assert_eq!(next, version.next().unwrap());
    assert_state_matches_derivation(db, &id).await;
    version = lock_pending_now(db, &ffqns, 1, now, exr, LEASE).await[0].next_version;
    assert_state_matches_derivation(db, &id).await;
    let failure = ExecutionEventInner::Finished {
        result: Err(FinishedExecutionError::UnhandledChildExecutionError {
            child_execution_id: id.next_level(&j1, 1),
            root_cause_id: id.next_level(&j1, 1),
        }),
    };
    append(db, &id, version, now, failure).await.unwrap();
    let log = assert_state_matches_derivation(db, &id).await;
    assert!(matches!(
        log.pending_state,
        PendingState::Finished {
            result_kind: ResultKind::UnhandledChildExecutionError,
            ..
        }
    ));
    db.append_response(now, &id, delay_finished(&j2, delay_id(4)))
        .await
        .unwrap();
    assert_state_matches_derivation(db, &id).await;
}

/// S19: `create_batch` creates all or nothing; `list_executions` pages newest first.
pub async fn s19_create_batch<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let start = clock.now();
    let f = ffqn("bulk");
    let reqs: Vec<_> = (1..=100u64)
        .map(|n| {
            let at = plus(start, ms(n));
            create_request(execution_id(u128::from(n)), f.clone(), at)
        })
        .collect();
    db.create_batch(reqs.clone()).await.unwrap();
    for req in &reqs {
        let log = assert_state_matches_derivation(db, &req.execution_id).await;
        assert_eq!(
            log.pending_state,
            PendingState::PendingAt {
                scheduled_at: req.scheduled_at
            }
        );
        assert_eq!(log.next_version, Version(1));
    }

    // One duplicate id among new ones: none is created.
    let mut with_dup: Vec<_> = (101..=110u128)
        .map(|n| create_request(execution_id(n), f.clone(), start))
        .collect();
    with_dup.insert(5, reqs[4].clone());
    expect_kind(db.create_batch(with_dup).await, DbErrorKind::Duplicate);
    for n in 101..=110u128 {
        expect_kind(db.get(&execution_id(n)).await, DbErrorKind::NotFound);
    }
    // A duplicate within the batch itself: none is created.
    let twice = vec![
        create_request(execution_id(201), f.clone(), start),
        create_request(execution_id(202), f.clone(), start),
        create_request(execution_id(201), f.clone(), start),
    ];
    expect_kind(db.create_batch(twice).await, DbErrorKind::Duplicate);
    expect_kind(db.get(&execution_id(201)).await, DbErrorKind::NotFound);
    expect_kind(db.get(&execution_id(202)).await, DbErrorKind::NotFound);

    // Pages, newest first.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = db
            .list_executions(
                ListExecutionsFilter {
                    ffqn: Some(f.clone()),
                    ..ListExecutionsFilter::default()
                },
                Pagination {
                    cursor: cursor.clone(),
                    length: 30,
                },
            )
            .await
            .unwrap();
        assert!(page.len() <= 30);
        let Some(last) = page.last() else { break };
        cursor = Some((last.created_at, last.execution_id.clone()));
        seen.extend(page.into_iter().map(|s| s.execution_id));
    }
    let newest_first: Vec<_> = (1..=100u128).rev().map(execution_id).collect();
    assert_eq!(seen, newest_first);
    let none = db
        .list_executions(
            ListExecutionsFilter {
                ffqn: Some(ffqn("nothing")),
                ..ListExecutionsFilter::default()
            },
            Pagination::default(),
        )
        .await
        .unwrap();
    assert!(none.is_empty());

    // All of them are due and lockable.
    let now = plus(start, Duration::from_secs(1));
    let locked = lock_pending_now(db, &ffqns_of(&f), 1_000, now, executor_id(1), LEASE).await;
    let expected: Vec<_> = (1..=100u128).map(execution_id).collect();
    assert_eq!(ids_of(&locked), expected);
    let locked_rows = db
        .list_executions(
            ListExecutionsFilter {
                state: Some(PendingStateKind::Locked),
                top_level_only: true,
                ..ListExecutionsFilter::default()
            },
            Pagination {
                cursor: None,
                length: 1_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(locked_rows.len(), 100);
    assert_eq!(locked_rows[0].next_version, Version(2));
    let pending_rows = db
        .list_executions(
            ListExecutionsFilter {
                state: Some(PendingStateKind::PendingAt),
                ..ListExecutionsFilter::default()
            },
            Pagination::default(),
        )
        .await
        .unwrap();
    assert!(pending_rows.is_empty());

    let events = db.get(&execution_id(1)).await.unwrap().events;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], reqs[0].to_created_event());
    for (version, event) in (0..).map(Version).zip(&events) {
        assert_eq!(
            &db.get_execution_event(&execution_id(1), version)
                .await
                .unwrap(),
            event
        );
    }
}

/// S20 (beyond `SCENARIOS.md`): `pending_at_or_sooner` is the waiter's present, and its horizon
/// moves on with the time it waits. Another process that submits work due at its own, later,
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

/// S21 (beyond `SCENARIOS.md`): rules every backend applies alike to the requests of a
/// workflow. A child created by `append_batch` must be announced by a
/// `ChildExecutionRequest` of the same batch in its own join set (else the log would not explain
/// it), and a `DelayRequest` may not reuse a delay id the execution already requested (its
/// response could not be told apart). Both are `InvalidRequest`, and nothing is written.
pub async fn s21_unexplained_creations_and_repeated_delays_refused<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let now = SimClock::epoch().now();
    let parent = execution_id(1);
    let kids = join_set("n:kids");
    let other = join_set("n:other");
    db.create(create_request(parent.clone(), ffqn("s21"), now))
        .await
        .expect("create");
    let child = parent.next_level(&kids, 1);
    let before = assert_state_matches_derivation(db, &parent).await;

    // Not announced at all; announced in another join set; announced for another child.
    for batch in [
        vec![join_set_create(&kids)],
        vec![
            join_set_create(&other),
            child_execution_request(&other, &child),
        ],
        vec![
            join_set_create(&kids),
            child_execution_request(&kids, &parent.next_level(&kids, 2)),
        ],
    ] {
        let refused = db
            .append_batch(batch_creating(
                &parent,
                Version(1),
                now,
                batch,
                vec![child_request(&parent, &kids, 1, ffqn("s21-child"), now)],
            ))
            .await;
        assert!(
            matches!(
                expect_validation(refused),
                ValidationError::InvalidRequest(_)
            ),
            "an unannounced child is an invalid request"
        );
        expect_kind(db.get(&child).await, DbErrorKind::NotFound);
        assert_eq!(assert_state_matches_derivation(db, &parent).await, before);
    }

    // Announced properly, it is created.
    db.append_batch(batch_creating(
        &parent,
        Version(1),
        now,
        vec![
            join_set_create(&kids),
            child_execution_request(&kids, &child),
        ],
        vec![child_request(&parent, &kids, 1, ffqn("s21-child"), now)],
    ))
    .await
    .expect("an announced child is created");
    assert_state_matches_derivation(db, &child).await;

    // A delay id used twice by one execution.
    let sleeps = join_set("o:sleep");
    let expires = plus(now, Duration::from_secs(5));
    db.append_batch(batch(
        &parent,
        Version(3),
        now,
        vec![
            join_set_create(&sleeps),
            delay_request(&sleeps, delay_id(1), expires),
        ],
    ))
    .await
    .expect("the first request of the delay");
    let before = assert_state_matches_derivation(db, &parent).await;
    let repeated = append(
        db,
        &parent,
        Version(5),
        now,
        delay_request(&sleeps, delay_id(1), expires),
    )
    .await;
    assert!(
        matches!(
            expect_validation(repeated),
            ValidationError::InvalidRequest(_)
        ),
        "a repeated delay id is an invalid request"
    );
    assert_eq!(assert_state_matches_derivation(db, &parent).await, before);
}
