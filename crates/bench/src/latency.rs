//! Latency of one execution at a time: submit (`create`) to its acknowledged `Finished`, on an
//! idle executor that only notifications wake, p50 and p99 per backend, each beside the
//! commit latency of the same machine measured in the same run; and submit to result over
//! the HTTP API beside the same through the library ([`crate::http`]).
//!
//! One executor (the throughput rows' configuration) runs on a fresh store; the benchmark
//! creates one no-op execution, waits until the executor's `Finished` append for it was
//! acknowledged (the executor's store handle is a [`CountingDb`]), and only then creates the
//! next, so the executor is idle, waiting in `wait_for_pending`, at every submit. A few
//! executions first warm the store up, untimed. The limits, timed once after each execution
//! so that they see the same load (the disk of a shared machine changes speed within minutes),
//! p50 against p50: SQLite's single-row `INSERT` transaction with `synchronous=FULL` on a raw
//! connection with the store's pragmas (the `sqlite_ceiling` statement), and PostgreSQL's
//! single-client autocommit `INSERT` on the same server, through a connection of its own. An
//! execution needs three commits (create, lock, finish), so three commits are the floor on the
//! durable backends.

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

/// The commit the p50 is held to, timed once after each execution (so under the same load as
/// the executions, on a machine whose disk speed swings within minutes).
enum Commit<'a> {
    /// The memory backend: no commit.
    None,
    /// A single-row `INSERT` transaction on a raw SQLite connection with the store's pragmas
    /// (WAL, `synchronous=FULL`), a database of its own.
    Sqlite(rusqlite::Connection),
    /// An autocommit single-row `INSERT` through a PostgreSQL connection of its own.
    Postgres(&'a tokio_postgres::Client, tokio_postgres::Statement),
}

/// A 200-byte row, as `sqlite_ceiling` writes.
const BODY: &str = concat!(
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
);

impl<'a> Commit<'a> {
    /// The commit of `probe`'s backend, its name and the ratio its p50 allows; `None` for
    /// memory, and for SQLite below FULL (the target is about FULL commits).
    async fn open(
        probe: &'a Probe,
        dir: &Path,
        sync: Synchronous,
    ) -> anyhow::Result<Option<(Self, &'static str, f64)>> {
        match probe {
            Probe::Memory => Ok(None),
            Probe::Sqlite { .. } if sync != Synchronous::Full => Ok(None),
            Probe::Sqlite { .. } => {
                let conn = rusqlite::Connection::open(dir.join("latency-commit.db"))?;
                let mode: String =
                    conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
                anyhow::ensure!(mode == "wal", "journal_mode is {mode}, expected wal");
                conn.execute_batch(
                    "PRAGMA synchronous=FULL; \
                     CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
                )?;
                Ok(Some((Self::Sqlite(conn), "single-row FULL commit", 3.5)))
            }
            Probe::Postgres { client, .. } => {
                client
                    .batch_execute(
                        "CREATE TABLE bench_commit_latency \
                         (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)",
                    )
                    .await
                    .context("creating the commit-latency table")?;
                let insert = client
                    .prepare("INSERT INTO bench_commit_latency (body) VALUES ($1)")
                    .await?;
                let commit = Self::Postgres(client, insert);
                Ok(Some((commit, "single-client INSERT commit", 4.0)))
            }
        }
    }

    /// Times one commit.
    async fn once(&self) -> anyhow::Result<Duration> {
        let start = Instant::now();
        match self {
            Self::None => {}
            Self::Sqlite(conn) => {
                conn.prepare_cached("INSERT INTO t (body) VALUES (?1)")?
                    .execute([BODY])?;
            }
            Self::Postgres(client, insert) => {
                client.execute(insert, &[&BODY]).await?;
            }
        }
        Ok(start.elapsed())
    }

    async fn close(self) -> anyhow::Result<()> {
        if let Self::Postgres(client, _) = self {
            client
                .batch_execute("DROP TABLE bench_commit_latency")
                .await?;
        }
        Ok(())
    }
}

/// What one backend's latency run found.
struct Measured {
    /// Submit to the executor's acknowledged `Finished`.
    finished: Latency,
    /// The commits timed after each execution.
    commits: Latency,
    /// Submit to result over HTTP.
    http: Latency,
    /// Submit to result through the library, alternating with `http`.
    library: Latency,
}

/// Runs `executions` no-op executions one at a time on `db` with one idle executor, timing
/// one `commit` after each; then as many submitted and awaited over HTTP and through the
/// library, alternating.
async fn measure(
    db: &Arc<dyn DbConnection>,
    commit: &Commit<'_>,
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<Measured> {
    anyhow::ensure!(executions > 0, "--latency-executions: 0 executions");
    let total = WARM_UP + executions;
    let counting = Arc::new(CountingDb::new(db.clone(), total, false));
    let node = crate::multi::noop_node(db, counting.clone(), batch_size)?.start()?;
    let timed = async {
        let mut samples = Vec::with_capacity(executions);
        let mut commits = Vec::with_capacity(executions);
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
            let elapsed = start.elapsed();
            // Once the executor is idle again, as it is at the next submit.
            let commit = commit.once().await?;
            if n >= WARM_UP {
                samples.push(elapsed);
                commits.push(commit);
            }
        }
        let (finished, commits) = (Latency::of(&mut samples), Latency::of(&mut commits));
        let (http, library) = to_result(db, node.catalog(), executions).await?;
        anyhow::Ok(Measured {
            finished,
            commits,
            http,
            library,
        })
    }
    .await;
    node.shutdown(crate::multi::STOP).await;
    timed
}

/// Submit to result, one execution at a time, over HTTP (`POST /executions`, `GET
/// .../wait`) and through the library (`node::submit`, `node::wait_for_result`), alternating;
/// the first [`WARM_UP`] of each untimed.
async fn to_result(
    db: &Arc<dyn DbConnection>,
    catalog: &Arc<node::Catalog>,
    executions: usize,
) -> anyhow::Result<(Latency, Latency)> {
    let served = crate::http::Served::start(db.clone(), catalog.clone()).await?;
    let params = serde_json::json!([]);
    let timed = async {
        let (mut http, mut library) = (Vec::new(), Vec::new());
        for n in 0..WARM_UP + executions {
            let start = Instant::now();
            served.submit_and_wait(crate::FFQN, &params).await?;
            let over_http = start.elapsed();
            let start = Instant::now();
            let submission = node::Submission {
                ffqn: crate::FFQN.parse()?,
                params: params.clone(),
                execution_id: None,
                metadata: concepts::ExecutionMetadata::default(),
            };
            let submitted = node::submit(db.as_ref(), catalog, &executor::Now, submission).await?;
            let result = node::wait_for_result(
                db.as_ref(),
                submitted.execution_id(),
                Some(Duration::from_secs(10)),
                node::DEFAULT_WAIT_SLICE,
            )
            .await?;
            anyhow::ensure!(
                result.is_some(),
                "no result within 10 s through the library"
            );
            if n >= WARM_UP {
                http.push(over_http);
                library.push(start.elapsed());
            }
        }
        anyhow::Ok((Latency::of(&mut http), Latency::of(&mut library)))
    }
    .await;
    served.stop().await?;
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
            let commit = Commit::open(&store.probe, dir, sync).await?;
            let (probe, limit) = match commit {
                Some((probe, name, ratio)) => (probe, Some((name, ratio))),
                None => (Commit::None, None),
            };
            let measured = measure(&store.db, &probe, args.latency_executions, batch_size).await;
            probe.close().await?;
            let measured = measured?;
            anyhow::Ok((
                measured.finished,
                limit.map(|(name, ratio)| (name, measured.commits.p50_ms, ratio)),
                (measured.http, measured.library),
            ))
        }
        .await;
        store.finish().await?;
        let (latency, limit, (http, library)) = measured?;
        let p50 = "latency p50, submit to Finished";
        rows.push((
            backend.clone(),
            match limit {
                None => Row::alone(p50, latency.p50_ms, "ms", Goal::AtMost(0.02)),
                Some((name, commit_ms, ratio)) => Row::against(
                    p50,
                    latency.p50_ms,
                    "ms",
                    format!("{name} (p50, one after each execution)"),
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
        rows.push((
            backend.clone(),
            Row::against(
                "latency p50, submit to result over HTTP",
                http.p50_ms,
                "ms",
                "the same through the library (submit, wait_for_result), alternating",
                library.p50_ms,
                Goal::Report,
            ),
        ));
    }
    Ok(rows)
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
