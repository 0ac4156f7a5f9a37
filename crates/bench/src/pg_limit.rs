//! The PostgreSQL server's own limits, measured in the same run as the end-to-end figures they
//! are compared with: autocommit single-row `INSERT` transactions per second with 32 concurrent
//! clients (the throughput limit) and with one client (whose inverse is the time of one
//! commit, the latency limit).
//!
//! Each client is a plain `tokio-postgres` connection to the benchmark's database, with the
//! server's own settings (`synchronous_commit=on`), inserting one 200-byte row per statement
//! into a scratch table that is dropped afterwards. Each measurement runs for a fixed time and
//! counts the statements acknowledged within it.

use crate::probe::driver_url;
use anyhow::Context;
use std::{
    sync::Arc,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::{Duration, Instant},
};
use tokio_postgres::{Client, NoTls};

/// What one measurement found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InsertLimits {
    /// Single-row `INSERT` transactions per second with [`CLIENTS`] clients.
    pub(crate) many_per_second: f64,
    /// Single-row `INSERT` transactions per second with one client.
    pub(crate) one_per_second: f64,
}

impl InsertLimits {
    /// One single-client commit, in milliseconds.
    pub(crate) fn one_commit_ms(&self) -> f64 {
        1_000.0 / self.one_per_second
    }
}

/// The concurrent clients of the throughput limit.
pub(crate) const CLIENTS: usize = 32;

const TABLE: &str = "stele_bench_insert_limit";

/// Measures both limits on the database `database` of the server `server_url` names, each
/// for `budget`.
pub(crate) async fn measure(
    server_url: &str,
    database: &str,
    budget: Duration,
) -> anyhow::Result<InsertLimits> {
    let admin = connect(server_url, database).await?;
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {TABLE}; \
             CREATE TABLE {TABLE} (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)"
        ))
        .await
        .context("creating the scratch table")?;
    let many = inserts_per_second(server_url, database, CLIENTS, budget).await;
    let one = match &many {
        Ok(_) => inserts_per_second(server_url, database, 1, budget).await,
        Err(_) => Ok(0.0),
    };
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {TABLE}"))
        .await
        .context("dropping the scratch table")?;
    Ok(InsertLimits {
        many_per_second: many?,
        one_per_second: one?,
    })
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
