//! Retention: the [`Pruner`] deletes finished trees of executions once they are older than the
//! retention period, in bounded batches, so that the store does not grow forever
//! (`docs/SEMANTICS.md` §13). Which trees may go is the storage kernel's rule
//! (`DbClient::prune`); this module only decides when, and how much at a time.

use crate::Task;
use chrono::{DateTime, Utc};
use concepts::{ClockFn, DbClient, DbError, PruneOutcome, PruneRequest, sub_saturating};
use std::{sync::Arc, time::Duration};
use tokio::sync::watch;
use tracing::{debug, info, info_span, warn};

/// How the pruner works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunerConfig {
    /// How long a finished top-level execution (with its tree) is kept after it finished.
    pub retention: Duration,
    /// How often the pruner looks for trees to delete (real time); at least 1 ns.
    pub interval: Duration,
    /// How many top-level executions one `prune` call examines, at most: the size of one
    /// transaction, and so how long it holds the store. At least 1.
    pub batch: usize,
}

/// A [`PrunerConfig`] that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrunerConfigError {
    /// `batch` is 0: no call could delete anything.
    #[error(
        "the pruner's batch is 0: give it the number of trees one transaction may delete (100, say)"
    )]
    ZeroBatch,
    /// `interval` is 0: the pruner would never pause between passes.
    #[error("the pruner's interval is 0: give it how long to pause between passes (a minute, say)")]
    ZeroInterval,
}

impl PrunerConfig {
    /// Checks that the pruner can work with this configuration.
    ///
    /// # Errors
    /// A zero `batch` or a zero `interval`.
    pub fn validate(&self) -> Result<(), PrunerConfigError> {
        if self.batch == 0 {
            return Err(PrunerConfigError::ZeroBatch);
        }
        if self.interval.is_zero() {
            return Err(PrunerConfigError::ZeroInterval);
        }
        Ok(())
    }
}

/// What one pass over the store removed, summed over its batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneTotals {
    /// Trees deleted (their top-level executions).
    pub trees: usize,
    /// Executions deleted, top-level and descendants.
    pub executions: usize,
    /// Trees examined and kept, because a member has not finished.
    pub kept: usize,
    /// `prune` calls (transactions) the pass made.
    pub batches: usize,
}

impl PruneTotals {
    fn add(&mut self, outcome: &PruneOutcome) {
        self.trees += outcome.trees;
        self.executions += outcome.executions;
        self.kept += outcome.kept;
        self.batches += 1;
    }
}

/// One pass: deletes every tree whose top-level execution finished before `finished_before`
/// and whose members all finished, `batch` top-level executions per `prune` call, following
/// [`PruneOutcome::next`] until no candidate is left, and yielding to the runtime between
/// calls. What `stele executions prune` runs once; the [`Pruner`] runs it every interval.
///
/// # Errors
/// A `prune` call failed (a `batch` of 0 is refused by the store); what earlier calls deleted
/// stays deleted.
pub async fn prune_finished<D: DbClient + ?Sized>(
    db: &D,
    finished_before: DateTime<Utc>,
    batch: usize,
) -> Result<PruneTotals, DbError> {
    pass(db, finished_before, batch, || false).await
}

/// A pass that stops between two calls once `stop()` says so.
async fn pass<D: DbClient + ?Sized>(
    db: &D,
    finished_before: DateTime<Utc>,
    batch: usize,
    stop: impl Fn() -> bool,
) -> Result<PruneTotals, DbError> {
    let mut totals = PruneTotals::default();
    let mut after = None;
    loop {
        let request = PruneRequest {
            finished_before,
            limit: batch,
            after,
        };
        let outcome = match db.prune(request).await {
            Ok(outcome) => outcome,
            Err(err) => {
                if totals.batches > 0 {
                    warn!(
                        ?totals,
                        "pruning stopped half-way; the next pass goes on: {err}"
                    );
                }
                return Err(err);
            }
        };
        totals.add(&outcome);
        debug!(
            trees = outcome.trees,
            executions = outcome.executions,
            kept = outcome.kept,
            "pruned a batch"
        );
        after = outcome.next;
        if after.is_none() || stop() {
            return Ok(totals);
        }
        // Each call is a bounded transaction; between two, others get the store and the
        // runtime's threads.
        tokio::task::yield_now().await;
    }
}

/// The retention task: every `interval` (the first pass at once), one [`prune_finished`]
/// pass at `now - retention`, logged (`info` when it deleted or kept anything).
///
/// Runs next to executors and the timers watcher, on any store. Closed by
/// [`Pruner::close`]; dropped without closing, it is aborted (a `prune` call in flight is one
/// transaction, all or nothing).
#[derive(Debug)]
pub struct Pruner {
    task: Task,
}

impl Pruner {
    /// Checks `config` and spawns the pruner on the current tokio runtime.
    ///
    /// # Errors
    /// The configuration cannot work ([`PrunerConfig::validate`]).
    pub fn spawn_new<D, C>(
        db: Arc<D>,
        config: PrunerConfig,
        clock: C,
    ) -> Result<Self, PrunerConfigError>
    where
        D: DbClient + ?Sized + 'static,
        C: ClockFn,
    {
        config.validate()?;
        let task = Task::spawn("pruner", info_span!("pruner"), |closing| async move {
            // Validated above: the loop runs.
            let _ = pruner_loop(db, config, clock, closing).await;
        });
        Ok(Self { task })
    }

    /// Stops the pruner and returns once it has ended: a `prune` call in flight completes
    /// first, no further one starts. Idempotent.
    pub async fn close(&mut self) {
        self.task.close().await;
    }
}

/// The loop [`Pruner::spawn_new`] spawns: every `config.interval` (the first time at once) one
/// pass at `now - retention`, logged, until `closing` turns true (or its sender is dropped);
/// a pass in progress stops between two calls once it does. For a caller that polls the loop
/// itself, such as the deterministic simulation, which kills it by dropping it at any await
/// point (a `prune` call in flight is one transaction, all or nothing).
///
/// # Errors
/// The configuration cannot work ([`PrunerConfig::validate`]): no pass is made.
pub async fn pruner_loop<D, C>(
    db: Arc<D>,
    config: PrunerConfig,
    clock: C,
    mut closing: watch::Receiver<bool>,
) -> Result<(), PrunerConfigError>
where
    D: DbClient + ?Sized,
    C: ClockFn,
{
    config.validate()?;
    loop {
        let finished_before = sub_saturating(clock.now(), config.retention);
        let stop = || *closing.borrow();
        match pass(db.as_ref(), finished_before, config.batch, stop).await {
            Ok(totals) if totals.trees > 0 || totals.kept > 0 => info!(
                "pruned {} trees ({} executions) finished before {finished_before}; \
                 kept {} with unfinished members ({} batches)",
                totals.trees, totals.executions, totals.kept, totals.batches
            ),
            Ok(_) => debug!("nothing finished before {finished_before} to prune"),
            Err(err) => warn!("cannot prune, trying again in {:?}: {err}", config.interval),
        }
        tokio::select! {
            _ = closing.wait_for(|closing| *closing) => break,
            () = tokio::time::sleep(config.interval) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
