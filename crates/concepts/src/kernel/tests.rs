//! Unit tests of the kernel without a backend: snapshots built by hand, plans checked field by
//! field, and the waiter hub on tokio's paused clock.

use super::*;
use crate::{
    AppendBatchRequest, ComponentId, CreateConflict, CreateOutcome, CreateRequest, DbError,
    DelayId, DuplicateKind, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionState,
    ExecutorId, FinishedExecutionError, FunctionFqn, HistoryEvent, JoinSetId, JoinSetRequest,
    JoinSetResponse, JoinSetResponseEvent, LockPendingRequest, OutcomeWrite, PendingState,
    ValidationError, Version,
};
use chrono::{DateTime, Utc};
use std::{sync::Arc, time::Duration};

pub(super) fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap()
}

pub(super) fn ffqn() -> FunctionFqn {
    "ns:pkg/ifc.fn".parse().unwrap()
}

pub(super) fn join_set() -> JoinSetId {
    "n:batch".parse().unwrap()
}

pub(super) fn create_request(
    execution_id: &ExecutionId,
    parent: Option<(ExecutionId, JoinSetId)>,
) -> CreateRequest {
    CreateRequest {
        created_at: at(0),
        execution_id: execution_id.clone(),
        ffqn: ffqn(),
        params: serde_json::json!([1]).into(),
        parent,
        scheduled_at: at(0),
        retry_exp_backoff: Duration::from_secs(1),
        max_retries: 2,
        component_id: "activity:test".parse::<ComponentId>().unwrap(),
        metadata: Default::default(),
        scheduled_by: None,
    }
}

/// A row in `state` at `next_version`.
pub(super) fn row(
    execution_id: &ExecutionId,
    next_version: u32,
    pending_state: PendingState,
) -> ExecutionRow {
    ExecutionRow {
        state: ExecutionState {
            next_version: Version(next_version),
            pending_state,
        },
        ..ExecutionRow::new_execution(&create_request(execution_id, None))
    }
}

fn snapshot_of(rows: impl IntoIterator<Item = ExecutionRow>) -> Snapshot {
    let mut snapshot = Snapshot::default();
    for row in rows {
        snapshot.add_execution(row);
    }
    snapshot
}

/// Plans `write` on `snapshot` as a backend does (its keys first): the plan, with the reply
/// kept in it for the assertions.
pub(super) fn run<W: Write>(snapshot: &Snapshot, write: W) -> Result<Planned<W::Reply>, DbError> {
    write.keys()?;
    let (plan, reply) = plan(snapshot, write)?;
    assert_revisions_move(snapshot, &plan);
    Ok(Planned { plan, reply })
}

/// Every row a plan changes has another [`Revision`] than the row it was planned on: what a
/// backend's check of a plan on known rows relies on.
pub(super) fn assert_revisions_move(snapshot: &Snapshot, plan: &WritePlan) {
    for change in &plan.changes {
        if let Some(before) = snapshot.executions.get(&change.row.execution_id)
            && *before != change.row
        {
            assert_ne!(
                before.revision(),
                change.row.revision(),
                "{before:?} -> {:?}",
                change.row
            );
        }
    }
}

/// A plan and its reply.
#[derive(Debug)]
pub(super) struct Planned<R> {
    pub(super) plan: WritePlan,
    pub(super) reply: R,
}

impl<R> std::ops::Deref for Planned<R> {
    type Target = WritePlan;
    fn deref(&self) -> &WritePlan {
        &self.plan
    }
}

fn append(
    execution_id: &ExecutionId,
    version: u32,
    now: i64,
    events: Vec<ExecutionEventInner>,
) -> AppendBatchRequest {
    AppendBatchRequest {
        execution_id: execution_id.clone(),
        version: Version(version),
        now: at(now),
        events,
        children: Vec::new(),
        leases: Vec::new(),
        answers: Vec::new(),
    }
}

fn join_next(run_expires_at: i64) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinNext {
            join_set_id: join_set(),
            run_expires_at: at(run_expires_at),
            closing: false,
        },
    }
}

fn delay_request(delay_id: DelayId) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: join_set(),
            request: JoinSetRequest::DelayRequest {
                delay_id,
                expires_at: at(50),
            },
        },
    }
}

pub(super) fn pending(secs: i64) -> PendingState {
    PendingState::PendingAt {
        scheduled_at: at(secs),
    }
}

#[test]
fn a_new_execution_is_pending_at_its_schedule_and_wakes_its_function() {
    let id = ExecutionId::generate_at(at(0));
    let plan = run(&Snapshot::default(), create_request(&id, None)).unwrap();
    assert_eq!(plan.reply, CreateOutcome::Created);
    let [change] = plan.changes.as_slice() else {
        panic!("one change expected: {plan:?}");
    };
    assert!(change.is_new());
    assert_eq!(change.row.state.pending_state, pending(0));
    assert_eq!(change.events.len(), 1);
    assert!(matches!(
        change.events[0],
        (
            Version(0),
            ExecutionEvent {
                event: ExecutionEventInner::Created(_),
                ..
            }
        )
    ));
    assert_eq!(
        plan.wakeups[..],
        vec![Wakeup::Pending {
            ffqn: ffqn(),
            at: at(0)
        }]
    );
}

#[test]
fn a_repeated_create_is_answered_and_a_conflicting_one_refused() {
    let id = ExecutionId::generate_at(at(0));
    let mut stored = snapshot_of([row(&id, 1, pending(0))]);
    stored
        .created
        .insert(id.clone(), create_request(&id, None).to_created_event());
    let plan = run(&stored, create_request(&id, None)).unwrap();
    assert_eq!(
        plan.reply,
        CreateOutcome::AlreadyExisted {
            pending_state: pending(0)
        }
    );
    assert!(
        plan.changes.is_empty() && plan.wakeups.is_empty(),
        "{plan:?}"
    );
    let mut other = create_request(&id, None);
    other.params = serde_json::json!([2]).into();
    other.ffqn = "ns:pkg/ifc.other".parse().unwrap();
    let err = run(&stored, other.clone()).unwrap_err();
    assert!(
        matches!(
            &err,
            DbError::Duplicate(DuplicateKind::ExecutionConflict { execution_id, differences })
                if *execution_id == id
                    && *differences == [CreateConflict::Function, CreateConflict::Params]
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "duplicate: execution {id} already exists and differs in its function and parameters"
        )
    );
    let twice = CreateBatch(vec![create_request(&id, None), create_request(&id, None)]);
    let plan = run(&Snapshot::default(), twice).unwrap();
    assert_eq!(plan.changes.len(), 1, "the repeated item writes nothing");
    let conflicting = CreateBatch(vec![create_request(&id, None), other]);
    assert!(matches!(
        run(&Snapshot::default(), conflicting),
        Err(DbError::Duplicate(DuplicateKind::ExecutionConflict { .. }))
    ));
}

#[test]
fn appends_check_the_version_and_the_finished_state_first() {
    let id = ExecutionId::generate_at(at(0));
    let snapshot = snapshot_of([row(&id, 3, pending(0))]);
    let err = run(&snapshot, append(&id, 2, 1, vec![join_next(5)])).unwrap_err();
    assert!(
        matches!(
            err,
            DbError::VersionMismatch {
                appending_version: Version(2),
                expected_version: Version(3)
            }
        ),
        "{err:?}"
    );
    let missing = ExecutionId::generate_at(at(1));
    assert!(matches!(
        run(&snapshot, append(&missing, 1, 1, vec![join_next(5)])),
        Err(DbError::NotFound(_))
    ));
    let finished = snapshot_of([row(
        &id,
        3,
        PendingState::Finished {
            version: Version(3),
            finished_at: at(1),
            result_kind: crate::ResultKind::of(&Err(FinishedExecutionError::PermanentTimeout)),
        },
    )]);
    let err = run(&finished, append(&id, 7, 2, vec![join_next(5)])).unwrap_err();
    assert!(
        matches!(err, DbError::Validation(ValidationError::AlreadyFinished)),
        "{err:?}"
    );
}

#[test]
fn a_delay_id_is_requested_once_and_a_delay_answered_early_never_opens() {
    let id = ExecutionId::generate_at(at(0));
    let delay_id = DelayId::generate_at(at(0));
    let mut snapshot = snapshot_of([row(&id, 2, pending(0))]);
    let plan = run(&snapshot, append(&id, 2, 1, vec![delay_request(delay_id)])).unwrap();
    assert_eq!(
        plan.changes[0].delays_requested,
        vec![PlannedDelay {
            delay_id,
            join_set_id: join_set(),
            expires_at: at(50),
            open: true
        }]
    );

    let err = run(
        &snapshot,
        append(
            &id,
            2,
            1,
            vec![delay_request(delay_id), delay_request(delay_id)],
        ),
    )
    .unwrap_err();
    assert!(
        matches!(err, DbError::Validation(ValidationError::InvalidRequest(_))),
        "{err:?}"
    );

    snapshot.delays.insert(
        (id.clone(), delay_id),
        DelayRow {
            requested: false,
            answered: true,
        },
    );
    let plan = run(&snapshot, append(&id, 2, 1, vec![delay_request(delay_id)])).unwrap();
    assert!(!plan.changes[0].delays_requested[0].open);

    snapshot.delays.insert(
        (id.clone(), delay_id),
        DelayRow {
            requested: true,
            answered: false,
        },
    );
    let err = run(&snapshot, append(&id, 2, 1, vec![delay_request(delay_id)])).unwrap_err();
    assert!(
        matches!(err, DbError::Validation(ValidationError::InvalidRequest(ref m)) if m.contains("already requested")),
        "{err:?}"
    );
}

#[test]
fn join_next_consumes_the_next_response_or_blocks() {
    let id = ExecutionId::generate_at(at(0));
    let mut snapshot = snapshot_of([row(&id, 2, pending(0))]);
    let plan = run(&snapshot, append(&id, 2, 1, vec![join_next(5)])).unwrap();
    let change = &plan.changes[0];
    assert_eq!(
        change.row.state.pending_state,
        PendingState::BlockedByJoinSet {
            join_set_id: join_set(),
            lock_expires_at: at(5),
            closing: false
        }
    );
    assert_eq!(
        change.join_sets,
        vec![(
            join_set(),
            JoinSetCounters {
                join_next_count: 1,
                response_count: 0
            }
        )]
    );
    assert!(plan.wakeups.is_empty());

    // Two responses stored, one consumed: the next JoinNext takes the second one's time.
    snapshot.join_sets.insert(
        (id.clone(), join_set()),
        JoinSetRow {
            counters: JoinSetCounters {
                join_next_count: 1,
                response_count: 2,
            },
            next_response_times: vec![at(9)],
        },
    );
    let plan = run(&snapshot, append(&id, 2, 1, vec![join_next(5)])).unwrap();
    assert_eq!(plan.changes[0].row.state.pending_state, pending(9));
    assert_eq!(
        plan.wakeups[..],
        vec![Wakeup::Pending {
            ffqn: ffqn(),
            at: at(9)
        }]
    );

    // A snapshot that lacks the time its counters promise is the backend's bug.
    snapshot
        .join_sets
        .get_mut(&(id.clone(), join_set()))
        .unwrap()
        .next_response_times
        .clear();
    assert!(matches!(
        run(&snapshot, append(&id, 2, 1, vec![join_next(5)])),
        Err(DbError::Backend(_))
    ));
}

#[test]
fn keys_name_each_join_set_once_with_the_responses_it_consumes() {
    let id = ExecutionId::generate_at(at(0));
    let delay_id = DelayId::generate_at(at(0));
    let keys = append(
        &id,
        2,
        1,
        vec![delay_request(delay_id), join_next(5), join_next(6)],
    )
    .keys()
    .unwrap();
    assert_eq!(keys.executions[..], vec![id.clone()]);
    assert_eq!(keys.delays, vec![(id.clone(), delay_id)]);
    assert_eq!(
        keys.join_sets,
        vec![JoinSetKey {
            execution_id: id,
            join_set_id: join_set(),
            next_responses: 2,
            created: false,
        }]
    );
}

#[test]
fn a_response_unblocks_its_join_set_and_duplicates_are_refused() {
    let parent = ExecutionId::generate_at(at(0));
    let child = parent.next_level(&join_set(), 1);
    let blocked = PendingState::BlockedByJoinSet {
        join_set_id: join_set(),
        lock_expires_at: at(5),
        closing: false,
    };
    let mut snapshot = snapshot_of([row(&parent, 4, blocked)]);
    snapshot.join_sets.insert(
        (parent.clone(), join_set()),
        JoinSetRow {
            counters: JoinSetCounters {
                join_next_count: 1,
                response_count: 0,
            },
            next_response_times: Vec::new(),
        },
    );
    let response = JoinSetResponseEvent {
        join_set_id: join_set(),
        event: JoinSetResponse::ChildExecutionFinished {
            child_execution_id: child.clone(),
            finished_version: Version(3),
            result: Ok(crate::SupportedFunctionReturnValue::None),
        },
    };
    let request = || AppendResponse {
        now: at(7),
        execution_id: parent.clone(),
        response: response.clone(),
    };
    let plan = run(&snapshot, request()).unwrap();
    let change = &plan.changes[0];
    assert_eq!(change.row.state.pending_state, pending(7));
    assert_eq!(
        (change.responses[0].idx, change.responses[0].join_set_idx),
        (0, 0)
    );
    assert_eq!(change.row.response_count, 1);
    assert_eq!(
        plan.wakeups[..],
        vec![
            Wakeup::Responses(parent.clone()),
            Wakeup::Pending {
                ffqn: ffqn(),
                at: at(7)
            }
        ]
    );

    snapshot
        .child_responses
        .insert((parent.clone(), child.clone()));
    let err = run(&snapshot, request()).unwrap_err();
    assert!(
        matches!(err, DbError::Duplicate(DuplicateKind::ChildResponse { .. })),
        "{err:?}"
    );
}

/// The `Finished` (`Ok(None)`) of the locked child of `row`, at its version 2, answering its
/// parent.
fn finishes(row: &ExecutionRow) -> OutcomeWrite {
    let finished = ExecutionEventInner::Finished {
        result: Ok(crate::SupportedFunctionReturnValue::None),
    };
    let parent = row.parent.as_ref();
    OutcomeWrite::new(
        row.execution_id.clone(),
        Version(2),
        at(4),
        finished,
        parent,
    )
}

/// The row of `child` of `parent` (in `join_set()`), locked at version 2.
fn locked_child(parent: &ExecutionId, child: &ExecutionId) -> ExecutionRow {
    let locked = PendingState::Locked {
        executor_id: ExecutorId::generate_at(at(0)),
        run_id: crate::RunId::generate_at(at(0)),
        lock_expires_at: at(10),
    };
    ExecutionRow {
        parent: Some((parent.clone(), join_set())),
        ..row(child, 2, locked)
    }
}

#[test]
fn a_finished_child_answers_its_parent_in_the_same_plan() {
    let parent = ExecutionId::generate_at(at(0));
    let child = parent.next_level(&join_set(), 1);
    let child_row = locked_child(&parent, &child);
    let snapshot = snapshot_of([child_row.clone(), row(&parent, 3, pending(20))]);
    let finished = ExecutionEventInner::Finished {
        result: Ok(crate::SupportedFunctionReturnValue::None),
    };
    let write = finishes(&child_row);
    let keys = (write.clone()).keys().unwrap();
    assert_eq!(
        keys.executions[..],
        vec![child.clone(), parent.clone()],
        "the child is locked before its parent"
    );
    let plan = run(&snapshot, write).unwrap();
    assert_eq!(plan.reply, Version(2), "a Finished keeps its version");
    assert_eq!(plan.changes.len(), 2);
    assert_eq!(plan.changes[1].responses.len(), 1);
    assert!(plan.wakeups.contains(&Wakeup::Finished(child.clone())));
    assert!(plan.wakeups.contains(&Wakeup::Responses(parent.clone())));

    // An outcome that names no parent for a child is refused, and so is a child's finish
    // through append_batch, which could not answer the parent.
    let orphan = OutcomeWrite::new(child.clone(), Version(2), at(4), finished.clone(), None);
    assert!(matches!(
        run(&snapshot, orphan),
        Err(DbError::Validation(ValidationError::InvalidRequest(_)))
    ));
    assert!(matches!(
        run(&snapshot, append(&child, 2, 4, vec![finished.clone()])),
        Err(DbError::Validation(ValidationError::InvalidRequest(_)))
    ));
    // A parent that does not exist is `NotFound`, though it is not the child's parent either.
    let stranger = (ExecutionId::generate_at(at(1)), join_set());
    let lost = OutcomeWrite::new(child.clone(), Version(2), at(4), finished, Some(&stranger));
    assert!(matches!(run(&snapshot, lost), Err(DbError::NotFound(_))));
}

#[test]
fn lock_pending_locks_what_is_due_and_hands_out_the_log() {
    let due = ExecutionId::generate_at(at(0));
    let later = ExecutionId::generate_at(at(1));
    let request = |lock_expires_at| LockPendingRequest {
        batch_size: 10,
        pending_at_or_sooner: at(5),
        ffqns: Arc::from([ffqn()]),
        now: at(5),
        component_id: "activity:test".parse().unwrap(),
        executor_id: ExecutorId::generate_at(at(0)),
        lock_expires_at,
    };
    assert!(matches!(
        request(at(5)).keys(),
        Err(DbError::Validation(
            ValidationError::InvalidExpiryDate { .. }
        ))
    ));
    let keys = request(at(9)).keys().unwrap();
    assert_eq!(keys.due.as_ref().map(|d| d.limit), Some(10));

    let mut snapshot = Snapshot::default();
    let log = LogRows {
        events: vec![create_request(&due, None).to_created_event()],
        responses: Vec::new(),
    };
    snapshot.add_due(row(&due, 1, pending(3)));
    // An index that rounded a due time down returns a candidate that is not due yet.
    snapshot.add_due(row(
        &later,
        1,
        PendingState::PendingAt {
            scheduled_at: at(5) + chrono::TimeDelta::nanoseconds(1),
        },
    ));
    let plan = run(&snapshot, request(at(9))).unwrap();
    assert_eq!(plan.reply.len(), 1);
    let grant = plan.reply[0].clone();
    assert_eq!(grant.locked_at, Version(1));
    assert_eq!(grant.events_handed_over(), 1);
    // The history read after the commit may have grown: it is cut at the grant's bounds.
    let mut grown = log.clone();
    grown.events.push(ExecutionEvent {
        created_at: at(9),
        event: ExecutionEventInner::Finished {
            result: Ok(crate::SupportedFunctionReturnValue::None),
        },
    });
    let cloned = hand_over_cloned(&grant, &grown.events, &grown.responses).unwrap();
    let locked = hand_over(grant.clone(), grown).unwrap();
    assert_eq!(locked.execution_id, due);
    assert_eq!(locked.next_version, Version(2));
    assert_eq!(locked.params, serde_json::json!([1]).into());
    assert!(locked.event_history.is_empty());
    assert_eq!(cloned, locked, "both hand-overs hand over the same");
    assert!(
        hand_over_cloned(&grant, &[], &[]).is_err(),
        "a history shorter than the grant's"
    );
    let short = LogRows {
        events: Vec::new(),
        responses: Vec::new(),
    };
    assert!(
        hand_over(grant, short).is_err(),
        "a history shorter than the grant's"
    );
    assert_eq!(plan.changes.len(), 1);
    assert!(matches!(
        plan.changes[0].row.state.pending_state,
        PendingState::Locked { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn the_hub_wakes_pending_waiters_whose_moving_horizon_covers_the_work() {
    let hub = Arc::new(WaiterHub::new());
    let other: FunctionFqn = "ns:pkg/ifc.other".parse().unwrap();
    let waiter = {
        let hub = Arc::clone(&hub);
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            hub.wait_for_pending(
                at(10),
                Arc::from([ffqn()]),
                Duration::from_secs(60),
                async { Ok(false) },
            )
            .await;
            start.elapsed()
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(hub.counts().pending, 1);
    // Not its function, and not within its horizon yet: no wake-up.
    hub.deliver(&[
        Wakeup::Pending {
            ffqn: other,
            at: at(10),
        },
        Wakeup::Pending {
            ffqn: ffqn(),
            at: at(15),
        },
    ]);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!waiter.is_finished());
    // Six seconds later its horizon is 16: work due at 15 wakes it.
    hub.deliver(&[Wakeup::Pending {
        ffqn: ffqn(),
        at: at(15),
    }]);
    let waited = waiter.await.unwrap();
    assert_eq!(waited, Duration::from_secs(6));
    assert_eq!(
        hub.counts(),
        WaiterCounts::default(),
        "a woken waiter leaves no registration"
    );
}

#[tokio::test(start_paused = true)]
async fn the_hub_loses_no_wakeup_between_check_and_wait_and_close_releases_everyone() {
    let hub = Arc::new(WaiterHub::new());
    let id = ExecutionId::generate_at(at(0));
    let checks = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let waiter = {
        let (hub, id, checks) = (Arc::clone(&hub), id.clone(), Arc::clone(&checks));
        tokio::spawn(async move {
            hub.wait_for_responses(&id, 0, || {
                let n = checks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let hub = Arc::clone(&hub);
                let id = id.clone();
                async move {
                    if n == 0 {
                        // A write commits between the check and the wait.
                        hub.deliver(&[Wakeup::Responses(id)]);
                        Ok(None)
                    } else {
                        Ok(Some(Vec::new()))
                    }
                }
            })
            .await
        })
    };
    assert_eq!(waiter.await.unwrap().unwrap(), Vec::new());
    assert_eq!(checks.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(hub.counts(), WaiterCounts::default());

    let finished = {
        let (hub, id) = (Arc::clone(&hub), id.clone());
        tokio::spawn(async move {
            hub.wait_for_finished(&id, None, || async { Ok(None) })
                .await
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(hub.counts().finished, 1);
    hub.close();
    assert!(matches!(finished.await.unwrap(), Err(DbError::Closed)));
    assert!(matches!(
        hub.wait_for_finished(&id, None, || async { Ok(None) })
            .await,
        Err(DbError::Closed)
    ));
    let timed_out = WaiterHub::new()
        .wait_for_finished(&id, Some(Duration::from_secs(1)), || async { Ok(None) })
        .await;
    assert!(matches!(timed_out, Err(DbError::Timeout)));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_bounds_the_wait_for_a_finish_never_the_check() {
    let hub = WaiterHub::new();
    let id = ExecutionId::generate_at(at(0));
    // A check that takes time (a database read) finds the execution finished: even a zero
    // timeout reports it.
    let seven = || {
        Ok(crate::SupportedFunctionReturnValue::InfallibleOrResultOk(
            serde_json::json!(7).into(),
        ))
    };
    let slow_check = || async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(Some(seven()))
    };
    let found = hub
        .wait_for_finished(&id, Some(Duration::ZERO), slow_check)
        .await;
    assert_eq!(found.unwrap(), seven());
    // The timeout runs from the call: a slow first check counts against it.
    let slow_miss = || async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(None)
    };
    let started = tokio::time::Instant::now();
    let missed = hub
        .wait_for_finished(&id, Some(Duration::from_millis(20)), slow_miss)
        .await;
    assert!(matches!(missed, Err(DbError::Timeout)), "{missed:?}");
    assert_eq!(started.elapsed(), Duration::from_millis(20));
    assert_eq!(hub.counts(), WaiterCounts::default());
}

#[tokio::test(start_paused = true)]
async fn a_committed_finish_hands_its_result_to_the_waiter_without_a_read() {
    let hub = Arc::new(WaiterHub::new());
    let id = ExecutionId::generate_at(at(0));
    let locked = PendingState::Locked {
        executor_id: ExecutorId::generate_at(at(0)),
        run_id: crate::RunId::generate_at(at(0)),
        lock_expires_at: at(10),
    };
    let snapshot = snapshot_of([row(&id, 2, locked)]);
    let value = || {
        Ok(crate::SupportedFunctionReturnValue::InfallibleOrResultOk(
            serde_json::json!(7).into(),
        ))
    };
    let finished = ExecutionEventInner::Finished { result: value() };
    let write = OutcomeWrite::new(id.clone(), Version(2), at(4), finished, None);
    let plan = run(&snapshot, write).unwrap().plan;
    let checks = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let wait = |hub: Arc<WaiterHub>| {
        let (id, checks) = (id.clone(), Arc::clone(&checks));
        tokio::spawn(async move {
            let check = || {
                checks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok(None) }
            };
            hub.wait_for_finished(&id, Some(Duration::from_secs(1)), check)
                .await
        })
    };
    let waiter = wait(Arc::clone(&hub));
    tokio::task::yield_now().await;
    assert_eq!(checks.load(std::sync::atomic::Ordering::SeqCst), 1);
    hub.deliver_plans([&plan]);
    assert_eq!(waiter.await.unwrap().unwrap(), value());
    assert_eq!(
        checks.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the handed result is the answer: no second read"
    );
    // A wake-up without the plan (another process's commit) is followed by a read.
    let waiter = wait(Arc::clone(&hub));
    tokio::task::yield_now().await;
    hub.deliver(&plan.wakeups);
    assert!(matches!(waiter.await.unwrap(), Err(DbError::Timeout)));
    assert_eq!(checks.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(hub.counts(), WaiterCounts::default());
}

#[tokio::test(start_paused = true)]
async fn a_committed_response_is_handed_to_the_waiter_of_its_place_alone() {
    let hub = Arc::new(WaiterHub::new());
    let parent = ExecutionId::generate_at(at(0));
    let child = parent.next_level(&join_set(), 1);
    let child_row = locked_child(&parent, &child);
    // The parent has three responses: this one is its fourth (index 3).
    let parent_row = ExecutionRow {
        response_count: 3,
        ..row(&parent, 3, pending(20))
    };
    let snapshot = snapshot_of([child_row.clone(), parent_row]);
    let plan = run(&snapshot, finishes(&child_row)).unwrap().plan;
    let response = plan.changes[1].responses[0].response.clone();
    let reads = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let subscribe = |from_idx: usize| {
        let (hub, parent, reads) = (Arc::clone(&hub), parent.clone(), Arc::clone(&reads));
        tokio::spawn(async move {
            let check = || {
                reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok(None) }
            };
            let waited = hub.wait_for_responses(&parent, from_idx, check);
            tokio::time::timeout(Duration::from_secs(1), waited).await
        })
    };
    let (before, at_its_place, after) = (subscribe(2), subscribe(3), subscribe(4));
    tokio::task::yield_now().await;
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 3);
    hub.deliver_plans([&plan]);
    let handed = at_its_place.await.unwrap().unwrap().unwrap();
    assert_eq!(handed, vec![response]);
    // The waiter of index 2 lacks one the plan does not hold, the waiter of index 4 waits for
    // one it does not hold: both read the store again, and find nothing.
    assert!(before.await.unwrap().is_err());
    assert!(after.await.unwrap().is_err());
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(hub.counts(), WaiterCounts::default());
}

#[test]
fn a_large_batch_finds_its_duplicates_past_the_linear_lookup() {
    let ids: Vec<ExecutionId> = (0..20).map(|i| ExecutionId::generate_at(at(i))).collect();
    let mut reqs: Vec<CreateRequest> = ids.iter().map(|id| create_request(id, None)).collect();
    let plan = run(&Snapshot::default(), CreateBatch(reqs.clone())).unwrap();
    assert_eq!(plan.changes.len(), 20);
    // One wake-up for a batch of one function's executions, at the earliest of their times.
    let states = plan.changes.iter().map(|c| &c.row.state.pending_state);
    let earliest = states.filter_map(PendingState::pending_at).min().unwrap();
    let wakeup = Wakeup::Pending {
        ffqn: ffqn(),
        at: earliest,
    };
    assert_eq!(plan.wakeups[..], [wakeup]);
    let mut conflicting = create_request(&ids[3], None);
    conflicting.ffqn = "ns:pkg/ifc.other".parse().unwrap();
    reqs.push(conflicting);
    let err = run(&Snapshot::default(), CreateBatch(reqs)).unwrap_err();
    assert!(
        matches!(err, DbError::Duplicate(DuplicateKind::ExecutionConflict { ref execution_id, .. }) if *execution_id == ids[3]),
        "{err:?}"
    );
}

#[test]
fn expired_timers_come_in_one_order_and_a_lease_expires_inclusively() {
    let first = ExecutionId::generate_at(at(0));
    let second = ExecutionId::generate_at(at(1));
    let locked = |lock_expires_at| PendingState::Locked {
        executor_id: ExecutorId::generate_at(at(0)),
        run_id: crate::RunId::generate_at(at(0)),
        lock_expires_at,
    };
    let leased = row(&second, 2, locked(at(5)));
    let lease = (leased.clone())
        .expired_lock_at(at(5))
        .unwrap()
        .expect("expiry is inclusive");
    assert_eq!(
        row(&second, 2, locked(at(6)))
            .expired_lock_at(at(5))
            .unwrap(),
        None
    );
    assert!(matches!(
        row(&second, 2, pending(0)).expired_lock_at(at(5)),
        Err(DbError::Backend(_))
    ));
    let delay = |execution_id: &ExecutionId, delay_id, expires_at| crate::ExpiredDelay {
        execution_id: execution_id.clone(),
        join_set_id: join_set(),
        delay_id,
        expires_at,
    };
    let (d1, d2) = (DelayId::generate_at(at(0)), DelayId::generate_at(at(1)));
    let delays = vec![
        delay(&second, d2, at(5)),
        delay(&second, d1, at(5)),
        delay(&first, d2, at(5)),
        delay(&first, d1, at(4)),
        delay(&first, d1, at(6)),
    ];
    let locked = [leased, row(&first, 2, locked(at(6)))];
    let timers = expired_timers(at(5), locked, delays).unwrap();
    assert!(matches!(&timers[2], crate::ExpiredTimer::Lock(l) if *l == lease));
    let order: Vec<(ExecutionId, Option<DelayId>)> = timers
        .iter()
        .map(|t| match t {
            crate::ExpiredTimer::Lock(l) => (l.execution_id.clone(), None),
            crate::ExpiredTimer::Delay(d) => (d.execution_id.clone(), Some(d.delay_id)),
        })
        .collect();
    assert_eq!(
        order,
        vec![
            (first.clone(), Some(d1)),
            (first, Some(d2)),
            (second.clone(), None),
            (second.clone(), Some(d1)),
            (second, Some(d2))
        ]
    );
}

#[test]
fn a_hub_closes_once_and_refuses_afterwards() {
    let hub = WaiterHub::new();
    assert!(hub.ensure_open().is_ok());
    assert!(hub.close(), "the first close closes");
    assert!(!hub.close(), "a second close is a no-op");
    assert!(matches!(hub.ensure_open(), Err(DbError::Closed)));
}
