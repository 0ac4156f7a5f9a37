//! L12..L14: durable promises (`docs/SEMANTICS.md` §12): a stub execution, never run by an
//! executor, completed once from outside, answering the workflow that awaits it in the same
//! write.

use super::{Fixture, LEASE, assert_finished_with, cancelled, child_responses, finished_version};
use crate::{
    StoreFactory,
    storage_scenarios::helpers::{
        component_id, execution_id, executor_id, expect_kind, expect_validation, ffqn, join_set,
        ms, plus,
    },
};
use concepts::{
    CancelOutcome, CompleteOutcome, CompleteRequest, DbError, DbErrorKind, DuplicateKind,
    ExecutionId, FunctionFqn, Json, LockPendingRequest, PendingState, SupportedFunctionReturnValue,
    ValidationError,
};
use std::{sync::Arc, time::Duration};

/// The stub function of the scenarios' promises.
fn approval() -> FunctionFqn {
    FunctionFqn::stub("approval").expect("legal stub name")
}

fn value(json: serde_json::Value) -> SupportedFunctionReturnValue {
    SupportedFunctionReturnValue::InfallibleOrResultOk(Json(json))
}

impl Fixture {
    /// Completes `execution_id` now with `value`.
    async fn complete(
        &self,
        execution_id: &ExecutionId,
        value: SupportedFunctionReturnValue,
    ) -> Result<CompleteOutcome, DbError> {
        self.db
            .complete(CompleteRequest {
                execution_id: execution_id.clone(),
                now: self.now(),
                value,
            })
            .await
    }

    /// A parent (id `n`) awaiting one promise in join set `n:approval`; returns both ids.
    async fn awaiting_promise(&self, n: u128) -> (ExecutionId, ExecutionId) {
        let parent = self.top(n, "workflow").await;
        let stub = self
            .await_children(&parent, &join_set("n:approval"), &[approval()], None)
            .await
            .remove(0);
        (parent, stub)
    }
}

/// L12: a workflow awaits a promise (a child of a stub function); no executor locks it; an
/// external `complete` finishes it with the value and answers the workflow in the same write
/// (finished version, value, time), which makes the workflow pending; waiters learn the
/// value. A promise without a parent completes too.
pub async fn l12_promise_completed_once_answers_its_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent, stub) = f.awaiting_promise(1).await;
    assert!(stub.to_string().starts_with(&parent.to_string()));
    assert!(matches!(
        f.log(&stub).await.pending_state,
        PendingState::PendingAt { .. }
    ));
    f.clock.move_time_forward(ms(1_000)).await;
    assert!(
        f.lock_due("workflow").await.is_empty(),
        "the workflow stays blocked"
    );
    let at = f.now();

    let approved = value(serde_json::json!({"approved_by": "ops"}));
    assert_eq!(
        f.complete(&stub, approved.clone()).await.expect("complete"),
        CompleteOutcome::Completed
    );
    let stub_log = f.log(&stub).await;
    assert_finished_with(&stub_log, &Ok(approved.clone()), at);
    let parent_log = f.log(&parent).await;
    assert_eq!(
        child_responses(&parent_log),
        vec![(
            stub.clone(),
            finished_version(&stub_log),
            Ok(approved.clone()),
            at
        )]
    );
    assert_eq!(
        parent_log.pending_state,
        PendingState::PendingAt { scheduled_at: at }
    );
    assert_eq!(
        f.db.wait_for_finished_result(&stub, Some(Duration::ZERO))
            .await
            .expect("finished"),
        Ok(approved)
    );
    assert_eq!(f.lock_due("workflow").await, vec![parent]);

    let top_level = f
        .create(crate::storage_scenarios::helpers::create_request(
            execution_id(2),
            approval(),
            f.now(),
        ))
        .await;
    assert_eq!(
        f.complete(&top_level, SupportedFunctionReturnValue::None)
            .await
            .expect("complete"),
        CompleteOutcome::Completed
    );
    assert_finished_with(
        &f.log(&top_level).await,
        &Ok(SupportedFunctionReturnValue::None),
        f.now(),
    );
}

/// L13: completing a promise again with the same value is `AlreadyCompleted` and writes
/// nothing; with another value (or another variant) it is a typed `Duplicate`
/// (`Completion`) and writes nothing.
pub async fn l13_promise_completed_twice<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent, stub) = f.awaiting_promise(1).await;
    let paid = value(serde_json::json!({"paid": 42}));
    f.complete(&stub, paid.clone()).await.expect("complete");
    let before = f.logs(&[parent.clone(), stub.clone()]).await;
    f.clock.move_time_forward(ms(10)).await;

    assert_eq!(
        f.complete(&stub, paid).await.expect("the same value again"),
        CompleteOutcome::AlreadyCompleted
    );
    assert_eq!(f.logs(&[parent.clone(), stub.clone()]).await, before);

    for other in [
        value(serde_json::json!({"paid": 43})),
        SupportedFunctionReturnValue::FallibleResultErr(Json(serde_json::json!({"paid": 42}))),
        SupportedFunctionReturnValue::None,
    ] {
        let err = expect_kind(f.complete(&stub, other).await, DbErrorKind::Duplicate);
        assert!(
            matches!(&err, DbError::Duplicate(DuplicateKind::Completion { execution_id, .. })
                if *execution_id == stub),
            "{err:?}"
        );
    }
    assert_eq!(
        f.logs(&[parent, stub]).await,
        before,
        "a refused completion writes nothing"
    );
}

/// L14: `complete` of an unknown id is `NotFound`, of an execution that is not a stub is an
/// invalid request (writing nothing), and of a cancelled promise a `Duplicate` (it has a
/// result); `lock_pending` naming a stub function is refused and locks nothing.
pub async fn l14_promise_refusals<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let some = value(serde_json::json!(1));
    expect_kind(
        f.complete(&execution_id(99), some.clone()).await,
        DbErrorKind::NotFound,
    );

    let runs = f.top(1, "work").await;
    let before = f.log(&runs).await;
    let refused = expect_validation(f.complete(&runs, some.clone()).await);
    assert!(
        matches!(refused, ValidationError::InvalidRequest(_)),
        "{refused:?}"
    );
    assert_eq!(f.log(&runs).await, before);

    let (_parent, stub) = f.awaiting_promise(2).await;
    for ffqns in [vec![approval()], vec![ffqn("work"), approval()]] {
        let now = f.now();
        let err =
            f.db.lock_pending(LockPendingRequest {
                batch_size: 10,
                pending_at_or_sooner: now,
                ffqns: Arc::from(ffqns),
                now,
                component_id: component_id(),
                executor_id: executor_id(1),
                lock_expires_at: plus(now, LEASE),
            })
            .await;
        let refused = expect_validation(err);
        assert!(
            matches!(refused, ValidationError::InvalidRequest(_)),
            "{refused:?}"
        );
    }
    assert_eq!(f.log(&runs).await, before, "nothing was locked");
    assert!(matches!(
        f.log(&stub).await.pending_state,
        PendingState::PendingAt { .. }
    ));

    assert_eq!(
        f.cancel(&stub, "timed out waiting").await,
        CancelOutcome::Cancelled { executions: 1 }
    );
    let cancelled_log = f.log(&stub).await;
    let err = expect_kind(f.complete(&stub, some).await, DbErrorKind::Duplicate);
    assert!(
        matches!(&err, DbError::Duplicate(DuplicateKind::Completion { execution_id, .. })
            if *execution_id == stub),
        "{err:?}"
    );
    assert_eq!(f.log(&stub).await, cancelled_log);
    assert_eq!(
        cancelled_log.finished_result(),
        Some(&cancelled("timed out waiting"))
    );
}
