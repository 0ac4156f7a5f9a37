//! L21 and L22: the lifecycle as a workflow sees it, through the `workflow` crate on spawned
//! executors: a cancelled child's result reaches the workflow awaiting it like any other, and
//! a promise the workflow awaits is completed by a typed client.

use crate::{
    StoreFactory,
    workflow_scenarios::fixture::{Fixture, GATED, SAFETY, is_blocked},
};
use concepts::{
    CancelOutcome, CompleteOutcome, ExecutionEventInner, ExecutionId, ExecutionLog,
    FinishedExecutionError, HistoryEvent, JoinSetRequest,
};
use std::sync::Arc;
use workflow::{
    ChildError, ClientError, Function, FunctionFailure, WorkflowCtx, WorkflowError, promise_id,
};

type Result<T> = std::result::Result<T, WorkflowError<String>>;

const AWAITS_CHILD: Function<u64, String> = Function::new("test:workflow/lifecycle.awaits-child");
const AWAITS_PROMISE: Function<u64, u64> = Function::new("test:workflow/lifecycle.awaits-promise");

/// Calls `GATED` and says how the call ended.
async fn awaits_child(ctx: WorkflowCtx, n: u64) -> Result<String> {
    match ctx.call(&GATED, &n).await {
        Ok(value) => Ok(format!("value {value}")),
        Err(ChildError {
            failure: FunctionFailure::Cancelled { reason },
            ..
        }) => Ok(format!("cancelled: {reason}")),
        Err(other) => Err(other.into()),
    }
}

/// Awaits the promise `approval` and adds `n` to its value.
async fn awaits_promise(ctx: WorkflowCtx, n: u64) -> Result<u64> {
    let approval = ctx.promise::<u64>("approval");
    Ok(approval.wait().await? + n)
}

/// The only child `log` requested.
fn requested_child(log: &ExecutionLog) -> ExecutionId {
    let children: Vec<&ExecutionId> = log
        .events
        .iter()
        .filter_map(|e| match &e.event {
            ExecutionEventInner::HistoryEvent {
                event:
                    HistoryEvent::JoinSetRequest {
                        request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
                        ..
                    },
            } => Some(child_execution_id),
            _ => None,
        })
        .collect();
    assert_eq!(children.len(), 1, "one child: {children:?}");
    children[0].clone()
}

/// L21: a workflow awaiting a child that is cancelled (while its activity may be running)
/// gets the child's `Cancelled` result with its reason, handles it like any other result and
/// finishes; the child's log ends with the cancellation.
pub async fn l21_workflow_gets_a_cancelled_childs_result<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let worker = f
        .workflows()
        .register(&AWAITS_CHILD, awaits_child)
        .expect("register");
    f.spawn(Arc::new(worker));
    let client = f.client();
    let handle = client.submit(&AWAITS_CHILD, &9).await.expect("submit");
    let log = f
        .until(
            "the workflow awaits its child",
            handle.execution_id(),
            is_blocked,
        )
        .await;
    let child = requested_child(&log);

    assert_eq!(
        client.cancel(&child, "not needed").await.expect("cancel"),
        CancelOutcome::Cancelled { executions: 1 }
    );
    assert_eq!(
        handle
            .result_within(SAFETY)
            .await
            .expect("the workflow finishes"),
        "cancelled: not needed"
    );
    assert_eq!(
        f.log(&child).await.finished_result(),
        Some(&Err(FinishedExecutionError::Cancelled {
            reason: "not needed".to_owned()
        }))
    );
    f.close().await;
}

/// L22: a workflow awaits a promise; a typed client completes it (by the id `promise_id`
/// derives) and the workflow finishes with the value; completing again with the same value is
/// accepted (`CompleteOutcome::AlreadyCompleted`), with another value refused
/// (`ClientError::DifferentResult`). Each refusal's message says what happened: an unknown
/// promise explains how a promise's id is made; an unknown ordinary execution, cancelled,
/// says nothing of promises.
pub async fn l22_workflow_promise_completed_by_a_client<F: StoreFactory>(factory: &F) {
    let mut f = Fixture::new(factory).await;
    let worker = f
        .workflows()
        .register(&AWAITS_PROMISE, awaits_promise)
        .expect("register");
    f.spawn(Arc::new(worker));
    let client = f.client();
    let handle = client.submit(&AWAITS_PROMISE, &1).await.expect("submit");
    let log = f
        .until(
            "the workflow awaits its promise",
            handle.execution_id(),
            is_blocked,
        )
        .await;
    let promise = promise_id(handle.execution_id(), "approval").expect("legal name");
    assert_eq!(requested_child(&log), promise);

    assert_eq!(
        client.complete(&promise, &41u64).await.expect("complete"),
        CompleteOutcome::Completed
    );
    assert_eq!(
        handle
            .result_within(SAFETY)
            .await
            .expect("the workflow finishes"),
        42
    );
    assert_eq!(
        client
            .complete(&promise, &41u64)
            .await
            .expect("the same value"),
        CompleteOutcome::AlreadyCompleted
    );
    match client.complete(&promise, &7u64).await {
        Err(err @ ClientError::DifferentResult { .. }) => {
            assert_eq!(
                err.to_string(),
                format!(
                    "promise {promise} already has another result, the value 41: a promise is \
                     completed once (completing it again with the same value is accepted)"
                )
            );
        }
        other => panic!("expected `DifferentResult`, got {other:?}"),
    }

    let unknown_promise = promise_id(handle.execution_id(), "never-asked").expect("legal name");
    match client.complete(&unknown_promise, &1u64).await {
        Err(err @ ClientError::NoSuchPromise(_)) => {
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("no promise {unknown_promise} in this store: ")),
                "{text}"
            );
            assert!(text.contains("`W.n:name_1`"), "{text}");
        }
        other => panic!("expected `NoSuchPromise`, got {other:?}"),
    }
    let unknown: ExecutionId = "E_01KB0000000000000000000000".parse().expect("an id");
    match client.cancel(&unknown, "not needed").await {
        Err(err @ ClientError::NotFound(_)) => assert_eq!(
            err.to_string(),
            format!("no execution {unknown} in this store: check the id")
        ),
        other => panic!("expected `NotFound`, got {other:?}"),
    }
    f.close().await;
}
