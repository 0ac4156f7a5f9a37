//! The workflow rows of the benchmark: serial steps per second (a workflow calling a no-op
//! activity in sequence), a fan-out to many no-op children (time, parent runs, parent log
//! size), and the replay rate of a long history (a fresh run replaying it, timed inside the
//! worker, so the read that `lock_pending` did is excluded).

use anyhow::{Context, bail};
use async_trait::async_trait;
use concepts::{
    ComponentId, DbConnection, ExecutionEventInner, ExecutionId, ExecutionLog, FunctionFqn,
};
use executor::{Now, Worker, WorkerContext, WorkerResult};
use node::{ExecutorSettings, Node};
use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use timers_watcher::TimersWatcherConfig;
use workflow::{
    ActivityCtx, ActivityWorker, Client, Function, Response, WorkflowCtx, WorkflowError,
    WorkflowWorker,
};

const NOOP: Function<u64, u64> = Function::new("bench:workflow/activities.noop");
const SERIAL: Function<u64, u64> = Function::new("bench:workflow/flows.serial");
const FAN_OUT: Function<u64, u64> = Function::new("bench:workflow/flows.fan-out");
const LONG_HISTORY: Function<u64, u64> = Function::new("bench:workflow/flows.long-history");

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

/// Runs the three workflow workloads on `db` (a fresh store) and closes it.
pub async fn measure(
    backend: &str,
    db: Arc<dyn DbConnection>,
    serial_steps: u64,
    children: u64,
    history_steps: u64,
) -> anyhow::Result<WorkflowMeasurement> {
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
    let limit = Duration::from_secs(600);

    eprintln!("  {backend}: {serial_steps} activities submitted and awaited one by one ...");
    let start = Instant::now();
    for step in 0..serial_steps {
        let handle = client.submit(&NOOP, &step).await?;
        handle.result_within(limit).await.context("round trip")?;
    }
    let round_trip = start.elapsed();

    eprintln!("  {backend}: {serial_steps} serial steps ...");
    let start = Instant::now();
    let handle = client.submit(&SERIAL, &serial_steps).await?;
    handle.result_within(limit).await.context("serial")?;
    let serial = start.elapsed();
    let serial_runs = runs(&db.get(handle.execution_id()).await?);

    eprintln!("  {backend}: a fan-out of {children} children ...");
    let start = Instant::now();
    let handle = client.submit(&FAN_OUT, &children).await?;
    let answered = handle.result_within(limit).await.context("fan-out")?;
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
    handle.result_within(limit).await.context("long history")?;
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
    })
}
