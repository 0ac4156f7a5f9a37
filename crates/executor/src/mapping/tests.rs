//! One test per row of the table, without a database.

use super::*;
use crate::worker::FatalError;
use concepts::{DbError, JoinSetResponse, Json};

const BACKOFF: Duration = Duration::from_millis(100);

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_000, 0).unwrap()
}

fn after(duration: Duration) -> DateTime<Utc> {
    add_saturating(now(), duration)
}

fn parent_id() -> ExecutionId {
    ExecutionId::generate_at(now())
}

/// A child run at version 2 with `temporary_event_count` failures behind it.
fn child_run(temporary_event_count: u32, max_retries: u32) -> RunInfo {
    let join_set_id: JoinSetId = "n:batch".parse().unwrap();
    let parent = parent_id();
    RunInfo {
        execution_id: parent.next_level(&join_set_id, 1),
        version: Version(2),
        temporary_event_count,
        max_retries,
        retry_exp_backoff: BACKOFF,
        parent: Some((parent, join_set_id)),
    }
}

fn top_level_run(temporary_event_count: u32, max_retries: u32) -> RunInfo {
    RunInfo {
        parent: None,
        ..child_run(temporary_event_count, max_retries)
    }
}

fn json(text: &str) -> Json {
    Json(serde_json::from_str(text).unwrap())
}

fn map(result: WorkerResult, run: &RunInfo) -> Option<OutcomeWrite> {
    map_worker_result(result, run, now())
}

fn err(error: WorkerError) -> WorkerResult {
    WorkerResult::Err(error)
}

/// Asserts a write of `event` at `version` to `run`'s execution, and returns it.
#[track_caller]
fn assert_write(
    write: Option<OutcomeWrite>,
    run: &RunInfo,
    version: Version,
    event: &ExecutionEventInner,
) -> OutcomeWrite {
    let write = write.expect("a write");
    assert_eq!(write.execution_id, run.execution_id);
    assert_eq!(write.version, version);
    assert_eq!(write.now, now());
    assert_eq!(&write.event, event);
    write
}

/// Asserts that a finished child's write carries the response to its parent.
#[track_caller]
fn assert_notifies_parent(write: &OutcomeWrite, run: &RunInfo) {
    assert_eq!(write.parent, run.parent);
    let (to, response) = write.parent_response().expect("the parent is notified");
    let (parent, join_set_id) = run.parent.as_ref().unwrap();
    assert_eq!(&to, parent);
    assert_eq!(&response.event.join_set_id, join_set_id);
    let ExecutionEventInner::Finished { result } = &write.event else {
        panic!("only `Finished` notifies the parent, got {:?}", write.event)
    };
    assert_eq!(
        response.event.event,
        JoinSetResponse::ChildExecutionFinished {
            child_execution_id: run.execution_id.clone(),
            finished_version: write.version,
            result: result.clone(),
        }
    );
}

#[test]
fn ok_finishes_at_the_workers_version_and_notifies_the_parent() {
    let run = child_run(0, 3);
    let value = SupportedFunctionReturnValue::InfallibleOrResultOk(json(r#"{"b":1,"a":2}"#));
    let event = ExecutionEventInner::Finished {
        result: Ok(value.clone()),
    };
    let write = assert_write(
        map(WorkerResult::Ok(value, Version(5)), &run),
        &run,
        Version(5),
        &event,
    );
    assert_notifies_parent(&write, &run);

    let run = top_level_run(0, 3);
    let write = map(
        WorkerResult::Ok(SupportedFunctionReturnValue::None, Version(2)),
        &run,
    );
    assert_eq!(write.unwrap().parent_response(), None);
}

#[test]
fn db_updated_by_worker_writes_nothing() {
    assert_eq!(map(WorkerResult::DbUpdatedByWorker, &child_run(0, 3)), None);
}

#[test]
fn timeout_handled_by_watcher_writes_nothing() {
    let result = err(WorkerError::TemporaryTimeoutHandledByWatcher);
    assert_eq!(map(result, &child_run(0, 0)), None);
}

#[test]
fn db_error_writes_nothing() {
    assert_eq!(
        map(err(WorkerError::DbError(DbError::Closed)), &child_run(0, 0)),
        None
    );
}

#[test]
fn timeout_with_a_retry_left_is_temporarily_timed_out() {
    let run = child_run(1, 3);
    let event = ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: after(BACKOFF * 2),
    };
    let write = assert_write(
        map(err(WorkerError::TemporaryTimeout), &run),
        &run,
        Version(2),
        &event,
    );
    assert_eq!(
        write.parent_response(),
        None,
        "temporary outcomes never notify the parent"
    );
}

#[test]
fn timeout_without_a_retry_is_permanent_and_notifies_the_parent() {
    let run = child_run(3, 3);
    let event = ExecutionEventInner::Finished {
        result: Err(FinishedExecutionError::PermanentTimeout),
    };
    let write = assert_write(
        map(err(WorkerError::TemporaryTimeout), &run),
        &run,
        Version(2),
        &event,
    );
    assert_notifies_parent(&write, &run);
}

fn trap() -> WorkerResult {
    err(WorkerError::ActivityTrap {
        reason: "boom".into(),
        detail: Some("at line 7".into()),
    })
}

#[test]
fn activity_trap_with_a_retry_left_is_temporarily_failed() {
    let run = child_run(0, 1);
    let event = ExecutionEventInner::TemporarilyFailed {
        backoff_expires_at: after(BACKOFF),
        reason_full: "activity trap: boom".into(),
        reason_inner: "boom".into(),
        detail: Some("at line 7".into()),
    };
    let write = assert_write(map(trap(), &run), &run, Version(2), &event);
    assert_eq!(write.parent_response(), None);
}

#[test]
fn activity_trap_without_a_retry_is_a_permanent_failure() {
    let run = child_run(0, 0);
    let event = ExecutionEventInner::Finished {
        result: Err(FinishedExecutionError::PermanentFailure {
            reason_inner: "boom".into(),
            reason_full: "activity trap: boom".into(),
            kind: PermanentFailureKind::ActivityTrap,
            detail: Some("at line 7".into()),
        }),
    };
    let write = assert_write(map(trap(), &run), &run, Version(2), &event);
    assert_notifies_parent(&write, &run);
}

fn returned_error() -> WorkerResult {
    err(WorkerError::ActivityReturnedError {
        value: json(r#"{"code":42}"#),
        detail: None,
    })
}

#[test]
fn returned_error_with_a_retry_left_is_temporarily_failed() {
    let run = child_run(2, 3);
    let event = ExecutionEventInner::TemporarilyFailed {
        backoff_expires_at: after(BACKOFF * 4),
        reason_full: r#"activity returned error: {"code":42}"#.into(),
        reason_inner: "activity returned error".into(),
        detail: None,
    };
    assert_write(map(returned_error(), &run), &run, Version(2), &event);
}

#[test]
fn returned_error_without_a_retry_becomes_the_result() {
    let run = child_run(0, 0);
    let event = ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::FallibleResultErr(json(
            r#"{"code":42}"#,
        ))),
    };
    let write = assert_write(map(returned_error(), &run), &run, Version(2), &event);
    assert_notifies_parent(&write, &run);
}

fn workflow_trap() -> WorkerResult {
    err(WorkerError::TemporaryWorkflowTrap {
        reason: "index out of bounds".into(),
        detail: None,
        version: Version(6),
    })
}

#[test]
fn workflow_trap_with_a_retry_left_is_temporarily_failed_at_the_workers_version() {
    let run = child_run(0, u32::MAX);
    let event = ExecutionEventInner::TemporarilyFailed {
        backoff_expires_at: after(BACKOFF),
        reason_full: "workflow trap: index out of bounds".into(),
        reason_inner: "index out of bounds".into(),
        detail: None,
    };
    assert_write(map(workflow_trap(), &run), &run, Version(6), &event);
}

#[test]
fn workflow_trap_without_a_retry_is_a_permanent_failure_at_the_workers_version() {
    let run = child_run(1, 1);
    let event = ExecutionEventInner::Finished {
        result: Err(FinishedExecutionError::PermanentFailure {
            reason_inner: "index out of bounds".into(),
            reason_full: "workflow trap: index out of bounds".into(),
            kind: PermanentFailureKind::WorkflowTrap,
            detail: None,
        }),
    };
    let write = assert_write(map(workflow_trap(), &run), &run, Version(6), &event);
    assert_notifies_parent(&write, &run);
}

#[test]
fn limit_reached_unlocks_without_using_up_a_retry() {
    // Two failures so far: the backoff is `BACKOFF * 2^2`, whether or not a retry is left.
    for max_retries in [0, 2, 5] {
        let run = child_run(2, max_retries);
        let result = err(WorkerError::LimitReached {
            reason: "too many".into(),
            version: Version(4),
        });
        let event = ExecutionEventInner::Unlocked {
            backoff_expires_at: after(BACKOFF * 4),
            reason: "too many".into(),
        };
        let write = assert_write(map(result, &run), &run, Version(4), &event);
        assert_eq!(write.parent_response(), None);
    }
}

#[test]
fn parked_unlocks_until_the_parked_time_without_using_up_a_retry() {
    for max_retries in [0, 2] {
        let run = child_run(2, max_retries);
        let result = err(WorkerError::Parked {
            reason: "diverged".into(),
            version: Version(4),
        });
        let event = ExecutionEventInner::Unlocked {
            backoff_expires_at: concepts::PARKED_UNTIL,
            reason: "diverged".into(),
        };
        let write = assert_write(map(result, &run), &run, Version(4), &event);
        assert_eq!(write.parent_response(), None);
    }
}

#[test]
fn fatal_errors_finish_at_the_workers_version_and_notify_the_parent() {
    let run = child_run(0, 5);
    let grandchild = run.execution_id.next_level(&"o:x".parse().unwrap(), 1);
    let failure =
        |kind, reason_inner: &str, reason_full: &str| FinishedExecutionError::PermanentFailure {
            reason_inner: reason_inner.into(),
            reason_full: reason_full.into(),
            kind,
            detail: None,
        };
    let cases = [
        (
            FatalError::UnhandledChildExecutionError {
                child_execution_id: grandchild.clone(),
                root_cause_id: grandchild.clone(),
            },
            FinishedExecutionError::UnhandledChildExecutionError {
                child_execution_id: grandchild.clone(),
                root_cause_id: grandchild,
            },
        ),
        (
            FatalError::ParamsParsingError {
                reason: "expected u32".into(),
            },
            failure(
                PermanentFailureKind::ParamsParsingError,
                "expected u32",
                "cannot parse parameters: expected u32",
            ),
        ),
        (
            FatalError::ResultParsingError {
                reason: "not UTF-8".into(),
            },
            failure(
                PermanentFailureKind::ResultParsingError,
                "not UTF-8",
                "cannot parse result: not UTF-8",
            ),
        ),
        (
            FatalError::NondeterminismDetected {
                reason: "expected JoinNext".into(),
            },
            failure(
                PermanentFailureKind::NondeterminismDetected,
                "expected JoinNext",
                "nondeterminism detected: expected JoinNext",
            ),
        ),
    ];
    for (fatal, expected) in cases {
        let event = ExecutionEventInner::Finished {
            result: Err(expected),
        };
        let result = err(WorkerError::FatalError(fatal, Version(9)));
        let write = assert_write(map(result, &run), &run, Version(9), &event);
        assert_notifies_parent(&write, &run);
    }
}

#[test]
fn huge_backoffs_saturate_instead_of_panicking() {
    let run = RunInfo {
        retry_exp_backoff: Duration::MAX,
        ..child_run(40, u32::MAX)
    };
    let event = ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: DateTime::<Utc>::MAX_UTC,
    };
    assert_write(
        map(err(WorkerError::TemporaryTimeout), &run),
        &run,
        Version(2),
        &event,
    );
    let result = err(WorkerError::LimitReached {
        reason: "r".into(),
        version: Version(2),
    });
    let event = ExecutionEventInner::Unlocked {
        backoff_expires_at: DateTime::<Utc>::MAX_UTC,
        reason: "r".into(),
    };
    assert_write(map(result, &run), &run, Version(2), &event);
}
