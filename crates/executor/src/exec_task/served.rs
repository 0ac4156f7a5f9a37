//! An executor serving the executions created under its leases in its process
//! ([`LocalExecutors`](crate::LocalExecutors)): its registration there, and the runs it makes
//! of what it is handed.

use super::{ExecTask, Run, lock_tasks};
use crate::local::{Answer, Entry, Registered, RunSink, Start};
use concepts::{ClockFn, CreateRequest, Locked};
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;
use tracing::debug;

impl<C: ClockFn> ExecTask<C> {
    /// Registers this executor in its [`LocalExecutors`](crate::LocalExecutors) until the
    /// returned guard is dropped: each execution created under one of its leases is made a
    /// [`Run`] (the worker, then the outcome write, holding the reserved permit) and handed to
    /// `sink`, which spawns it or polls it (see [`ExecTask::lock_runs`]).
    pub fn serve_locally(
        self: &Arc<Self>,
        sink: impl Fn(Run) + Send + Sync + 'static,
    ) -> LocallyServed {
        LocallyServed {
            _registered: self.register_locally(Box::new(sink)),
        }
    }

    /// Registers this executor as the spawned loop does: the runs it is handed are spawned
    /// beside its own, in the list its drain awaits.
    pub(super) fn register_spawning(self: &Arc<Self>) -> Registered {
        let spawned = self.runs.clone();
        self.register_locally(Box::new(move |run: Run| {
            let handle = tokio::spawn(run.future);
            let mut tasks = lock_tasks(&spawned);
            tasks.retain(|task| !task.is_finished());
            tasks.push(handle);
        }))
    }

    fn register_locally(self: &Arc<Self>, sink: RunSink) -> Registered {
        self.local.register(Entry {
            ffqns: self.ffqns.clone(),
            limiter: self.limiter.clone(),
            executor_id: self.executor_id,
            component_id: self.config.component_id.clone(),
            lock_expiry: self.config.lock_expiry,
            starter: Box::new(Starter {
                task: Arc::clone(self),
                sink,
            }),
        })
    }
}

/// How a registered executor runs an execution created under its lease: as a run of its own
/// `lock_pending`, handed to the sink.
struct Starter<C: ClockFn> {
    task: Arc<ExecTask<C>>,
    sink: RunSink,
}

impl<C: ClockFn> Start for Starter<C> {
    fn start(
        &self,
        created: CreateRequest,
        locked: Locked,
        permit: OwnedSemaphorePermit,
        answer: Option<Answer>,
    ) {
        let locked_at = created.created_at;
        let locked = concepts::kernel::hand_over_created(created, locked);
        let meters = self.task.meters.locked(&locked, locked_at);
        let execution_id = locked.execution_id.clone();
        debug!(%execution_id, "running an execution created under this executor's lease");
        let future = (self.task).run(locked, locked_at, Some(permit), meters, answer);
        (self.sink)(Run {
            execution_id,
            future,
        });
    }
}

/// An executor registered in its [`LocalExecutors`](crate::LocalExecutors) by
/// [`ExecTask::serve_locally`]; dropping it unregisters the executor.
#[must_use = "the executor is unregistered when this is dropped"]
pub struct LocallyServed {
    _registered: Registered,
}

impl std::fmt::Debug for LocallyServed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocallyServed").finish_non_exhaustive()
    }
}
