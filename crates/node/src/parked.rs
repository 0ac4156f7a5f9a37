//! The prober of parked executions: for each worker of the node, [`executor::unpark`] at the
//! node's start and then after each pause of [`executor::probe_pauses`] (a second, doubling up
//! to five minutes), so that a node started with fixed code takes up within its first pass
//! what older code parked, and a node whose code still diverges costs a few reads, fewer and
//! fewer of them.

use concepts::{ClockFn, DbConnection};
use executor::Worker;
use std::sync::Arc;
use tracing::{info, warn};

/// Probes the parked executions of `workers`' functions until the task is dropped.
pub(crate) async fn keep_probing<C: ClockFn>(
    db: Arc<dyn DbConnection>,
    clock: C,
    workers: Vec<Arc<dyn Worker>>,
) {
    for pause in executor::probe_pauses() {
        for worker in &workers {
            match executor::unpark(db.as_ref(), worker.as_ref(), &clock).await {
                Ok(pass) if pass.unlocked > 0 => info!(
                    "unparked {} of {} parked executions: a run gets further now",
                    pass.unlocked, pass.probed
                ),
                Ok(_) => {}
                Err(err) => warn!("cannot probe the parked executions; tried again later: {err}"),
            }
        }
        tokio::time::sleep(pause).await;
    }
}
