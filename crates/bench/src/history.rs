//! Stored history: the end-to-end rate (the no-op workload of the first table) on a store
//! that already holds many finished executions, against the same store empty (after a warm-up
//! run of 1,000); the HTTP API's first page of finished executions on the full store and the
//! UI's list page of the same ([`crate::http`]), then the UI's pages of a long log and of a
//! parent of many children written into it ([`crate::pages`]); and, on the memory backend,
//! the resident bytes each stored finished execution costs.
//!
//! The store is filled through its own API, quickly: `create_batch` of 10,000, `lock_pending`
//! of 10,000, and their `Finished` outcomes written 1,000 to a transaction with
//! `append_outcomes` (the batch write of the watcher), so every stored execution has the rows
//! and log (`Created`, `Locked`, `Finished`) an executor leaves.
//!
//! Both measured runs follow the upkeep a store gets over its life (on PostgreSQL `VACUUM
//! (ANALYZE)`, what autovacuum does to a store that grew over days, and a `CHECKPOINT`): the
//! fill writes a million executions in about a minute, and measured right after it the run
//! would time autovacuum's first pass over all of them, running beside it, and the checkpoint
//! that the fill's WAL started.

use anyhow::{Context, ensure};
use concepts::{
    ClockFn, DbConnection, ExecutionEventInner, LockPendingRequest, OutcomeWrite,
    SupportedFunctionReturnValue, add_saturating,
};
use executor::Now;
use std::{sync::Arc, time::Duration};

/// What one measurement found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HistoryFigures {
    /// Finished executions stored before the second run.
    pub(crate) stored: usize,
    /// End-to-end executions/s on the empty store.
    pub(crate) empty_rate: f64,
    /// End-to-end executions/s with `stored` finished executions in the store.
    pub(crate) stored_rate: f64,
    /// Resident bytes per stored finished execution (memory backend only).
    pub(crate) bytes_per_execution: Option<f64>,
    /// The median time of the HTTP API's first page of 100 finished executions, ms.
    pub(crate) first_page_ms: f64,
    /// The median time of the UI's list page of finished executions (its first 100), ms.
    pub(crate) list_page_ms: f64,
    /// The UI's execution pages.
    pub(crate) pages: crate::pages::PageFigures,
}

/// The UI's execution pages the stored-history phase measures: the events of the long log
/// and the children of the parent (0 skips each).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageSizes {
    pub(crate) events: usize,
    pub(crate) children: usize,
}

const CHUNK: usize = 10_000;
/// Executions of the warm-up run.
const WARM_UP: usize = 1_000;
/// Rows of the HTTP listing's page (the API's `limit`, the UI's default page).
const PAGE: usize = 100;

/// Fills `db` with `count` finished executions through its API.
async fn fill(db: &dyn DbConnection, count: usize) -> anyhow::Result<()> {
    let ffqns: Arc<[concepts::FunctionFqn]> = Arc::from([crate::FFQN.parse()?]);
    let mut left = count;
    while left > 0 {
        let chunk = left.min(CHUNK);
        let mut requests = crate::noop_requests(chunk)?;
        let now = Now.now();
        for request in &mut requests {
            request.scheduled_at = now;
        }
        db.create_batch(requests).await.context("create_batch")?;
        let locked = db
            .lock_pending(LockPendingRequest {
                batch_size: chunk,
                pending_at_or_sooner: now,
                ffqns: ffqns.clone(),
                now,
                component_id: crate::component_id()?,
                executor_id: concepts::ExecutorId::generate_at(now),
                lock_expires_at: add_saturating(now, Duration::from_secs(600)),
            })
            .await
            .context("lock_pending")?;
        ensure!(locked.len() == chunk, "locked {} of {chunk}", locked.len());
        let now = Now.now();
        let writes: Vec<OutcomeWrite> = locked
            .into_iter()
            .map(|l| {
                let event = ExecutionEventInner::Finished {
                    result: Ok(SupportedFunctionReturnValue::None),
                };
                OutcomeWrite::new(l.execution_id, l.next_version, now, event, None)
            })
            .collect();
        for batch in writes.chunks(timers_watcher::LEASES_PER_WRITE) {
            let results = db.append_outcomes(batch.to_vec()).await?;
            ensure!(results.iter().all(Result::is_ok), "a Finished was refused");
        }
        left -= chunk;
    }
    Ok(())
}

/// The resident set size of this process, in bytes (Linux), `None` elsewhere.
fn resident_bytes() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0)
}

/// Measures `store` empty, then with `stored` finished executions; `executions` per run, each
/// after the store's upkeep ([`crate::probe::Probe::upkeep`]); then the listing pages and the
/// execution pages of `pages` on the full store.
pub(crate) async fn measure(
    backend: &str,
    store: &crate::Store,
    stored: usize,
    executions: usize,
    batch_size: usize,
    pages: PageSizes,
) -> anyhow::Result<HistoryFigures> {
    let (db, probe) = (&store.db, &store.probe);
    // A first, small run warms the store up (file growth, PostgreSQL's first statistics), so
    // that the empty store is not measured cold against a warm full one.
    crate::run_noop(backend, db, executions.min(WARM_UP), batch_size).await?;
    // Before each measured run, the upkeep a store gets over its life (PostgreSQL: what
    // autovacuum does): the fill writes in a minute what a store gathers in days, so without
    // it the second run would measure the first autovacuum of the whole fill, running beside
    // it, and plans cached while the tables were empty.
    probe.upkeep().await?;
    let empty = crate::run_noop(backend, db, executions, batch_size).await?;
    let before = resident_bytes();
    fill(db.as_ref(), stored).await?;
    let after = resident_bytes();
    probe.upkeep().await?;
    let full = crate::run_noop(backend, db, executions, batch_size).await?;
    let served = crate::http::Served::start(db.clone(), Arc::new(node::Catalog::new())).await?;
    let timed = async {
        let first_page_ms = served.first_page_ms(PAGE).await?;
        let list_page_ms = served.list_page_ms(PAGE).await?;
        // Written after the listings, so that those list the fill's executions only.
        let figures =
            crate::pages::measure(backend, db.as_ref(), &served, pages.events, pages.children)
                .await?;
        anyhow::Ok((first_page_ms, list_page_ms, figures))
    }
    .await;
    served.stop().await?;
    let (first_page_ms, list_page_ms, pages) = timed?;
    let bytes_per_execution = match (backend, before, after) {
        ("memory", Some(before), Some(after)) => Some((after - before) / stored as f64),
        _ => None,
    };
    Ok(HistoryFigures {
        stored,
        empty_rate: empty.per_second(empty.create + empty.run),
        stored_rate: full.per_second(full.create + full.run),
        bytes_per_execution,
        first_page_ms,
        list_page_ms,
        pages,
    })
}

/// The targets-table rows of `figures`: within 20% of the empty store on SQLite and
/// PostgreSQL (reported on memory), the listing pages (the API's first page under 50 ms, the
/// UI's under 200 ms, on SQLite and PostgreSQL), the execution pages (under 200 ms) and the
/// memory backend's bytes per execution.
pub(crate) fn rows(backend: &str, figures: &HistoryFigures) -> Vec<crate::targets::Row> {
    use crate::targets::{Goal, Row};
    let goal = if backend == "memory" {
        Goal::Report
    } else {
        Goal::RatioAtLeast(0.8)
    };
    let mut rows = vec![Row::against(
        format!(
            "end to end with {} finished executions stored, executions/s",
            figures.stored
        ),
        figures.stored_rate,
        "/s",
        "the same on the empty store",
        figures.empty_rate,
        goal,
    )];
    rows.push(Row::alone(
        format!(
            "HTTP GET /executions?state=finished, first page of {PAGE} with {} stored, ms (median of {})",
            figures.stored,
            crate::http::PAGES
        ),
        figures.first_page_ms,
        "ms",
        if backend == "memory" {
            Goal::Report
        } else {
            Goal::AtMost(50.0)
        },
    ));
    rows.push(Row::alone(
        format!(
            "UI GET /executions?state=finished, first page of {PAGE} with {} stored, ms (median of {})",
            figures.stored,
            crate::http::PAGES
        ),
        figures.list_page_ms,
        "ms",
        if backend == "memory" {
            Goal::Report
        } else {
            Goal::AtMost(200.0)
        },
    ));
    rows.extend(crate::pages::rows(&figures.pages));
    if let Some(bytes) = figures.bytes_per_execution {
        rows.push(Row::alone(
            "resident bytes per stored finished execution",
            bytes,
            "B",
            Goal::Report,
        ));
    }
    rows
}
