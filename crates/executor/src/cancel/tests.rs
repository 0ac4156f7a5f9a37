//! The cancellation handle against a fake store: asked only when polled, answered with the
//! result, retried after a retriable error, silent after any other.

use super::*;
use async_trait::async_trait;
use concepts::FinishedExecutionError;
use futures_util::FutureExt as _;
use std::sync::Mutex;
use tokio::sync::Notify;

/// Answers `wait_for_finished_result` with the queued answers, one per call, then waits for
/// [`FakeAwait::finish`].
#[derive(Default)]
struct FakeAwait {
    calls: Mutex<usize>,
    answers: Mutex<Vec<Result<FinishedExecutionResult, DbError>>>,
    finished: Mutex<Option<FinishedExecutionResult>>,
    notify: Notify,
}

impl FakeAwait {
    fn calls(&self) -> usize {
        *self.calls.lock().unwrap()
    }

    fn finish(&self, result: FinishedExecutionResult) {
        *self.finished.lock().unwrap() = Some(result);
        self.notify.notify_waiters();
    }
}

#[async_trait]
impl DbAwait for FakeAwait {
    async fn wait_for_finished_result(
        &self,
        _execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        assert_eq!(timeout, None, "a cancellation waits without limit");
        *self.calls.lock().unwrap() += 1;
        if let Some(answer) = self.answers.lock().unwrap().pop() {
            return answer;
        }
        loop {
            let notified = self.notify.notified();
            if let Some(result) = self.finished.lock().unwrap().clone() {
                return Ok(result);
            }
            notified.await;
        }
    }
}

fn id() -> ExecutionId {
    "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0".parse().unwrap()
}

fn cancelled(reason: &str) -> FinishedExecutionResult {
    Err(FinishedExecutionError::Cancelled {
        reason: reason.to_string(),
    })
}

#[tokio::test]
async fn the_store_is_asked_only_once_the_future_is_polled() {
    let db = Arc::new(FakeAwait::default());
    let cancellation = Cancellation::new(db.clone());
    let clone = cancellation.clone();
    let future = clone.cancelled(&id());
    assert_eq!(db.calls(), 0, "a handle and an unpolled future ask nothing");
    let mut future = Box::pin(future);
    assert!((&mut future).now_or_never().is_none(), "not finished yet");
    assert_eq!(db.calls(), 1);
    db.finish(cancelled("operator"));
    assert_eq!(future.await, cancelled("operator"));
    assert_eq!(format!("{cancellation:?}"), "Cancellation(store)");
}

#[tokio::test(start_paused = true)]
async fn a_retriable_error_is_asked_again_after_a_pause() {
    let db = Arc::new(FakeAwait::default());
    db.answers
        .lock()
        .unwrap()
        .push(Err(DbError::Connection("reset by peer".to_string())));
    db.finish(Err(FinishedExecutionError::PermanentTimeout));
    let result = Cancellation::new(db.clone()).cancelled(&id()).await;
    assert_eq!(result, Err(FinishedExecutionError::PermanentTimeout));
    assert_eq!(db.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_error_retrying_cannot_cure_leaves_the_future_pending() {
    let db = Arc::new(FakeAwait::default());
    db.answers.lock().unwrap().push(Err(DbError::Closed));
    let waited = tokio::time::timeout(
        Duration::from_secs(3600),
        Cancellation::new(db.clone()).cancelled(&id()),
    )
    .await;
    assert!(waited.is_err(), "never completes: {waited:?}");
    assert_eq!(db.calls(), 1, "not asked again");
    let never = tokio::time::timeout(
        Duration::from_secs(3600),
        Cancellation::never().cancelled(&id()),
    );
    assert!(never.await.is_err());
    assert_eq!(
        format!("{:?}", Cancellation::never()),
        "Cancellation(never)"
    );
}
