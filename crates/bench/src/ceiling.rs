//! The ceiling of raw SQLite on this machine: small rows committed in WAL mode with the
//! store's `synchronous` level, the rate every SQLite figure of the bench is held to.

use std::{
    path::Path,
    time::{Duration, Instant},
};

/// Raw SQLite: `rows_per_txn` small rows per transaction, repeated for about `budget`.
/// Returns (transactions/s, rows/s).
pub(crate) fn sqlite_ceiling(
    dir: &Path,
    synchronous: &str,
    rows_per_txn: usize,
    budget: Duration,
) -> anyhow::Result<(f64, f64)> {
    let path = dir.join(format!("ceiling-{synchronous}-{rows_per_txn}.db"));
    let conn = rusqlite::Connection::open(&path)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
    anyhow::ensure!(mode == "wal", "journal_mode is {mode}, expected wal");
    conn.execute_batch(&format!(
        "PRAGMA synchronous={synchronous}; CREATE TABLE t (id INTEGER PRIMARY KEY, execution_id TEXT NOT NULL, body TEXT NOT NULL);"
    ))?;
    let body = "x".repeat(200);
    let start = Instant::now();
    let mut transactions = 0usize;
    while start.elapsed() < budget {
        let tx = conn.unchecked_transaction()?;
        {
            let mut stmt =
                tx.prepare_cached("INSERT INTO t (execution_id, body) VALUES (?1, ?2)")?;
            for row in 0..rows_per_txn {
                stmt.execute(rusqlite::params![format!("E_{transactions}_{row}"), body])?;
            }
        }
        tx.commit()?;
        transactions += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok((
        transactions as f64 / secs,
        (transactions * rows_per_txn) as f64 / secs,
    ))
}
