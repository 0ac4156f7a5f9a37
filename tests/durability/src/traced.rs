//! The executor's view of the store, wrapped to report what the multi-process test checks:
//! how many executions each `lock_pending` locked, and when each `wait_for_pending` began and
//! ended and whether it ran to its `max_wait`.
//!
//! A `wait_for_pending` call ends for one of three reasons only: something was due when it
//! looked (at once), a notification woke it, or `max_wait` passed. A call that began when
//! nothing could be due and ended before its `max_wait` was therefore woken by a
//! notification; the lines printed here let a test prove exactly that.

use crate::Out;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    DbAwait, DbError, DbExecutor, ExecutionId, FinishedExecutionResult, FunctionFqn,
    LockPendingRequest, LockedExecution, OutcomeWrite, Version,
};
use durability::{Line, wall_ms};
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// Wake-up counters of one executor's store handle.
#[derive(Debug, Default)]
pub(crate) struct WaitCounts {
    /// `wait_for_pending` calls that returned.
    pub(crate) waits: AtomicU64,
    /// Those that returned before their `max_wait` (due at once, or woken).
    pub(crate) early: AtomicU64,
    /// Those that ran to their `max_wait`.
    pub(crate) timed_out: AtomicU64,
}

/// Forwards everything to the store; counts, and with `print` reports on standard output the
/// lines [`Line::Locked`], [`Line::Waiting`] and [`Line::Waited`].
pub(crate) struct TracedDb {
    inner: Arc<dyn DbExecutor>,
    print: bool,
    pub(crate) counts: WaitCounts,
}

impl TracedDb {
    pub(crate) fn new(inner: Arc<dyn DbExecutor>, print: bool) -> Self {
        Self {
            inner,
            print,
            counts: WaitCounts::default(),
        }
    }
}

#[async_trait]
impl DbAwait for TracedDb {
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        self.inner
            .wait_for_finished_result(execution_id, timeout)
            .await
    }
}

#[async_trait]
impl DbExecutor for TracedDb {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        let locked = self.inner.lock_pending(req).await;
        if self.print
            && let Ok(locked) = &locked
            && !locked.is_empty()
        {
            Out::line(Line::Locked(locked.len()));
        }
        locked
    }

    async fn unlock_lost(
        &self,
        executor_id: concepts::ExecutorId,
        lock_expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<usize, DbError> {
        self.inner
            .unlock_lost(executor_id, lock_expires_at, now)
            .await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        self.inner.append_outcome(write).await
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        let start_ms = wall_ms();
        if self.print {
            Out::line(Line::Waiting { start: start_ms });
        }
        let started = Instant::now();
        self.inner
            .wait_for_pending(pending_at_or_sooner, ffqns, max_wait)
            .await;
        let timed_out = started.elapsed() >= max_wait;
        self.counts.waits.fetch_add(1, Ordering::Relaxed);
        let counter = if timed_out {
            &self.counts.timed_out
        } else {
            &self.counts.early
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if self.print {
            Out::line(Line::Waited {
                start: start_ms,
                end: wall_ms(),
                early: !timed_out,
            });
        }
    }
}
