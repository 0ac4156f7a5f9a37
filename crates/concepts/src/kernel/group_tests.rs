//! Unit tests of writes planned together: the group planner (each write on what the earlier
//! ones left, a refused one refusing only itself, one change per execution), the union of
//! keys, and plans on known rows.

use super::tests::{assert_revisions_move, at, create_request, join_set, pending, row};
use super::*;
use crate::{
    AppendBatchRequest, CompleteOutcome, CompleteRequest, DbErrorKind, ExecutionEventInner,
    ExecutionId, ExecutorId, FunctionFqn, HistoryEvent, JoinSetResponse, OutcomeWrite,
    PendingState, RunId, SupportedFunctionReturnValue, Version,
};

fn join_next() -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinNext {
            join_set_id: join_set(),
            run_expires_at: at(10),
            closing: false,
        },
    }
}

fn locked() -> PendingState {
    PendingState::Locked {
        executor_id: ExecutorId::generate_at(at(0)),
        run_id: RunId::generate_at(at(0)),
        lock_expires_at: at(10),
    }
}

fn finish(
    id: &ExecutionId,
    version: u32,
    parent: Option<&(ExecutionId, crate::JoinSetId)>,
) -> OutcomeWrite {
    let result = Ok(SupportedFunctionReturnValue::None);
    let event = ExecutionEventInner::Finished { result };
    OutcomeWrite::new(id.clone(), Version(version), at(5), event, parent)
}

/// Plans `writes` as one group on the snapshot loaded for the union of their keys.
fn group_of(snapshot: Snapshot, plan_all: impl FnOnce(&mut GroupPlanner<'_>)) -> WritePlan {
    let before = snapshot.clone();
    let mut group = GroupPlanner::owning(snapshot);
    plan_all(&mut group);
    let plan = group.finish();
    assert_revisions_move(&before, &plan);
    plan
}

#[test]
fn a_write_sees_what_the_writes_before_it_in_its_group_left() {
    let id = ExecutionId::generate_at(at(0));
    let create = create_request(&id, None);
    let append = AppendBatchRequest::events(id.clone(), Version(1), at(1), vec![join_next()]);
    let keys = Keys::union([&create.keys().unwrap(), &append.keys().unwrap()]);
    assert_eq!(keys.new_executions, std::slice::from_ref(&id));
    assert_eq!(keys.executions[..], *std::slice::from_ref(&id));
    let plan = group_of(Snapshot::default(), |group| {
        assert_eq!(
            group.plan(create.clone()).unwrap(),
            crate::CreateOutcome::Created
        );
        // The append sees the execution the create made; a second create is its repeat.
        assert_eq!(group.plan(append).unwrap(), Version(2));
        let again = group.plan(create).unwrap();
        assert!(
            matches!(again, crate::CreateOutcome::AlreadyExisted { .. }),
            "{again:?}"
        );
    });
    assert_eq!(plan.changes.len(), 1, "one change per execution");
    let change = &plan.changes[0];
    assert!(change.is_new());
    assert_eq!(change.events.len(), 2);
    assert_eq!(change.row.state.next_version, Version(2));
}

#[test]
fn a_refused_write_refuses_only_itself() {
    let id = ExecutionId::generate_at(at(0));
    let mut snapshot = Snapshot::default();
    snapshot.add_execution(row(&id, 2, locked()));
    let plan = group_of(snapshot, |group| {
        let stale = group.plan(finish(&id, 1, None)).unwrap_err();
        assert_eq!(stale.kind(), DbErrorKind::VersionMismatch);
        assert_eq!(group.plan(finish(&id, 2, None)).unwrap(), Version(2));
        // Now finished: a later outcome is refused on what the accepted one left.
        assert!(crate::is_lost_race(
            &group.plan(finish(&id, 2, None)).unwrap_err()
        ));
    });
    assert_eq!(plan.changes.len(), 1);
    assert_eq!(plan.changes[0].events.len(), 1);
    assert_eq!(plan.wakeups[..], [Wakeup::Finished(id)]);
}

#[test]
fn a_childs_answer_is_consumed_by_its_parents_join_next_in_the_same_group() {
    let parent = ExecutionId::generate_at(at(0));
    let child = parent.next_level(&join_set(), 1);
    let child_row = ExecutionRow {
        parent: Some((parent.clone(), join_set())),
        ..row(&child, 2, locked())
    };
    let outcome = finish(&child, 2, child_row.parent.as_ref());
    let append = AppendBatchRequest::events(parent.clone(), Version(4), at(6), vec![join_next()]);
    let keys = Keys::union([&outcome.keys().unwrap(), &append.keys().unwrap()]);
    assert_eq!(keys.join_sets.len(), 1, "the join set is named once");
    assert_eq!(keys.join_sets[0].next_responses, 1);
    let mut snapshot = Snapshot::default();
    snapshot.add_execution(row(&parent, 4, locked()));
    snapshot.add_execution(child_row);
    let plan = group_of(snapshot, |group| {
        assert_eq!(group.plan(outcome).unwrap(), Version(2));
        assert_eq!(group.plan(append).unwrap(), Version(5));
    });
    let parent_change = plan
        .changes
        .iter()
        .find(|c| c.row.execution_id == parent)
        .unwrap();
    assert_eq!(parent_change.responses.len(), 1);
    assert_eq!(parent_change.events.len(), 1);
    let counters = JoinSetCounters {
        join_next_count: 1,
        response_count: 1,
    };
    assert_eq!(parent_change.join_sets, [(join_set(), counters)]);
    // The response was there when the JoinNext came: not blocked, due when the run expires.
    assert_eq!(parent_change.row.state.pending_state, pending(10));
}

#[test]
fn a_promise_completed_twice_in_one_group_is_completed_once() {
    let parent = ExecutionId::generate_at(at(0));
    let stub = parent.next_level(&join_set(), 1);
    let stub_row = ExecutionRow {
        ffqn: FunctionFqn::stub("approval").unwrap(),
        parent: Some((parent.clone(), join_set())),
        ..row(&stub, 1, pending(0))
    };
    let complete = CompleteRequest {
        execution_id: stub.clone(),
        now: at(3),
        value: SupportedFunctionReturnValue::InfallibleOrResultOk(serde_json::json!("yes").into()),
    };
    let mut snapshot = Snapshot::default();
    snapshot.add_execution(row(&parent, 4, locked()));
    snapshot.add_execution(stub_row);
    let plan = group_of(snapshot, |group| {
        assert_eq!(
            group.plan(complete.clone()).unwrap(),
            CompleteOutcome::Completed
        );
        assert_eq!(
            group.plan(complete).unwrap(),
            CompleteOutcome::AlreadyCompleted
        );
    });
    let answered: Vec<_> = (plan.changes.iter())
        .flat_map(|c| &c.responses)
        .map(|r| &r.response.event.event)
        .collect();
    assert!(
        matches!(
            answered[..],
            [JoinSetResponse::ChildExecutionFinished { .. }]
        ),
        "the parent is answered once: {answered:?}"
    );
}

#[test]
fn known_rows_plan_a_write_without_a_load_once_and_say_what_they_assume() {
    let id = ExecutionId::generate_at(at(0));
    let known = KnownRows::new(16);
    let lock = ExecutionChange {
        row: row(&id, 2, locked()),
        old_state: Some(PendingState::PendingAt {
            scheduled_at: at(0),
        }),
        events: smallvec::SmallVec::new(),
        responses: ThinVec::new(),
        join_sets: ThinVec::new(),
        delays_requested: ThinVec::new(),
        delays_closed: ThinVec::new(),
    };
    known.remember(&WritePlan {
        changes: vec![lock.clone()],
        ..WritePlan::default()
    });
    let outcome = finish(&id, 2, None);
    let keys = outcome.keys().unwrap();
    // Only when asked for rows the store knows.
    assert!(known.assume(&keys, false).is_none());
    known.remember(&WritePlan {
        changes: vec![lock.clone()],
        ..WritePlan::default()
    });
    let (snapshot, assumption) = known.assume(&keys, true).expect("the row is known");
    assert_eq!(assumption.revisions, [(id.clone(), lock.row.revision())]);
    assert!(assumption.absent.is_empty());
    plan(&snapshot, outcome).unwrap();
    assert!(
        known.assume(&keys, true).is_none(),
        "a known row is used once"
    );

    // A create assumes its id absent, and a duplicate of it refutes that.
    let other = ExecutionId::generate_at(at(1));
    let (empty, assumption) = known
        .assume(&create_request(&other, None).keys().unwrap(), false)
        .unwrap();
    assert!(empty.executions.is_empty());
    assert!(assumption.refuted_by(&crate::DuplicateKind::Execution(other).into()));
    assert!(!assumption.refuted_by(&crate::DuplicateKind::Execution(id).into()));
}

#[test]
fn known_rows_carry_the_join_sets_their_plan_wrote_for_the_next_step_of_a_workflow() {
    let parent = ExecutionId::generate_at(at(0));
    let child = parent.next_level(&join_set(), 1);
    let link = (parent.clone(), join_set());
    let child_row = ExecutionRow {
        parent: Some(link.clone()),
        ..row(&child, 2, locked())
    };
    let mut loaded = Snapshot::default();
    loaded.add_execution(row(&parent, 3, locked()));
    loaded.add_execution(child_row);
    let counters = |join_next_count, response_count| JoinSetCounters {
        join_next_count,
        response_count,
    };
    loaded.join_sets.insert(
        link.clone(),
        JoinSetRow {
            counters: counters(1, 0),
            next_response_times: Vec::new(),
        },
    );
    // The child's outcome answers the parent's one `JoinNext`: its plan wrote the join set.
    let (outcome_plan, _) = plan(&loaded, finish(&child, 2, Some(&link))).unwrap();
    let known = KnownRows::new(16);
    known.remember(&outcome_plan);
    // The parent's next step, a `JoinNext` for a response not there yet: planned on the known
    // row and counters, as on a load.
    let step = AppendBatchRequest::events(parent.clone(), Version(3), at(6), vec![join_next()]);
    let keys = step.keys().unwrap();
    let (snapshot, assumption) = known.assume(&keys, true).expect("all of it is known");
    assert_eq!(assumption.revisions.len(), 1);
    assert_eq!(snapshot.join_sets[&link].counters, counters(1, 1));
    let mut reloaded = Snapshot::default();
    reloaded.add_execution(outcome_plan.changes[1].row.clone());
    reloaded.join_sets.insert(
        link.clone(),
        JoinSetRow {
            counters: counters(1, 1),
            next_response_times: Vec::new(),
        },
    );
    assert_eq!(
        plan(&snapshot, step.clone()).unwrap().0,
        plan(&reloaded, step.clone()).unwrap().0
    );

    // A `JoinNext` that would consume a response already there needs its time: a load.
    let mut early = outcome_plan.clone();
    early.changes[1].join_sets[0].1 = counters(0, 1);
    known.remember(&early);
    assert!(known.assume(&keys, true).is_none());
    // A join set the known row's plan did not write: a load.
    let mut unwritten = outcome_plan.clone();
    unwritten.changes[1].join_sets.clear();
    known.remember(&unwritten);
    assert!(known.assume(&keys, true).is_none());
    // A child's outcome asks whether the parent holds its response: known only from the
    // child's unfinished row.
    let second = parent.next_level(&join_set(), 2);
    let answer = finish(&second, 2, Some(&link)).keys().unwrap();
    known.remember(&outcome_plan);
    assert!(
        known.assume(&answer, true).is_none(),
        "the child's row is unknown"
    );
    let mut with_child = outcome_plan.clone();
    with_child.changes[0].row = ExecutionRow {
        parent: Some(link.clone()),
        ..row(&second, 2, locked())
    };
    known.remember(&with_child);
    let (snapshot, _) = known.assume(&answer, true).expect("an unfinished child");
    assert!(snapshot.child_responses.is_empty());
    with_child.changes[0].row.state.pending_state = PendingState::Finished {
        version: Version(2),
        finished_at: at(5),
        result_kind: crate::ResultKind::Ok,
    };
    known.remember(&with_child);
    assert!(known.assume(&answer, true).is_none(), "a finished child");
}

#[test]
fn a_join_set_the_write_creates_is_assumed_without_counters_and_the_backend_checks_it() {
    let parent = ExecutionId::generate_at(at(0));
    let known = KnownRows::new(16);
    let locked_parent = ExecutionChange {
        row: row(&parent, 3, locked()),
        old_state: Some(locked()),
        events: smallvec::SmallVec::new(),
        responses: ThinVec::new(),
        join_sets: ThinVec::new(),
        delays_requested: ThinVec::new(),
        delays_closed: ThinVec::new(),
    };
    let create = ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetCreate {
            join_set_id: join_set(),
            closing_strategy: crate::ClosingStrategy::Complete,
        },
    };
    let step =
        AppendBatchRequest::events(parent.clone(), Version(3), at(6), vec![create, join_next()]);
    let keys = step.keys().unwrap();
    assert!(keys.join_sets[0].created && keys.join_sets[0].next_responses == 1);
    known.remember(&WritePlan {
        changes: vec![locked_parent.clone()],
        ..WritePlan::default()
    });
    let (snapshot, assumption) = known.assume(&keys, true).expect("a new join set");
    assert_eq!(
        assumption.absent_join_sets,
        [(parent.clone(), join_set())],
        "the backend checks that it has no counters"
    );
    assert_eq!(
        snapshot.join_sets[&(parent.clone(), join_set())],
        JoinSetRow::default()
    );
    plan(&snapshot, step).unwrap();
    // A `JoinNext` alone names a join set it does not create: unknown counters, a load.
    let next = AppendBatchRequest::events(parent.clone(), Version(3), at(6), vec![join_next()]);
    known.remember(&WritePlan {
        changes: vec![locked_parent],
        ..WritePlan::default()
    });
    assert!(known.assume(&next.keys().unwrap(), true).is_none());
}
