//! Unit tests of the lifecycle rules (LIFECYCLE.md) without a backend: derived child ids,
//! stubs, `cancel` over a tree, `complete` of a stub and `prune` of finished trees, each write
//! loaded key by key from a hand-built table of rows, the way a backend loads it.

use super::tests::{Planned, at, create_request, ffqn, join_set, pending, row};
use super::*;
use crate::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest, DbError,
    DelayId, DuplicateKind, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutorId,
    FinishedExecutionError, FinishedExecutionResult, FunctionFqn, HistoryEvent, JoinSetId,
    JoinSetRequest, JoinSetResponse, JoinSetResponseEvent, JoinSetResponseEventOuter, Json,
    LockPendingRequest, PendingState, PruneOutcome, PruneRequest, ResultKind, RunId,
    SupportedFunctionReturnValue, ValidationError, Version,
};
use chrono::{DateTime, Utc};
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

type Outcome = FinishedExecutionResult;

/// What a backend stores, as far as the lifecycle writes read it.
#[derive(Debug, Default)]
struct Table {
    rows: BTreeMap<ExecutionId, ExecutionRow>,
    results: HashMap<ExecutionId, Outcome>,
    open_delays: HashMap<ExecutionId, Vec<DelayId>>,
    join_sets: HashMap<(ExecutionId, JoinSetId), JoinSetRow>,
    child_responses: HashSet<(ExecutionId, ExecutionId)>,
}

impl Table {
    fn add(&mut self, row: ExecutionRow) {
        self.rows.insert(row.execution_id.clone(), row);
    }

    /// Adds `row` finished at `finished_at` with `result`, at its next version.
    fn add_finished(&mut self, mut row: ExecutionRow, finished_at: i64, result: Outcome) {
        row.state.pending_state = PendingState::Finished {
            version: row.state.next_version,
            finished_at: at(finished_at),
            result_kind: ResultKind::of(&result),
        };
        self.results.insert(row.execution_id.clone(), result);
        self.add(row);
    }

    /// The join set `join_set()` of `execution_id` with these counters.
    fn join_set(&mut self, execution_id: &ExecutionId, join_next_count: u64, response_count: u64) {
        let counters = counters(join_next_count, response_count);
        let row = JoinSetRow {
            counters,
            next_response_times: Vec::new(),
        };
        self.join_sets
            .insert((execution_id.clone(), join_set()), row);
    }

    /// Loads `keys` into `snapshot` as every backend must.
    fn load(&self, keys: &Keys, snapshot: &mut Snapshot) {
        for id in keys.executions.iter().chain(&keys.new_executions) {
            if let Some(row) = self.rows.get(id) {
                snapshot.add_execution(row.clone());
            }
        }
        for root in &keys.subtrees {
            let (low, high) = descendant_bounds(root);
            let found: Vec<ExecutionRow> = (self.rows.values())
                .filter(|r| (low.as_str()..high.as_str()).contains(&r.execution_id.as_str()))
                .cloned()
                .collect();
            let ids = found.iter().map(|r| r.execution_id.clone()).collect();
            snapshot.subtrees.insert(root.clone(), ids);
            found.into_iter().for_each(|r| snapshot.add_execution(r));
        }
        for id in &keys.finished_results {
            if let Some(result) = self.results.get(id) {
                snapshot.finished_results.insert(id.clone(), result.clone());
            }
        }
        for id in &keys.open_delays {
            if let Some(open) = self.open_delays.get(id) {
                snapshot.open_delays.insert(id.clone(), open.clone());
            }
        }
        for key in &keys.join_sets {
            let key = (key.execution_id.clone(), key.join_set_id.clone());
            if let Some(row) = self.join_sets.get(&key) {
                snapshot.join_sets.insert(key, row.clone());
            }
        }
        for pair in &keys.child_responses {
            if self.child_responses.contains(pair) {
                snapshot.child_responses.insert(pair.clone());
            }
        }
        if let Some(query) = &keys.prune {
            let mut found: Vec<(DateTime<Utc>, &ExecutionId)> = (self.rows.values())
                .filter_map(|r| match r.state.pending_state {
                    PendingState::Finished { finished_at, .. } if r.execution_id.is_top_level() => {
                        Some((finished_at, &r.execution_id))
                    }
                    _ => None,
                })
                .filter(|(t, _)| *t < query.finished_before)
                .filter(|(t, id)| {
                    query
                        .after
                        .as_ref()
                        .is_none_or(|(a, a_id)| (t, *id) > (a, a_id))
                })
                .collect();
            found.sort();
            for (_, id) in found.into_iter().take(query.limit) {
                snapshot.prune_candidates.push(id.clone());
                snapshot.add_execution(self.rows[id].clone());
            }
        }
    }

    /// The protocol of every backend: keys, load, follow-up keys, load, plan.
    fn write<W: Write>(&self, request: W) -> Result<Planned<W::Reply>, DbError> {
        let keys = request.keys()?;
        let mut snapshot = Snapshot::default();
        self.load(&keys, &mut snapshot);
        if let Some(more) = request.follow_up_keys(&snapshot) {
            self.load(&more, &mut snapshot);
        }
        let (plan, reply) = plan(&snapshot, request)?;
        super::tests::assert_revisions_move(&snapshot, &plan);
        Ok(Planned { plan, reply })
    }
}

fn child_row(parent: &ExecutionId, idx: u64, version: u32, state: PendingState) -> ExecutionRow {
    let id = parent.next_level(&join_set(), idx);
    ExecutionRow {
        parent: Some((parent.clone(), join_set())),
        ..row(&id, version, state)
    }
}

fn counters(join_next_count: u64, response_count: u64) -> JoinSetCounters {
    JoinSetCounters {
        join_next_count,
        response_count,
    }
}

fn locked(lock_expires_at: i64) -> PendingState {
    PendingState::Locked {
        executor_id: ExecutorId::generate_at(at(0)),
        run_id: RunId::generate_at(at(0)),
        lock_expires_at: at(lock_expires_at),
    }
}

fn blocked() -> PendingState {
    PendingState::BlockedByJoinSet {
        join_set_id: join_set(),
        lock_expires_at: at(5),
        closing: false,
    }
}

fn cancelled() -> Outcome {
    Err(FinishedExecutionError::Cancelled {
        reason: "stop".to_owned(),
    })
}

fn ok_none() -> Outcome {
    Ok(SupportedFunctionReturnValue::None)
}

fn cancel(execution_id: &ExecutionId) -> CancelRequest {
    CancelRequest {
        execution_id: execution_id.clone(),
        now: at(9),
        reason: "stop".to_owned(),
    }
}

/// The event and state of an execution finished at `at(9)` at `version`.
fn finished_at_9(version: u32, result: Outcome) -> (ExecutionEvent, PendingState) {
    let state = PendingState::Finished {
        version: Version(version),
        finished_at: at(9),
        result_kind: ResultKind::of(&result),
    };
    let event = ExecutionEvent {
        created_at: at(9),
        event: ExecutionEventInner::Finished { result },
    };
    (event, state)
}

/// The response a child finished at `at(9)` sends its parent.
fn child_finished(child: &ExecutionId, version: u32, result: Outcome) -> JoinSetResponseEventOuter {
    JoinSetResponseEventOuter {
        created_at: at(9),
        event: JoinSetResponseEvent {
            join_set_id: join_set(),
            event: JoinSetResponse::ChildExecutionFinished {
                child_execution_id: child.clone(),
                finished_version: Version(version),
                result,
            },
        },
    }
}

fn cancelled_members(executions: usize) -> CancelOutcome {
    CancelOutcome::Cancelled { executions }
}

fn assert_writes_nothing(plan: &WritePlan) {
    let nothing = plan.changes.is_empty() && plan.wakeups.is_empty();
    assert!(nothing, "{plan:?}");
}

/// The responses a change stores.
fn responses(change: &ExecutionChange) -> Vec<&JoinSetResponseEventOuter> {
    change.responses.iter().map(|r| &r.response).collect()
}

/// An execution of `ffqn()` is due at `at(9)`.
fn due_at_9() -> Wakeup {
    Wakeup::Pending {
        ffqn: ffqn(),
        at: at(9),
    }
}

fn invalid_request(err: &DbError) -> &str {
    match err {
        DbError::Validation(ValidationError::InvalidRequest(message)) => message,
        other => panic!("expected an invalid request, got {other:?}"),
    }
}

#[test]
fn a_child_id_is_derived_from_its_parent_and_join_set() {
    let parent = ExecutionId::generate_at(at(0));
    let derived = parent.next_level(&join_set(), 1);
    let as_child = |id: &ExecutionId| create_request(id, Some((parent.clone(), join_set())));
    assert!(as_child(&derived).keys().is_ok());
    let other_join_set: JoinSetId = "n:other".parse().unwrap();
    let not_derived = [
        ExecutionId::generate_at(at(1)).next_level(&join_set(), 1),
        parent.next_level(&other_join_set, 1),
        derived.next_level(&join_set(), 1),
        ExecutionId::generate_at(at(2)),
    ];
    for id in &not_derived {
        let err = as_child(id).keys().unwrap_err();
        let js = join_set();
        let expected = format!(
            "execution {id} is created as a child of {parent} in join set {js}, so its id must \
             be `{parent}.{js}_<index>` (`ExecutionId::next_level`)"
        );
        assert_eq!(invalid_request(&err), expected);
    }
    let err = create_request(&derived, None).keys().unwrap_err();
    assert_eq!(
        invalid_request(&err),
        format!(
            "execution {derived} has a child's id (of {parent}), but the request names no parent"
        )
    );

    // The same rule for every item of a batch and every child of `append_batch`.
    let top_level = create_request(&ExecutionId::generate_at(at(3)), None);
    let batch = CreateBatch(vec![top_level, as_child(&not_derived[0])]);
    invalid_request(&batch.keys().unwrap_err());
    let announce = |child_execution_id: &ExecutionId| ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: join_set(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: child_execution_id.clone(),
            },
        },
    };
    let append = |child: &ExecutionId| AppendBatchRequest {
        execution_id: parent.clone(),
        version: Version(2),
        now: at(1),
        events: vec![announce(child)],
        children: vec![as_child(child)],
        leases: Vec::new(),
        answers: Vec::new(),
    };
    assert!(append(&derived).keys().is_ok());
    let err = append(&not_derived[1]).keys().unwrap_err();
    assert!(
        invalid_request(&err).contains("ExecutionId::next_level"),
        "{err}"
    );
}

#[test]
fn lock_pending_refuses_to_name_a_stub() {
    let stub = FunctionFqn::stub("approval").unwrap();
    assert!(stub.is_stub() && !ffqn().is_stub());
    assert_eq!(stub.to_string(), "stele:stub.approval");
    let request = LockPendingRequest {
        batch_size: 10,
        pending_at_or_sooner: at(5),
        ffqns: Arc::from([ffqn(), stub.clone()]),
        now: at(5),
        component_id: "activity:test".parse().unwrap(),
        executor_id: ExecutorId::generate_at(at(0)),
        lock_expires_at: at(9),
    };
    let err = request.keys().unwrap_err();
    assert_eq!(
        invalid_request(&err),
        format!(
            "function {stub} is a stub: no executor runs it, `complete` finishes its executions"
        )
    );
}

#[test]
fn cancel_finishes_a_pending_locked_or_blocked_execution_at_its_version() {
    for state in [pending(3), locked(50), blocked()] {
        let id = ExecutionId::generate_at(at(0));
        let mut table = Table::default();
        table.add(row(&id, 4, state.clone()));
        let plan = table.write(cancel(&id)).unwrap();
        assert_eq!(plan.reply, cancelled_members(1), "{state:?}");
        let [change] = plan.changes.as_slice() else {
            panic!("one change expected: {plan:?}");
        };
        let (event, finished) = finished_at_9(4, cancelled());
        assert_eq!(change.old_state.as_ref(), Some(&state));
        assert_eq!(change.events[..], [(Version(4), event)]);
        assert_eq!(change.row.state.pending_state, finished);
        assert_eq!(change.row.state.next_version, Version(4));
        assert!(change.responses.is_empty() && change.delays_closed.is_empty());
        assert_eq!(plan.wakeups[..], [Wakeup::Finished(id.clone())]);
        assert!(plan.deleted.is_empty());
    }
}

#[test]
fn cancel_of_a_finished_execution_writes_nothing_and_says_how_it_finished() {
    let done = ExecutionId::generate_at(at(0));
    let cancelled_before = ExecutionId::generate_at(at(1));
    let mut table = Table::default();
    table.add_finished(row(&done, 3, pending(0)), 2, ok_none());
    table.add_finished(row(&cancelled_before, 2, pending(0)), 4, cancelled());
    for (id, result) in [(&done, ok_none()), (&cancelled_before, cancelled())] {
        let mut snapshot = Snapshot::default();
        table.load(&cancel(id).keys().unwrap(), &mut snapshot);
        assert_eq!(
            cancel(id).follow_up_keys(&snapshot),
            None,
            "nothing more to read"
        );
        let plan = table.write(cancel(id)).unwrap();
        assert_eq!(plan.reply, CancelOutcome::AlreadyFinished { result });
        assert_writes_nothing(&plan);
    }
    let unknown = ExecutionId::generate_at(at(2));
    assert!(matches!(
        table.write(cancel(&unknown)),
        Err(DbError::NotFound(_))
    ));
}

#[test]
fn cancel_of_a_child_answers_its_waiting_parent() {
    let parent = ExecutionId::generate_at(at(0));
    let mut table = Table::default();
    table.add(row(&parent, 5, blocked()));
    table.join_set(&parent, 1, 0);
    let child = child_row(&parent, 1, 3, locked(50));
    let child_id = child.execution_id.clone();
    table.add(child);
    let keys = cancel(&child_id).keys().unwrap();
    assert_eq!(
        keys.executions[..],
        [parent.clone(), child_id.clone()],
        "parent first"
    );
    let plan = table.write(cancel(&child_id)).unwrap();
    assert_eq!(plan.reply, cancelled_members(1));
    let [child_change, parent_change] = plan.changes.as_slice() else {
        panic!("two changes expected: {plan:?}");
    };
    assert_eq!(child_change.row.execution_id, child_id);
    assert_eq!(
        child_change.row.state.pending_state,
        finished_at_9(3, cancelled()).1
    );
    let response = &parent_change.responses[0];
    assert_eq!((response.idx, response.join_set_idx), (0, 0));
    assert_eq!(
        responses(parent_change),
        [&child_finished(&child_id, 3, cancelled())]
    );
    assert_eq!(
        parent_change.row.state.pending_state,
        pending(9),
        "unblocked"
    );
    assert_eq!(
        plan.wakeups[..],
        [
            Wakeup::Finished(child_id),
            Wakeup::Responses(parent),
            due_at_9()
        ]
    );
}

/// Cancels a three-level tree: the root, a blocked child with a locked and a pending child
/// of its own, and a finished child that is left alone.
#[test]
fn cancel_finishes_the_unfinished_tree_with_each_parent_answered_and_delays_closed() {
    let root = ExecutionId::generate_at(at(0));
    let mut table = Table::default();
    let root_row = ExecutionRow {
        response_count: 1,
        ..row(&root, 6, blocked())
    };
    table.add(root_row);
    table.join_set(&root, 2, 1);
    let child = child_row(&root, 1, 5, blocked());
    let child_id = child.execution_id.clone();
    table.add(child);
    table.join_set(&child_id, 1, 0);
    let done = child_row(&root, 2, 2, pending(0));
    let done_id = done.execution_id.clone();
    table.add_finished(done, 3, ok_none());
    table
        .child_responses
        .insert((root.clone(), done_id.clone()));
    let locked_grandchild = child_row(&child_id, 1, 3, locked(50));
    let pending_grandchild = child_row(&child_id, 2, 1, pending(0));
    let (g1, g2) = (
        locked_grandchild.execution_id.clone(),
        pending_grandchild.execution_id.clone(),
    );
    table.add(locked_grandchild);
    table.add(pending_grandchild);
    let (root_delay, g1_delay) = (DelayId::generate_at(at(0)), DelayId::generate_at(at(1)));
    table.open_delays.insert(root.clone(), vec![root_delay]);
    table.open_delays.insert(g1.clone(), vec![g1_delay]);

    // What a backend is asked to load: the whole tree first, then what the members answer
    // and close, each join set named once.
    let keys = cancel(&root).keys().unwrap();
    assert_eq!(keys.executions[..], *std::slice::from_ref(&root));
    assert_eq!(keys.finished_results, std::slice::from_ref(&root));
    assert_eq!(keys.subtrees, std::slice::from_ref(&root));
    let mut snapshot = Snapshot::default();
    table.load(&keys, &mut snapshot);
    assert_eq!(
        snapshot.subtrees[&root],
        [child_id.clone(), g1.clone(), g2.clone(), done_id.clone()]
    );
    let more = cancel(&root).follow_up_keys(&snapshot).unwrap();
    let members = [root.clone(), child_id.clone(), g1.clone(), g2.clone()];
    assert_eq!(more.open_delays, members);
    let named: Vec<_> = (more.join_sets.iter())
        .map(|k| (k.execution_id.clone(), k.next_responses))
        .collect();
    assert_eq!(named, [(root.clone(), 0), (child_id.clone(), 0)]);
    assert_eq!(
        more.child_responses,
        [
            (root.clone(), child_id.clone()),
            (child_id.clone(), g1.clone()),
            (child_id.clone(), g2.clone())
        ]
    );

    let plan = table.write(cancel(&root)).unwrap();
    assert_eq!(plan.reply, cancelled_members(4));
    let changed: Vec<_> = plan.changes.iter().map(|c| &c.row.execution_id).collect();
    assert_eq!(
        changed,
        members.iter().collect::<Vec<_>>(),
        "parents first, the finished child untouched"
    );
    for (change, version) in plan.changes.iter().zip([6, 5, 3, 1]) {
        let (event, state) = finished_at_9(version, cancelled());
        assert_eq!(
            change.events[..],
            [(Version(version), event)],
            "{}",
            change.row.execution_id
        );
        assert_eq!(change.row.state.pending_state, state);
    }
    let [root_change, child_change, g1_change, g2_change] = plan.changes.as_slice() else {
        unreachable!("four changes, checked above");
    };
    // Each parent is answered after the responses it had, in its join set's order.
    let placed = |change: &ExecutionChange| -> Vec<_> {
        (change.responses.iter())
            .map(|r| (r.idx, r.join_set_idx, r.response.clone()))
            .collect()
    };
    assert_eq!(
        placed(root_change),
        [(1, 1, child_finished(&child_id, 5, cancelled()))]
    );
    assert_eq!(
        placed(child_change),
        [
            (0, 0, child_finished(&g1, 3, cancelled())),
            (1, 1, child_finished(&g2, 1, cancelled()))
        ]
    );
    assert_eq!(root_change.join_sets, [(join_set(), counters(2, 2))]);
    assert_eq!(child_change.join_sets, [(join_set(), counters(1, 2))]);
    assert_eq!(root_change.row.response_count, 2);
    assert_eq!(root_change.delays_closed, [root_delay]);
    assert_eq!(g1_change.delays_closed, [g1_delay]);
    assert!(child_change.delays_closed.is_empty() && g2_change.delays_closed.is_empty());
    assert!(g1_change.responses.is_empty() && g2_change.responses.is_empty());
    assert_eq!(
        plan.wakeups[..],
        [
            Wakeup::Responses(root.clone()),
            Wakeup::Finished(root),
            Wakeup::Responses(child_id.clone()),
            Wakeup::Finished(child_id),
            Wakeup::Finished(g1),
            Wakeup::Finished(g2),
        ]
    );
}

#[test]
fn a_cancelled_descendant_answers_its_parent_that_finished_earlier() {
    let root = ExecutionId::generate_at(at(0));
    let mut table = Table::default();
    table.add(row(&root, 2, pending(0)));
    let timed_out = child_row(&root, 1, 4, pending(0));
    let timed_out_id = timed_out.execution_id.clone();
    let timeout = Err(FinishedExecutionError::PermanentTimeout);
    table.add_finished(timed_out, 3, timeout.clone());
    let orphan = child_row(&timed_out_id, 1, 1, pending(0));
    let orphan_id = orphan.execution_id.clone();
    table.add(orphan);
    let plan = table.write(cancel(&root)).unwrap();
    assert_eq!(plan.reply, cancelled_members(2));
    let parent_change = (plan.changes.iter())
        .find(|c| c.row.execution_id == timed_out_id)
        .expect("the finished parent receives the response");
    assert!(parent_change.events.is_empty());
    assert_eq!(
        parent_change.old_state.as_ref(),
        Some(&parent_change.row.state.pending_state)
    );
    let expected = child_finished(&orphan_id, 1, cancelled());
    assert_eq!(responses(parent_change), [&expected]);
    assert!(!plan.wakeups.contains(&Wakeup::Finished(timed_out_id)));
}

fn stub_row(execution_id: &ExecutionId, parent: Option<&ExecutionId>) -> ExecutionRow {
    ExecutionRow {
        ffqn: FunctionFqn::stub("approval").unwrap(),
        parent: parent.map(|p| (p.clone(), join_set())),
        ..row(execution_id, 1, pending(0))
    }
}

fn value(text: &str) -> SupportedFunctionReturnValue {
    SupportedFunctionReturnValue::InfallibleOrResultOk(Json(serde_json::json!(text)))
}

fn complete(execution_id: &ExecutionId, text: &str) -> CompleteRequest {
    CompleteRequest {
        execution_id: execution_id.clone(),
        now: at(9),
        value: value(text),
    }
}

#[test]
fn complete_finishes_a_stub_once_and_answers_its_parent() {
    let parent = ExecutionId::generate_at(at(0));
    let stub = parent.next_level(&join_set(), 1);
    let mut table = Table::default();
    table.add(row(&parent, 4, blocked()));
    table.join_set(&parent, 1, 0);
    table.add(stub_row(&stub, Some(&parent)));
    let keys = complete(&stub, "yes").keys().unwrap();
    assert_eq!(keys.executions[..], [parent.clone(), stub.clone()]);
    assert_eq!(keys.child_responses, [(parent.clone(), stub.clone())]);
    assert_eq!(keys.finished_results, std::slice::from_ref(&stub));

    let plan = table.write(complete(&stub, "yes")).unwrap();
    assert_eq!(plan.reply, CompleteOutcome::Completed);
    let [stub_change, parent_change] = plan.changes.as_slice() else {
        panic!("two changes expected: {plan:?}");
    };
    let (event, state) = finished_at_9(1, Ok(value("yes")));
    assert_eq!(stub_change.events[..], [(Version(1), event)]);
    assert_eq!(stub_change.row.state.pending_state, state);
    let expected = child_finished(&stub, 1, Ok(value("yes")));
    assert_eq!(responses(parent_change), [&expected]);
    assert_eq!(parent_change.row.state.pending_state, pending(9));
    assert_eq!(
        plan.wakeups[..],
        [
            Wakeup::Finished(stub.clone()),
            Wakeup::Responses(parent.clone()),
            due_at_9()
        ]
    );

    // Completed: the same value again writes nothing, another value is refused.
    table.add_finished(stub_row(&stub, Some(&parent)), 9, Ok(value("yes")));
    table.child_responses.insert((parent.clone(), stub.clone()));
    let again = table.write(complete(&stub, "yes")).unwrap();
    assert_eq!(again.reply, CompleteOutcome::AlreadyCompleted);
    assert_writes_nothing(&again);
    let err = table.write(complete(&stub, "no")).unwrap_err();
    assert!(
        matches!(&err, DbError::Duplicate(DuplicateKind::Completion { execution_id, .. }) if *execution_id == stub),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "duplicate: execution {stub} was already completed with a different result: \
             the value \"yes\""
        )
    );
    // A cancelled promise cannot be completed either.
    table.add_finished(stub_row(&stub, Some(&parent)), 9, cancelled());
    let err = table.write(complete(&stub, "yes")).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("a different result: cancelled: stop"),
        "{err}"
    );
}

#[test]
fn complete_needs_an_existing_stub() {
    let mut table = Table::default();
    let top_level_stub = ExecutionId::generate_at(at(0));
    table.add(stub_row(&top_level_stub, None));
    let plan = table.write(complete(&top_level_stub, "yes")).unwrap();
    assert_eq!(plan.reply, CompleteOutcome::Completed);
    assert_eq!(plan.changes.len(), 1, "no parent to answer");

    let runs = ExecutionId::generate_at(at(1));
    table.add(row(&runs, 2, locked(50)));
    let err = table.write(complete(&runs, "yes")).unwrap_err();
    assert!(
        invalid_request(&err).starts_with(&format!(
            "execution {runs} runs {}, which is not a stub",
            ffqn()
        )),
        "{err}"
    );
    let unknown = ExecutionId::generate_at(at(2));
    assert!(matches!(
        table.write(complete(&unknown, "yes")),
        Err(DbError::NotFound(_))
    ));
}

fn prune(finished_before: i64, limit: usize, after: Option<(i64, &ExecutionId)>) -> PruneRequest {
    PruneRequest {
        finished_before: at(finished_before),
        limit,
        after: after.map(|(t, id)| (at(t), id.clone())),
    }
}

fn counted(
    trees: usize,
    executions: usize,
    kept: usize,
    next: Option<(i64, &ExecutionId)>,
) -> PruneOutcome {
    let next = next.map(|(t, id)| (at(t), id.clone()));
    PruneOutcome {
        trees,
        executions,
        kept,
        next,
    }
}

fn pruned(plan: Planned<PruneOutcome>) -> (PruneOutcome, Vec<ExecutionId>) {
    assert_writes_nothing(&plan);
    (plan.reply, plan.plan.deleted.to_vec())
}

/// Top-level executions finished at 10 (a finished tree of three), 20 (a child still
/// pending), 30 (two, alone), 100 (too recent), and one pending: their ids, in that order.
fn retention_table() -> (Table, [ExecutionId; 6], [ExecutionId; 3]) {
    let mut table = Table::default();
    let ids: Vec<_> = (0..6).map(|i| ExecutionId::generate_at(at(i))).collect();
    let ids: [ExecutionId; 6] = ids.try_into().unwrap();
    assert!(
        ids[2] < ids[3],
        "ids grow with their time: the tie at 30 goes by id"
    );
    for (id, finished_at) in ids.iter().zip([10, 20, 30, 30, 100]) {
        table.add_finished(row(id, 3, pending(0)), finished_at, ok_none());
    }
    table.add(row(&ids[5], 1, pending(0)));
    let child = child_row(&ids[0], 1, 2, pending(0));
    let grandchild = child_row(&child.execution_id, 1, 2, pending(0));
    let unfinished = child_row(&ids[1], 1, 1, pending(0));
    let children = [
        child.execution_id.clone(),
        grandchild.execution_id.clone(),
        unfinished.execution_id.clone(),
    ];
    table.add_finished(child, 8, ok_none());
    table.add_finished(grandchild, 7, ok_none());
    table.add(unfinished);
    (table, ids, children)
}

#[test]
fn prune_deletes_whole_finished_trees_and_keeps_the_others() {
    let (table, ids, [child, grandchild, _]) = retention_table();
    let (outcome, deleted) = pruned(table.write(prune(50, 10, None)).unwrap());
    assert_eq!(outcome, counted(3, 5, 1, None));
    assert_eq!(
        deleted,
        [
            ids[0].clone(),
            child,
            grandchild,
            ids[2].clone(),
            ids[3].clone()
        ]
    );
    let (nothing, deleted) = pruned(table.write(prune(10, 10, None)).unwrap());
    assert_eq!(
        (nothing, deleted),
        (PruneOutcome::default(), Vec::new()),
        "strictly before"
    );
    let err = table.write(prune(50, 0, None)).unwrap_err();
    assert!(
        invalid_request(&err).contains("`limit` must be at least 1"),
        "{err}"
    );
}

#[test]
fn prune_examines_at_most_limit_trees_and_continues_after_its_cursor() {
    let (table, ids, [child, grandchild, _]) = retention_table();
    let (first, deleted) = pruned(table.write(prune(50, 2, None)).unwrap());
    assert_eq!(first, counted(1, 3, 1, Some((20, &ids[1]))));
    assert_eq!(deleted, [ids[0].clone(), child, grandchild]);
    // Exactly `limit` candidates: the cursor is given, and the next call finds the end.
    let (second, deleted) = pruned(table.write(prune(50, 2, Some((20, &ids[1])))).unwrap());
    assert_eq!(second, counted(2, 2, 0, Some((30, &ids[3]))));
    assert_eq!(deleted, [ids[2].clone(), ids[3].clone()]);
    let (last, _) = pruned(table.write(prune(50, 2, Some((30, &ids[3])))).unwrap());
    assert_eq!(last, PruneOutcome::default());
    // A cursor between two executions finished at the same time: ties go by id.
    let (tie, deleted) = pruned(table.write(prune(50, 2, Some((30, &ids[2])))).unwrap());
    assert_eq!((tie.trees, tie.next), (1, None));
    assert_eq!(deleted, [ids[3].clone()]);
}
