//! The gauges the node samples instead of counting per event: per function of its catalog,
//! the executions due now and not locked, and how long the oldest of them has waited
//! (`concepts::metrics::DUE_EXECUTIONS`, `OLDEST_DUE_AGE`). One bounded read per function
//! per interval: at most [`SAMPLE`] pending executions are looked at, so on a larger backlog
//! the count stops there and the age is that of the oldest among the newest [`SAMPLE`].

use crate::BackgroundContext;
use concepts::{
    ClockFn, ListExecutionsFilter, Pagination, PendingState, PendingStateKind, metrics as m,
};
use std::time::Duration;

/// Pending executions looked at per function and sample.
pub const SAMPLE: usize = 1_000;

/// Samples every `every` until the node's shutdown begins.
pub(crate) async fn run<C: ClockFn>(context: BackgroundContext<C>, every: Duration) {
    let BackgroundContext {
        signal,
        db,
        clock,
        catalog,
    } = context;
    let functions: Vec<_> = catalog.functions().map(|f| f.ffqn().clone()).collect();
    loop {
        for function in &functions {
            let filter = ListExecutionsFilter {
                ffqn: Some(function.clone()),
                state: Some(PendingStateKind::PendingAt),
                ..ListExecutionsFilter::default()
            };
            let page = Pagination {
                cursor: None,
                length: SAMPLE,
            };
            let Ok(rows) = db.list_executions(filter, page).await else {
                continue; // The store's own errors are counted where it is written to.
            };
            let now = clock.now();
            let due: Vec<_> = rows
                .iter()
                .filter_map(|row| match row.pending_state {
                    PendingState::PendingAt { scheduled_at } if scheduled_at <= now => {
                        Some(scheduled_at)
                    }
                    _ => None,
                })
                .collect();
            let oldest = due.iter().min().map_or(0.0, |at| {
                now.signed_duration_since(*at)
                    .to_std()
                    .unwrap_or_default()
                    .as_secs_f64()
            });
            let label = function.to_string();
            #[expect(clippy::cast_precision_loss, reason = "a count of executions")]
            metrics::gauge!(m::DUE_EXECUTIONS, m::FUNCTION => label.clone()).set(due.len() as f64);
            metrics::gauge!(m::OLDEST_DUE_AGE, m::FUNCTION => label).set(oldest);
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = signal.clone().fired() => return,
        }
    }
}
