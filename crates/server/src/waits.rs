//! The long polls of `GET /executions/{id}/wait`: every poll of one execution shares one wait
//! of the store (one registration with the store's waiter hub, one read when it starts and
//! one when it is woken), whatever the number of polls and however long they are held; each
//! poll keeps only its receiver and its own timeout. The shared wait ends with the
//! execution's finish (every poll is answered with it), a store error (every poll is answered
//! with it), or the last poll leaving.

use concepts::{DbConnection, DbError, ExecutionId, FinishedExecutionResult};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};
use tokio::sync::watch;

/// Where the shared wait of one execution stands.
#[derive(Debug, Clone)]
enum Stage {
    /// The store is read for the first time: a poll waits for this read whatever its
    /// timeout, so that a finished execution is answered even with `timeout=0s`.
    Checking,
    /// Not finished at the first read: waiting for the store's wake-up.
    Waiting,
    /// The finish, or the store's error.
    Done(Result<FinishedExecutionResult, DbError>),
}

type Shared = Arc<Mutex<HashMap<ExecutionId, watch::Sender<Stage>>>>;

/// The shared waits of one API, by execution.
pub(crate) struct LongPolls {
    db: Arc<dyn DbConnection>,
    shared: Shared,
}

fn lock(shared: &Shared) -> MutexGuard<'_, HashMap<ExecutionId, watch::Sender<Stage>>> {
    // Every section leaves the map consistent, so a poisoned lock is still usable.
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Counts a poll in `stele_http_long_polls` while it is held.
struct Held;

impl Held {
    fn new() -> Self {
        if concepts::metrics::enabled() {
            metrics::gauge!(concepts::metrics::HTTP_LONG_POLLS).increment(1.0);
        }
        Self
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if concepts::metrics::enabled() {
            metrics::gauge!(concepts::metrics::HTTP_LONG_POLLS).decrement(1.0);
        }
    }
}

impl LongPolls {
    pub(crate) fn new(db: Arc<dyn DbConnection>) -> Self {
        Self {
            db,
            shared: Arc::default(),
        }
    }

    /// The result of `execution_id` once it finishes, `None` when `timeout` passed first
    /// (the first read of the store is never cut by it).
    ///
    /// # Errors
    /// `NotFound` for an unknown execution, or the store's error.
    pub(crate) async fn wait(
        &self,
        execution_id: &ExecutionId,
        timeout: Duration,
    ) -> Result<Option<FinishedExecutionResult>, DbError> {
        let _held = Held::new();
        let mut receiver = self.subscribe(execution_id);
        // The sender lives until the stage is `Done`, so a closed channel is a store closed
        // under the wait (its task ended with the runtime).
        let checked = receiver
            .wait_for(|stage| !matches!(stage, Stage::Checking))
            .await
            .map_err(|_| DbError::Closed)?
            .clone();
        let done = match checked {
            Stage::Done(done) => done,
            Stage::Checking | Stage::Waiting => {
                let finished = receiver.wait_for(|stage| matches!(stage, Stage::Done(_)));
                match tokio::time::timeout(timeout, finished).await {
                    Err(_elapsed) => return Ok(None),
                    Ok(Err(_closed)) => return Err(DbError::Closed),
                    Ok(Ok(stage)) => match &*stage {
                        Stage::Done(done) => done.clone(),
                        Stage::Checking | Stage::Waiting => return Err(DbError::Closed),
                    },
                }
            }
        };
        done.map(Some)
    }

    /// A receiver of `execution_id`'s shared wait, started by the first poll.
    fn subscribe(&self, execution_id: &ExecutionId) -> watch::Receiver<Stage> {
        let mut waits = lock(&self.shared);
        if let Some(sender) = waits.get(execution_id) {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(Stage::Checking);
        waits.insert(execution_id.clone(), sender.clone());
        drop(waits);
        tokio::spawn(shared_wait(
            self.db.clone(),
            self.shared.clone(),
            execution_id.clone(),
            sender,
        ));
        receiver
    }
}

/// The one wait of the store for `execution_id`, for every poll subscribed to `sender`.
async fn shared_wait(
    db: Arc<dyn DbConnection>,
    shared: Shared,
    execution_id: ExecutionId,
    sender: watch::Sender<Stage>,
) {
    let mut checked = false;
    loop {
        // The first read, with no waiting at all; then the wait, with no timeout of its own:
        // the store's hub wakes it on the finish, from this process or another one.
        let wait = async {
            if checked {
                db.wait_for_finished_result(&execution_id, None).await
            } else {
                db.wait_for_finished_result(&execution_id, Some(Duration::ZERO))
                    .await
            }
        };
        let outcome = tokio::select! {
            outcome = wait => outcome,
            () = sender.closed() => {
                let mut waits = lock(&shared);
                if sender.receiver_count() > 0 {
                    // A poll joined as the last one left: wait again for it.
                    continue;
                }
                forget(&mut waits, &execution_id, &sender);
                return;
            }
        };
        match outcome {
            Err(DbError::Timeout) if !checked => {
                checked = true;
                sender.send_replace(Stage::Waiting);
            }
            outcome => {
                // Forgotten first: a poll that comes after starts a wait of its own, whose
                // first read finds the finish at once.
                forget(&mut lock(&shared), &execution_id, &sender);
                sender.send_replace(Stage::Done(outcome));
                return;
            }
        }
    }
}

/// Removes `sender`'s entry, unless a newer wait of the execution replaced it.
fn forget(
    waits: &mut HashMap<ExecutionId, watch::Sender<Stage>>,
    execution_id: &ExecutionId,
    sender: &watch::Sender<Stage>,
) {
    if waits
        .get(execution_id)
        .is_some_and(|current| current.same_channel(sender))
    {
        waits.remove(execution_id);
    }
}
