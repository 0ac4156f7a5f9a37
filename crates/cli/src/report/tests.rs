//! Tests of the summary: counts, percentiles and the exactly-once check on hand-made logs.

use super::*;
use concepts::{
    ComponentId, ExecutionEvent, ExecutionMetadata, FinishedExecutionError, JoinSetId,
    JoinSetResponseEvent, JoinSetResponseEventOuter, Json, SupportedFunctionReturnValue,
};
use std::time::Duration;

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
}

fn event(ms: i64, event: ExecutionEventInner) -> ExecutionEvent {
    ExecutionEvent {
        created_at: at(ms),
        event,
    }
}

fn created(parent: Option<(ExecutionId, JoinSetId)>) -> ExecutionEventInner {
    ExecutionEventInner::Created(Box::new(concepts::Created {
        ffqn: "ns:pkg/ifc.fn".parse().unwrap(),
        params: Json(serde_json::json!({})),
        parent,
        scheduled_at: at(0),
        retry_exp_backoff: Duration::from_millis(100),
        max_retries: 3,
        component_id: ComponentId::new("activity", "x").unwrap(),
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    }))
}

fn ok() -> ExecutionEventInner {
    ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::None),
    }
}

fn log(execution_id: &ExecutionId, events: Vec<ExecutionEvent>) -> ExecutionLog {
    let next_version = Version(u32::try_from(events.len()).unwrap());
    ExecutionLog {
        execution_id: execution_id.clone(),
        events,
        responses: Vec::new(),
        next_version,
        pending_state: PendingState::PendingAt {
            scheduled_at: at(0),
        },
    }
}

/// A top-level execution created at 0 that finished after `ms`.
fn finished_after(ms: i64) -> ExecutionLog {
    let id = ExecutionId::generate_at(at(0));
    log(&id, vec![event(0, created(None)), event(ms, ok())])
}

fn response_from(child: &ExecutionId, join_set: &JoinSetId) -> JoinSetResponseEventOuter {
    JoinSetResponseEventOuter {
        created_at: at(5),
        event: JoinSetResponseEvent {
            join_set_id: join_set.clone(),
            event: JoinSetResponse::ChildExecutionFinished {
                child_execution_id: child.clone(),
                finished_version: Version(1),
                result: Ok(SupportedFunctionReturnValue::None),
            },
        },
    }
}

#[test]
fn counts_outcomes_retries_and_timeouts() {
    let id = ExecutionId::generate_at(at(0));
    let retried = log(
        &id,
        vec![
            event(0, created(None)),
            event(
                1,
                ExecutionEventInner::TemporarilyFailed {
                    backoff_expires_at: at(2),
                    reason_full: "x".into(),
                    reason_inner: "x".into(),
                    detail: None,
                },
            ),
            event(
                3,
                ExecutionEventInner::TemporarilyTimedOut {
                    backoff_expires_at: at(4),
                },
            ),
            event(
                9,
                ExecutionEventInner::Finished {
                    result: Err(FinishedExecutionError::PermanentTimeout),
                },
            ),
        ],
    );
    let summary = summarize(&[retried, finished_after(4)]);
    assert_eq!(summary.executions, 2);
    assert_eq!(summary.finished, 2);
    assert_eq!(summary.retries, 1);
    assert_eq!(summary.timeouts, 1);
    assert_eq!(summary.outcomes["Ok"], 1);
    assert_eq!(summary.outcomes["Timeout"], 1);
    assert_eq!(summary.outcomes_by_function["ns:pkg/ifc.fn"]["Timeout"], 1);
    assert!((summary.span_seconds - 0.009).abs() < 1e-9);
    assert!(summary.exactly_once.holds());
}

#[test]
fn latency_percentiles_use_the_nearest_rank() {
    let logs: Vec<ExecutionLog> = (1..=100).map(finished_after).collect();
    let latency = summarize(&logs).latency.unwrap();
    assert!((latency.p50_ms - 50.0).abs() < 1e-9);
    assert!((latency.p99_ms - 99.0).abs() < 1e-9);
    assert!((latency.max_ms - 100.0).abs() < 1e-9);
    let single = summarize(&[finished_after(7)]).latency.unwrap();
    assert!((single.p50_ms - 7.0).abs() < 1e-9 && (single.p99_ms - 7.0).abs() < 1e-9);
    assert_eq!(summarize(&[]).latency, None);
}

#[test]
fn the_exactly_once_check_catches_lost_and_doubled_work() {
    let unfinished = {
        let id = ExecutionId::generate_at(at(0));
        log(&id, vec![event(0, created(None))])
    };
    let twice = {
        let id = ExecutionId::generate_at(at(0));
        log(
            &id,
            vec![event(0, created(None)), event(1, ok()), event(2, ok())],
        )
    };
    let summary = summarize(&[unfinished, twice, finished_after(1)]);
    let check = summary.exactly_once;
    assert_eq!(check.finished_once, 1);
    assert_eq!(check.not_finished, 1);
    assert_eq!(check.finished_more_than_once, 1);
    assert!(!check.holds());
}

#[test]
fn the_exactly_once_check_follows_child_results_to_their_parent() {
    let join_set: JoinSetId = "n:children".parse().unwrap();
    let parent_id = ExecutionId::generate_at(at(0));
    let children: Vec<ExecutionId> = (1..=3)
        .map(|i| parent_id.next_level(&join_set, i))
        .collect();
    let child_logs: Vec<ExecutionLog> = children
        .iter()
        .map(|child| {
            log(
                child,
                vec![
                    event(1, created(Some((parent_id.clone(), join_set.clone())))),
                    event(5, ok()),
                ],
            )
        })
        .collect();
    let mut parent = log(&parent_id, vec![event(0, created(None)), event(6, ok())]);
    // Child 1 delivered once, child 2 twice, child 3 never.
    parent.responses = vec![
        response_from(&children[0], &join_set),
        response_from(&children[1], &join_set),
        response_from(&children[1], &join_set),
    ];
    let mut logs = vec![parent];
    logs.extend(child_logs);
    let summary = summarize(&logs);
    assert_eq!(summary.top_level, 1);
    assert_eq!(summary.children, 3);
    let check = summary.exactly_once;
    assert_eq!(check.child_results_delivered_once, 1);
    assert_eq!(check.child_results_duplicated, 1);
    assert_eq!(check.child_results_missing, 1);
    assert!(!check.holds());
    assert_eq!(
        summary.latency.unwrap().max_ms,
        6.0,
        "children are not in the latency"
    );
}

#[test]
fn state_counts_add_up() {
    let counts = StateCounts {
        pending: 1,
        retrying: 2,
        running: 3,
        blocked: 4,
        finished: 5,
    };
    assert_eq!(counts.total(), 15);
    assert!(!counts.all_finished());
    assert!(
        StateCounts {
            finished: 5,
            ..StateCounts::default()
        }
        .all_finished()
    );
    assert!(
        !StateCounts::default().all_finished(),
        "an empty store has no finished workload"
    );
}
