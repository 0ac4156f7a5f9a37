//! S26 and S27: executions created already locked, by an `append_batch`
//! (`AppendBatchRequest::leases`) or by `create_locked`: the lease is in the log, the
//! execution is never due, its lease expires like any other (the watcher times it out), its
//! outcome answers its parent or finishes it, and a write whose lease breaks a rule writes
//! nothing.

use super::{LEASE, ffqns_of, helpers::*};
use crate::StoreFactory;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, ClockFn, CreateOutcome, CreateRequest, DbConnection, DbErrorKind,
    ExecutionEvent, ExecutionEventInner, ExecutionId, ExpiredTimer, FinishedExecutionError,
    FunctionFqn, JoinSetId, Lease, LockPendingRequest, Locked, OutcomeWrite, PendingState,
    ValidationError, Version,
};
use std::time::Duration;
use test_utils::SimClock;

/// The ids a `lock_pending` of `f` at `now` locks.
async fn locked_ids(
    db: &dyn DbConnection,
    f: &FunctionFqn,
    now: DateTime<Utc>,
    expires: DateTime<Utc>,
) -> Vec<ExecutionId> {
    let request = LockPendingRequest {
        batch_size: 10,
        pending_at_or_sooner: now,
        ffqns: ffqns_of(f),
        now,
        component_id: component_id(),
        executor_id: executor_id(1),
        lock_expires_at: expires,
    };
    let locked = db.lock_pending(request).await.expect("lock_pending");
    locked.into_iter().map(|l| l.execution_id).collect()
}

/// The parent's batch at `version` opening `join_set_id` and announcing `children` in it, with
/// `leases`.
fn batch_leasing(
    parent: &ExecutionId,
    version: Version,
    now: DateTime<Utc>,
    join_set_id: &JoinSetId,
    children: Vec<CreateRequest>,
    leases: Vec<Lease>,
) -> AppendBatchRequest {
    let mut events = vec![join_set_create(join_set_id)];
    events.extend(
        (children.iter()).map(|child| child_execution_request(join_set_id, &child.execution_id)),
    );
    AppendBatchRequest {
        leases,
        ..batch_creating(parent, version, now, events, children)
    }
}

/// S26: a child created by its parent's `append_batch` with a lease has `Created` at version 0
/// and the lease's `Locked` at version 1 at the batch's time, is `Locked` from its first
/// commit (a `lock_pending` of its function finds nothing, the other child of the batch,
/// created without a lease, is due), is reported by `get_expired_timers` once its lease ends
/// (so the watcher recovers it if nobody writes its outcome), and its outcome at version 2
/// answers its parent; one nobody runs is timed out by `timers_watcher::tick` once its lease
/// ends, answering its parent. A batch whose lease names an execution it does not create, names one
/// twice, ends by the batch's time, is of a stub, or is of a child due later, is refused with
/// the kind the kernel gives (`InvalidRequest`, `InvalidExpiryDate`, `NotYetPending`) and
/// writes nothing.
pub async fn s26_children_created_locked<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let (f, child_f) = (ffqn("s26"), ffqn("s26-child"));
    let parent = execution_id(1);
    db.create(create_request(parent.clone(), f, now))
        .await
        .expect("create the parent");
    let before = assert_state_matches_derivation(db, &parent).await;
    let kids = join_set("n:kids");
    let child = |idx: u64| child_request(&parent, &kids, idx, child_f.clone(), now);
    let (leased, due) = (child(1), child(2));
    let expires = plus(now, LEASE);

    // Each refusal writes nothing.
    let stub = CreateRequest {
        ffqn: FunctionFqn::stub("s26").expect("a stub"),
        ..child(1)
    };
    let later = CreateRequest {
        scheduled_at: plus(now, Duration::from_secs(5)),
        ..child(1)
    };
    let twice = vec![lease(&leased.execution_id, expires); 2];
    let refusals = [
        (vec![child(1)], vec![lease(&due.execution_id, expires)]),
        (vec![child(1)], vec![lease(&parent, expires)]),
        (vec![child(1)], twice),
        (vec![child(1)], vec![lease(&leased.execution_id, now)]),
        (vec![stub], vec![lease(&leased.execution_id, expires)]),
        (vec![later], vec![lease(&leased.execution_id, expires)]),
    ];
    for (n, (children, leases)) in refusals.into_iter().enumerate() {
        let refused = db
            .append_batch(batch_leasing(
                &parent,
                Version(1),
                now,
                &kids,
                children,
                leases,
            ))
            .await;
        let refusal = expect_validation(refused);
        let expected = match n {
            3 => matches!(refusal, ValidationError::InvalidExpiryDate { .. }),
            5 => matches!(refusal, ValidationError::NotYetPending { .. }),
            _ => matches!(refusal, ValidationError::InvalidRequest(_)),
        };
        assert!(expected, "refusal {n}: {refusal:?}");
        expect_kind(db.get(&leased.execution_id).await, DbErrorKind::NotFound);
        assert_eq!(assert_state_matches_derivation(db, &parent).await, before);
    }

    // Created locked, beside a child created due.
    let granted = lease(&leased.execution_id, expires);
    let next = db
        .append_batch(batch_leasing(
            &parent,
            Version(1),
            now,
            &kids,
            vec![leased.clone(), due.clone()],
            vec![granted.clone()],
        ))
        .await
        .expect("the batch with a lease");
    assert_eq!(next, Version(4));
    let log = assert_state_matches_derivation(db, &leased.execution_id).await;
    assert_eq!(
        log.events,
        vec![
            leased.to_created_event(),
            ExecutionEvent {
                created_at: now,
                event: ExecutionEventInner::Locked(granted.locked.clone()),
            },
        ]
    );
    assert_eq!(log.next_version, Version(2));
    assert_eq!(
        log.pending_state,
        PendingState::Locked {
            executor_id: granted.locked.executor_id,
            run_id: granted.locked.run_id,
            lock_expires_at: expires,
        }
    );
    let ids = locked_ids(db, &child_f, now, expires).await;
    assert_eq!(
        ids,
        vec![due.execution_id.clone()],
        "only the child created due"
    );

    // Its lease expires like any other.
    let expired = db
        .get_expired_timers(expires)
        .await
        .expect("expired timers");
    let lease_of_leased = expired.iter().find_map(|timer| match timer {
        ExpiredTimer::Lock(lock) if lock.execution_id == leased.execution_id => Some(lock),
        _ => None,
    });
    let lease_of_leased = lease_of_leased.expect("the leased child's lease expires");
    assert_eq!(lease_of_leased.executor_id, executor_id(7));
    assert_eq!(lease_of_leased.next_version, Version(2));
    assert_eq!(lease_of_leased.parent, Some((parent.clone(), kids.clone())));

    // Its outcome answers the parent.
    let parent_before = db.get(&parent).await.expect("get the parent");
    db.append_outcome(OutcomeWrite::new(
        leased.execution_id.clone(),
        Version(2),
        now,
        finished_ok(serde_json::json!("done")),
        leased.parent.as_ref(),
    ))
    .await
    .expect("the leased child's outcome");
    let log = assert_state_matches_derivation(db, &leased.execution_id).await;
    assert!(log.pending_state.is_finished(), "{:?}", log.pending_state);
    let parent_after = assert_state_matches_derivation(db, &parent).await;
    assert_eq!(
        parent_after.responses.len(),
        parent_before.responses.len() + 1,
        "the parent is answered"
    );

    // A leased child nobody runs is timed out by the watcher once its lease ends, like any
    // lease: its last try, so it finishes with a permanent timeout and answers its parent.
    let more = join_set("n:more");
    let abandoned = CreateRequest {
        max_retries: 0,
        ..child_request(&parent, &more, 1, child_f.clone(), now)
    };
    db.append_batch(batch_leasing(
        &parent,
        next,
        now,
        &more,
        vec![abandoned.clone()],
        vec![lease(&abandoned.execution_id, expires)],
    ))
    .await
    .expect("a second batch with a lease");
    timers_watcher::tick(db, expires, Duration::ZERO)
        .await
        .expect("the watcher's tick");
    let log = assert_state_matches_derivation(db, &abandoned.execution_id).await;
    assert_eq!(log.events.len(), 3, "Created, Locked, then the timeout");
    assert!(
        matches!(
            &log.events[2].event,
            ExecutionEventInner::Finished {
                result: Err(FinishedExecutionError::PermanentTimeout),
                ..
            }
        ),
        "{:?}",
        log.events[2]
    );
    let parent_last = assert_state_matches_derivation(db, &parent).await;
    assert_eq!(
        parent_last.responses.len(),
        parent_after.responses.len() + 1,
        "the parent is answered by the timeout"
    );
}

/// S27: a top-level execution created locked by `create_locked` (a submit a node's executor
/// runs at once) has `Created` at version 0 and the lease's `Locked` at version 1 at its
/// creation time, is `Locked` from its first commit (a `lock_pending` of its function finds
/// only the execution created due beside it), its lease expires like any other, and its
/// outcome at version 2 finishes it. A repeat, by `create_locked` with another lease or by
/// `create`, is answered `AlreadyExisted` with the first lease's state and writes nothing; one
/// with other parameters is a conflict. A lease ending at the creation time, a stub, a child
/// or an execution due later is refused with the kernel's kind and writes nothing.
pub async fn s27_submit_created_locked<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let now = SimClock::epoch().now();
    let f = ffqn("s27");
    let expires = plus(now, LEASE);
    let submitted = create_request(execution_id(1), f.clone(), now);
    let id = submitted.execution_id.clone();
    let granted = lease(&id, expires).locked;

    // Each refusal writes nothing.
    let stub = CreateRequest {
        ffqn: FunctionFqn::stub("s27").expect("a stub"),
        ..submitted.clone()
    };
    let later = CreateRequest {
        scheduled_at: plus(now, Duration::from_secs(5)),
        ..submitted.clone()
    };
    let parent = execution_id(9);
    let child = child_request(&parent, &join_set("n:kids"), 1, f.clone(), now);
    let refusals = [
        (submitted.clone(), lease(&id, now).locked),
        (stub, granted.clone()),
        (later, granted.clone()),
        (child.clone(), granted.clone()),
    ];
    for (n, (request, locked)) in refusals.into_iter().enumerate() {
        let refusal = expect_validation(db.create_locked(request, locked).await);
        let expected = match n {
            0 => matches!(refusal, ValidationError::InvalidExpiryDate { .. }),
            2 => matches!(refusal, ValidationError::NotYetPending { .. }),
            _ => matches!(refusal, ValidationError::InvalidRequest(_)),
        };
        assert!(expected, "refusal {n}: {refusal:?}");
        expect_kind(db.get(&id).await, DbErrorKind::NotFound);
        expect_kind(db.get(&child.execution_id).await, DbErrorKind::NotFound);
    }

    // Created locked, beside an execution of the same function created due.
    let due = create_request(execution_id(2), f.clone(), now);
    db.create(due.clone()).await.expect("create the due one");
    let outcome =
        (db.create_locked(submitted.clone(), granted.clone()).await).expect("create_locked");
    assert_eq!(outcome, CreateOutcome::Created);
    let log = assert_state_matches_derivation(db, &id).await;
    let locked_event = ExecutionEvent {
        created_at: now,
        event: ExecutionEventInner::Locked(granted.clone()),
    };
    assert_eq!(log.events, vec![submitted.to_created_event(), locked_event]);
    assert_eq!(log.next_version, Version(2));
    let locked_state = PendingState::Locked {
        executor_id: granted.executor_id,
        run_id: granted.run_id,
        lock_expires_at: expires,
    };
    assert_eq!(log.pending_state, locked_state);

    // Repeats write nothing and answer the first lease's state; other parameters conflict.
    let other_lease = Locked {
        executor_id: executor_id(8),
        run_id: run_id(8),
        ..granted.clone()
    };
    let repeated =
        (db.create_locked(submitted.clone(), other_lease).await).expect("a repeated create_locked");
    let already = CreateOutcome::AlreadyExisted {
        pending_state: locked_state.clone(),
    };
    assert_eq!(repeated, already);
    let repeated = db
        .create(submitted.clone())
        .await
        .expect("a repeated create");
    assert_eq!(repeated, already);
    let conflicting = CreateRequest {
        params: concepts::Json(serde_json::json!(["other"])),
        ..submitted.clone()
    };
    expect_kind(
        db.create_locked(conflicting, granted.clone()).await,
        DbErrorKind::Duplicate,
    );
    assert_eq!(assert_state_matches_derivation(db, &id).await, log);

    let ids = locked_ids(db, &f, now, expires).await;
    assert_eq!(
        ids,
        vec![due.execution_id.clone()],
        "only the execution created due"
    );

    // Its lease expires like any other.
    let expired = (db.get_expired_timers(expires).await).expect("expired timers");
    let lease_of = expired.iter().find_map(|timer| match timer {
        ExpiredTimer::Lock(lock) if lock.execution_id == id => Some(lock),
        _ => None,
    });
    let lease_of = lease_of.expect("the lease of the execution created locked expires");
    assert_eq!(lease_of.executor_id, granted.executor_id);
    assert_eq!(lease_of.next_version, Version(2));
    assert_eq!(lease_of.parent, None);

    // Its outcome finishes it.
    let write = OutcomeWrite::new(
        id.clone(),
        Version(2),
        now,
        finished_ok(serde_json::json!(1)),
        None,
    );
    db.append_outcome(write).await.expect("its outcome");
    let log = assert_state_matches_derivation(db, &id).await;
    assert!(log.pending_state.is_finished(), "{:?}", log.pending_state);
}
