//! S1 and S18: the life of one execution through locks, a timeout, an unlock and its end, and
//! the stored pending state against its reference derivation after every kind of event and
//! response.

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use concepts::{
    ClockFn, CreateOutcome, DbErrorKind, ExecutionEventInner, FinishedExecutionError, PendingState,
    PendingStateKind, ResultKind, Version,
};
use std::time::Duration;
use test_utils::SimClock;

/// S1: the life of one execution through locks, a timeout, an unlock and its end
/// (`docs/SEMANTICS.md` §2-§4). `lock_pending` on an empty store locks nothing; `create` answers
/// `Created`, and the same `create` again `AlreadyExisted`; `lock_pending` hands the execution
/// over at version 2 with its function, parameters, metadata, schedule, retry settings, no
/// parent, no temporary event, an empty history and no responses. A `TemporarilyTimedOut` with
/// a backoff follows; locking before the backoff is `NotYetPending` (and `lock_pending` finds
/// nothing), locking exactly at it succeeds with an empty history. Another executor, or the
/// same executor under another run, is `AlreadyLocked`; the same executor and run extend the
/// lease. `Persist` then `Unlocked`: locking before the unlock's backoff fails, exactly at it
/// succeeds and hands over the `Persist` with one temporary event. `Finished` keeps the next
/// version at its own; another `Finished`, at that version or the next, is `AlreadyFinished`;
/// `get_execution_event` reads versions 0 and 8 and is `NotFound` past the log.
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
    assert_eq!(
        db.create(req.clone()).await.unwrap(),
        CreateOutcome::Created
    );
    assert_state_matches_derivation(db, &id).await;
    // A repeated submit is answered, not refused (`docs/SEMANTICS.md` §10; L1..L4 pin the rest).
    let again = db.create(req.clone()).await.unwrap();
    assert!(
        matches!(again, CreateOutcome::AlreadyExisted { .. }),
        "{again:?}"
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
