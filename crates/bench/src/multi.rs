//! The multi-process mode: P executor processes against one PostgreSQL database.
//!
//! The parent creates a fresh database and starts P copies of this binary
//! (`stele-bench worker-process`), each of which connects its own store and reports `ready`.
//! Only then does the parent create the N executions with one `create_batch` and send `go` to
//! every child, which starts one executor (the same configuration as the single-process run).
//! Every child counts its acknowledged `Finished` appends and prints the running count; the
//! run ends when the counts add up to N. The parent then sends `stop`, collects each child's
//! count, and checks with a query that N executions are finished and no child counted one
//! twice.
//!
//! So the timing covers the same span as the single-process table (creates, then the
//! executors' work up to the last acknowledged `Finished`), and leaves out what only the
//! multi-process run has: starting processes and connecting their stores. The counts reach
//! the parent through pipes, a delay of microseconds per line.

use crate::{BenchWorker, Measurement, counting::CountingDb, noop_requests, pg_run::PostgresRun};
use anyhow::{Context, bail, ensure};
use concepts::DbClientExt as _;
use concepts::{DbConnection, ListExecutionsFilter, PendingStateKind};
use executor::Now;
use node::{ExecutorSettings, Node, NodeBuilder};
use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};
use storage_postgres::{PostgresConfig, PostgresStore};
use tokio::sync::mpsc;

/// How long a child may take to connect, or a run to finish, before the benchmark gives up.
const TIMEOUT: Duration = Duration::from_secs(600);

/// The arguments of a worker process (the hidden `worker-process` subcommand).
#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    /// The server, a `postgres://` URL.
    #[arg(long)]
    url: String,
    /// The database on it.
    #[arg(long)]
    database: String,
    /// How many executions the executor locks per tick.
    #[arg(long)]
    batch_size: usize,
}

/// A worker process: connect, say `ready`, on `go` run an executor that prints each
/// acknowledged `Finished` count, on `stop` (or end of input) close and print
/// `stopped <count>`.
pub(crate) async fn worker_process(args: WorkerArgs) -> anyhow::Result<()> {
    let config = PostgresConfig::from_url(&args.url)?.with_database(&args.database);
    let db: Arc<dyn DbConnection> = Arc::new(PostgresStore::connect(config).await?);
    let (commands, mut received) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if commands.send(line).is_err() {
                return;
            }
        }
        let _ = commands.send("stop".to_string());
    });
    say("ready");
    match received.recv().await.as_deref() {
        Some("go") => {}
        Some("stop") | None => {
            db.close().await;
            say("stopped 0");
            return Ok(());
        }
        Some(other) => bail!("unexpected command `{other}`"),
    }
    let counting = Arc::new(CountingDb::new(db.clone(), usize::MAX, true));
    let node = noop_node(&db, counting.clone(), args.batch_size)?.start()?;
    while let Some(command) = received.recv().await {
        if command == "stop" {
            break;
        }
    }
    node.shutdown(STOP).await;
    db.close().await;
    say(&format!("stopped {}", counting.finished()));
    Ok(())
}

/// How long a benchmark's node gets to drain when it stops: its runs are no-ops, so it
/// stops as soon as the last outcome is written.
pub(crate) const STOP: Duration = Duration::from_secs(10);

/// A node of one executor of no-op executions, `batch_size` per tick, that locks and writes
/// through `counting`; no timers watcher (the throughput and latency runs have none, the soak
/// adds one).
pub(crate) fn noop_node(
    db: &Arc<dyn DbConnection>,
    counting: Arc<CountingDb>,
    batch_size: usize,
) -> anyhow::Result<NodeBuilder<Now>> {
    Ok(Node::builder(db.clone(), Now)
        .without_timers_watcher()
        .worker_through(
            Arc::new(BenchWorker::new()?),
            noop_settings(batch_size)?,
            counting,
        ))
}

/// The executor of the no-op executions: `batch_size` per tick, leases of a minute.
pub(crate) fn noop_settings(batch_size: usize) -> anyhow::Result<ExecutorSettings> {
    Ok(ExecutorSettings {
        lock_expiry: Duration::from_secs(60),
        tick_sleep: Duration::from_secs(1),
        batch_size,
        component_id: Some(crate::component_id()?),
        concurrency: None,
    })
}

fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// One child as the parent sees it.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    ready: bool,
    finished: usize,
    stopped: Option<usize>,
    closed: bool,
}

impl Worker {
    fn send(&mut self, command: &str) -> anyhow::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .context("the worker's input is closed")?;
        writeln!(stdin, "{command}")?;
        stdin.flush()?;
        Ok(())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing its input stops a worker; one that is still running after a failed run is
        // killed so that no process outlives the benchmark.
        self.stdin.take();
        if !self.closed {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A line from child `idx`, or `None` when it closed its output.
type Line = (usize, Option<String>);

/// How many times each number of executor processes runs, the numbers alternated (1, 2, 4, 1,
/// 2, 4, ...): on two cores shared with the server one run of each moves by more than the
/// differences the targets compare.
pub(crate) const PROCESS_ROUNDS: usize = 3;

/// The multi-process PostgreSQL runs, one fresh database each, [`PROCESS_ROUNDS`] of each
/// number of processes, alternated; returns per number of processes the table row of its median
/// run (with the end-to-end rates of all its runs) and that run's end-to-end executions/s.
pub(crate) async fn measure_all(
    server_url: &str,
    counts: &[usize],
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<(Vec<String>, Vec<(usize, f64)>)> {
    for &processes in counts {
        anyhow::ensure!(processes > 0, "--processes: 0 is not a number of processes");
    }
    let mut runs: Vec<Vec<(f64, String)>> = vec![Vec::new(); counts.len()];
    for round in 1..=PROCESS_ROUNDS {
        for (&processes, runs) in counts.iter().zip(&mut runs) {
            eprintln!(
                "measuring postgres with {processes} executor process(es), run {round} of \
                 {PROCESS_ROUNDS} ..."
            );
            let run = PostgresRun::create(server_url, &format!("p{processes}r{round}")).await?;
            let measured = match run.connect().await {
                Ok(parent) => {
                    let measured = measure(
                        &parent,
                        &run.server_url,
                        &run.name,
                        processes,
                        executions,
                        batch_size,
                    )
                    .await;
                    parent.close().await;
                    measured
                }
                Err(e) => Err(e),
            };
            run.drop_database().await?;
            let (m, per_process) = measured?;
            let shares: Vec<String> = per_process.iter().map(ToString::to_string).collect();
            let rate = m.per_second(m.create + m.run);
            runs.push((rate, format!("{} {} |", m.row(), shares.join(" / "))));
        }
    }
    let mut rows = Vec::new();
    let mut rates = Vec::new();
    for (&processes, mut runs) in counts.iter().zip(runs) {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let all: Vec<String> = runs.iter().map(|(rate, _)| format!("{rate:.0}")).collect();
        let (rate, row) = runs.swap_remove(runs.len() / 2);
        rows.push(format!("{row} {} |", all.join(", ")));
        rates.push((processes, rate));
    }
    Ok((rows, rates))
}

/// Runs N executions with `processes` worker processes on the database `database` of the
/// server `url` names (which must exist, empty); `parent` is the parent's own store on it.
pub(crate) async fn measure(
    parent: &Arc<dyn DbConnection>,
    url: &str,
    database: &str,
    processes: usize,
    executions: usize,
    batch_size: usize,
) -> anyhow::Result<(Measurement, Vec<usize>)> {
    let exe = std::env::current_exe().context("locating the benchmark binary")?;
    let (lines_tx, mut lines) = mpsc::unbounded_channel::<Line>();
    let mut workers = Vec::new();
    for idx in 0..processes {
        let mut child = Command::new(&exe)
            .args(["worker-process", "--url", url, "--database", database])
            .args(["--batch-size", &batch_size.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a worker process")?;
        let stdout = child.stdout.take().context("the worker's output")?;
        let stdin = child.stdin.take();
        let tx = lines_tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((idx, Some(line))).is_err() {
                    return;
                }
            }
            let _ = tx.send((idx, None));
        });
        workers.push(Worker {
            child,
            stdin,
            ready: false,
            finished: 0,
            stopped: None,
            closed: false,
        });
    }
    drop(lines_tx);
    until(&mut lines, &mut workers, "every worker ready", |w| {
        w.iter().all(|w| w.ready)
    })
    .await?;

    let requests = noop_requests(executions)?;
    let start = Instant::now();
    parent
        .create_batch(requests)
        .await
        .context("create_batch")?;
    let created = Instant::now();
    for worker in &mut workers {
        worker.send("go")?;
    }
    until(&mut lines, &mut workers, "every execution finished", |w| {
        w.iter().map(|w| w.finished).sum::<usize>() >= executions
    })
    .await?;
    let finished = Instant::now();

    for worker in &mut workers {
        worker.send("stop")?;
    }
    until(&mut lines, &mut workers, "every worker stopped", |w| {
        w.iter().all(|w| w.stopped.is_some() && w.closed)
    })
    .await?;
    let mut per_process = Vec::new();
    for worker in &mut workers {
        let status = worker.child.wait()?;
        ensure!(status.success(), "a worker process exited with {status}");
        per_process.push(worker.stopped.unwrap_or_default());
    }
    let counted: usize = per_process.iter().sum();
    ensure!(
        counted == executions,
        "the workers acknowledged {counted} Finished appends for {executions} executions"
    );
    let stored = count_finished(parent.as_ref()).await?;
    ensure!(
        stored == executions,
        "the store holds {stored} finished executions, expected {executions}"
    );
    Ok((
        Measurement {
            backend: processes.to_string(),
            executions,
            create: created - start,
            // From the end of `create_batch`, like the single-process run: sending `go` (a
            // few microseconds) counts as starting the executors.
            run: finished - created,
        },
        per_process,
    ))
}

/// Takes lines until `done` holds.
async fn until(
    lines: &mut mpsc::UnboundedReceiver<Line>,
    workers: &mut [Worker],
    what: &str,
    done: impl Fn(&[Worker]) -> bool,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !done(workers) {
        let Ok(line) = tokio::time::timeout_at(deadline, lines.recv()).await else {
            bail!("gave up after {TIMEOUT:?} waiting for {what}");
        };
        let Some((idx, line)) = line else {
            bail!("every worker closed its output while waiting for {what}");
        };
        let worker = &mut workers[idx];
        let Some(line) = line else {
            worker.closed = true;
            if worker.stopped.is_none() {
                bail!("worker process {idx} exited while waiting for {what}");
            }
            continue;
        };
        if line == "ready" {
            worker.ready = true;
        } else if let Some(count) = line.strip_prefix("finished ") {
            // Counts printed by concurrent tasks may arrive out of order: the largest holds.
            let count: usize = count.parse().context("a finished count")?;
            worker.finished = worker.finished.max(count);
        } else if let Some(count) = line.strip_prefix("stopped ") {
            worker.stopped = Some(count.parse().context("a stopped count")?);
        } else {
            bail!("worker process {idx} printed `{line}`");
        }
    }
    Ok(())
}

/// How many executions are finished.
async fn count_finished(db: &dyn DbConnection) -> anyhow::Result<usize> {
    let filter = ListExecutionsFilter {
        state: Some(PendingStateKind::Finished),
        ..ListExecutionsFilter::default()
    };
    Ok(db.list_all_executions(filter).await?.len())
}
