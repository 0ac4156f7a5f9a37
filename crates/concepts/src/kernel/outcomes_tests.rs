//! Unit tests of `append_outcomes` plans: writes planned one after the other on what the
//! earlier ones left, a refused one refusing only itself, one change per execution.

use super::tests::{at, join_set, row};
use super::*;
use crate::{
    DbErrorKind, ExecutionEventInner, ExecutionId, ExecutorId, FinishedExecutionError,
    JoinSetResponse, OutcomeWrite, PendingState, RunId, Version,
};

fn locked_child(parent: &ExecutionId, idx: u64) -> ExecutionRow {
    let child = parent.next_level(&join_set(), idx);
    ExecutionRow {
        parent: Some((parent.clone(), join_set())),
        ..row(
            &child,
            2,
            PendingState::Locked {
                executor_id: ExecutorId::generate_at(at(0)),
                run_id: RunId::generate_at(at(0)),
                lock_expires_at: at(10),
            },
        )
    }
}

fn timeout(row: &ExecutionRow, version: u32) -> OutcomeWrite {
    OutcomeWrite::new(
        row.execution_id.clone(),
        Version(version),
        at(11),
        ExecutionEventInner::Finished {
            result: Err(FinishedExecutionError::PermanentTimeout),
        },
        row.parent.as_ref(),
    )
}

#[test]
fn outcomes_are_planned_one_after_the_other_and_refused_one_by_one() {
    let parent = ExecutionId::generate_at(at(0));
    let children: Vec<ExecutionRow> = (1..=3).map(|idx| locked_child(&parent, idx)).collect();
    let blocked = PendingState::BlockedByJoinSet {
        join_set_id: join_set(),
        lock_expires_at: at(10),
        closing: false,
    };
    let mut snapshot = Snapshot::default();
    snapshot.add_execution(row(&parent, 5, blocked));
    for child in &children {
        snapshot.add_execution(child.clone());
    }
    // The second write is stale: its version moved on.
    let writes = vec![
        timeout(&children[0], 2),
        timeout(&children[1], 1),
        timeout(&children[2], 2),
    ];
    let request = AppendOutcomes(writes);
    let keys = request.keys().unwrap();
    assert_eq!(
        keys.executions.iter().filter(|id| **id == parent).count(),
        1,
        "the parent is named once"
    );
    let (plan, replies) = plan(&snapshot, request).unwrap();
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[0].as_ref().unwrap(), &Version(2));
    assert_eq!(
        replies[1].as_ref().unwrap_err().kind(),
        DbErrorKind::VersionMismatch
    );
    assert_eq!(replies[2].as_ref().unwrap(), &Version(2));

    assert_eq!(plan.changes.len(), 3, "two children and their parent, once");
    let parent_change = plan
        .changes
        .iter()
        .find(|c| c.row.execution_id == parent)
        .unwrap();
    let answered: Vec<(u64, u64, ExecutionId)> = parent_change
        .responses
        .iter()
        .map(|r| match &r.response.event.event {
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } => (r.idx, r.join_set_idx, child_execution_id.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        answered,
        vec![
            (0, 0, children[0].execution_id.clone()),
            (1, 1, children[2].execution_id.clone()),
        ],
        "consecutive indexes, the refused child's skipped"
    );
    assert_eq!(parent_change.row.response_count, 2);
    assert_eq!(
        parent_change.join_sets,
        vec![(
            join_set(),
            JoinSetCounters {
                join_next_count: 0,
                response_count: 2
            }
        )]
    );
    assert!(
        plan.changes
            .iter()
            .all(|c| c.row.execution_id != children[1].execution_id)
    );
    assert!(plan.wakeups.contains(&Wakeup::Responses(parent.clone())));
}

#[test]
fn a_repeated_outcome_in_one_batch_is_refused_by_the_first() {
    let parent = ExecutionId::generate_at(at(0));
    let child = locked_child(&parent, 1);
    let mut snapshot = Snapshot::default();
    snapshot.add_execution(row(&parent, 5, super::tests::pending(20)));
    snapshot.add_execution(child.clone());
    let request = AppendOutcomes(vec![timeout(&child, 2), timeout(&child, 2)]);
    request.keys().unwrap();
    let (_, replies) = plan(&snapshot, request).unwrap();
    assert!(replies[0].is_ok());
    assert!(crate::is_lost_race(replies[1].as_ref().unwrap_err()));
}

#[test]
fn an_empty_batch_of_outcomes_is_refused() {
    let err = AppendOutcomes(Vec::new()).keys().unwrap_err();
    assert!(err.to_string().contains("append_outcomes"), "{err}");
}
