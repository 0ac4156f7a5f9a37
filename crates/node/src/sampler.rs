//! The gauges the node samples instead of counting per event: per function of its catalog,
//! the executions due now and not locked, and how long the oldest of them has waited
//! (`concepts::metrics::DUE_EXECUTIONS`, `DUE_CAPPED`, `OLDEST_DUE_AGE`). One read per function
//! per interval, `DbClient::due_backlog`: the index the locks read, in its order, at most
//! [`CAP`] + 1 rows, so the oldest is exact however long the backlog is, and the count stops at
//! [`CAP`] (the capped gauge says so) instead of reading the whole backlog.

use crate::BackgroundContext;
use chrono::{DateTime, Utc};
use concepts::{DbClient, FunctionFqn, metrics as m};
use std::time::Duration;

/// The due executions counted per function and sample, at most.
pub const CAP: usize = 1_000;

/// Samples every `every` until the node's shutdown begins.
pub(crate) async fn run<C: concepts::ClockFn>(context: BackgroundContext<C>, every: Duration) {
    let BackgroundContext {
        signal,
        db,
        clock,
        catalog,
    } = context;
    let functions: Vec<_> = catalog.functions().map(|f| f.ffqn().clone()).collect();
    loop {
        sample(db.as_ref(), clock.now(), &functions, CAP).await;
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = signal.clone().fired() => return,
        }
    }
}

/// One sample at `now`: per function of `functions`, its due executions counted up to `cap`
/// (`stele_due_executions`, and `stele_due_executions_capped` 1 when there are more), and the
/// age of the oldest (`stele_oldest_due_age_seconds`, 0 when none is due). A function the
/// store cannot read now keeps its last figures (the store's errors are counted where it is
/// written to).
pub async fn sample(db: &dyn DbClient, now: DateTime<Utc>, functions: &[FunctionFqn], cap: usize) {
    if !m::enabled() {
        return;
    }
    for function in functions {
        let Ok(backlog) = db.due_backlog(function, now, cap).await else {
            continue;
        };
        let age = backlog.oldest_due_at.map_or(0.0, |at| {
            let waited = now.signed_duration_since(at).to_std().unwrap_or_default();
            waited.as_secs_f64()
        });
        let label = function.to_string();
        #[expect(clippy::cast_precision_loss, reason = "a count of executions")]
        metrics::gauge!(m::DUE_EXECUTIONS, m::FUNCTION => label.clone()).set(backlog.due as f64);
        metrics::gauge!(m::DUE_CAPPED, m::FUNCTION => label.clone()).set(if backlog.more {
            1.0
        } else {
            0.0
        });
        metrics::gauge!(m::OLDEST_DUE_AGE, m::FUNCTION => label).set(age);
    }
}
