//! Latency of one execution at a time: submit (`create`) to its acknowledged `Finished`, on an
//! idle executor that only notifications wake, p50 and p99 per backend, each beside the
//! commit latency of the same machine measured in the same run.
//!
//! One executor (the throughput rows' configuration) runs on a fresh store; the benchmark
//! creates one no-op execution, waits until the executor's `Finished` append for it was
//! acknowledged (the executor's store handle is a [`CountingDb`]), and only then creates the
//! next, so the executor is idle, waiting in `wait_for_pending`, at every submit. A few
//! executions first warm the store up, untimed. The limits: SQLite's single-row `INSERT`
//! transaction with `synchronous=FULL` (the `sqlite_ceiling` measurement, as its mean time),
//! and PostgreSQL's single-client autocommit `INSERT` on the same server, through a connection
//! of its own. An execution needs three commits (create, lock, finish), so three commits are
//! the floor on the durable backends.

use crate::{Store, counting::CountingDb, probe::Probe, targets::Goal, targets::Row};
use anyhow::Context;
use concepts::{DbConnection, ExecutionId};
use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};
use storage_sqlite::Synchronous;

/// Untimed executions before the timed ones.
const WARM_UP: usize = 20;
/// How long each commit-latency measurement runs.
const COMMIT_BUDGET: Duration = Duration::from_secs(2);

/// The arguments of the latency rows.
#[derive(clap::Args, Debug)]
pub(crate) struct LatencyArgs {
    /// Latency rows: how many executions are timed, one at a time, per backend.
    #[arg(long, default_value_t = 1_000)]
    latency_executions: usize,
    /// Skip the latency rows.
    #[arg(long)]
    no_latency: bool,
}

/// Submit-to-`Finished` latencies of one backend, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latency {
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

impl Latency {
    /// The percentiles of `samples` (sorted here).
    fn of(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            let rank = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1e3
        };
        Self {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
        }
    }
}

/// Runs `executions` no-op executions one at a time on `db` with one idle executor.
pub(crate) async fn measure(
    db: &Arc<dyn DbConnection>,
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<Latency> {
    anyhow::ensure!(executions > 0, "--latency-executions: 0 executions");
    let total = WARM_UP + executions;
    let counting = Arc::new(CountingDb::new(db.clone(), total, false));
    let mut executor = crate::multi::spawn_noop_executor(counting.clone(), batch_size)?;
    let timed = async {
        let mut samples = Vec::with_capacity(executions);
        let deadline = Duration::from_secs(10);
        for (n, request) in crate::noop_requests(total)?.into_iter().enumerate() {
            let execution_id: ExecutionId = request.execution_id.clone();
            let start = Instant::now();
            db.create(request).await.context("create")?;
            tokio::time::timeout(deadline, counting.reached(n + 1))
                .await
                .with_context(|| {
                    format!("{execution_id} did not finish within {deadline:?} of its submit")
                })?;
            if n >= WARM_UP {
                samples.push(start.elapsed());
            }
        }
        anyhow::Ok(Latency::of(&mut samples))
    }
    .await;
    executor.close().await;
    timed
}

/// The latency rows of every backend of `backends` (fresh stores, dropped afterwards).
pub(crate) async fn rows(
    args: &LatencyArgs,
    backends: &[String],
    dir: &Path,
    sync: Synchronous,
    postgres_url: Option<&str>,
    batch_size: usize,
) -> anyhow::Result<Vec<(String, Row)>> {
    let mut rows = Vec::new();
    if args.no_latency {
        return Ok(rows);
    }
    for backend in backends {
        let Some(store) = Store::open(backend, dir, sync, postgres_url, "latency").await? else {
            continue;
        };
        eprintln!("measuring the latency on {backend} ...");
        let measured = async {
            let latency = measure(&store.db, args.latency_executions, batch_size).await?;
            let limit = commit_latency(&store.probe, dir, sync).await?;
            anyhow::Ok((latency, limit))
        }
        .await;
        store.finish().await?;
        let (latency, limit) = measured?;
        let p50 = "latency p50, submit to Finished";
        rows.push((
            backend.clone(),
            match limit {
                None => Row::alone(p50, latency.p50_ms, "ms", Goal::AtMost(0.02)),
                Some((name, commit_ms, ratio)) => Row::against(
                    p50,
                    latency.p50_ms,
                    "ms",
                    name,
                    commit_ms,
                    Goal::RatioAtMost(ratio),
                ),
            },
        ));
        rows.push((
            backend.clone(),
            Row::against(
                "latency p99, submit to Finished",
                latency.p99_ms,
                "ms",
                "p50",
                latency.p50_ms,
                Goal::RatioAtMost(2.0),
            ),
        ));
    }
    Ok(rows)
}

/// The commit latency the backend's p50 is held to, in ms, with its name and the ratio
/// allowed: none for memory; SQLite's single-row FULL commit (when the run uses FULL);
/// PostgreSQL's single-client INSERT commit.
async fn commit_latency(
    probe: &Probe,
    dir: &Path,
    sync: Synchronous,
) -> anyhow::Result<Option<(&'static str, f64, f64)>> {
    match probe {
        Probe::Memory => Ok(None),
        Probe::Sqlite { .. } if sync == Synchronous::Full => {
            // A folder of its own: the ceiling rows' database of the same name may exist.
            let dir = dir.join("latency-commit");
            std::fs::create_dir_all(&dir)?;
            let (per_second, _) = crate::sqlite_ceiling(&dir, "FULL", 1, COMMIT_BUDGET)?;
            Ok(Some(("single-row FULL commit", 1e3 / per_second, 3.5)))
        }
        Probe::Sqlite { .. } => Ok(None),
        Probe::Postgres { client, .. } => {
            let ms = postgres_insert_commit(client).await?;
            Ok(Some(("single-client INSERT commit", ms, 4.0)))
        }
    }
}

/// The mean time of one autocommit single-row `INSERT` on `client`, in ms, over about
/// [`COMMIT_BUDGET`].
async fn postgres_insert_commit(client: &tokio_postgres::Client) -> anyhow::Result<f64> {
    client
        .batch_execute(
            "CREATE TABLE bench_commit_latency (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)",
        )
        .await
        .context("creating the commit-latency table")?;
    let insert = client
        .prepare("INSERT INTO bench_commit_latency (body) VALUES ($1)")
        .await?;
    let body = "x".repeat(200);
    let start = Instant::now();
    let mut commits = 0u32;
    while start.elapsed() < COMMIT_BUDGET {
        client.execute(&insert, &[&body]).await?;
        commits += 1;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(commits);
    client
        .batch_execute("DROP TABLE bench_commit_latency")
        .await?;
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::Latency;
    use std::time::Duration;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=1000).rev().map(Duration::from_micros).collect();
        let latency = Latency::of(&mut samples);
        assert!((latency.p50_ms - 0.5).abs() < 1e-9, "{latency:?}");
        assert!((latency.p99_ms - 0.99).abs() < 1e-9, "{latency:?}");
    }
}
