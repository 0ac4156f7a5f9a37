//! `durability-node`: one Stele node as a real OS process, for the crash tests that SIGKILL it
//! and start it again on the same store.
//!
//! `durability-node run --database sqlite://PATH --executions N` opens the store (a SQLite
//! file, or a `postgres://` URL), submits N executions of a no-op function in one atomic
//! `create_batch` if the store holds no execution yet (so a restarted node resumes the same
//! work instead of submitting it again), runs an executor and a timers watcher (`--role`
//! chooses; both started, and drained at the end, by a `node::Node`), and exits 0 once every
//! execution is finished. Leases are short (1.5 s by
//! default) and the watcher ticks every 100 ms, so the work of a killed node is recovered soon
//! after a restart.
//!
//! With `--workload workflow` the N executions are workflows (`durability::flows`), each with
//! four no-op children; N, `progress` and the `finished` lines count the workflows.
//!
//! With `--submit never` the node submits nothing and waits for N executions to be finished,
//! whoever submits them (the multi-process test submits them itself, in batches).
//! `--executor-tick-ms` gives the executor a `tick_sleep` of its own (the watcher keeps
//! `--tick-ms`), and `--trace-waits` reports each lock and each `wait_for_pending` of the
//! executor (see the `traced` module).
//!
//! `--identity NAME` names the node across restarts: restarted under the same name, it takes
//! back at once the leases its killed predecessor left (`NodeBuilder::identity`).
//!
//! `--busy-timeout-ms` gives a SQLite store a shorter `busy_timeout`, so that a test provokes
//! contention between processes quickly.
//!
//! Standard output is one line per fact, flushed as soon as it is known: the [`Line`]s of the
//! crate's library, whose documentation lists them. A `finished` line is printed only after a
//! read of the store returned the execution as finished, i.e. after the write committed: it is
//! an acknowledgement a test can hold the store to after a crash. Diagnostics go to standard
//! error (`RUST_LOG`, default `warn`). The summary's `listener_connects` is how many times a
//! PostgreSQL store's notification listener connected (`null` on SQLite). A store that is
//! down for a while (a database server restarting) is asked again by the node's progress
//! loop; the executor and the watcher recover by themselves.

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use clap::{Args, Parser, Subcommand, ValueEnum};
use concepts::{
    ClockFn, DbConnection, DbError, ExecutionId, FunctionFqn, Json, ListExecutionsFilter,
    Pagination, PendingStateKind, SupportedFunctionReturnValue,
};
use durability::{FFQN, Line, Workload, flows, list_ids};
use executor::{Now, Worker, WorkerContext, WorkerResult};
use node::{ExecutorSettings, Node};
use std::{
    collections::HashSet,
    io::Write,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};
use storage_postgres::{PostgresConfig, PostgresStore};
use storage_sqlite::{SqliteConfig, SqlitePool};
use timers_watcher::TimersWatcherConfig;

mod traced;

#[derive(Parser, Debug)]
#[command(
    name = "durability-node",
    version,
    about = "A Stele node for crash tests: submits, runs and awaits N executions."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Submits N executions if the store is empty, runs them, and exits 0 once all are
    /// finished, printing a JSON summary.
    Run(RunArgs),
}

/// What a node runs.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// An executor only.
    Executor,
    /// A timers watcher only.
    Watcher,
    /// An executor and a timers watcher.
    Both,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Self::Executor => "executor",
            Self::Watcher => "watcher",
            Self::Both => "both",
        }
    }
}

/// What the submitted executions run.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum WorkloadKind {
    /// The no-op function.
    Noop,
    /// The workflow of `durability::flows`, whose children run the no-op function.
    Workflow,
}

/// Whether a node submits the executions.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Submit {
    /// When the store holds no execution yet.
    IfEmpty,
    /// Never: another process submits them.
    Never,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The store: `sqlite://PATH` (`sqlite:///abs/path` for an absolute path) or
    /// `postgres://USER@HOST:PORT/DB`.
    #[arg(long)]
    database: String,
    /// How many executions the store must hold (submitted if it is empty).
    #[arg(long)]
    executions: usize,
    /// What this node runs.
    #[arg(long, value_enum, default_value_t = Role::Both)]
    role: Role,
    /// Whether this node submits the executions.
    #[arg(long, value_enum, default_value_t = Submit::IfEmpty)]
    submit: Submit,
    /// What the executions run; with `workflow`, N counts the top-level workflows (their
    /// children come on top).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Noop)]
    workload: WorkloadKind,
    /// With `--workload workflow`: the version of the workflow's code this node runs
    /// (`durability::flows::flow`, or `flow_v2`, which changes it behind a patch).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    workflow_version: u8,
    /// The lease of each run, in milliseconds.
    #[arg(long, default_value_t = 1_500)]
    lock_expiry_ms: u64,
    /// The executor's and the watcher's longest sleep between looks, in milliseconds.
    #[arg(long, default_value_t = 100)]
    tick_ms: u64,
    /// The executor's `tick_sleep` in milliseconds, if not `--tick-ms`: its longest wait for
    /// a due execution when no notification wakes it.
    #[arg(long)]
    executor_tick_ms: Option<u64>,
    /// Prints a line for each lock and each `wait_for_pending` of the executor.
    #[arg(long)]
    trace_waits: bool,
    /// How long the watcher waits past a lease's expiry before timing it out, in
    /// milliseconds.
    #[arg(long, default_value_t = 100)]
    leeway_ms: u64,
    /// How long each worker run sleeps, in milliseconds (the "work").
    #[arg(long, default_value_t = 5)]
    work_ms: u64,
    /// How many worker runs may run at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// How many executions one executor tick locks at most.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// How often the node asks the store which executions finished, in milliseconds.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,
    /// Retries of each execution (a run cut short by a kill uses one up).
    #[arg(long, default_value_t = 100)]
    max_retries: u32,
    /// The first retry's backoff, in milliseconds.
    #[arg(long, default_value_t = 10)]
    retry_backoff_ms: u64,
    /// Gives up (exit code 1) when not everything finished after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// The node's identity (`NodeBuilder::identity`): a node restarted under the same one
    /// takes back at once the leases the killed one left. Without it, they are waited out.
    #[arg(long)]
    identity: Option<String>,
    /// SQLite only: the store's `busy_timeout` in milliseconds (default the store's own); a
    /// small one provokes contention between processes quickly.
    #[arg(long)]
    busy_timeout_ms: Option<u64>,
}

/// Where the store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DatabaseUrl {
    Sqlite(PathBuf),
    Postgres(String),
}

impl DatabaseUrl {
    fn parse(url: &str) -> anyhow::Result<Self> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            ensure!(!path.is_empty(), "`{url}` names no file: use sqlite://PATH");
            Ok(Self::Sqlite(PathBuf::from(path)))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(url.to_string()))
        } else {
            bail!("unsupported database `{url}`: use sqlite://PATH or postgres://...")
        }
    }

    /// The store, and its PostgreSQL handle (for the listener's state) when it is one.
    async fn open(
        &self,
        busy_timeout: Option<Duration>,
    ) -> anyhow::Result<(Arc<dyn DbConnection>, Option<PostgresStore>)> {
        Ok(match self {
            Self::Sqlite(path) => {
                let mut config = SqliteConfig::new(path);
                if let Some(busy_timeout) = busy_timeout {
                    config.busy_timeout = busy_timeout;
                }
                (
                    Arc::new(
                        SqlitePool::open(config)
                            .await
                            .with_context(|| format!("cannot open {}", path.display()))?,
                    ),
                    None,
                )
            }
            Self::Postgres(url) => {
                let config = PostgresConfig::from_url(url)?;
                let redacted = config.redacted_url().to_string();
                let store = PostgresStore::connect(config)
                    .await
                    .with_context(|| format!("cannot connect to {redacted}"))?;
                (Arc::new(store.clone()), Some(store))
            }
        })
    }
}

/// Standard output, one flushed line at a time. A failed write (the reader went away) is
/// ignored: the lines are reports, and the store stays the truth.
struct Out;

impl Out {
    fn lines<I: IntoIterator<Item = Line>>(lines: I) {
        let mut stdout = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(stdout, "{line}");
        }
        let _ = stdout.flush();
    }

    fn line(line: Line) {
        Self::lines([line]);
    }
}

/// The no-op worker: sleeps `work`, counts its run, and returns its parameter.
struct NoopWorker {
    ffqns: Vec<FunctionFqn>,
    work: Duration,
    runs: AtomicU64,
}

#[async_trait]
impl Worker for NoopWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        tokio::time::sleep(self.work).await;
        self.runs.fetch_add(1, Ordering::Relaxed);
        let echo = ctx.params.0.get(0).cloned().unwrap_or_default();
        WorkerResult::Ok(
            SupportedFunctionReturnValue::InfallibleOrResultOk(Json(echo)),
            ctx.version,
        )
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// How the node came by its executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Submission {
    /// This node submitted them.
    Submitted,
    /// They were there already (a restart), or another node submitted them first.
    Resumed,
}

/// Submits `args.executions` executions in one `create_batch` if the store holds none.
async fn submit_if_empty(
    db: &dyn DbConnection,
    args: &RunArgs,
    workload: &Workload,
) -> anyhow::Result<Submission> {
    let any = db
        .list_executions(
            ListExecutionsFilter::default(),
            Pagination {
                cursor: None,
                length: 1,
            },
        )
        .await?;
    if !any.is_empty() {
        return Ok(Submission::Resumed);
    }
    let now = Now.now();
    let backoff = Duration::from_millis(args.retry_backoff_ms);
    let requests = (0..args.executions)
        .map(|idx| workload.request(idx, now, backoff, args.max_retries))
        .collect();
    Out::line(Line::Submitting(args.executions));
    match db.create_batch(requests).await {
        Ok(()) => Ok(Submission::Submitted),
        // All or nothing: another node's batch committed first, ours left nothing behind.
        Err(DbError::Duplicate(_)) => Ok(Submission::Resumed),
        Err(err) => Err(err).context("cannot submit the executions"),
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let database = DatabaseUrl::parse(&args.database)?;
    ensure!(args.executions > 0, "--executions must be at least 1");
    let workload = match args.workload {
        WorkloadKind::Noop => Workload::new()?,
        WorkloadKind::Workflow => Workload::workflows()?,
    };
    let (db, postgres) = database
        .open(args.busy_timeout_ms.map(Duration::from_millis))
        .await?;

    let (submission, total) = match args.submit {
        Submit::IfEmpty => {
            let submission = submit_if_empty(db.as_ref(), &args, &workload).await?;
            let total = list_ids(db.as_ref(), None).await?.len();
            ensure!(
                total == args.executions,
                "the store holds {total} executions, expected {}",
                args.executions
            );
            Out::line(match submission {
                Submission::Submitted => Line::Submitted(total),
                Submission::Resumed => Line::Resumed(total),
            });
            (submission, total)
        }
        Submit::Never => {
            Out::line(Line::Awaiting(args.executions));
            (Submission::Resumed, args.executions)
        }
    };

    let worker = Arc::new(NoopWorker {
        ffqns: vec![FFQN.parse()?],
        work: Duration::from_millis(args.work_ms),
        runs: AtomicU64::new(0),
    });
    let tick = Duration::from_millis(args.tick_ms);
    let traced = Arc::new(traced::TracedDb::new(db.clone(), args.trace_waits));
    let runs_executors = matches!(args.role, Role::Executor | Role::Both);
    // Each executor has a bound of its own: the workflows waiting for their children must not
    // hold the permits the children need.
    let settings = |tick_sleep| ExecutorSettings {
        lock_expiry: Duration::from_millis(args.lock_expiry_ms),
        tick_sleep,
        batch_size: args.batch_size,
        component_id: Some(workload.component_id.clone()),
        concurrency: Some(args.concurrency.max(1)),
    };
    let mut builder = Node::builder(db.clone(), Now);
    if let Some(identity) = &args.identity {
        builder = builder.identity(identity.clone());
    }
    if runs_executors {
        let executor_tick = args.executor_tick_ms.map_or(tick, Duration::from_millis);
        builder = builder.worker_through(worker.clone(), settings(executor_tick), traced.clone());
        if args.workload == WorkloadKind::Workflow {
            builder = if args.workflow_version == 2 {
                builder.workflow(&flows::FLOW, flows::flow_v2)
            } else {
                builder.workflow(&flows::FLOW, flows::flow)
            };
            builder = builder
                .child_settings(
                    workload.component_id.clone(),
                    args.max_retries,
                    Duration::from_millis(args.retry_backoff_ms),
                )
                .workflow_settings(settings(tick));
        }
    }
    builder = match args.role {
        Role::Watcher | Role::Both => builder.timers_watcher(TimersWatcherConfig {
            tick_sleep: tick,
            leeway: Duration::from_millis(args.leeway_ms),
        }),
        Role::Executor => builder.without_timers_watcher(),
    };
    let node = builder.start()?;
    if let Some(executor) = node
        .executors()
        .iter()
        .find(|executor| executor.functions.iter().any(|f| f.to_string() == FFQN))
    {
        Out::line(Line::Executor(executor.executor_id));
    }

    let deadline = started + Duration::from_secs(args.timeout_s);
    let mut seen: HashSet<ExecutionId> = HashSet::new();
    let mut finished_at_start = None;
    loop {
        // A store that is down for a while (a database server restarting) is asked again.
        let finished = match list_ids(db.as_ref(), Some(PendingStateKind::Finished)).await {
            Ok(finished) => finished,
            Err(err) if err.is_retriable() && Instant::now() < deadline => {
                tracing::warn!("cannot read the finished executions, asking again: {err}");
                tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
                continue;
            }
            Err(err) => return Err(err).context("cannot read the finished executions"),
        };
        let count = finished.len();
        finished_at_start.get_or_insert(count);
        let new: Vec<Line> = finished
            .into_iter()
            .filter(|id| seen.insert(id.clone()))
            .map(Line::Finished)
            .collect();
        Out::lines(new.into_iter().chain([Line::Progress {
            finished: count,
            total,
        }]));
        ensure!(
            count <= total,
            "{count} executions are finished, but the store holds {total}"
        );
        if count == total {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "only {count} of {total} executions finished within {} s",
            args.timeout_s
        );
        tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
    }

    node.shutdown(Duration::from_millis(args.lock_expiry_ms))
        .await;
    db.close().await;
    let summary = serde_json::json!({
        "role": args.role.name(),
        "executions": total,
        "submitted": submission == Submission::Submitted,
        "finished_at_start": finished_at_start.unwrap_or_default(),
        "finished": seen.len(),
        "worker_runs": worker.runs.load(Ordering::Relaxed),
        "waits": traced.counts.waits.load(Ordering::Relaxed),
        "waits_early": traced.counts.early.load(Ordering::Relaxed),
        "waits_timed_out": traced.counts.timed_out.load(Ordering::Relaxed),
        "elapsed_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "listener_connects": postgres.map(|store| store.listener_state().connects),
    });
    Out::line(Line::Summary(summary));
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Run(args) => run(args).await,
    }
}

#[cfg(test)]
mod tests;
