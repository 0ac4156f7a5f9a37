//! The PostgreSQL server's throughput limit, measured in the same run as the end-to-end
//! figures it is compared with: autocommit single-row `INSERT` transactions per second with
//! [`CLIENTS`] concurrent clients. (The latency rows measure the single-client commit.)
//!
//! Each client is a plain `tokio-postgres` connection to the benchmark's database, with the
//! server's own settings (`synchronous_commit=on`), inserting one 200-byte row per statement
//! into a scratch table that is dropped afterwards. The measurement runs for a fixed time and
//! counts the statements acknowledged within it.

use crate::{
    probe::driver_url,
    targets::{Goal, Row, Targets},
};
use anyhow::Context;
use std::{
    sync::Arc,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};
use tokio_postgres::{Client, NoTls};

/// The concurrent clients of the throughput limit.
pub(crate) const CLIENTS: usize = 32;

const TABLE: &str = "stele_bench_insert_limit";

/// Single-row `INSERT` transactions per second with [`CLIENTS`] clients on the database
/// `database` of the server `server_url` names, over `budget`.
pub(crate) async fn measure(
    server_url: &str,
    database: &str,
    budget: Duration,
) -> anyhow::Result<f64> {
    measure_clients(server_url, database, CLIENTS, budget).await
}

/// Single-row `INSERT` transactions per second with `clients` clients on the database
/// `database` of the server `server_url` names, over `budget`.
pub(crate) async fn measure_clients(
    server_url: &str,
    database: &str,
    clients: usize,
    budget: Duration,
) -> anyhow::Result<f64> {
    let admin = connect(server_url, database).await?;
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {TABLE}; \
             CREATE TABLE {TABLE} (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)"
        ))
        .await
        .context("creating the scratch table")?;
    let measured = inserts_per_second(server_url, database, clients, budget).await;
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
        .await
        .context("dropping the scratch table")?;
    measured
}

/// The server's single-row `INSERT` transactions/s at 32 clients, on a fresh database.
pub(crate) async fn measure_on_fresh_database(server_url: &str) -> anyhow::Result<f64> {
    eprintln!("measuring the PostgreSQL server's single-row INSERT transactions/s ...");
    let run = crate::PostgresRun::create(server_url, "limit").await?;
    let measured = measure(&run.server_url, &run.name, Duration::from_secs(3)).await;
    run.drop_database().await?;
    measured
}

/// The PostgreSQL rows of the targets table: one process end to end against the server's
/// INSERT transactions at 32 clients, several processes against one (the multi-process run's
/// own 1-process figure when it has one).
pub(crate) fn add_targets(
    targets: &mut Targets,
    inserts_per_second: f64,
    rate: f64,
    by_processes: &[(usize, f64)],
) {
    targets.add(
        "postgres",
        Row::against(
            "end to end, executions/s, 1 executor process",
            rate,
            "/s",
            format!("single-row INSERT transactions/s, {} clients", CLIENTS),
            inserts_per_second,
            Goal::RatioAtLeast(1.0),
        ),
    );
    let one = by_processes
        .iter()
        .find(|(p, _)| *p == 1)
        .map_or(rate, |(_, r)| *r);
    for (processes, value) in by_processes.iter().filter(|(p, _)| *p > 1) {
        targets.add(
            "postgres",
            Row::against(
                format!("end to end, executions/s, {processes} executor processes"),
                *value,
                "/s",
                "1 executor process",
                one,
                Goal::RatioAtLeast(1.0),
            ),
        );
    }
}

async fn connect(server_url: &str, database: &str) -> anyhow::Result<Client> {
    let mut config: tokio_postgres::Config = driver_url(server_url)
        .parse()
        .context("parsing the PostgreSQL URL for the limit measurement")?;
    config.dbname(database);
    let (client, connection) = config
        .connect(NoTls)
        .await
        .with_context(|| format!("connecting to database {database}"))?;
    tokio::spawn(async move {
        // The connection ends when its client is dropped; an error then is the run's own.
        let _ = connection.await;
    });
    Ok(client)
}

/// `clients` connections, each inserting one row per autocommit statement, one after the
/// other, for `budget`; returns the acknowledged statements per second.
async fn inserts_per_second(
    server_url: &str,
    database: &str,
    clients: usize,
    budget: Duration,
) -> anyhow::Result<f64> {
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(connect(server_url, database).await?);
    }
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let body = "x".repeat(200);
    let start = Instant::now();
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|client| {
            let (done, count, body) = (done.clone(), count.clone(), body.clone());
            tokio::spawn(async move {
                let statement = client
                    .prepare(&format!("INSERT INTO {TABLE} (body) VALUES ($1)"))
                    .await?;
                while !done.load(Ordering::Relaxed) {
                    client.execute(&statement, &[&body]).await?;
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, tokio_postgres::Error>(())
            })
        })
        .collect();
    tokio::time::sleep(budget).await;
    done.store(true, Ordering::Relaxed);
    let counted = count.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    for task in tasks {
        task.await
            .context("an INSERT client panicked")?
            .context("an INSERT client failed")?;
    }
    Ok(counted as f64 / elapsed.as_secs_f64())
}
