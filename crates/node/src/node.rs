//! [`Node`], the handle of a started node: what it runs, and its graceful shutdown
//! ([`Node::shutdown`], which reports a [`DrainReport`]).

use crate::{builder::NodeBuilder, catalog::Catalog};
use concepts::{ClockFn, ComponentId, DbConnection, ExecutorId, FunctionFqn};
use executor::ExecutorTaskHandle;
use futures_util::future::{BoxFuture, join_all};
use std::{sync::Arc, time::Duration};
use timers_watcher::{Pruner, TimersWatcherHandle};
use tokio::{sync::watch, task::JoinHandle};
use tracing::{debug, info, warn};

/// A running node: an executor per worker, the timers watcher, the retention task and the
/// background tasks it was built with. Stop it with [`Node::shutdown`]; dropped without it,
/// every loop is aborted (and a warning logged), the runs in flight go on until the process
/// ends, and their leases expire.
#[derive(Debug)]
pub struct Node {
    executors: Vec<RunningExecutor>,
    infos: Vec<ExecutorInfo>,
    watcher: Option<TimersWatcherHandle>,
    pruner: Option<Pruner>,
    background: Vec<Background>,
    signal: watch::Sender<bool>,
    catalog: Arc<Catalog>,
}

/// One executor of a running node, as [`Node::executors`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorInfo {
    /// The executor's id, written into each `Locked` event it appends.
    pub executor_id: ExecutorId,
    /// Its component.
    pub component_id: ComponentId,
    /// The functions its worker runs.
    pub functions: Vec<FunctionFqn>,
}

/// What a graceful shutdown did ([`Node::shutdown`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Runs in flight when the shutdown began that ended before its deadline, their outcome
    /// written.
    pub finished: usize,
    /// Runs still going at the deadline, stopped where they were: their executions stay
    /// locked until their leases expire, and then a timers watcher on the store (of a later
    /// node, or another process) recovers them.
    pub left: usize,
    /// Background tasks ([`NodeBuilder::background`]) still going at the deadline, aborted.
    pub background_aborted: usize,
}

pub(crate) struct RunningExecutor {
    pub(crate) handle: ExecutorTaskHandle,
    pub(crate) info: ExecutorInfo,
}

impl std::fmt::Debug for RunningExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info.fmt(f)
    }
}

impl Node {
    /// A builder of a node on `db` whose executors, workflows, watcher and retention task read
    /// time from `clock` (`executor::Now`, the real one, or a simulated clock in tests).
    #[must_use]
    pub fn builder<C: ClockFn>(db: Arc<dyn DbConnection>, clock: C) -> NodeBuilder<C> {
        NodeBuilder::new(db, clock)
    }

    pub(crate) fn new(
        executors: Vec<RunningExecutor>,
        watcher: Option<TimersWatcherHandle>,
        pruner: Option<Pruner>,
        background: Vec<Background>,
        signal: watch::Sender<bool>,
        catalog: Arc<Catalog>,
    ) -> Self {
        let infos = executors
            .iter()
            .map(|running| running.info.clone())
            .collect();
        Self {
            executors,
            infos,
            watcher,
            pruner,
            background,
            signal,
            catalog,
        }
    }

    /// The node's executors, one per worker: the node's activities first, then its
    /// workflows, then the other workers in the order they were given.
    #[must_use]
    pub fn executors(&self) -> &[ExecutorInfo] {
        &self.infos
    }

    /// Every function the node runs, in the order of [`Node::executors`].
    #[must_use]
    pub fn functions(&self) -> Vec<FunctionFqn> {
        self.infos
            .iter()
            .flat_map(|info| info.functions.iter().cloned())
            .collect()
    }

    /// The functions the node runs and how a submitted execution of each is created: what
    /// `node::submit` takes, built by `start` from the registrations (see [`Catalog`]).
    #[must_use]
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The node's executors, by the functions they run: a [`workflow::Client`] given them
    /// (`Client::with_local_executors`) submits an execution due now already locked by one
    /// of them with a permit free, which runs it at once, as `node::submit` through the
    /// node's [`catalog`](Self::catalog) does.
    #[must_use]
    pub fn local_executors(&self) -> &executor::LocalExecutors {
        self.catalog.local_executors()
    }

    /// Whether the node runs a timers watcher.
    #[must_use]
    pub fn runs_timers_watcher(&self) -> bool {
        self.watcher.is_some()
    }

    /// Whether the node runs a retention task.
    #[must_use]
    pub fn runs_retention(&self) -> bool {
        self.pruner.is_some()
    }

    /// Stops the node gracefully within `timeout`:
    ///
    /// 1. every executor stops locking new executions at once, and the background tasks are
    ///    signalled;
    /// 2. the runs in flight go on, and so do the timers watcher (a run may be waiting for a
    ///    durable sleep it delivers) and the retention task, until every run ended, its outcome
    ///    written, or `timeout` has passed;
    /// 3. the runs still going are aborted where they are and left to their leases, and the
    ///    background tasks still going are aborted;
    /// 4. the timers watcher and the retention task stop (each after the pass in flight).
    ///
    /// The report says how many runs ended and how many were left. The timeout is measured on
    /// tokio's clock. The store is not closed: it is the caller's.
    pub async fn shutdown(mut self, timeout: Duration) -> DrainReport {
        let deadline = tokio::time::Instant::now() + timeout;
        self.signal.send_replace(true);
        let drains = join_all(
            self.executors
                .iter_mut()
                .map(|running| running.handle.drain(timeout)),
        );
        let background = join_all(
            self.background
                .iter_mut()
                .map(|task| task.stop_until(deadline)),
        );
        let (outcomes, stopped) = tokio::join!(drains, background);
        if let Some(watcher) = &mut self.watcher {
            watcher.close().await;
        }
        if let Some(pruner) = &mut self.pruner {
            pruner.close().await;
        }
        let report = DrainReport {
            finished: outcomes.iter().map(|outcome| outcome.finished).sum(),
            left: outcomes.iter().map(|outcome| outcome.left).sum(),
            background_aborted: stopped.iter().filter(|stopped| !**stopped).count(),
        };
        info!(
            finished = report.finished,
            left = report.left,
            background_aborted = report.background_aborted,
            "node stopped"
        );
        report
    }
}

/// Fires when the node shuts down: what a background task ([`NodeBuilder::background`])
/// waits for to stop.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    receiver: watch::Receiver<bool>,
}

impl ShutdownSignal {
    /// A signal that fires once `receiver` sees `true` (or its sender is dropped): for a
    /// service run outside a node, a server's tests say.
    #[must_use]
    pub fn new(receiver: watch::Receiver<bool>) -> Self {
        Self { receiver }
    }

    /// Completes once the node's shutdown began (at once if it did already); a future that
    /// owns the signal, for a server's graceful shutdown, say.
    pub async fn fired(mut self) {
        // An error is a node dropped without `shutdown`: its tasks are aborted anyway.
        let _ = self.receiver.wait_for(|fired| *fired).await;
    }

    /// Whether the node's shutdown began.
    #[must_use]
    pub fn has_fired(&self) -> bool {
        *self.receiver.borrow()
    }
}

/// What a background task of [`NodeBuilder::background_service`] gets when the node starts:
/// the signal of its shutdown, and the node's store, clock and catalog, to serve the node's
/// clients with.
#[derive(Clone)]
pub struct BackgroundContext<C: ClockFn> {
    /// Fires when the node's shutdown begins.
    pub signal: ShutdownSignal,
    /// The node's store.
    pub db: Arc<dyn DbConnection>,
    /// The node's clock.
    pub clock: C,
    /// The functions the node runs ([`Node::catalog`]).
    pub catalog: Arc<Catalog>,
}

impl<C: ClockFn> std::fmt::Debug for BackgroundContext<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundContext")
            .field("signal", &self.signal)
            .field("catalog", &self.catalog)
            .finish_non_exhaustive()
    }
}

/// A spawned background task of a node.
pub(crate) struct Background {
    name: &'static str,
    join: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Background {
    pub(crate) fn spawn(name: &'static str, task: BoxFuture<'static, ()>) -> Self {
        Self {
            name,
            join: Some(tokio::spawn(task)),
        }
    }

    /// Waits for the task (already signalled) until `deadline`, then aborts it; true when it
    /// ended by itself.
    async fn stop_until(&mut self, deadline: tokio::time::Instant) -> bool {
        let Some(mut join) = self.join.take() else {
            return true;
        };
        match tokio::time::timeout_at(deadline, &mut join).await {
            Ok(Ok(())) => {
                debug!("background task {} stopped", self.name);
                true
            }
            Ok(Err(err)) => {
                warn!("background task {} ended abnormally: {err}", self.name);
                true
            }
            Err(_elapsed) => {
                join.abort();
                let _ = join.await;
                warn!(
                    "background task {} was still going at the shutdown's deadline; aborted",
                    self.name
                );
                false
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(join) = self.join.take() {
            if !join.is_finished() {
                warn!(
                    "background task {} dropped without `shutdown`, aborting",
                    self.name
                );
            }
            join.abort();
        }
    }
}
