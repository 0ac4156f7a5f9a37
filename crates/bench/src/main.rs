//! `stele-bench`: end-to-end throughput of Stele's backends, run with `cargo xtask bench`.
//!
//! The workload: N no-op executions created up front with one `create_batch`, then one executor
//! whose worker returns at once (a `node::Node` of that one worker, without a timers watcher),
//! timed from the first create to the last committed `Finished`.
//! It reports creates/s (the `create_batch` call), finished/s (from the executor's start to the
//! last `Finished`) and end-to-end executions/s (the whole run), per backend: memory, SQLite
//! and PostgreSQL (a fresh database on the server `--postgres-url` or
//! `STELE_TEST_POSTGRES_URL` names, dropped afterwards). For SQLite it also measures, in the
//! same run and with the same pragmas, the ceiling of the machine: single-row `INSERT`
//! transactions per second, and rows per second at 100 rows per transaction.
//!
//! Completion is observed exactly, not by polling: the executor's store handle is wrapped so
//! that every acknowledged `Finished` append is counted, and the run ends when the count
//! reaches N.
//!
//! With PostgreSQL it also runs the same workload with 1, 2 and 4 executor processes against
//! one server (`--processes`), three runs of each, alternated, the median kept: see the `multi`
//! module for how one run is measured. Its limit,
//! measured on the same server in the same run (`pg_limit`), is the server's single-row
//! `INSERT` transactions/s at 32 concurrent clients; the targets table holds the one-process
//! rate against it and each multi-process rate against the one-process rate.
//!
//! Then single submits from many callers (`submits`, skipped with `--no-submits`): 64 tasks
//! creating one execution per call while an executor runs, beside the first table's rate.
//!
//! Then the lifecycle rows (`lifecycle`, skipped with `--no-lifecycle`): executions removed
//! per second by `prune`, and one `cancel` of a parent with 10,000 unfinished children, its
//! time and the transactions it committed (read through `probe`).
//!
//! Then the engine's other targets: mass lease expiry (`expiry`, `--expiry-leases`), the
//! end-to-end rate on a store holding many finished executions (`history`,
//! `--stored-executions`, with the HTTP API's and the UI's pages on it, `pages`,
//! `--page-events`, `--page-children`), and the lock's cost beside long histories (`lockcost`,
//! `--lock-history`), and on SQLite the wake-up of a waiter by a commit of another store on
//! the same file, as another process's would be (`wakeups`, `--wakeups`); 0 skips each.
//!
//! Then the latency rows (`latency`, skipped with `--no-latency`): submit to `Finished` of one
//! execution at a time on an idle executor, p50 and p99 per backend, beside the p50 of one
//! commit timed after each execution.
//!
//! Last, the instruction counts (`instructions`, skipped with `--no-instructions`):
//! instructions per execution of each backend end to end, under `valgrind --tool=callgrind`,
//! and the PostgreSQL server's CPU time per execution; `--instructions` runs only those.
//!
//! `--soak` runs only the soak (`soak`): a steady submit rate for minutes with a node of an
//! executor, the timers watcher and `timers_watcher::Pruner`, printing the store's size over time and
//! whether it levelled off.

#![expect(clippy::print_stdout, reason = "a benchmark prints its results")]

mod ceiling;
mod counting;
mod expiry;
mod fires;
mod history;
mod http;
mod instructions;
mod latency;
mod lifecycle;
mod lockcost;
mod multi;
mod pages;
mod pg_limit;
mod pg_run;
mod probe;
mod soak;
mod steps;
mod submits;
mod targets;
mod wakeups;
mod workflows;

use anyhow::{Context, bail};
use async_trait::async_trait;
use clap::{Parser, Subcommand};
use concepts::{
    ClockFn, ComponentId, CreateRequest, DbConnection, ExecutionId, ExecutionMetadata, FunctionFqn,
    Json, SupportedFunctionReturnValue,
};
use counting::CountingDb;
use executor::{Now, Worker, WorkerContext, WorkerResult};
use pg_run::PostgresRun;
use probe::Probe;
use std::{
    fmt::Write as _,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};
use storage_sqlite::{SqliteConfig, SqlitePool, Synchronous};
use targets::{Goal, Row, Targets};

/// The command line: the benchmark itself, or (hidden) one of its worker processes.
#[derive(Parser, Debug)]
#[command(about = "End-to-end throughput of Stele's storage backends")]
struct Cli {
    #[command(subcommand)]
    command: Option<Internal>,
    #[command(flatten)]
    args: Args,
}

/// Subcommands the benchmark runs itself.
#[derive(Subcommand, Debug)]
enum Internal {
    /// One executor process of the multi-process mode (started by the benchmark).
    #[command(hide = true)]
    WorkerProcess(multi::WorkerArgs),
}

/// Command-line arguments.
#[derive(clap::Args, Debug)]
struct Args {
    /// Executions per backend.
    #[arg(long, default_value_t = 10_000)]
    executions: usize,
    /// Backends to measure, comma separated: memory, sqlite, postgres (postgres needs
    /// `--postgres-url`, and is left out with a note when there is none).
    #[arg(long, value_delimiter = ',', default_value = "memory,sqlite")]
    backends: Vec<String>,
    /// The PostgreSQL server: a `postgres://` URL of a database to connect to for creating
    /// the benchmark's own, which is dropped afterwards (`?pool_size=N` sets each store's
    /// pool, 16 by default).
    #[arg(long, env = "STELE_TEST_POSTGRES_URL")]
    postgres_url: Option<String>,
    /// With postgres: the numbers of executor processes of the multi-process runs, comma
    /// separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    processes: Vec<usize>,
    /// With postgres: skip the multi-process runs.
    #[arg(long)]
    no_multi_process: bool,
    /// SQLite's `synchronous` level for the executor run: full or normal.
    #[arg(long, default_value = "full")]
    synchronous: String,
    /// How many executions the executor locks per tick.
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Skip the raw SQLite ceiling measurement.
    #[arg(long)]
    no_ceiling: bool,
    /// Workflow rows: how many no-op activities the serial workflow calls in sequence.
    #[arg(long, default_value_t = 1_000)]
    workflow_steps: u64,
    /// Workflow rows: how many no-op children the fan-out parent submits.
    #[arg(long, default_value_t = 10_000)]
    fan_out: u64,
    /// Workflow rows: how many recorded steps the replayed history holds.
    #[arg(long, default_value_t = 10_000)]
    history: u64,
    /// Skip the workflow rows.
    #[arg(long)]
    no_workflows: bool,
    /// Skip the rows of single submits from many tasks (`submits`).
    #[arg(long)]
    no_submits: bool,
    /// Lifecycle rows: how many finished executions are pruned.
    #[arg(long, default_value_t = 10_000)]
    prune_executions: usize,
    /// Lifecycle rows: top-level executions examined per `prune` call, comma separated: one
    /// pass each, with executions of its own, one after the other on the same store (the
    /// first on fresh tables, which PostgreSQL has no statistics of yet).
    #[arg(long, value_delimiter = ',', default_value = "1000,1000,100")]
    prune_batch: Vec<usize>,
    /// Lifecycle rows: how many unfinished children the cancelled parent has.
    #[arg(long, default_value_t = 10_000)]
    cancel_children: u64,
    /// Skip the lifecycle rows (prune rate, cancellation of a tree).
    #[arg(long)]
    no_lifecycle: bool,
    /// Mass lease expiry: how many leases expire at once (0 skips the rows).
    #[arg(long, default_value_t = 10_000)]
    expiry_leases: usize,
    /// Mass schedule fires: how many schedules are due in the same minute (0 skips the
    /// rows).
    #[arg(long, default_value_t = 10_000)]
    schedule_fires: usize,
    /// Cross-process wake-ups on SQLite: how many are timed (0 skips the rows).
    #[arg(long, default_value_t = 200)]
    wakeups: usize,
    /// Stored history: how many finished executions the store holds for the second run (0
    /// skips the rows).
    #[arg(long, default_value_t = 1_000_000)]
    stored_executions: usize,
    /// Stored history: how many events the long log whose UI page is timed holds (0 skips
    /// the row).
    #[arg(long, default_value_t = 20_000)]
    page_events: usize,
    /// Stored history: how many finished children the parent whose UI page is timed has (0
    /// skips the row).
    #[arg(long, default_value_t = 10_000)]
    page_children: usize,
    /// Lock cost: how many events the long logs hold (0 skips the row).
    #[arg(long, default_value_t = 2_000)]
    lock_history: usize,
    /// Run the soak instead of everything else: a steady submit rate, one executor, the
    /// timers watcher and the pruner, with the store's size printed over time.
    #[arg(long)]
    soak: bool,
    /// Soak: how long executions are submitted, in seconds.
    #[arg(long, default_value_t = 180)]
    soak_seconds: u64,
    /// Soak: executions submitted per second.
    #[arg(long, default_value_t = 200)]
    soak_rate: u64,
    /// Soak: seconds a finished tree is kept before it is pruned.
    #[arg(long, default_value_t = 5)]
    soak_retention_seconds: u64,
    /// Soak: top-level executions examined per `prune` call.
    #[arg(long, default_value_t = 1_000)]
    soak_prune_batch: usize,
    /// Soak: milliseconds between two runs of the pruner.
    #[arg(long, default_value_t = 1_000)]
    soak_prune_interval_ms: u64,
    /// Soak: seconds between two printed rows.
    #[arg(long, default_value_t = 10)]
    soak_report_seconds: u64,
    #[command(flatten)]
    instructions: instructions::InstructionArgs,
    #[command(flatten)]
    latency: latency::LatencyArgs,
}

/// The function every benchmark execution runs.
const FFQN: &str = "bench:noop/ifc.noop";

fn component_id() -> anyhow::Result<ComponentId> {
    Ok(ComponentId::new("activity", "noop")?)
}

/// A worker that returns at once.
struct BenchWorker {
    ffqns: Vec<FunctionFqn>,
}

impl BenchWorker {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            ffqns: vec![FFQN.parse()?],
        })
    }
}

#[async_trait]
impl Worker for BenchWorker {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        WorkerResult::Ok(SupportedFunctionReturnValue::None, ctx.version)
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        &self.ffqns
    }
}

/// `executions` no-op executions, due now.
fn noop_requests(executions: usize) -> anyhow::Result<Vec<CreateRequest>> {
    let ffqn: FunctionFqn = FFQN.parse()?;
    let component_id = component_id()?;
    let now = Now.now();
    Ok((0..executions)
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
        .collect())
}

/// One run's numbers.
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

    fn row(&self) -> String {
        format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} |",
            self.backend,
            self.executions,
            self.per_second(self.create),
            self.per_second(self.run),
            self.per_second(self.create + self.run)
        )
    }
}

async fn measure(
    backend: &str,
    db: Arc<dyn DbConnection>,
    args: &Args,
) -> anyhow::Result<Measurement> {
    let measured = run_noop(backend, &db, args.executions, args.batch_size).await;
    db.close().await;
    measured
}

/// Creates `executions` no-op executions with one `create_batch` and runs them to their
/// last acknowledged `Finished` with one executor; leaves the store open.
async fn run_noop(
    backend: &str,
    db: &Arc<dyn DbConnection>,
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<Measurement> {
    let requests = noop_requests(executions)?;
    let counting = Arc::new(CountingDb::new(db.clone(), executions, false));

    let start = Instant::now();
    db.create_batch(requests).await.context("create_batch")?;
    let created = Instant::now();
    let node = multi::noop_node(db, counting.clone(), batch_size)?.start()?;
    let deadline = Duration::from_secs(600);
    let reached = tokio::time::timeout(deadline, counting.reached_target()).await;
    let finished = Instant::now();
    node.shutdown(multi::STOP).await;
    reached
        .with_context(|| format!("{backend}: not every execution finished within {deadline:?}"))?;
    Ok(Measurement {
        backend: backend.to_string(),
        executions,
        create: created - start,
        run: finished - created,
    })
}

/// A fresh store of one backend for the lifecycle rows or the soak, with its probe and, for
/// PostgreSQL, the database to drop afterwards.
struct Store {
    db: Arc<dyn DbConnection>,
    probe: Probe,
    postgres: Option<PostgresRun>,
}

impl Store {
    /// A fresh store of `backend` (a SQLite file `<label>.db` in `dir`, a PostgreSQL database
    /// `stele_bench_<pid>_<label>`); `None` for postgres without a server.
    async fn open(
        backend: &str,
        dir: &Path,
        sync: Synchronous,
        postgres_url: Option<&str>,
        label: &str,
    ) -> anyhow::Result<Option<Self>> {
        match backend {
            "memory" => Ok(Some(Self {
                db: Arc::new(storage_memory::MemoryStore::new()),
                probe: Probe::Memory,
                postgres: None,
            })),
            "sqlite" => {
                let path = dir.join(format!("{label}.db"));
                let pool = SqlitePool::open(SqliteConfig::new(&path).with_synchronous(sync))
                    .await
                    .with_context(|| format!("opening {}", path.display()))?;
                Ok(Some(Self {
                    db: Arc::new(pool),
                    probe: Probe::Sqlite { path },
                    postgres: None,
                }))
            }
            "postgres" => {
                let Some(url) = postgres_url else {
                    return Ok(None);
                };
                let run = PostgresRun::create(url, label).await?;
                let opened = async {
                    let db = run.connect().await?;
                    match Probe::postgres(&run.server_url, &run.name).await {
                        Ok(probe) => Ok((db, probe)),
                        Err(e) => {
                            db.close().await;
                            Err(e)
                        }
                    }
                }
                .await;
                match opened {
                    Ok((db, probe)) => Ok(Some(Self {
                        db,
                        probe,
                        postgres: Some(run),
                    })),
                    Err(e) => {
                        run.drop_database().await?;
                        Err(e)
                    }
                }
            }
            other => bail!("unknown backend `{other}` (expected memory, sqlite or postgres)"),
        }
    }

    /// Closes the store and the probe, and drops the PostgreSQL database.
    async fn finish(self) -> anyhow::Result<()> {
        self.db.close().await;
        self.probe.close().await;
        if let Some(run) = self.postgres {
            run.drop_database().await?;
        }
        Ok(())
    }
}

/// The note printed when postgres is asked for without a server.
const NO_POSTGRES: &str = "postgres was left out: neither --postgres-url nor \
                           STELE_TEST_POSTGRES_URL names a server (`source .ci/postgres.sh \
                           && pg_start` starts a local one)";

/// The single-process PostgreSQL run on a fresh database.
async fn measure_postgres(server_url: &str, args: &Args) -> anyhow::Result<Measurement> {
    let run = PostgresRun::create(server_url, "single").await?;
    let measured = match run.connect().await {
        Ok(db) => measure("postgres", db, args).await,
        Err(e) => Err(e),
    };
    run.drop_database().await?;
    measured
}

impl Args {
    /// What the counted phase of the instruction counts runs.
    fn phase(&self) -> instructions::PhaseArgs<'_> {
        instructions::PhaseArgs {
            executions: self.executions,
            batch_size: self.batch_size,
            synchronous: &self.synchronous,
            postgres_url: self.postgres_url.as_deref().filter(|url| !url.is_empty()),
        }
    }
}

/// Adds each backend's instruction rows to `targets`; returns the notes of those left out.
async fn count_instructions(args: &Args, targets: &mut Targets) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    for backend in &args.backends {
        match instructions::rows(&args.instructions, backend, &args.phase()).await? {
            Ok(rows) => targets.add_all(backend, rows),
            Err(note) => notes.push(note),
        }
    }
    Ok(notes)
}

fn synchronous(level: &str) -> anyhow::Result<Synchronous> {
    match level {
        "full" => Ok(Synchronous::Full),
        "normal" => Ok(Synchronous::Normal),
        other => bail!("--synchronous must be full or normal, not `{other}`"),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(backend) = &cli.args.instructions.instructions_phase {
        let args = &cli.args;
        return instructions::run_phase(&args.instructions, backend, &args.phase());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if cli.args.instructions.with_recorder && cli.command.is_none() {
        let recent = instructions::install_recorder()?;
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                recent.upkeep();
            }
        });
    }
    match cli.command {
        Some(Internal::WorkerProcess(worker)) => runtime.block_on(multi::worker_process(worker)),
        None => runtime.block_on(bench(cli.args)),
    }
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let sync = synchronous(&args.synchronous)?;
    let postgres_url = args.postgres_url.clone().filter(|url| !url.is_empty());
    if args.soak {
        return soak::run_all(&args, dir.path(), sync, postgres_url.as_deref()).await;
    }
    let mut report = String::new();
    let mut targets = Targets::default();
    if args.instructions.instructions {
        let notes = count_instructions(&args, &mut targets).await?;
        println!("{}", targets.render());
        for note in notes {
            println!("\nNote: {note}.");
        }
        return Ok(());
    }
    let mut end_to_end = Vec::new();
    let mut notes = Vec::new();
    writeln!(report, "Machine: {}", targets::machine())?;
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
    let mut multi_rows = None;
    for backend in &args.backends {
        let m = match backend.as_str() {
            "memory" => {
                eprintln!("measuring memory ...");
                measure(
                    "memory",
                    Arc::new(storage_memory::MemoryStore::new()),
                    &args,
                )
                .await?
            }
            "sqlite" => {
                let path = dir.path().join("bench.db");
                let pool = SqlitePool::open(SqliteConfig::new(&path).with_synchronous(sync))
                    .await
                    .with_context(|| format!("opening {}", path.display()))?;
                let label = format!("sqlite (synchronous={})", args.synchronous);
                eprintln!("measuring {label} ...");
                measure(&label, Arc::new(pool), &args).await?
            }
            "postgres" => {
                let Some(url) = &postgres_url else {
                    eprintln!("{NO_POSTGRES}");
                    notes.push(NO_POSTGRES.to_string());
                    continue;
                };
                eprintln!("measuring postgres ...");
                let limit = pg_limit::measure_on_fresh_database(url).await?;
                let m = measure_postgres(url, &args).await?;
                let rate = m.per_second(m.create + m.run);
                let mut by_processes = Vec::new();
                if !args.no_multi_process {
                    let (rows, rates) =
                        multi::measure_all(url, &args.processes, args.executions, args.batch_size)
                            .await?;
                    multi_rows = Some(rows);
                    by_processes = rates;
                }
                pg_limit::add_targets(&mut targets, limit, rate, &by_processes);
                m
            }
            other => bail!("unknown backend `{other}` (expected memory, sqlite or postgres)"),
        };
        writeln!(report, "{}", m.row())?;
        end_to_end.push((backend.clone(), m.per_second(m.create + m.run)));
    }
    for (backend, rate) in end_to_end.iter().filter(|_| !args.no_submits) {
        let url = postgres_url.as_deref();
        if let Some(store) = Store::open(backend, dir.path(), sync, url, "submits").await? {
            eprintln!("measuring single submits from many tasks on {backend} ...");
            let submitted = submits::measure_on(store, args.executions).await?;
            let row = Row::against(
                format!(
                    "{} tasks submitting single creates to a running executor (batch {}, task limiter {}), executions/s",
                    submits::TASKS,
                    submits::BATCH,
                    submits::TASKS
                ),
                submitted,
                "/s",
                "end to end with one create_batch (the first table)",
                *rate,
                Goal::Report,
            );
            targets.add(backend, row);
        }
    }
    if !args.no_workflows {
        let sizes = workflows::Sizes {
            serial_steps: args.workflow_steps,
            children: args.fan_out,
            history_steps: args.history,
        };
        let on = workflows::On {
            backends: &args.backends,
            dir: dir.path(),
            sync,
            postgres_url: postgres_url.as_deref(),
        };
        workflows::report(&on, &sizes, &mut report, &mut targets).await?;
    }
    for note in &notes {
        writeln!(report, "\nNote: {note}.")?;
    }
    if let Some(rows) = multi_rows {
        writeln!(
            report,
            "\nPostgreSQL, several executor processes against one local server (one fresh database per run). Each number of processes runs {} times, the numbers alternated; a row is the run of the median end-to-end rate, beside the rates of all its runs. The parent creates the executions with one create_batch once every process has connected, then tells each to start one executor (the same configuration as above); each process counts its acknowledged Finished appends and reports them through a pipe, and the time ends when they add up to {}. Process start-up and connections are not timed; afterwards a query confirms that every execution is finished and the counts add up exactly.\n",
            multi::PROCESS_ROUNDS,
            args.executions
        )?;
        writeln!(
            report,
            "| executor processes | executions | creates/s | finished/s | end-to-end executions/s | Finished per process | end-to-end executions/s of its runs |"
        )?;
        writeln!(report, "|---|---:|---:|---:|---:|---|---|")?;
        for row in rows {
            writeln!(report, "{row}")?;
        }
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
            let (tps, rps) =
                ceiling::sqlite_ceiling(dir.path(), level, rows, Duration::from_secs(3))?;
            writeln!(report, "| {level} | {rows} | {tps:.0} | {rps:.0} |")?;
            if (level, rows) == ("FULL", 1)
                && sync == Synchronous::Full
                && let Some((_, rate)) = end_to_end.iter().find(|(b, _)| b == "sqlite")
            {
                targets.add(
                    "sqlite",
                    Row::against(
                        "end to end, executions/s",
                        *rate,
                        "/s",
                        "single-row FULL transactions/s",
                        tps,
                        Goal::RatioAtLeast(2.0),
                    ),
                );
            }
        }
    }
    if !args.no_lifecycle {
        let rows = lifecycle::rows(&args, dir.path(), sync, postgres_url.as_deref()).await?;
        report.push_str(&rows);
    }
    for backend in args.backends.iter().filter(|_| args.expiry_leases > 0) {
        let url = postgres_url.as_deref();
        if let Some(store) = Store::open(backend, dir.path(), sync, url, "expiry").await? {
            eprintln!("measuring mass lease expiry on {backend} ...");
            let measured = expiry::measure(store.db.clone(), args.expiry_leases).await;
            store.finish().await?;
            targets.add_all(backend, expiry::rows(backend, &measured?));
        }
    }
    for backend in args.backends.iter().filter(|_| args.schedule_fires > 0) {
        let url = postgres_url.as_deref();
        if let Some(store) = Store::open(backend, dir.path(), sync, url, "fires").await? {
            eprintln!("measuring mass schedule fires on {backend} ...");
            let measured = fires::measure(store.db.clone(), args.schedule_fires).await;
            store.finish().await?;
            targets.add_all(backend, fires::rows(backend, &measured?));
        }
    }
    if args.wakeups > 0 && args.backends.iter().any(|backend| backend == "sqlite") {
        eprintln!("measuring wake-ups across two stores on one SQLite file ...");
        let measured = wakeups::measure(dir.path(), sync, args.wakeups).await?;
        targets.add_all("sqlite", wakeups::rows(&measured));
    }
    for backend in args.backends.iter().filter(|_| args.stored_executions > 0) {
        let Some(store) = Store::open(
            backend,
            dir.path(),
            sync,
            postgres_url.as_deref(),
            "history",
        )
        .await?
        else {
            continue;
        };
        eprintln!(
            "measuring {} stored executions on {backend} ...",
            args.stored_executions
        );
        let (stored, executions) = (args.stored_executions, args.executions);
        let pages = history::PageSizes {
            events: args.page_events,
            children: args.page_children,
        };
        let measured =
            history::measure(backend, &store, stored, executions, args.batch_size, pages).await;
        store.finish().await?;
        for row in history::rows(backend, &measured?) {
            targets.add(backend, row);
        }
    }
    for backend in args.backends.iter().filter(|_| args.lock_history > 0) {
        let Some(store) =
            Store::open(backend, dir.path(), sync, postgres_url.as_deref(), "lock").await?
        else {
            continue;
        };
        eprintln!("measuring the lock cost on {backend} ...");
        let measured = lockcost::measure(store.db.clone(), args.lock_history).await;
        store.finish().await?;
        targets.add(backend, lockcost::row(&measured?));
    }
    let latency = &args.latency;
    let postgres = postgres_url.as_deref();
    for (backend, row) in latency::rows(
        latency,
        &args.backends,
        dir.path(),
        sync,
        postgres,
        args.batch_size,
    )
    .await?
    {
        targets.add(&backend, row);
    }
    for (backend, rate) in &end_to_end {
        if backend == "memory" {
            targets.add(
                "memory",
                Row::alone("end to end, executions/s", *rate, "/s", Goal::Report),
            );
        }
    }
    if !args.instructions.no_instructions {
        for note in count_instructions(&args, &mut targets).await? {
            writeln!(report, "\nNote: {note}.")?;
        }
    }
    if !targets.is_empty() {
        report.push_str(&targets.render());
    }
    println!("{report}");
    Ok(())
}
