//! S9, S10 and S11: responses and join sets: duplicates refused, the parent blocked until its
//! response, arrival order, and responses to a finished execution.

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use concepts::{
    ClockFn, DbError, DbErrorKind, DuplicateKind, ExecutionEventInner, FinishedExecutionError,
    JoinSetResponse, Json, OutcomeWrite, PendingState, PendingStateKind,
    SupportedFunctionReturnValue, Version,
};
use std::time::Duration;
use test_utils::SimClock;

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
