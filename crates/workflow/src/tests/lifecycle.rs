//! Promises and cancellation against recorded histories: what a promise records and replays,
//! the promises a finished workflow cancels, and a warm wait that a cancellation ends.

use super::*;
use crate::{ChildError, FunctionFailure, join_set::promise_id};

fn approval() -> ExecutionId {
    promise_id(&parent(), "approval").expect("a legal name")
}

/// Awaits the promise `approval` and returns its value.
async fn awaits_approval(ctx: WorkflowCtx, _: u64) -> Result<u64, WorkflowError<String>> {
    let promise = ctx.promise::<u64>("approval");
    assert_eq!(promise.id(), &approval());
    Ok(promise.wait().await?)
}

#[tokio::test]
async fn a_promise_is_recorded_and_replayed_like_a_child_of_a_stub_function() {
    let mut h = Harness::new();
    let first = h.run(awaits_approval).await;
    assert!(
        matches!(first, WorkerResult::DbUpdatedByWorker),
        "{first:?}"
    );
    let history = h.log.history();
    assert!(
        matches!(&history[..], [
            HistoryEvent::JoinSetCreate { join_set_id, .. },
            HistoryEvent::JoinSetRequest {
                request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
                ..
            },
            HistoryEvent::JoinNext { closing: false, .. },
        ] if join_set_id.to_string() == "n:approval" && *child_execution_id == approval()),
        "{history:?}"
    );
    {
        let children = h.log.children.lock().unwrap();
        assert_eq!(children.len(), 1);
        assert_eq!(children[0].execution_id, approval());
        assert_eq!(children[0].ffqn.to_string(), "stele:stub.approval");
        assert!(children[0].ffqn.is_stub());
        assert_eq!(children[0].params, Json(json!(null)));
    }
    h.child_ok(&approval(), 5);
    let WorkerResult::Ok(value, _) = h.run(awaits_approval).await else {
        panic!("the replay gets the value");
    };
    assert_eq!(
        value,
        SupportedFunctionReturnValue::InfallibleOrResultOk(Json(json!(5)))
    );
    assert_eq!(
        *h.log.appends.lock().unwrap(),
        1,
        "the replay wrote nothing"
    );
    assert!(
        h.log.cancelled.lock().unwrap().is_empty(),
        "an answered promise is not cancelled"
    );
}

#[tokio::test]
async fn a_promise_nobody_awaits_holds_nothing_open_and_is_cancelled_when_the_workflow_finishes() {
    let h = Harness::new();
    let leaves_it = |ctx: WorkflowCtx, n: u64| async move {
        let _promise = ctx.promise::<u64>("approval");
        Ok(n)
    };
    let WorkerResult::Ok(..) = h.run(leaves_it).await else {
        panic!("finished without awaiting the promise");
    };
    assert!(
        !h.log
            .history()
            .iter()
            .any(|event| matches!(event, HistoryEvent::JoinNext { .. })),
        "no closing JoinNext for a promise"
    );
    assert_eq!(*h.log.cancelled.lock().unwrap(), [approval()]);
}

#[tokio::test]
async fn a_promise_with_a_deadline_that_passes_is_none_and_then_cancelled() {
    let mut h = Harness::new();
    let within = |ctx: WorkflowCtx, _: u64| async move {
        let value = ctx
            .promise::<u64>("approval")
            .wait_within(Duration::from_secs(60))
            .await?;
        Ok(value.unwrap_or(0) + 1)
    };
    let first = h.run(within).await;
    assert!(
        matches!(first, WorkerResult::DbUpdatedByWorker),
        "{first:?}"
    );
    h.delays_fire();
    let WorkerResult::Ok(value, _) = h.run(within).await else {
        panic!("the deadline answers");
    };
    assert_eq!(
        value,
        SupportedFunctionReturnValue::InfallibleOrResultOk(Json(json!(1)))
    );
    assert_eq!(*h.log.cancelled.lock().unwrap(), [approval()]);
}

#[tokio::test]
async fn a_cancelled_child_is_a_cancelled_failure() {
    let mut h = Harness::new();
    let reports = |ctx: WorkflowCtx, n: u64| async move {
        match ctx.call(&A, &n).await {
            Err(ChildError {
                failure: FunctionFailure::Cancelled { reason },
                ..
            }) if reason == "operator" => Ok(0),
            other => Err(WorkflowError::Failed(format!("{other:?}"))),
        }
    };
    let first = h.run(reports).await;
    assert!(
        matches!(first, WorkerResult::DbUpdatedByWorker),
        "{first:?}"
    );
    let child = h.child_ids()[0].clone();
    let cancelled = Err(FinishedExecutionError::Cancelled {
        reason: "operator".to_string(),
    });
    h.child_finished(&child, cancelled);
    let WorkerResult::Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(value), _) =
        h.run(reports).await
    else {
        panic!("handled");
    };
    assert_eq!(value, Json(json!(0)));
}

#[tokio::test]
async fn a_warm_wait_ends_without_writing_once_the_execution_is_cancelled() {
    let mut h = Harness::new();
    h.warm = Some(Duration::from_secs(10));
    *h.log.finished_by_someone_else.lock().unwrap() =
        Some(Err(FinishedExecutionError::Cancelled {
            reason: "operator".to_string(),
        }));
    let calls = |ctx: WorkflowCtx, n: u64| async move { Ok(ctx.call(&A, &n).await?) };
    let result = h.run(calls).await;
    assert!(
        matches!(result, WorkerResult::DbUpdatedByWorker),
        "the executor writes nothing: {result:?}"
    );
    assert_eq!(
        *h.log.appends.lock().unwrap(),
        1,
        "only the request, written before the wait"
    );
}

#[test]
fn a_promise_id_needs_a_legal_name() {
    assert_eq!(approval().to_string(), format!("{}.n:approval_1", parent()));
    assert!(promise_id(&parent(), "").is_err(), "empty");
    assert!(promise_id(&parent(), "a.b").is_err(), "a dot");
    assert!(promise_id(&parent(), "two words").is_err(), "whitespace");
}
