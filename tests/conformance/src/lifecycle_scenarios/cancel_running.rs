//! L11: a worker still running when its execution is cancelled, under a real executor: it
//! learns of the cancellation while it runs (`WorkerContext::cancelled`), and its late outcome
//! is refused as a lost race, never a panic.

use super::{Fixture, assert_finished_with, cancelled, child_responses, finished_version};
use crate::{
    StoreFactory,
    storage_scenarios::helpers::{SAFETY, ffqn, join_set, ms},
};
use async_trait::async_trait;
use concepts::{
    CancelOutcome, ExecutionEventInner, ExecutionId, FinishedExecutionResult, FunctionFqn,
    SupportedFunctionReturnValue,
};
use executor::{Worker, WorkerContext, WorkerResult};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};
use tokio::sync::mpsc;

/// Runs until its execution is finished by someone else (`WorkerContext::cancelled`), records
/// what it learned, then reports `Ok` at the context's version anyway: the outcome of a
/// worker that ignores what it learned.
struct RunsUntilFinished {
    ffqns: Vec<FunctionFqn>,
    started: mpsc::UnboundedSender<ExecutionId>,
    learned: Mutex<HashMap<ExecutionId, Result<FinishedExecutionResult, String>>>,
}

#[async_trait]
impl Worker for RunsUntilFinished {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let _ = self.started.send(ctx.execution_id.clone());
        let learned = tokio::time::timeout(SAFETY, ctx.cancelled())
            .await
            .map_err(|_| format!("not cancelled within {SAFETY:?}"));
        self.learned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(ctx.execution_id.clone(), learned);
        WorkerResult::Ok(SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// L11: an executor runs a top-level execution and a child; both are cancelled (the child
/// through its parent) while their workers run. Each worker learns the `Cancelled` result
/// while it runs; its late `Finished` is refused by the version check (the task ends
/// without a panic); each log keeps exactly one `Finished`, the cancellation, and the parent
/// exactly one response from the child.
pub async fn l11_worker_of_a_cancelled_execution_loses_its_race<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (started, mut started_rx) = mpsc::unbounded_channel();
    let worker = Arc::new(RunsUntilFinished {
        ffqns: vec![ffqn("slow")],
        started,
        learned: Mutex::default(),
    });
    let exec = f.executor(worker.clone(), f.db.clone());
    let alone = f.top(1, "slow").await;
    let parent = f.top(2, "parent").await;
    let child = f
        .await_children(&parent, &join_set("n:kids"), &[ffqn("slow")], None)
        .await
        .remove(0);

    let running = exec.tick(f.now()).await.expect("tick");
    let mut locked = running.execution_ids();
    locked.sort();
    assert_eq!(locked, vec![alone.clone(), child.clone()]);
    for _ in 0..2 {
        tokio::time::timeout(SAFETY, started_rx.recv())
            .await
            .expect("both workers start")
            .expect("the worker keeps its sender");
    }
    f.clock.move_time_forward(ms(200)).await;
    let at = f.now();
    assert_eq!(
        f.cancel(&alone, "stop it").await,
        CancelOutcome::Cancelled { executions: 1 }
    );
    assert_eq!(
        f.cancel(&parent, "stop the tree").await,
        CancelOutcome::Cancelled { executions: 2 }
    );
    let before = f
        .logs(&[alone.clone(), parent.clone(), child.clone()])
        .await;

    tokio::time::timeout(SAFETY, running.wait_for_tasks())
        .await
        .expect("the workers end")
        .expect("a refused late write does not panic");
    let after = f
        .logs(&[alone.clone(), parent.clone(), child.clone()])
        .await;
    assert_eq!(after, before, "the late outcomes were refused");
    for (log, reason) in [(&after[0], "stop it"), (&after[2], "stop the tree")] {
        assert_finished_with(log, &cancelled(reason), at);
        let finished = log
            .events
            .iter()
            .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }));
        assert_eq!(finished.count(), 1, "{}", log.execution_id);
    }
    assert_eq!(
        child_responses(&after[1]),
        vec![(
            child.clone(),
            finished_version(&after[2]),
            cancelled("stop the tree"),
            at
        )]
    );
    let learned = worker
        .learned
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(
        learned,
        HashMap::from([
            (alone, Ok(cancelled("stop it"))),
            (child, Ok(cancelled("stop the tree"))),
        ]),
        "each running worker learned of its cancellation"
    );
}
