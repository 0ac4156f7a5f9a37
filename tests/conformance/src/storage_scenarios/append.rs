//! S7, S8 and S21: what `append_batch` refuses (wrong versions, unknown and finished
//! executions, malformed or unexplained requests), and that a refused batch writes nothing.

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use concepts::{
    ClockFn, DbError, DbErrorKind, ExecutionEventInner, LockPendingRequest, OutcomeWrite,
    SupportedFunctionReturnValue, ValidationError, Version,
};
use std::time::Duration;
use test_utils::SimClock;

/// S7: a wrong version is `VersionMismatch` carrying both versions (for an append, a lock and a
/// batch); `Created` passed to an append is `CreatedEventAppended`; a lease that ends at its
/// start is `InvalidExpiryDate` (for a lock and for `lock_pending`); empty batches
/// (`append_batch`, with or without children, and `create_batch`) are `EmptyBatch`; every
/// operation on an unknown execution (reads, appends, outcomes, locks, responses, waits) is
/// `NotFound` at once; after `Finished`, every append is `AlreadyFinished`, at any version.
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

/// S8: a batch that fails half-way writes nothing, for every kind of batch: an `append_batch`
/// whose later event is refused; an `append_batch` creating children of which one exists
/// already, or whose parent event fails while its children are valid; an `append_outcome`
/// answering a parent that already has this child's response, or an unknown parent; a child's
/// batch at a wrong version. No event, response or child of a refused write is stored.
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

/// S21: rules every backend applies alike to the requests of a workflow (`docs/SEMANTICS.md`
/// §4.4). A child created by `append_batch` must be announced by a
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
