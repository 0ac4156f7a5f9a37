//! What a running worker can learn about its execution while it runs: whether someone else
//! finished it (a cancellation, or the watcher giving up on the lease).

use concepts::{DbAwait, DbError, ExecutionId, FinishedExecutionResult};
use std::{fmt, future::Future, sync::Arc, time::Duration};

/// The first pause before a wait that failed with a retriable error is tried again; it
/// doubles up to [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries of a failing wait.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(5);

/// What a running worker watches to learn that its execution was finished by someone else;
/// every [`WorkerContext`](crate::WorkerContext) carries one
/// ([`WorkerContext::cancellation`](crate::WorkerContext::cancellation)).
///
/// [`WorkerContext::cancelled`](crate::WorkerContext::cancelled) (or
/// [`Cancellation::cancelled`]) is a future that completes when the execution is finished by
/// someone else while the worker runs: `cancel` (`Err(Cancelled { reason })`), or the timers
/// watcher after the lease expired without a retry left (`Err(PermanentTimeout)`). A worker
/// that never asks pays for nothing but the handle, one reference count: the wait is
/// registered with the store only when the future is first polled, and deregistered when it is
/// dropped.
///
/// Knowing is optional: a worker that ignores it runs to its end and its write is refused
/// like any stale writer's (the executor logs the lost race and writes nothing more).
#[derive(Clone)]
pub struct Cancellation {
    // One word on purpose: the handle is in every context, and moves with it.
    store: Option<Arc<Store>>,
}

/// The store the executor works with, shared by the handles of all its runs.
struct Store(Arc<dyn DbAwait>);

impl Cancellation {
    /// Watches executions in `db`. An executor makes one and gives each run a clone.
    #[must_use]
    pub fn new(db: Arc<dyn DbAwait>) -> Self {
        Self {
            store: Some(Arc::new(Store(db))),
        }
    }

    /// A handle whose [`Cancellation::cancelled`] never completes: for workers driven by hand
    /// (unit tests) without a store.
    #[must_use]
    pub fn never() -> Self {
        Self { store: None }
    }

    /// Completes with the result of `execution_id` once someone else finished it.
    ///
    /// Owns what it needs (`'static`), so it can be held across the worker's other awaits or
    /// raced against its work with `tokio::select!`. A store that fails with a retriable error
    /// is asked again after a pause (100 ms, doubling up to 5 s); one that cannot answer
    /// otherwise (closed, the execution unknown) is logged once and the future never
    /// completes: the worker goes on, and its write settles the matter.
    pub fn cancelled(
        &self,
        execution_id: &ExecutionId,
    ) -> impl Future<Output = FinishedExecutionResult> + Send + 'static {
        let store = self.store.clone();
        let execution_id = execution_id.clone();
        async move {
            let Some(store) = store else {
                return std::future::pending().await;
            };
            let mut pause = FIRST_RETRY_PAUSE;
            loop {
                match store.0.wait_for_finished_result(&execution_id, None).await {
                    Ok(result) => return result,
                    Err(err) if err.is_retriable() => {
                        tracing::debug!(
                            %execution_id,
                            "cannot watch for a cancellation, retrying in {pause:?}: {err}"
                        );
                        tokio::time::sleep(pause).await;
                        pause = pause.saturating_mul(2).min(MAX_RETRY_PAUSE);
                    }
                    Err(err) => return unwatchable(&execution_id, &err).await,
                }
            }
        }
    }
}

async fn unwatchable(execution_id: &ExecutionId, err: &DbError) -> FinishedExecutionResult {
    tracing::warn!(
        %execution_id,
        "cannot watch for a cancellation; the run goes on and its write settles it: {err}"
    );
    std::future::pending().await
}

impl fmt::Debug for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.store {
            Some(_) => "Cancellation(store)",
            None => "Cancellation(never)",
        })
    }
}

#[cfg(test)]
mod tests;
