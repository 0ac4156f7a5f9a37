//! What the lifecycle rows read beside the store: the sizes of a SQLite database's files and
//! of a PostgreSQL database's tables, and the counters that tell how many transactions a
//! write committed (SQLite's wal-index change counter, PostgreSQL's transaction ids).

use anyhow::{Context, ensure};
use concepts::{ExecutionId, kernel::descendant_bounds};
use std::path::{Path, PathBuf};
use tokio::task::JoinHandle;

/// The store a probe reads beside.
pub(crate) enum Probe {
    /// Nothing to read: the memory store has no files and no transaction counter.
    Memory,
    /// The SQLite database at `path`, with its `-wal` and `-shm` files beside it.
    Sqlite { path: PathBuf },
    /// A connection of its own to the benchmark's PostgreSQL database.
    Postgres {
        client: tokio_postgres::Client,
        driver: JoinHandle<()>,
    },
}

/// `path` with `suffix` appended to its file name (`bench.db` → `bench.db-wal`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The size of the file at `path`, 0 when it does not exist (a WAL after a truncating
/// checkpoint, say).
fn file_size(path: &Path) -> anyhow::Result<u64> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(meta.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e).with_context(|| format!("reading the size of {}", path.display())),
    }
}

/// The URL of the server `server_url` names, without the parameters only Stele's
/// `PostgresConfig` knows (`pool_size`, `statement_timeout_ms`), which the driver refuses.
pub(crate) fn driver_url(server_url: &str) -> String {
    let Some((base, query)) = server_url.split_once('?') else {
        return server_url.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
            !pair.is_empty() && key != "pool_size" && key != "statement_timeout_ms"
        })
        .collect();
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// Every table of the connected database's schema and its `pg_total_relation_size` (table,
/// indexes and TOAST), by name.
const TABLE_SIZES: &str = "SELECT c.relname::text, pg_total_relation_size(c.oid)::bigint \
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
    WHERE c.relkind = 'r' AND n.nspname = current_schema() ORDER BY c.relname";

/// The next transaction id the server will assign; reading it assigns none.
const NEXT_XID: &str = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint";

/// The transactions that last wrote the state rows of a tree (the root `$1` and the ids in
/// [`descendant_bounds`], `$2..$3`) and the responses its root holds: distinct `xmin`s, rows.
const TREE_WRITERS: &str = "SELECT count(DISTINCT xmin::text)::bigint, count(*)::bigint FROM ( \
    SELECT xmin FROM t_execution \
        WHERE execution_id = $1 OR (execution_id >= $2 AND execution_id < $3) \
    UNION ALL SELECT xmin FROM t_response WHERE execution_id = $1) AS written";

impl Probe {
    /// A probe of the database `database` on the server `server_url` names.
    pub(crate) async fn postgres(server_url: &str, database: &str) -> anyhow::Result<Self> {
        let mut config: tokio_postgres::Config = driver_url(server_url)
            .parse()
            .context("parsing the PostgreSQL URL for the benchmark's own connection")?;
        config.dbname(database);
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting the probe to database {database}"))?;
        let driver = tokio::spawn(async move {
            // The probe's connection ends with the run; its error is the run's, not ours.
            let _ = connection.await;
        });
        Ok(Self::Postgres { client, driver })
    }

    /// The sizes of what the store keeps on disk, in bytes, by part: the SQLite database file
    /// and its WAL, or each PostgreSQL table; nothing for memory.
    pub(crate) async fn sizes(&self) -> anyhow::Result<Vec<(String, u64)>> {
        match self {
            Self::Memory => Ok(Vec::new()),
            Self::Sqlite { path } => Ok(vec![
                ("database file".to_string(), file_size(path)?),
                ("WAL".to_string(), file_size(&with_suffix(path, "-wal"))?),
            ]),
            Self::Postgres { client, .. } => {
                let rows = client
                    .query(TABLE_SIZES, &[])
                    .await
                    .context("reading the table sizes")?;
                rows.iter()
                    .map(|row| {
                        let bytes: i64 = row.try_get(1)?;
                        Ok((row.try_get(0)?, u64::try_from(bytes)?))
                    })
                    .collect()
            }
        }
    }

    /// A counter that grows by one with each transaction the store commits, where the store
    /// has one: SQLite's wal-index change counter (`iChange`, "incremented with each
    /// transaction", sqlite.org/walformat.html; a WAL reset adds one too), PostgreSQL's next
    /// transaction id (every writing transaction takes one, committed or not).
    pub(crate) async fn commit_mark(&self) -> anyhow::Result<Option<u64>> {
        match self {
            Self::Memory => Ok(None),
            Self::Sqlite { path } => wal_index_changes(&with_suffix(path, "-shm")).map(Some),
            Self::Postgres { client, .. } => {
                let row = client
                    .query_one(NEXT_XID, &[])
                    .await
                    .context("reading the next transaction id")?;
                let next: i64 = row.try_get(0)?;
                Ok(Some(u64::try_from(next)?))
            }
        }
    }

    /// PostgreSQL: how many transactions last wrote the state rows of the tree of `root` and
    /// the responses `root` holds, and how many rows that is.
    pub(crate) async fn tree_writers(
        &self,
        root: &ExecutionId,
    ) -> anyhow::Result<Option<(i64, i64)>> {
        let Self::Postgres { client, .. } = self else {
            return Ok(None);
        };
        let (low, high) = descendant_bounds(root);
        let root = root.to_string();
        let row = client
            .query_one(TREE_WRITERS, &[&root, &low, &high])
            .await
            .context("reading the writers of the cancelled tree")?;
        Ok(Some((row.try_get(0)?, row.try_get(1)?)))
    }

    /// Brings a PostgreSQL store to the state its autovacuum keeps a store in that grew over
    /// time: `VACUUM (ANALYZE)` of its tables (dead row versions removed, statistics current,
    /// and the plans cached on the store's connections invalidated by the new statistics), then
    /// a `CHECKPOINT`, so that the run measured next starts at the same point of the server's
    /// checkpoint cycle whatever WAL came before it (the fill's gigabytes started one that
    /// overlapped the measured run in some builds and not in others). Nothing on the other
    /// backends, which have no such upkeep.
    pub(crate) async fn upkeep(&self) -> anyhow::Result<()> {
        if let Self::Postgres { client, .. } = self {
            client
                .batch_execute("VACUUM (ANALYZE)")
                .await
                .context("vacuuming the store")?;
            client
                .batch_execute("CHECKPOINT")
                .await
                .context("checkpointing the server")?;
        }
        Ok(())
    }

    /// Ends the probe's connection.
    pub(crate) async fn close(self) {
        if let Self::Postgres { client, driver } = self {
            drop(client);
            let _ = driver.await;
        }
    }
}

/// The `iChange` field of the wal-index header in the `-shm` file at `shm`: the header is kept
/// twice (bytes 0..48 and 48..96), and a read between a writer's two copies sees them differ,
/// so it reads until they agree.
fn wal_index_changes(shm: &Path) -> anyhow::Result<u64> {
    for _ in 0..100 {
        let bytes = std::fs::read(shm)
            .with_context(|| format!("reading the wal-index {}", shm.display()))?;
        ensure!(
            bytes.len() >= 96,
            "the wal-index {} holds {} bytes, fewer than its header",
            shm.display(),
            bytes.len()
        );
        if bytes[..48] == bytes[48..96] {
            let field: [u8; 4] = bytes[8..12].try_into()?;
            return Ok(u64::from(u32::from_ne_bytes(field)));
        }
        std::thread::yield_now();
    }
    anyhow::bail!(
        "the two copies of the wal-index header in {} kept differing",
        shm.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_url_drops_only_stele_parameters() {
        assert_eq!(
            driver_url("postgres://u@h:1/db?pool_size=4&sslmode=disable&statement_timeout_ms=9"),
            "postgres://u@h:1/db?sslmode=disable"
        );
        assert_eq!(
            driver_url("postgres://u@h:1/db?pool_size=4"),
            "postgres://u@h:1/db"
        );
        assert_eq!(driver_url("postgres://u@h:1/db"), "postgres://u@h:1/db");
    }

    #[test]
    fn with_suffix_appends_to_the_file_name() {
        assert_eq!(
            with_suffix(Path::new("/tmp/x/bench.db"), "-wal"),
            PathBuf::from("/tmp/x/bench.db-wal")
        );
    }

    #[test]
    fn the_wal_index_counter_counts_sqlite_commits() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("probe.db");
        let conn = rusqlite::Connection::open(&path)?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
        assert_eq!(mode, "wal");
        conn.execute_batch("CREATE TABLE t (x INTEGER)")?;
        let shm = with_suffix(&path, "-shm");
        let before = wal_index_changes(&shm)?;
        for x in 0..3 {
            conn.execute("INSERT INTO t (x) VALUES (?1)", [x])?;
        }
        let tx = conn.unchecked_transaction()?;
        for x in 0..10 {
            tx.execute("INSERT INTO t (x) VALUES (?1)", [x])?;
        }
        tx.commit()?;
        assert_eq!(wal_index_changes(&shm)? - before, 4);
        Ok(())
    }
}
