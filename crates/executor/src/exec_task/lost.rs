//! The leases of `lock_pending` calls whose reply was lost (a retriable error: the lock may
//! have committed), kept until they are given back ([`DbExecutor::unlock_lost`]).

use chrono::{DateTime, Utc};
use concepts::{DbError, DbExecutor, ExecutorId};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The ends of an executor's leases whose lock reply was lost.
#[derive(Debug, Default)]
pub(super) struct LostLocks(Mutex<Vec<DateTime<Utc>>>);

impl LostLocks {
    fn list(&self) -> MutexGuard<'_, Vec<DateTime<Utc>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A `lock_pending` with a lease until `lock_expires_at` failed with a retriable error.
    pub(super) fn remember(&self, lock_expires_at: DateTime<Utc>) {
        self.list().push(lock_expires_at);
    }

    /// Gives back what the lost locks may have locked, before the executor locks again:
    /// otherwise those executions would wait for their leases to end and then be timed out, a
    /// retry used (or failed for good) without ever having run. A lease that has ended by
    /// `now` is left to the timers watcher. Until every one is given back the executor locks
    /// nothing new (the error): a new lease of the same end would be taken for a lost one.
    pub(super) async fn give_back(
        &self,
        db: &dyn DbExecutor,
        executor_id: ExecutorId,
        now: DateTime<Utc>,
    ) -> Result<(), DbError> {
        let lost = std::mem::take(&mut *self.list());
        if lost.is_empty() {
            return Ok(());
        }
        let mut left = Vec::new();
        let mut first_error = None;
        for lock_expires_at in lost.into_iter().filter(|ends| *ends > now) {
            match db.unlock_lost(executor_id, lock_expires_at, now).await {
                Ok(given_back) if given_back > 0 => {
                    tracing::info!(given_back, "gave back the executions of a lost lock reply");
                }
                Ok(_) => {}
                Err(err) => {
                    left.push(lock_expires_at);
                    first_error.get_or_insert(err);
                }
            }
        }
        self.list().extend(left);
        first_error.map_or(Ok(()), Err)
    }
}
