//! What a running worker can learn about its execution while it runs: whether someone else
//! finished it (a cancellation, or the watcher giving up on the lease).

use concepts::{DbAwait, DbError, ExecutionId, FinishedExecutionResult};
use std::{fmt, future::Future, sync::Arc, time::Duration};

/// The first pause before a wait that failed with a retriable error is tried again; it
/// doubles up to [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries of a failing wait.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(5);

/// A handle on the end of one execution, given to its worker in
/// [`WorkerContext::cancellation`](crate::WorkerContext::cancellation).
///
/// [`Cancellation::cancelled`] is a future that completes when the execution is finished by
/// someone else while the worker runs: `cancel` (`Err(Cancelled { reason })`), or the timers
/// watcher after the lease expired without a retry left (`Err(PermanentTimeout)`). A worker
/// that never asks pays for nothing but the handle's two reference counts: the wait is
/// registered with the store only when the future is first polled, and deregistered when it is
/// dropped.
///
/// Knowing is optional: a worker that ignores it runs to its end and its write is refused
/// like any stale writer's (the executor logs the lost race and writes nothing more).
#[derive(Clone)]
pub struct Cancellation {
    watched: Option<(Arc<dyn DbAwait>, ExecutionId)>,
}

impl Cancellation {
    /// The end of `execution_id`, as `db` reports it.
    #[must_use]
    pub fn new(db: Arc<dyn DbAwait>, execution_id: ExecutionId) -> Self {
        Self {
            watched: Some((db, execution_id)),
        }
    }

    /// A handle whose [`Cancellation::cancelled`] never completes: for workers driven by hand
    /// (unit tests) without a store.
    #[must_use]
    pub fn never() -> Self {
        Self { watched: None }
    }

    /// Completes with the execution's result once someone else finished it.
    ///
    /// Owns what it needs (`'static`), so it can be held across the worker's other awaits or
    /// raced against its work with `tokio::select!`. A store that fails with a retriable error
    /// is asked again after a pause (100 ms, doubling up to 5 s); one that cannot answer
    /// otherwise (closed, the execution unknown) is logged once and the future never
    /// completes: the worker goes on, and its write settles the matter.
    pub fn cancelled(&self) -> impl Future<Output = FinishedExecutionResult> + Send + 'static {
        let watched = self.watched.clone();
        async move {
            let Some((db, execution_id)) = watched else {
                return std::future::pending().await;
            };
            let mut pause = FIRST_RETRY_PAUSE;
            loop {
                match db.wait_for_finished_result(&execution_id, None).await {
                    Ok(result) => return result,
                    Err(err) if err.is_retriable() => {
                        tracing::debug!(%execution_id, "cannot watch for a cancellation, retrying in {pause:?}: {err}");
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
        match &self.watched {
            Some((_, execution_id)) => f
                .debug_struct("Cancellation")
                .field("execution_id", execution_id)
                .finish_non_exhaustive(),
            None => f.write_str("Cancellation(never)"),
        }
    }
}

#[cfg(test)]
mod tests;
