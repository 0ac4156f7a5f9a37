//! The workflow rows of the benchmark: serial steps per second (a workflow calling a no-op
//! activity in sequence), a fan-out to many no-op children (time, parent runs, parent log
//! size), and the replay rate of a long history (a fresh run replaying it, timed inside the
//! worker, so the read that `lock_pending` did is excluded).

use crate::targets::Targets;
use crate::targets::{Goal, Row};
use anyhow::{Context, bail};
use async_trait::async_trait;
use concepts::{
    ComponentId, DbConnection, ExecutionEventInner, ExecutionId, ExecutionLog, FunctionFqn,
};
use executor::{Now, Worker, WorkerContext, WorkerResult};
use node::{ExecutorSettings, Node};
use std::fmt::Write as _;
use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use storage_sqlite::{SqliteConfig, SqlitePool, Synchronous};
use timers_watcher::TimersWatcherConfig;
use workflow::{
    ActivityCtx, ActivityWorker, Client, Function, Response, WorkflowCtx, WorkflowError,
    WorkflowWorker,
};

const NOOP: Function<u64, u64> = Function::new("bench:workflow/activities.noop");
const SERIAL: Function<u64, u64> = Function::new("bench:workflow/flows.serial");
const FAN_OUT: Function<u64, u64> = Function::new("bench:workflow/flows.fan-out");
const LONG_HISTORY: Function<u64, u64> = Function::new("bench:workflow/flows.long-history");

/// The first steps of the serial run left out of its timeline.
const STEPS_WARM_UP: usize = 10;

/// The sleep that makes the long history's execution give up its run, to be replayed.
const COLD_SLEEP: Duration = Duration::from_secs(4);

type Result<T> = std::result::Result<T, WorkflowError<String>>;

async fn noop(_ctx: ActivityCtx, n: u64) -> std::result::Result<u64, String> {
    Ok(n)
}

async fn serial(ctx: WorkflowCtx, steps: u64) -> Result<u64> {
    for step in 0..steps {
        ctx.call(&NOOP, &step).await?;
    }
    Ok(steps)
}

async fn fan_out(ctx: WorkflowCtx, children: u64) -> Result<u64> {
    let js = ctx.join_set();
    for child in 0..children {
        js.submit(&NOOP, &child);
    }
    let mut answered = 0;
    while let Some(Response::Child(child)) = js.next().await {
        child.into_result::<u64>()?;
        answered += 1;
    }
    Ok(answered)
}

/// Records `steps` persisted values, then sleeps longer than its lease: the run after the
/// sleep replays the whole history.
async fn long_history(ctx: WorkflowCtx, steps: u64) -> Result<u64> {
    for _ in 0..steps {
        ctx.random_u64(0..=9).await;
    }
    ctx.sleep(COLD_SLEEP).await;
    Ok(steps)
}

/// Wraps a worker and keeps how long each of its runs took.
struct Timed {
    inner: Arc<dyn Worker>,
    runs: Mutex<Vec<(ExecutionId, usize, Duration)>>,
}

#[async_trait]
impl Worker for Timed {
    async fn run(&self, ctx: WorkerContext) -> WorkerResult {
        let id = ctx.execution_id.clone();
        let history = ctx.event_history.len();
        let start = Instant::now();
        let result = self.inner.run(ctx).await;
        let took = start.elapsed();
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((id, history, took));
        result
    }

    fn exported_functions(&self) -> &[FunctionFqn] {
        self.inner.exported_functions()
    }
}

/// The commit rate a backend's serial steps are held to, measured on the same machine right
/// before and right after them (the mean of the two), so that both see the same load.
pub enum StepLimit {
    /// The memory backend: no commit; the steps are held to an absolute rate.
    Memory,
    /// Single-row FULL `INSERT` transactions on a raw SQLite connection with the store's pragmas,
    /// in databases of their own under this directory.
    SqliteFull(PathBuf),
    /// Single-client autocommit single-row `INSERT`s on this server's database.
    PostgresSingleClient {
        /// The server, as given to the bench.
        server_url: String,
        /// The benchmark's database on it.
        database: String,
    },
}

/// How long each of the two measurements of the limit lasts.
const LIMIT_BUDGET: Duration = Duration::from_secs(1);

impl StepLimit {
    /// What is measured, for the targets table.
    fn name(&self) -> &'static str {
        match self {
            Self::Memory => "-",
            Self::SqliteFull(_) => "single-row FULL transactions/s (right before and after)",
            Self::PostgresSingleClient { .. } => {
                "single-client INSERT commits/s (right before and after)"
            }
        }
    }

    /// The limit's rate now; `nth` names the measurement (its own database file).
    async fn measure(&self, nth: usize) -> anyhow::Result<Option<f64>> {
        match self {
            Self::Memory => Ok(None),
            Self::SqliteFull(dir) => {
                let dir = dir.join(format!("step-limit-{nth}"));
                std::fs::create_dir_all(&dir)?;
                let (tps, _) = tokio::task::block_in_place(|| {
                    crate::ceiling::sqlite_ceiling(&dir, "FULL", 1, LIMIT_BUDGET)
                })?;
                Ok(Some(tps))
            }
            Self::PostgresSingleClient {
                server_url,
                database,
            } => {
                let rate =
                    crate::pg_limit::measure_clients(server_url, database, 1, LIMIT_BUDGET).await?;
                Ok(Some(rate))
            }
        }
    }
}

/// The workflow numbers of one backend.
pub struct WorkflowMeasurement {
    backend: String,
    round_trip: Duration,
    serial_steps: u64,
    serial: Duration,
    serial_runs: usize,
    children: u64,
    fan_out: Duration,
    fan_out_tail: Duration,
    fan_out_runs: usize,
    fan_out_events: usize,
    replayed_events: usize,
    replay: Duration,
    /// The limit's name and its rate beside the serial steps.
    limit: (&'static str, Option<f64>),
    /// Where the serial run's steps spent their time.
    pub timeline: crate::steps::Timeline,
}

impl WorkflowMeasurement {
    /// The table's header.
    pub const HEADER: &str = "| backend | one activity submitted and awaited (ms) | serial steps | steps/s | ms/step | parent runs | fan-out children | time to parent's Finished (s) | of which after the last child answered (s) | parent runs | events in the parent's log | replayed events | replayed events/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

    /// The table's row.
    pub fn row(&self) -> String {
        let steps_per_second = self.serial_steps as f64 / self.serial.as_secs_f64();
        format!(
            "| {} | {:.2} | {} | {:.0} | {:.2} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {:.0} |",
            self.backend,
            self.round_trip.as_secs_f64() * 1000.0 / self.serial_steps as f64,
            self.serial_steps,
            steps_per_second,
            1000.0 / steps_per_second,
            self.serial_runs,
            self.children,
            self.fan_out.as_secs_f64(),
            self.fan_out_tail.as_secs_f64(),
            self.fan_out_runs,
            self.fan_out_events,
            self.replayed_events,
            self.replayed_events as f64 / self.replay.as_secs_f64(),
        )
    }
}

impl WorkflowMeasurement {
    /// The rows of the targets table: serial steps/s against the limit measured beside them
    /// (at least a third of SQLite's FULL commits, a quarter of PostgreSQL's single-client
    /// commits: a step commits once, the parent's write recording the previous child's answer and
    /// creating the next child, when the child runs in the parent's process; on memory an
    /// absolute 20,000/s), and the fan-out's time, reported.
    pub(crate) fn target_rows(&self) -> Vec<Row> {
        let figure = "serial workflow steps/s";
        let steps = self.serial_steps as f64 / self.serial.as_secs_f64();
        let serial = match (self.backend.as_str(), self.limit) {
            ("sqlite", (name, Some(limit))) => Row::against(
                figure,
                steps,
                "/s",
                name,
                limit,
                Goal::RatioAtLeast(1.0 / 3.0),
            ),
            ("postgres", (name, Some(limit))) => {
                Row::against(figure, steps, "/s", name, limit, Goal::RatioAtLeast(0.25))
            }
            _ => Row::alone(figure, steps, "/s", Goal::AtLeast(20_000.0)),
        };
        let fan_out = Row::alone(
            format!(
                "fan-out of {} children, submit to the parent's result",
                self.children
            ),
            self.fan_out.as_secs_f64(),
            "s",
            Goal::Report,
        );
        vec![serial, fan_out]
    }
}

fn runs(log: &ExecutionLog) -> usize {
    log.events
        .iter()
        .filter(|event| matches!(event.event, ExecutionEventInner::Locked(_)))
        .count()
}

fn settings(lock_expiry: Duration, component_id: &ComponentId) -> ExecutorSettings {
    ExecutorSettings {
        lock_expiry,
        tick_sleep: Duration::from_millis(100),
        batch_size: 256,
        component_id: Some(component_id.clone()),
        concurrency: None,
    }
}

/// Runs the three workflow workloads on `db` (a fresh store) and closes it; `limit` is
/// measured right before and right after the serial steps.
pub async fn measure(
    backend: &str,
    db: Arc<dyn DbConnection>,
    limit: &StepLimit,
    serial_steps: u64,
    children: u64,
    history_steps: u64,
) -> anyhow::Result<WorkflowMeasurement> {
    // Every store call of the run goes through the step trace (a lock and a push per call of a
    // step, nothing otherwise), so the timeline is the measured serial run's own.
    let traced = Arc::new(crate::steps::StepTrace::new(db, NOOP.ffqn()?));
    let db: Arc<dyn DbConnection> = traced.clone();
    let component_id = ComponentId::new("bench", "workflow")?;
    let activities = ActivityWorker::new().register(&NOOP, noop)?;
    let warm = WorkflowWorker::new(db.clone(), Now)
        .child_settings(component_id.clone(), 3, Duration::from_millis(100))
        .register(&SERIAL, serial)?
        .register(&FAN_OUT, fan_out)?;
    let cold = Arc::new(Timed {
        inner: Arc::new(
            WorkflowWorker::new(db.clone(), Now).register(&LONG_HISTORY, long_history)?,
        ),
        runs: Mutex::new(Vec::new()),
    });
    let lease = Duration::from_secs(600);
    let watcher_config = TimersWatcherConfig {
        tick_sleep: Duration::from_millis(100),
        leeway: Duration::ZERO,
    };
    let node = Node::builder(db.clone(), Now)
        .worker(Arc::new(activities), settings(lease, &component_id))
        .worker(Arc::new(warm), settings(lease, &component_id))
        .worker(cold.clone(), settings(COLD_SLEEP / 2, &component_id))
        .timers_watcher(watcher_config)
        .start()?;
    let client = Client::new(db.clone(), Now, component_id).retries(0, Duration::from_secs(1));
    let wait_limit = Duration::from_secs(600);

    eprintln!("  {backend}: {serial_steps} activities submitted and awaited one by one ...");
    let start = Instant::now();
    for step in 0..serial_steps {
        let handle = client.submit(&NOOP, &step).await?;
        handle
            .result_within(wait_limit)
            .await
            .context("round trip")?;
    }
    let round_trip = start.elapsed();

    eprintln!("  {backend}: {serial_steps} serial steps ...");
    let limit_before = limit
        .measure(0)
        .await
        .context("the limit before the steps")?;
    traced.start();
    let start = Instant::now();
    let handle = client.submit(&SERIAL, &serial_steps).await?;
    handle.result_within(wait_limit).await.context("serial")?;
    let serial = start.elapsed();
    traced.stop();
    let limit_after = limit
        .measure(1)
        .await
        .context("the limit after the steps")?;
    let limit_rate = limit_before
        .zip(limit_after)
        .map(|(before, after)| f64::midpoint(before, after));
    let timeline = traced.timeline(STEPS_WARM_UP);
    let serial_runs = runs(&db.get(handle.execution_id()).await?);

    eprintln!("  {backend}: a fan-out of {children} children ...");
    let start = Instant::now();
    let handle = client.submit(&FAN_OUT, &children).await?;
    let answered = handle.result_within(wait_limit).await.context("fan-out")?;
    let fan_out = start.elapsed();
    if answered != children {
        bail!("the fan-out consumed {answered} responses of {children}");
    }
    let log = db.get(handle.execution_id()).await?;
    let (fan_out_runs, fan_out_events) = (runs(&log), log.events.len());
    // From the last child's response to the parent's `Finished`: the parent's last write
    // (every `JoinNext` of the fan-out) and the executor's.
    let fan_out_tail = match (log.responses.last(), log.events.last()) {
        (Some(response), Some(finished)) => (finished.created_at - response.created_at)
            .to_std()
            .unwrap_or_default(),
        _ => Duration::ZERO,
    };

    eprintln!("  {backend}: a replay of {history_steps} recorded steps ...");
    let handle = client.submit(&LONG_HISTORY, &history_steps).await?;
    handle
        .result_within(wait_limit)
        .await
        .context("long history")?;
    let replay = cold
        .runs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .rev()
        .find(|(id, history, _)| id == handle.execution_id() && *history > 0)
        .map(|(_, history, took)| (*history, *took));
    let Some((replayed_events, replay)) = replay else {
        bail!("the long history was never replayed: its run did not give up at the sleep");
    };

    node.shutdown(crate::multi::STOP).await;
    db.close().await;
    Ok(WorkflowMeasurement {
        backend: backend.to_string(),
        round_trip,
        serial_steps,
        serial,
        serial_runs,
        children,
        fan_out,
        fan_out_tail,
        fan_out_runs,
        fan_out_events,
        replayed_events,
        replay,
        limit: (limit.name(), limit_rate),
        timeline,
    })
}

/// How big the three workloads are.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Activities the serial workflow calls one after the other.
    pub serial_steps: u64,
    /// Children of the fan-out.
    pub children: u64,
    /// Recorded steps the long history replays.
    pub history_steps: u64,
}

/// Where the workloads run: the backends asked for, the directory of the SQLite files, the
/// SQLite durability, and the PostgreSQL server.
pub struct On<'a> {
    /// The backends, by name.
    pub backends: &'a [String],
    /// Where the SQLite files go.
    pub dir: &'a Path,
    /// SQLite's durability.
    pub sync: Synchronous,
    /// The PostgreSQL server, if any.
    pub postgres_url: Option<&'a str>,
}

/// Runs the workloads on a fresh store of each backend of `on`, writing their table and each
/// backend's step timeline into `report`, and their targets into `targets`.
pub async fn report(
    on: &On<'_>,
    sizes: &Sizes,
    report: &mut String,
    targets: &mut Targets,
) -> anyhow::Result<()> {
    writeln!(
        report,
        "\nWorkflows (the `workflow` crate, the same backends, fresh stores): one workflow calling a no-op activity {} times in sequence; one parent submitting {} no-op children into a join set and consuming every response (time from submit to its result, runs = `Locked` events of the parent); a history of {} recorded values replayed by a fresh run after a cold sleep, timed inside the worker (the read is excluded).\n",
        sizes.serial_steps, sizes.children, sizes.history_steps
    )?;
    writeln!(report, "{}", WorkflowMeasurement::HEADER)?;
    let mut timelines = String::new();
    for backend in on.backends {
        let mut postgres = None;
        let (db, limit): (Arc<dyn DbConnection>, _) = match (backend.as_str(), on.postgres_url) {
            ("memory", _) => (
                Arc::new(storage_memory::MemoryStore::new()),
                StepLimit::Memory,
            ),
            ("sqlite", _) => {
                let path = on.dir.join("workflows.db");
                let db = SqlitePool::open(SqliteConfig::new(&path).with_synchronous(on.sync));
                let limit = match on.sync {
                    Synchronous::Full => StepLimit::SqliteFull(on.dir.into()),
                    _ => StepLimit::Memory,
                };
                (Arc::new(db.await?), limit)
            }
            ("postgres", Some(url)) => {
                let run = crate::pg_run::PostgresRun::create(url, "workflows").await?;
                let db = run.connect().await?;
                let limit = StepLimit::PostgresSingleClient {
                    server_url: run.server_url.clone(),
                    database: run.name.clone(),
                };
                postgres = Some(run);
                (db, limit)
            }
            _ => continue,
        };
        eprintln!("measuring workflows on {backend} ...");
        let measured = measure(
            backend,
            db,
            &limit,
            sizes.serial_steps,
            sizes.children,
            sizes.history_steps,
        )
        .await;
        if let Some(run) = postgres {
            run.drop_database().await?;
        }
        let m = measured?;
        writeln!(report, "{}", m.row())?;
        timelines.push_str(&m.timeline.table(backend));
        targets.add_all(backend, m.target_rows());
    }
    report.push_str(&timelines);
    Ok(())
}
