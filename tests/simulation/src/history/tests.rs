//! Each check across steps passes on what the rules allow and fails on what they forbid.

use super::{History, check_cancels, check_promises};
use crate::{
    components::{Answer, CANCEL_REASON, CancelAck, Completion, RETENTION, Records},
    invariants::Invariant,
    workers::{self, PROMISE},
};
use chrono::{DateTime, Duration, Utc};
use concepts::{
    CancelOutcome, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionIdTopLevel,
    ExecutionLog, FinishedExecutionError, FinishedExecutionResult, JoinSetId, JoinSetKind, Json,
    PendingState, ResultKind, SupportedFunctionReturnValue, Version,
};
use std::collections::BTreeMap;
use storage_memory::MemoryStore;

type Logs = BTreeMap<ExecutionId, ExecutionLog>;

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::UNIX_EPOCH + Duration::seconds(seconds)
}

fn root(k: u64) -> ExecutionId {
    ExecutionId::from(ExecutionIdTopLevel::from_parts(1_000 + k, u128::from(k)))
}

fn child(parent: &ExecutionId, name: &str) -> ExecutionId {
    let join_set = JoinSetId::new(JoinSetKind::Named, name).expect("a join set id");
    parent.next_level(&join_set, 1)
}

/// A log created at 0 s and, with a result, finished at `finished` seconds.
fn log(id: &ExecutionId, finished: Option<(i64, FinishedExecutionResult)>) -> ExecutionLog {
    let created = ExecutionEvent {
        created_at: at(0),
        event: ExecutionEventInner::Created(Box::new(concepts::Created {
            ffqn: workers::DOUBLE.ffqn().expect("a legal name"),
            params: Json(serde_json::json!(1)),
            parent: id.split_to_parent(),
            scheduled_at: at(0),
            retry_exp_backoff: std::time::Duration::ZERO,
            max_retries: 0,
            component_id: workers::component(),
            metadata: concepts::ExecutionMetadata::default(),
            scheduled_by: None,
        })),
    };
    let mut events = vec![created];
    let pending_state = match finished {
        None => PendingState::PendingAt {
            scheduled_at: at(0),
        },
        Some((seconds, result)) => {
            let result_kind = ResultKind::of(&result);
            events.push(ExecutionEvent {
                created_at: at(seconds),
                event: ExecutionEventInner::Finished { result },
            });
            PendingState::Finished {
                version: Version(1),
                finished_at: at(seconds),
                result_kind,
            }
        }
    };
    ExecutionLog {
        execution_id: id.clone(),
        events,
        responses: Vec::new(),
        next_version: Version(1),
        pending_state,
    }
}

fn value(n: u64) -> FinishedExecutionResult {
    Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(Json(
        serde_json::json!(n),
    )))
}

fn logs(entries: &[(&ExecutionId, Option<(i64, FinishedExecutionResult)>)]) -> Logs {
    (entries.iter())
        .map(|(id, finished)| ((*id).clone(), log(id, finished.clone())))
        .collect()
}

/// What `History::removed` finds wrong when `before` becomes `after` at `now` seconds.
fn pruning(before: Logs, after: &Logs, now: i64) -> Option<Invariant> {
    let mut history = History {
        prev: before,
        ..History::default()
    };
    let err = history.removed(after, &MemoryStore::new(), at(now)).err();
    err.map(|broken| broken.invariant)
}

#[test]
fn prune_may_remove_only_whole_finished_trees_past_retention() {
    let (top, kid, other) = (root(1), root(1), root(2));
    let kid = child(&kid, "k");
    let retention = RETENTION.as_secs() as i64;
    let tree = |kid_finished: bool| {
        logs(&[
            (&top, Some((10, value(1)))),
            (&kid, kid_finished.then(|| (5, value(2)))),
            (&other, None),
        ])
    };
    let only_other = logs(&[(&other, None)]);
    let now = 10 + retention + 1;
    assert_eq!(
        pruning(tree(true), &only_other, now),
        None,
        "a whole finished tree"
    );
    assert_eq!(
        pruning(tree(true), &only_other, 10 + retention),
        Some(Invariant::PruneWhole),
        "within the retention"
    );
    assert_eq!(
        pruning(tree(false), &only_other, now),
        Some(Invariant::PruneWhole),
        "a tree with an unfinished member"
    );
    let half = logs(&[(&top, Some((10, value(1)))), (&other, None)]);
    assert_eq!(
        pruning(tree(true), &half, now),
        Some(Invariant::PruneWhole),
        "a member without its tree"
    );
    let none = Logs::new();
    assert_eq!(
        pruning(tree(true), &none, now),
        Some(Invariant::PruneWhole),
        "an unfinished execution"
    );
}

#[test]
fn a_cancelled_tree_keeps_no_unfinished_member_and_none_joins_it() {
    let top = root(1);
    let (first, second) = (child(&top, "a"), child(&top, "b"));
    let cancelled = || {
        Err(FinishedExecutionError::Cancelled {
            reason: CANCEL_REASON.into(),
        })
    };
    let mut records = Records::default();
    records.cancels.push(CancelAck {
        target: top.clone(),
        outcome: CancelOutcome::Cancelled { executions: 2 },
        members: None,
    });
    let whole = logs(&[
        (&top, Some((5, cancelled()))),
        (&first, Some((5, cancelled()))),
    ]);
    assert!(check_cancels(&whole, &mut records).is_ok());
    let joined = logs(&[
        (&top, Some((5, cancelled()))),
        (&first, Some((5, cancelled()))),
        (&second, Some((6, value(1)))),
    ]);
    let broken = check_cancels(&joined, &mut records).expect_err("a member joined");
    assert_eq!(broken.invariant, Invariant::CancelledTree);
    let mut records = Records::default();
    records.cancels.push(CancelAck {
        target: top.clone(),
        outcome: CancelOutcome::Cancelled { executions: 1 },
        members: None,
    });
    let left = logs(&[(&top, Some((5, cancelled()))), (&first, None)]);
    let broken = check_cancels(&left, &mut records).expect_err("a member unfinished");
    assert_eq!(broken.invariant, Invariant::CancelledTree);
    // A tree that had finished is left alone, unfinished members and all.
    let mut records = Records::default();
    records.cancels.push(CancelAck {
        target: top.clone(),
        outcome: CancelOutcome::AlreadyFinished { result: value(3) },
        members: None,
    });
    let finished = logs(&[(&top, Some((5, value(3)))), (&first, None)]);
    assert!(check_cancels(&finished, &mut records).is_ok());
}

#[test]
fn a_promise_holds_its_first_accepted_completion_and_refuses_others() {
    let workflow = root(1);
    let promise = workflow::promise_id(&workflow, PROMISE).expect("a promise id");
    let completion = |value, answer| Completion {
        promise: promise.clone(),
        value,
        answer,
    };
    let store = logs(&[
        (&workflow, Some((6, value(14)))),
        (&promise, Some((5, value(7)))),
    ]);
    let records = Records {
        completions: vec![
            completion(7, Answer::Completed),
            completion(7, Answer::Repeated),
            completion(8, Answer::Refused("the value 7".into())),
        ],
        ..Records::default()
    };
    assert!(check_promises(&store, &records).is_ok());
    for wrong in [
        completion(8, Answer::Repeated),
        completion(7, Answer::Refused("the value 7".into())),
        completion(7, Answer::Completed),
    ] {
        let records = Records {
            completions: vec![completion(7, Answer::Completed), wrong.clone()],
            ..Records::default()
        };
        let broken = check_promises(&store, &records).expect_err("a wrong answer");
        assert_eq!(broken.invariant, Invariant::PromiseOnce, "{wrong:?}");
    }
    let returned_other = logs(&[
        (&workflow, Some((6, value(15)))),
        (&promise, Some((5, value(7)))),
    ]);
    let broken = check_promises(&returned_other, &Records::default()).expect_err("not 2 × 7");
    assert_eq!(broken.invariant, Invariant::PromiseOnce);
}
