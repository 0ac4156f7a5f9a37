//! `stele-bench`: end-to-end throughput of Stele's backends, run with `cargo xtask bench`.
//!
//! The workload: N no-op executions created up front with one `create_batch`, then one executor
//! whose worker returns at once, timed from the first create to the last committed `Finished`.
//! It reports creates/s (the `create_batch` call), finished/s (from the executor's start to the
//! last `Finished`) and end-to-end executions/s (the whole run), per backend. For SQLite it also
//! measures, in the same run and with the same pragmas, the ceiling of the machine: single-row
//! `INSERT` transactions per second, and rows per second at 100 rows per transaction.
//!
//! Completion is observed exactly, not by polling: the executor's store handle is wrapped so
//! that every acknowledged `Finished` append is counted, and the run ends when the count
//! reaches N.

#![expect(clippy::print_stdout, reason = "a benchmark prints its results")]

use anyhow::{Context, bail};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use clap::Parser;
use concepts::{
    AppendRequest, ClockFn, ComponentId, CreateRequest, DbConnection, DbError, DbExecutor,
    ExecutionEventInner, ExecutionId, ExecutionMetadata, ExecutorId, FunctionFqn, HistoryEvent,
    JoinSetResponseEventOuter, Json, LockedExecution, RunId, SupportedFunctionReturnValue, Version,
};
use executor::{ExecConfig, ExecTask, Now, Worker, WorkerContext, WorkerResult};
use std::{
    fmt::Write as _,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};
use storage_sqlite::{SqliteConfig, SqlitePool, Synchronous};
use tokio::sync::Notify;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "End-to-end throughput of Stele's storage backends")]
struct Args {
    /// Executions per backend.
    #[arg(long, default_value_t = 10_000)]
    executions: usize,
    /// Backends to measure, comma separated: memory, sqlite.
    #[arg(long, value_delimiter = ',', default_value = "memory,sqlite")]
    backends: Vec<String>,
    /// SQLite's `synchronous` level for the executor run: full or normal.
    #[arg(long, default_value = "full")]
    synchronous: String,
    /// How many executions the executor locks per tick.
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Skip the raw SQLite ceiling measurement.
    #[arg(long)]
    no_ceiling: bool,
}

/// A worker that returns at once.
struct NoopWorker {
    ffqns: Vec<FunctionFqn>,
}

#[async_trait]
impl Worker for NoopWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        WorkerResult::Ok(SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// Forwards to the real store and counts acknowledged `Finished` appends.
struct CountingDb {
    inner: Arc<dyn DbConnection>,
    finished: AtomicUsize,
    target: usize,
    done: Notify,
}

impl CountingDb {
    fn count(&self, result: &Result<Version, DbError>, event: &ExecutionEventInner) {
        if result.is_ok() && matches!(event, ExecutionEventInner::Finished { .. }) {
            let finished = self.finished.fetch_add(1, Ordering::SeqCst) + 1;
            if finished >= self.target {
                self.done.notify_one();
            }
        }
    }
}

#[async_trait]
impl DbExecutor for CountingDb {
    async fn lock_pending(
        &self,
        batch_size: usize,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        created_at: DateTime<Utc>,
        component_id: ComponentId,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
    ) -> Result<Vec<LockedExecution>, DbError> {
        self.inner
            .lock_pending(
                batch_size,
                pending_at_or_sooner,
                ffqns,
                created_at,
                component_id,
                executor_id,
                lock_expires_at,
            )
            .await
    }

    async fn lock(
        &self,
        created_at: DateTime<Utc>,
        component_id: ComponentId,
        execution_id: &ExecutionId,
        run_id: RunId,
        version: Version,
        executor_id: ExecutorId,
        lock_expires_at: DateTime<Utc>,
    ) -> Result<(Vec<HistoryEvent>, Version), DbError> {
        self.inner
            .lock(
                created_at,
                component_id,
                execution_id,
                run_id,
                version,
                executor_id,
                lock_expires_at,
            )
            .await
    }

    async fn append(
        &self,
        execution_id: &ExecutionId,
        version: Version,
        req: AppendRequest,
    ) -> Result<Version, DbError> {
        let event = req.event.clone();
        let result = self.inner.append(execution_id, version, req).await;
        self.count(&result, &event);
        result
    }

    async fn append_batch_respond_to_parent(
        &self,
        execution_id: &ExecutionId,
        created_at: DateTime<Utc>,
        batch: Vec<ExecutionEventInner>,
        version: Version,
        parent_execution_id: &ExecutionId,
        parent_response: JoinSetResponseEventOuter,
    ) -> Result<Version, DbError> {
        let last = batch.last().cloned();
        let result = self
            .inner
            .append_batch_respond_to_parent(
                execution_id,
                created_at,
                batch,
                version,
                parent_execution_id,
                parent_response,
            )
            .await;
        if let Some(last) = last {
            self.count(&result, &last);
        }
        result
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        self.inner
            .wait_for_pending(pending_at_or_sooner, ffqns, max_wait)
            .await;
    }
}

/// One backend's numbers.
struct Measurement {
    backend: String,
    executions: usize,
    create: Duration,
    run: Duration,
}

impl Measurement {
    fn per_second(&self, duration: Duration) -> f64 {
        self.executions as f64 / duration.as_secs_f64()
    }
}

async fn measure(
    backend: &str,
    db: Arc<dyn DbConnection>,
    args: &Args,
) -> anyhow::Result<Measurement> {
    let ffqn: FunctionFqn = "bench:noop/ifc.noop".parse()?;
    let component_id = ComponentId::new("activity", "noop")?;
    let now = Now.now();
    let requests: Vec<CreateRequest> = (0..args.executions)
        .map(|_| CreateRequest {
            created_at: now,
            execution_id: ExecutionId::generate_at(now),
            ffqn: ffqn.clone(),
            params: Json(serde_json::json!([])),
            parent: None,
            scheduled_at: now,
            retry_exp_backoff: Duration::from_millis(100),
            max_retries: 3,
            component_id: component_id.clone(),
            metadata: ExecutionMetadata::default(),
            scheduled_by: None,
        })
        .collect();
    let counting = Arc::new(CountingDb {
        inner: db.clone(),
        finished: AtomicUsize::new(0),
        target: args.executions,
        done: Notify::new(),
    });

    let start = Instant::now();
    db.create_batch(requests).await.context("create_batch")?;
    let created = Instant::now();
    let mut executor = ExecTask::spawn_new(
        Arc::new(NoopWorker { ffqns: vec![ffqn] }),
        ExecConfig {
            lock_expiry: Duration::from_secs(60),
            tick_sleep: Duration::from_secs(1),
            batch_size: args.batch_size,
            component_id,
            task_limiter: None,
        },
        Now,
        counting.clone(),
    );
    let deadline = Duration::from_secs(600);
    tokio::time::timeout(deadline, async {
        while counting.finished.load(Ordering::SeqCst) < args.executions {
            counting.done.notified().await;
        }
    })
    .await
    .with_context(|| format!("{backend}: not every execution finished within {deadline:?}"))?;
    let finished = Instant::now();
    executor.close().await;
    db.close().await;
    Ok(Measurement {
        backend: backend.to_string(),
        executions: args.executions,
        create: created - start,
        run: finished - created,
    })
}

fn synchronous(level: &str) -> anyhow::Result<Synchronous> {
    match level {
        "full" => Ok(Synchronous::Full),
        "normal" => Ok(Synchronous::Normal),
        other => bail!("--synchronous must be full or normal, not `{other}`"),
    }
}

/// Raw SQLite: `rows_per_txn` small rows per transaction, repeated for about `budget`.
/// Returns (transactions/s, rows/s).
fn sqlite_ceiling(
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

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cores} cores, {cpu}")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile::tempdir()?;
    let sync = synchronous(&args.synchronous)?;
    let mut report = String::new();
    writeln!(report, "Machine: {}", machine())?;
    writeln!(
        report,
        "Workload: {} no-op executions created with one create_batch, one executor (batch size {}), timed to the last acknowledged Finished.\n",
        args.executions, args.batch_size
    )?;
    writeln!(
        report,
        "| backend | executions | creates/s | finished/s | end-to-end executions/s |"
    )?;
    writeln!(report, "|---|---:|---:|---:|---:|")?;
    for backend in &args.backends {
        let (label, db): (String, Arc<dyn DbConnection>) = match backend.as_str() {
            "memory" => (
                "memory".into(),
                Arc::new(storage_memory::MemoryStore::new()),
            ),
            "sqlite" => {
                let path = dir.path().join("bench.db");
                let pool = SqlitePool::open(SqliteConfig::new(&path).with_synchronous(sync))
                    .await
                    .with_context(|| format!("opening {}", path.display()))?;
                (
                    format!("sqlite (synchronous={})", args.synchronous),
                    Arc::new(pool),
                )
            }
            other => bail!("unknown backend `{other}` (expected memory or sqlite)"),
        };
        eprintln!("measuring {label} ...");
        let m = measure(&label, db, &args).await?;
        writeln!(
            report,
            "| {} | {} | {:.0} | {:.0} | {:.0} |",
            m.backend,
            m.executions,
            m.per_second(m.create),
            m.per_second(m.run),
            m.per_second(m.create + m.run)
        )?;
    }
    if !args.no_ceiling {
        eprintln!("measuring the raw SQLite ceiling ...");
        writeln!(
            report,
            "\nRaw SQLite on this machine (WAL, one connection, 200-byte rows):\n"
        )?;
        writeln!(
            report,
            "| synchronous | rows per transaction | transactions/s | rows/s |"
        )?;
        writeln!(report, "|---|---:|---:|---:|")?;
        for (level, rows) in [("FULL", 1), ("NORMAL", 1), ("FULL", 100)] {
            let (tps, rps) = sqlite_ceiling(dir.path(), level, rows, Duration::from_secs(3))?;
            writeln!(report, "| {level} | {rows} | {tps:.0} | {rps:.0} |")?;
        }
    }
    println!("{report}");
    Ok(())
}
