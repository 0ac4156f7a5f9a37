//! The node that runs the demo's functions on a store, shared by `stele demo` and
//! `stele serve`: one executor per example function and a timers watcher (and, for
//! `stele serve`, the retention task), all started and drained by the `node` crate.

use super::{CliError, Exit};
use ::node::{ExecutorSettings, Node, NodeBuilder};
use cli::{
    workers::{
        approval::{APPROVAL, approval},
        fanout::{FANOUT, fanout},
        flaky::FlakyWorker,
        sleeper::{SLEEPER, sleeper},
        slow::SlowWorker,
    },
    workload::{self, DemoFunction, DemoFunctions},
};
use concepts::DbConnection;
use executor::{Now, Worker};
use std::{sync::Arc, time::Duration};
use timers_watcher::TimersWatcherConfig;
use workflow::WorkflowWorker;

/// How often the timers watcher looks for expired leases and delays.
const WATCHER_TICK: Duration = Duration::from_millis(100);
/// How long after expiry the watcher acts, so that a worker about to finish can write first.
const WATCHER_LEEWAY: Duration = Duration::from_millis(100);
/// The executors' fallback poll; notifications usually wake them sooner, but a retry whose
/// backoff ends, and work submitted by another process to a SQLite file (whose notifications
/// stay in the process that wrote), are found by this poll.
const EXECUTOR_TICK: Duration = Duration::from_millis(100);
/// How far past its deadline an overrunning `slow` attempt works: well past the watcher's
/// leeway and tick, so that the watcher always times it out first.
const SLOW_OVERRUN: Duration = Duration::from_millis(600);

/// 8 workers per core: the demo's workers mostly sleep (simulated I/O), so a core keeps
/// several busy; on 2 cores that is 16.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZero::get) * 8
}

/// The worker of `fanout`: its children are created as `flaky` executions are.
fn fanout_worker(db: &Arc<dyn DbConnection>, functions: &DemoFunctions) -> WorkflowWorker<Now> {
    let flaky = &functions.flaky;
    WorkflowWorker::new(db.clone(), Now)
        .child_settings(
            flaky.component_id.clone(),
            flaky.max_retries,
            flaky.retry_exp_backoff,
        )
        .register(&FANOUT, fanout)
        .expect("the demo's function handles are legal and distinct")
}

/// Every function the demo knows, with the worker that runs it: one executor each.
fn demo_workers<'f>(
    db: &Arc<dyn DbConnection>,
    functions: &'f DemoFunctions,
) -> Vec<(&'f DemoFunction, Arc<dyn Worker>)> {
    vec![
        (
            &functions.flaky,
            Arc::new(FlakyWorker::new(functions.flaky.ffqn.clone())),
        ),
        (
            &functions.slow,
            Arc::new(SlowWorker::new(
                functions.slow.ffqn.clone(),
                Now,
                SLOW_OVERRUN,
            )),
        ),
        (&functions.fanout, Arc::new(fanout_worker(db, functions))),
        (
            &functions.sleeper,
            Arc::new(
                WorkflowWorker::new(db.clone(), Now)
                    .register(&SLEEPER, sleeper)
                    .expect("the demo's function handles are legal and distinct"),
            ),
        ),
        (
            &functions.approval,
            Arc::new(
                WorkflowWorker::new(db.clone(), Now)
                    .register(&APPROVAL, approval)
                    .expect("the demo's function handles are legal and distinct"),
            ),
        ),
    ]
}

/// The node of `stele demo` and `stele serve`, not started yet: one executor per demo
/// function (with its lease and component), at most `concurrency` runs at once over all of
/// them, and the timers watcher; its catalog is the demo's (`workload::catalog`, what
/// `stele submit` submits through); `serve` adds its retention task and its HTTP server.
pub fn demo_node(
    db: &Arc<dyn DbConnection>,
    functions: &DemoFunctions,
    concurrency: usize,
) -> NodeBuilder<Now> {
    let watcher = TimersWatcherConfig {
        tick_sleep: WATCHER_TICK,
        leeway: WATCHER_LEEWAY,
    };
    let catalog = workload::catalog(functions);
    let builder = catalog.functions().fold(
        Node::builder(db.clone(), Now)
            .concurrency(concurrency)
            .timers_watcher(watcher)
            .unknown_functions(catalog.unknown_defaults().clone()),
        |builder, function| builder.describe(function.clone()),
    );
    demo_workers(db, functions)
        .into_iter()
        .fold(builder, |builder, (function, worker)| {
            let settings = ExecutorSettings {
                lock_expiry: function.lock_expiry,
                tick_sleep: EXECUTOR_TICK,
                batch_size: 8,
                component_id: Some(function.component_id.clone()),
                concurrency: None,
            };
            builder.worker(worker, settings)
        })
}

/// Starts a node of [`demo_node`]'s kind; its configuration is fixed, so a refusal is a bug
/// of `stele`, a runtime failure.
pub fn start(builder: NodeBuilder<Now>) -> Result<Node, CliError> {
    builder
        .start()
        .map_err(|err| CliError::new(Exit::Failure, format!("cannot start the node: {err}")))
}

/// The short names of the demo's functions, for the notes.
pub fn names(functions: &DemoFunctions) -> Vec<&'static str> {
    functions
        .all()
        .iter()
        .map(|function| function.name)
        .collect()
}
