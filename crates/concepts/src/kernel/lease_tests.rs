//! Unit tests of the leases an `append_batch` or a `create_locked` creates executions with:
//! the log and state, the hand-over without a read, and the refusals, planned on hand-built
//! snapshots.

use super::tests::{at, create_request, ffqn, join_set, pending, row, run};
use super::*;
use crate::{
    AppendBatchRequest, ComponentId, CreateRequest, DbError, ExecutionEvent, ExecutionEventInner,
    ExecutionId, ExecutorId, FunctionFqn, HistoryEvent, JoinSetRequest, Lease, Locked,
    PendingState, RunId, ValidationError, Version,
};

fn parent() -> ExecutionId {
    ExecutionId::generate_at(at(0))
}

fn child_of(parent: &ExecutionId, idx: u64) -> CreateRequest {
    let id = parent.next_level(&join_set(), idx);
    CreateRequest {
        created_at: at(10),
        scheduled_at: at(10),
        scheduled_by: Some(parent.clone()),
        ..create_request(&id, Some((parent.clone(), join_set())))
    }
}

fn lease(execution_id: &ExecutionId, lock_expires_at: i64) -> Lease {
    Lease {
        execution_id: execution_id.clone(),
        locked: Locked {
            component_id: "activity:eager".parse::<ComponentId>().unwrap(),
            executor_id: ExecutorId::from_parts(1, 7),
            run_id: RunId::from_parts(1, 9),
            lock_expires_at: at(lock_expires_at),
        },
    }
}

fn request(event: HistoryEvent) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent { event }
}

/// The parent's batch at version 1 and time 10 announcing `children` in the join set.
fn batch(
    parent: &ExecutionId,
    children: Vec<CreateRequest>,
    leases: Vec<Lease>,
) -> AppendBatchRequest {
    let mut events = vec![request(HistoryEvent::JoinSetCreate {
        join_set_id: join_set(),
        closing_strategy: crate::ClosingStrategy::Complete,
    })];
    events.extend(children.iter().map(|child| {
        request(HistoryEvent::JoinSetRequest {
            join_set_id: join_set(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: child.execution_id.clone(),
            },
        })
    }));
    AppendBatchRequest {
        execution_id: parent.clone(),
        version: Version(1),
        now: at(10),
        events,
        children,
        leases,
        answers: Vec::new(),
    }
}

fn stored(parent: &ExecutionId) -> Snapshot {
    let mut snapshot = Snapshot::default();
    snapshot.add_execution(row(parent, 1, pending(0)));
    snapshot
}

fn invalid_request(result: Result<impl std::fmt::Debug, DbError>) -> String {
    match result {
        Err(DbError::Validation(ValidationError::InvalidRequest(message))) => message,
        other => panic!("expected an invalid request, got {other:?}"),
    }
}

#[test]
fn a_leased_child_is_created_locked_at_version_1_and_wakes_no_executor() {
    let parent = parent();
    let (leased, due) = (child_of(&parent, 1), child_of(&parent, 2));
    let granted = lease(&leased.execution_id, 70);
    let plan = run(
        &stored(&parent),
        batch(
            &parent,
            vec![leased.clone(), due.clone()],
            vec![granted.clone()],
        ),
    )
    .unwrap();
    assert_eq!(plan.reply, Version(4), "the parent's next version");
    let change = |id: &ExecutionId| {
        (plan.changes.iter())
            .find(|change| change.row.execution_id == *id)
            .unwrap()
    };
    let child = change(&leased.execution_id);
    assert!(child.is_new());
    let events: Vec<_> = (child.events.iter())
        .map(|(version, event)| (*version, event.clone()))
        .collect();
    assert_eq!(
        events,
        vec![
            (Version(0), leased.to_created_event()),
            (
                Version(1),
                ExecutionEvent {
                    created_at: at(10),
                    event: ExecutionEventInner::Locked(granted.locked.clone()),
                }
            ),
        ]
    );
    assert_eq!(child.row.state.next_version, Version(2));
    assert_eq!(
        child.row.state.pending_state,
        PendingState::Locked {
            executor_id: granted.locked.executor_id,
            run_id: granted.locked.run_id,
            lock_expires_at: at(70),
        }
    );
    assert_eq!(
        change(&due.execution_id).row.state.pending_state,
        pending(10)
    );
    // Only the child created due wakes its function's executors.
    let woken: Vec<_> = (plan.wakeups.iter())
        .filter(|wakeup| matches!(wakeup, Wakeup::Pending { .. }))
        .collect();
    assert_eq!(
        woken,
        vec![&Wakeup::Pending {
            ffqn: ffqn(),
            at: at(10)
        }]
    );
}

#[test]
fn a_leased_child_is_handed_over_as_lock_pending_would_hand_it_over() {
    let parent = parent();
    let child = child_of(&parent, 1);
    let granted = lease(&child.execution_id, 70);
    let plan = run(
        &stored(&parent),
        batch(&parent, vec![child.clone()], vec![granted.clone()]),
    )
    .unwrap();
    let change = (plan.changes.iter())
        .find(|change| change.row.execution_id == child.execution_id)
        .unwrap();
    // What `lock_pending`'s hand-over gives for the same log and row.
    let grant = LockGrant {
        row: change.row.clone(),
        locked_at: Version(1),
        locked_event: granted.locked.clone(),
        due_at: at(10),
    };
    let log = LogRows {
        events: change
            .events
            .iter()
            .map(|(_, event)| event.clone())
            .collect(),
        responses: Vec::new(),
    };
    assert_eq!(
        hand_over_created(child, granted.locked),
        hand_over(grant, log).unwrap()
    );
}

#[test]
fn a_lease_of_an_execution_the_batch_does_not_create_is_refused() {
    let parent = parent();
    let child = child_of(&parent, 1);
    let other = child_of(&parent, 2);
    let refused = run(
        &stored(&parent),
        batch(&parent, vec![child], vec![lease(&other.execution_id, 70)]),
    );
    assert!(invalid_request(refused).contains("does not create it"));
    // Nor its parent's own row.
    let refused = run(
        &stored(&parent),
        batch(
            &parent,
            vec![child_of(&parent, 1)],
            vec![lease(&parent, 70)],
        ),
    );
    assert!(invalid_request(refused).contains("does not create it"));
}

#[test]
fn two_leases_of_one_execution_are_refused() {
    let parent = parent();
    let child = child_of(&parent, 1);
    let twice = vec![
        lease(&child.execution_id, 70),
        lease(&child.execution_id, 80),
    ];
    let refused = run(&stored(&parent), batch(&parent, vec![child], twice));
    assert!(invalid_request(refused).contains("two leases"));
}

#[test]
fn a_lease_of_a_stub_is_refused() {
    let parent = parent();
    let stub = CreateRequest {
        ffqn: FunctionFqn::stub("approval").unwrap(),
        ..child_of(&parent, 1)
    };
    let granted = lease(&stub.execution_id, 70);
    let refused = run(&stored(&parent), batch(&parent, vec![stub], vec![granted]));
    assert!(invalid_request(refused).contains("stub"));
}

#[test]
fn a_lease_that_ends_by_the_batch_is_refused() {
    let parent = parent();
    let child = child_of(&parent, 1);
    let granted = lease(&child.execution_id, 10);
    let refused = run(&stored(&parent), batch(&parent, vec![child], vec![granted]));
    assert!(
        matches!(
            refused,
            Err(DbError::Validation(ValidationError::InvalidExpiryDate {
                lock_expires_at,
                now,
            })) if lock_expires_at == at(10) && now == at(10)
        ),
        "{refused:?}"
    );
}

#[test]
fn a_lease_of_a_child_due_later_is_refused_as_not_yet_pending() {
    let parent = parent();
    let later = CreateRequest {
        scheduled_at: at(20),
        ..child_of(&parent, 1)
    };
    let granted = lease(&later.execution_id, 70);
    let refused = run(&stored(&parent), batch(&parent, vec![later], vec![granted]));
    assert!(
        matches!(
            refused,
            Err(DbError::Validation(ValidationError::NotYetPending { scheduled_at }))
                if scheduled_at == at(20)
        ),
        "{refused:?}"
    );
}

#[test]
fn a_submission_created_locked_wakes_no_executor_and_a_repeat_records_no_lease() {
    let id = ExecutionId::generate_at(at(0));
    let submitted = CreateRequest {
        created_at: at(10),
        scheduled_at: at(10),
        ..create_request(&id, None)
    };
    let granted = lease(&id, 70).locked;
    let write = || CreateLocked {
        request: submitted.clone(),
        locked: granted.clone(),
    };
    let plan = run(&Snapshot::default(), write()).unwrap();
    assert_eq!(plan.reply, crate::CreateOutcome::Created);
    let [change] = plan.changes.as_slice() else {
        panic!("{:?}", plan.changes);
    };
    let versions: Vec<_> = change.events.iter().map(|(version, _)| *version).collect();
    assert_eq!(versions, vec![Version(0), Version(1)]);
    assert!(matches!(
        change.row.state.pending_state,
        PendingState::Locked { .. }
    ));
    assert!(
        !(plan.wakeups.iter()).any(|wakeup| matches!(wakeup, Wakeup::Pending { .. })),
        "{:?}",
        plan.wakeups
    );

    // Stored already: answered as `create` answers a repeat, nothing written.
    let mut snapshot = Snapshot::default();
    snapshot.add_execution(row(&id, 2, change.row.state.pending_state.clone()));
    (snapshot.created).insert(id.clone(), submitted.to_created_event());
    let repeat = run(&snapshot, write()).unwrap();
    assert!(
        matches!(repeat.reply, crate::CreateOutcome::AlreadyExisted { .. }),
        "{:?}",
        repeat.reply
    );
    assert!(repeat.changes.is_empty(), "{:?}", repeat.changes);

    // A child is created locked by its parent's batch only.
    let child = child_of(&parent(), 1);
    let refused = run(
        &Snapshot::default(),
        CreateLocked {
            request: child,
            locked: granted.clone(),
        },
    );
    assert!(invalid_request(refused).contains("is a child"));
}

/// The plan of a `create_batch` of `requests` (due at time 0 unless they say otherwise) and the
/// grants of the lock at time 5 of `locked`, in their order, as rows with only `Created` stored.
fn created_and_granted(
    requests: Vec<CreateRequest>,
    locked: &[&ExecutionId],
) -> (WritePlan, Vec<LockGrant>) {
    let plan = run(&Snapshot::default(), CreateBatch(requests))
        .unwrap()
        .plan;
    let mut snapshot = Snapshot::default();
    for id in locked {
        snapshot.add_due(row(id, 1, pending(0)));
    }
    let lock = crate::LockPendingRequest {
        batch_size: 10,
        pending_at_or_sooner: at(5),
        ffqns: std::sync::Arc::from([ffqn()]),
        now: at(5),
        component_id: "activity:test".parse().unwrap(),
        executor_id: ExecutorId::from_parts(1, 7),
        lock_expires_at: at(9),
    };
    let mut grants = run(&snapshot, lock).unwrap().reply;
    // The kernel grants in due order, then id order: put them in the order asked for.
    grants.sort_by_key(|grant| locked.iter().position(|id| **id == grant.row.execution_id));
    (plan, grants)
}

#[test]
fn a_first_lease_is_handed_over_from_the_kept_created_event_as_from_a_read() {
    let ids: Vec<ExecutionId> = (0..3).map(|i| ExecutionId::generate_at(at(i))).collect();
    let requests = ids.iter().map(|id| create_request(id, None)).collect();
    let (plan, grants) = created_and_granted(requests, &[&ids[0], &ids[1], &ids[2]]);
    let read: Vec<_> = (grants.iter().zip(&plan.changes))
        .map(|(grant, change)| {
            let events = vec![change.events[0].1.clone()];
            let log = LogRows {
                events,
                responses: Vec::new(),
            };
            hand_over(grant.clone(), log).unwrap()
        })
        .collect();
    let kept = CreatedEvents::new(16);
    kept.remember(vec![plan]);
    let mut left = grants.clone();
    assert_eq!(kept.hand_over_leading(&mut left), read);
    assert!(left.is_empty());
    // Each event is handed over once.
    let mut again = grants;
    assert!(kept.hand_over_leading(&mut again).is_empty());
    assert_eq!(again.len(), 3);
}

#[test]
fn only_the_leading_grants_whose_created_event_is_kept_are_handed_over() {
    let ids: Vec<ExecutionId> = (0..4).map(|i| ExecutionId::generate_at(at(i))).collect();
    let later = CreateRequest {
        scheduled_at: at(1),
        ..create_request(&ids[3], None)
    };
    let requests = vec![
        create_request(&ids[0], None),
        create_request(&ids[2], None),
        later,
    ];
    let locked = [&ids[0], &ids[1], &ids[2], &ids[3]];
    let (plan, grants) = created_and_granted(requests, &locked);
    let kept = CreatedEvents::new(16);
    kept.remember(vec![plan]);
    // `ids[1]` was not created by this store: the grants from it on are read, in order.
    let mut left = grants.clone();
    let handed = kept.hand_over_leading(&mut left);
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].execution_id, ids[0]);
    assert_eq!(left, grants[1..]);
    // One created due later is not kept; one created due is, until handed over.
    let mut from_later = vec![grants[3].clone(), grants[2].clone()];
    assert!(kept.hand_over_leading(&mut from_later).is_empty());
    let mut due = vec![grants[2].clone()];
    assert_eq!(kept.hand_over_leading(&mut due).len(), 1);
    // A lease after the first (the history holds more than `Created`) reads.
    let kept = CreatedEvents::new(16);
    let (plan, grants) = created_and_granted(vec![create_request(&ids[0], None)], &[&ids[0]]);
    kept.remember(vec![plan]);
    let mut second = vec![LockGrant {
        locked_at: Version(3),
        ..grants[0].clone()
    }];
    assert!(kept.hand_over_leading(&mut second).is_empty());
}

#[test]
fn kept_created_events_are_forgotten_when_deleted_cleared_or_too_many() {
    let id = ExecutionId::generate_at(at(0));
    let (plan, grants) = created_and_granted(vec![create_request(&id, None)], &[&id]);
    let kept = CreatedEvents::new(16);
    let deletion = WritePlan {
        deleted: vec![id.clone()].into(),
        ..WritePlan::default()
    };
    kept.remember(vec![plan.clone()]);
    kept.forget(&deletion);
    assert!(kept.hand_over_leading(&mut grants.clone()).is_empty());
    kept.remember(vec![plan.clone()]);
    kept.clear();
    assert!(kept.hand_over_leading(&mut grants.clone()).is_empty());
    // A store keeping one event forgets it for the next.
    let one = CreatedEvents::new(1);
    let other = ExecutionId::generate_at(at(1));
    let (other_plan, _) = created_and_granted(vec![create_request(&other, None)], &[]);
    one.remember(vec![plan.clone(), other_plan]);
    assert!(one.hand_over_leading(&mut grants.clone()).is_empty());
    // Parameters over a 64th of the budget are not kept.
    let big = "x".repeat(CreatedEvents::MAX_BYTES / 64);
    let request = CreateRequest {
        params: serde_json::json!([big]).into(),
        ..create_request(&id, None)
    };
    let (big_plan, big_grants) = created_and_granted(vec![request], &[&id]);
    kept.remember(vec![big_plan]);
    assert!(kept.hand_over_leading(&mut big_grants.clone()).is_empty());
    kept.remember(vec![plan]);
    assert_eq!(kept.hand_over_leading(&mut grants.clone()).len(), 1);
}
