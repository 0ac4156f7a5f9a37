//! E6, E7, E8 and E9: join sets across parent and child: a child's failure, timeout, unhandled
//! error or success reaches its parent as a response, written with the child's end.

use super::{
    Fixture, LOCK_EXPIRY, config, ffqn, finished, finished_version, json_value, ms, ok,
    only_child_response, plus, tick, trap_failure,
    workers::{ParentWorker, ScriptedWorker, Step, child_join_set},
};
use crate::StoreFactory;
use concepts::{
    ClockFn, ExecutionEventInner, ExecutionId, FinishedExecutionError, FunctionFqn, PendingState,
    Version,
};
use executor::ExecTask;
use serde_json::json;
use std::sync::Arc;
use test_utils::SimClock;
use timers_watcher::TickProgress;

/// A parent (run by `parent_exec`) that has submitted its child and gave up its run; returns
/// the parent's and the child's ids and the parent's executor.
async fn parent_awaiting_child(
    f: &Fixture,
    child_ffqn: FunctionFqn,
    child_max_retries: u32,
) -> (ExecutionId, ExecutionId, ExecTask<SimClock>) {
    let parent_worker = ParentWorker::new(
        ffqn("parent"),
        child_ffqn.clone(),
        child_max_retries,
        f.db.clone(),
        f.clock.clone(),
    );
    let parent_exec = f.executor(Arc::new(parent_worker), config());
    let parent_id = f.create(f.request(ffqn("parent"), 0)).await;
    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    let child_id = ParentWorker::child_of(&parent_id);
    assert!(matches!(
        f.state(&parent_id).await,
        PendingState::BlockedByJoinSet { ref join_set_id, .. } if *join_set_id == child_join_set()
    ));
    let child = f.log(&child_id).await;
    assert_eq!(child.ffqn(), Some(&child_ffqn));
    assert!(matches!(
        child.pending_state,
        PendingState::PendingAt { .. }
    ));
    (parent_id, child_id, parent_exec)
}

/// E6: a child's permanent failure is written with its parent's response; the parent becomes
/// pending, and the response carries the child's id, finished version and error.
pub async fn e6_child_failure_notifies_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let child_worker = ScriptedWorker::new(ffqn("child"), vec![Step::Trap("child boom")]);
    let child_exec = f.executor(Arc::new(child_worker), config());
    f.clock.move_time_forward(ms(300)).await;
    let responded_at = f.clock.now();

    assert_eq!(
        tick(&child_exec, responded_at).await,
        vec![child_id.clone()]
    );

    let child = f.log(&child_id).await;
    let child_result = child.finished_result().expect("child finished").clone();
    assert_eq!(child_result, Err(trap_failure("child boom")));
    let parent = f.log(&parent_id).await;
    let (response, responder, version, result) = only_child_response(&parent);
    assert_eq!(response.created_at, responded_at);
    assert_eq!(responder, &child_id);
    assert_eq!(version, finished_version(&child));
    assert_eq!(result, &child_result);
    assert_eq!(
        parent.pending_state,
        PendingState::PendingAt {
            scheduled_at: responded_at
        }
    );

    // The parent does not handle the error: it fails with the child as the root cause.
    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    let unhandled = FinishedExecutionError::UnhandledChildExecutionError {
        child_execution_id: child_id.clone(),
        root_cause_id: child_id,
    };
    assert_eq!(f.last_event(&parent_id).await, finished(Err(unhandled)));
}

/// E7: a child that leaves the timeout to the watcher: after its lease expires, one watcher
/// tick writes `PermanentTimeout` and notifies the parent.
pub async fn e7_child_timeout_by_watcher_notifies_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, _parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let child_worker = ScriptedWorker::new(ffqn("child"), vec![Step::TimeoutHandledByWatcher]);
    let child_exec = f.executor(Arc::new(child_worker), config());
    let locked_at = f.clock.now();

    tick(&child_exec, locked_at).await;
    let lock_expires_at = plus(locked_at, LOCK_EXPIRY);
    assert!(matches!(
        f.last_event(&child_id).await,
        ExecutionEventInner::Locked(_)
    ));
    f.clock.move_time_to(plus(locked_at, LOCK_EXPIRY - ms(1)));
    assert_eq!(
        f.watcher_tick().await,
        TickProgress::default(),
        "the lease has not expired"
    );

    f.clock.move_time_to(lock_expires_at);
    assert_eq!(
        f.watcher_tick().await,
        TickProgress {
            expired_locks: 1,
            expired_async_timers: 0
        }
    );
    let child = f.log(&child_id).await;
    assert_eq!(
        child.finished_result(),
        Some(&Err(FinishedExecutionError::PermanentTimeout))
    );
    assert_eq!(finished_version(&child), Version(2));
    let parent = f.log(&parent_id).await;
    let (response, responder, version, result) = only_child_response(&parent);
    assert_eq!(response.created_at, lock_expires_at);
    assert_eq!((responder, version), (&child_id, Version(2)));
    assert_eq!(result, &Err(FinishedExecutionError::PermanentTimeout));
    assert_eq!(
        parent.pending_state,
        PendingState::PendingAt {
            scheduled_at: lock_expires_at
        }
    );
    assert_eq!(
        f.watcher_tick().await,
        TickProgress::default(),
        "resolved once"
    );
}

/// E8: a child's fatal `UnhandledChildExecutionError` reaches its parent with the same child
/// and root-cause ids (grandchild fails, child does not handle it, parent sees the root cause).
pub async fn e8_unhandled_child_error_reaches_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let child_worker = ParentWorker::new(
        ffqn("child"),
        ffqn("grandchild"),
        0,
        f.db.clone(),
        f.clock.clone(),
    );
    let child_exec = f.executor(Arc::new(child_worker), config());
    let grandchild_worker = ScriptedWorker::new(ffqn("grandchild"), vec![Step::Trap("deep boom")]);
    let grandchild_exec = f.executor(Arc::new(grandchild_worker), config());
    let grandchild_id = ParentWorker::child_of(&child_id);

    assert_eq!(
        tick(&child_exec, f.clock.now()).await,
        vec![child_id.clone()]
    );
    assert_eq!(
        tick(&grandchild_exec, f.clock.now()).await,
        vec![grandchild_id.clone()]
    );
    assert_eq!(
        tick(&child_exec, f.clock.now()).await,
        vec![child_id.clone()]
    );

    let child_error = FinishedExecutionError::UnhandledChildExecutionError {
        child_execution_id: grandchild_id.clone(),
        root_cause_id: grandchild_id.clone(),
    };
    let child = f.log(&child_id).await;
    assert_eq!(child.finished_result(), Some(&Err(child_error.clone())));
    let parent = f.log(&parent_id).await;
    let (_, responder, version, result) = only_child_response(&parent);
    assert_eq!((responder, version), (&child_id, finished_version(&child)));
    assert_eq!(result, &Err(child_error));

    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    let parent_error = FinishedExecutionError::UnhandledChildExecutionError {
        child_execution_id: child_id,
        root_cause_id: grandchild_id,
    };
    assert_eq!(f.last_event(&parent_id).await, finished(Err(parent_error)));
}

/// E9: a child that succeeds notifies its parent with its value.
pub async fn e9_child_success_notifies_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (parent_id, child_id, parent_exec) = parent_awaiting_child(&f, ffqn("child"), 0).await;
    let value = json_value(json!({"answer": 42}));
    let child_worker = ScriptedWorker::new(ffqn("child"), vec![Step::Ok(value.clone())]);
    let child_exec = f.executor(Arc::new(child_worker), config());

    assert_eq!(
        tick(&child_exec, f.clock.now()).await,
        vec![child_id.clone()]
    );
    let child = f.log(&child_id).await;
    let parent = f.log(&parent_id).await;
    let (_, responder, version, result) = only_child_response(&parent);
    assert_eq!((responder, version), (&child_id, finished_version(&child)));
    assert_eq!(result, &ok(&value));
    assert!(matches!(
        parent.pending_state,
        PendingState::PendingAt { .. }
    ));

    assert_eq!(
        tick(&parent_exec, f.clock.now()).await,
        vec![parent_id.clone()]
    );
    assert_eq!(f.last_event(&parent_id).await, finished(ok(&value)));
}
