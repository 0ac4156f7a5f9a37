//! S2 and S3: `get_expired_timers`, the expired leases and delays the timers watcher acts on.

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use concepts::{
    ClockFn, DbErrorKind, ExecutionEventInner, ExpiredDelay, ExpiredLock, ExpiredTimer, Version,
};
use std::time::Duration;
use test_utils::SimClock;

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

/// S2: an expired lease is reported by `get_expired_timers` with what the watcher needs: the
/// version to append at, the temporary event count, the retry settings and the parent (a
/// child's lease, after one `TemporarilyFailed`). Nothing is reported before the expiry, the
/// lease is reported at it (expiry is inclusive) and after it, and no longer once the watcher's
/// `TemporarilyTimedOut` resolved it; a pending execution has no timer.
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
        ffqn: child_ffqn.clone(),
        executor_id: executor_id(2),
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

/// S3: an expired delay is reported from its expiry on, with its execution, join set and delay
/// id, and only until its `DelayFinished` is stored (a second one is a `Duplicate`); a lease
/// that expires later is not reported before its time, and expired timers come in order of
/// expiry.
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
