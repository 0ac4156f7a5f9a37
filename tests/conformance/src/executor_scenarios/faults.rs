//! E20: a store that fails an outcome write with a retriable error (a busy database, a lost
//! connection) does not cost the run its lease: the executor writes it again, with backoff, a
//! bounded number of times, and never retries an error that retrying cannot cure.

use super::{Fixture, config, ffqn, finished, json_value, ok, tick};
use crate::StoreFactory;
use concepts::{ClockFn, DbError, PendingState};
use executor::outcome_write_attempts;
use serde_json::json;
use std::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};
use test_utils::forwarding::{Fault, ForwardingDb, Write};

use super::workers::{ScriptedWorker, Step};

/// Forwards to `inner`, but answers the first `failures` outcome writes with `error` without
/// writing them; counts every outcome write it is asked for.
fn failing_outcomes(
    inner: Arc<dyn concepts::DbConnection>,
    failures: u32,
    error: DbError,
) -> (Arc<ForwardingDb>, Arc<AtomicU32>) {
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = attempts.clone();
    let failures = AtomicU32::new(failures);
    let store = ForwardingDb::new(inner, move |write: &Write<'_>| {
        if !matches!(write, Write::Outcome(_)) {
            return Fault::Pass;
        }
        counted.fetch_add(1, Ordering::SeqCst);
        let failing = failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            Fault::Refuse(error.clone())
        } else {
            Fault::Pass
        }
    });
    (store, attempts)
}

/// E20: two retriable failures of a `Finished` are written through on the third attempt; a
/// retriable failure that lasts is retried until the run's lease is over
/// (`executor::outcome_retry_pauses`) and a non-retriable one given up after one attempt, both
/// leaving the lease to the watcher.
pub async fn e20_retriable_outcome_write_is_retried<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let value = json_value(json!({"done": true}));
    let run = |failures: u32, error: DbError| {
        let (store, attempts) = failing_outcomes(f.db.clone(), failures, error);
        let worker = Arc::new(ScriptedWorker::new(
            ffqn("e20"),
            vec![Step::Ok(value.clone())],
        ));
        let exec = executor::ExecTask::new(worker, config(), f.clock.clone(), store);
        (attempts, exec)
    };

    let transient = || DbError::Connection("injected: the connection was reset".to_string());
    let execution_id = f.create(f.request(ffqn("e20"), 3)).await;
    let (attempts, exec) = run(2, transient());
    assert_eq!(tick(&exec, f.clock.now()).await, vec![execution_id.clone()]);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "two failures, then the write"
    );
    assert_eq!(f.last_event(&execution_id).await, finished(ok(&value)));

    let lasting = f.create(f.request(ffqn("e20"), 3)).await;
    let (attempts, exec) = run(u32::MAX, transient());
    assert_eq!(tick(&exec, f.clock.now()).await, vec![lasting.clone()]);
    // Retried until the pauses fill the lease (the clock stands still: all of it is left).
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        outcome_write_attempts(super::LOCK_EXPIRY)
    );
    assert!(
        matches!(f.state(&lasting).await, PendingState::Locked { .. }),
        "a write that never went through leaves the lease to the watcher"
    );

    let refused = f.create(f.request(ffqn("e20"), 3)).await;
    let (attempts, exec) = run(u32::MAX, DbError::NotFound("injected".to_string()));
    assert_eq!(tick(&exec, f.clock.now()).await, vec![refused.clone()]);
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "retrying cannot cure it"
    );
    assert!(matches!(
        f.state(&refused).await,
        PendingState::Locked { .. }
    ));
}
