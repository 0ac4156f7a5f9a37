//! S12, S19, S31 and S32: `create` and `create_batch` (all or nothing), `list_executions` pages,
//! JSON key order kept through every path, children only under a parent that exists, and a
//! retry backoff kept to the microsecond.

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use concepts::{
    ClockFn, CreateOutcome, CreateRequest, DbErrorKind, ExecutionEventInner, HistoryEvent,
    JoinSetResponse, Json, ListExecutionsFilter, OutcomeWrite, Pagination, PendingState,
    PendingStateKind, SupportedFunctionReturnValue, Version,
};
use std::time::Duration;
use test_utils::SimClock;

/// S12: JSON payloads keep their object key order, byte for byte, through every path: the
/// parameters in the `Created` event and in what `lock_pending` hands over, a `Persist` value in
/// a locked history, a result as `wait_for_finished_result` and `get` return it, and the same
/// result in the parent's `ChildExecutionFinished` response.
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
        ExecutionEventInner::Created(created) => same_text(&created.params),
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

/// S19: `create_batch` creates all or nothing (an existing id with other parameters refuses the
/// whole batch); `list_executions` pages newest first.
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

    // One existing id with other parameters among new ones: none is created (an identical
    // repetition is accepted instead, `docs/SEMANTICS.md` §10, pinned by L3).
    let mut with_dup: Vec<_> = (101..=110u128)
        .map(|n| create_request(execution_id(n), f.clone(), start))
        .collect();
    with_dup.insert(
        5,
        CreateRequest {
            params: Json(serde_json::json!(["other"])),
            ..reqs[4].clone()
        },
    );
    expect_kind(db.create_batch(with_dup).await, DbErrorKind::Duplicate);
    for n in 101..=110u128 {
        expect_kind(db.get(&execution_id(n)).await, DbErrorKind::NotFound);
    }
    // An id twice within the batch itself, with other parameters: none is created.
    let twice = vec![
        create_request(execution_id(201), f.clone(), start),
        create_request(execution_id(202), f.clone(), start),
        CreateRequest {
            params: Json(serde_json::json!(["other"])),
            ..create_request(execution_id(201), f.clone(), start)
        },
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

/// S31: a child is created only under a parent that exists. `create` and `create_batch` naming
/// a parent that is not stored are refused and write nothing (the child was stored, and its
/// finish, which answers its parent, failed for ever: it could never finish, be cancelled or
/// pruned); a batch that creates the parent before its child, or a parent stored already, is
/// taken.
pub async fn s31_children_only_under_a_parent_that_exists<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let now = SimClock::epoch().now();
    let j = join_set("n:orphans");
    let missing = execution_id(1);
    let orphan = child_request(&missing, &j, 1, ffqn("child"), now);
    let refused = expect_validation(db.create(orphan.clone()).await);
    assert!(
        refused.to_string().contains(&format!("parent {missing}")),
        "{refused}"
    );
    let stored = execution_id(2);
    db.create(create_request(stored.clone(), ffqn("parent"), now))
        .await
        .unwrap();
    let sibling = child_request(&stored, &j, 1, ffqn("child"), now);
    expect_validation(db.create_batch(vec![sibling.clone(), orphan.clone()]).await);
    for id in [&orphan.execution_id, &sibling.execution_id] {
        expect_kind(db.get(id).await, DbErrorKind::NotFound);
    }

    db.create(sibling.clone()).await.unwrap();
    let parent = execution_id(3);
    let child = child_request(&parent, &j, 1, ffqn("child"), now);
    db.create_batch(vec![
        create_request(parent.clone(), ffqn("parent"), now),
        child.clone(),
    ])
    .await
    .unwrap();
    for id in [&sibling.execution_id, &child.execution_id] {
        assert_eq!(db.get(id).await.unwrap().events.len(), 1, "{id} is stored");
    }
}

/// S32: an execution's retry backoff is kept to the microsecond on every backend (the SQL
/// backends store microseconds): `get`, the hand-over (of a lock, or of one created locked)
/// and the state row show it without its sub-microsecond digits, and the same `create` repeated is `AlreadyExisted` everywhere (a
/// backend that kept the nanoseconds in one place and microseconds in another would answer a
/// conflict on one backend and a repeat on another).
pub async fn s32_backoff_kept_to_the_microsecond<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let now = SimClock::epoch().now();
    let id = execution_id(1);
    let mut request = create_request(id.clone(), ffqn("backoff"), now);
    request.retry_exp_backoff = Duration::from_nanos(1_500_999);
    let kept = Duration::from_micros(1_500);
    assert_eq!(
        db.create(request.clone()).await.unwrap(),
        CreateOutcome::Created
    );
    let repeated = db.create(request.clone()).await.unwrap();
    assert!(
        matches!(repeated, CreateOutcome::AlreadyExisted { .. }),
        "{repeated:?}"
    );
    let created = |event: &ExecutionEventInner| match event {
        ExecutionEventInner::Created(created) => created.retry_exp_backoff,
        other => panic!("not a Created event: {other:?}"),
    };
    let log = db.get(&id).await.unwrap();
    assert_eq!(created(&log.events[0].event), kept);
    let ffqns = ffqns_of(&ffqn("backoff"));
    let locked = lock_pending_now(db, &ffqns, 1, now, executor_id(1), LEASE).await;
    assert_eq!(ids_of(&locked), [id]);
    assert_eq!(locked[0].retry_exp_backoff, kept);
    // What an executor is handed for one it created locked, from the request it holds.
    let handed = concepts::kernel::hand_over_created(request, locked[0].locked_event.clone());
    assert_eq!(handed.retry_exp_backoff, kept);
}
