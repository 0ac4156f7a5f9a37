//! What every workflow scenario needs: a fresh store, a simulated clock, spawned executors for
//! workflows and activities, a manual timers watcher, and test activities whose completion
//! the scenario controls ([`Gates`]).

use crate::{StoreFactory, TestStore};
use concepts::{
    ClockFn, ComponentId, DbConnection, ExecutionEventInner, ExecutionId, ExecutionLog,
    HistoryEvent,
};
use executor::{ExecConfig, ExecTask, ExecutorTaskHandle, LocalExecutors, Worker};
use std::{collections::BTreeSet, sync::Arc, time::Duration};
use test_utils::SimClock;
use tokio::sync::watch;
use workflow::{ActivityCtx, ActivityWorker, Client, Function, WorkflowWorker};

/// An executor of `worker` on `db`, its leases `lease` long, running the children that
/// `local` reserves for it (a workflow's child started in its parent's process), spawned.
pub fn spawn_local(
    (db, clock, local): (&Arc<dyn DbConnection>, &SimClock, &LocalExecutors),
    worker: Arc<dyn Worker>,
    lease: Duration,
) -> ExecutorTaskHandle {
    let config = ExecConfig {
        lock_expiry: lease,
        tick_sleep: Duration::from_millis(20),
        batch_size: 8,
        component_id: component(),
        task_limiter: None,
    };
    ExecTask::new(worker, config, clock.clone(), db.clone())
        .with_local_executors(local.clone())
        .spawn()
}

/// A real-time safety net: far longer than any correct wait.
pub const SAFETY: Duration = Duration::from_secs(20);
/// The lease of the workflow executors, in simulated time.
pub const LEASE: Duration = Duration::from_secs(10);

/// Doubles its parameter.
pub const DOUBLE: Function<u64, u64> = Function::new("test:workflow/activities.double");
/// Always returns its error variant.
pub const REFUSE: Function<u64, u64> = Function::new("test:workflow/activities.refuse");
/// Returns its parameter once its gate is opened.
pub const GATED: Function<u64, u64> = Function::new("test:workflow/activities.gated");

/// The component of the scenarios' executions.
///
/// # Panics
/// Never: the id is legal.
#[must_use]
pub fn component() -> ComponentId {
    ComponentId::new("test", "workflow").expect("legal component id")
}

/// Gates that `GATED` children wait on, opened by the scenario one by one.
#[derive(Clone)]
pub struct Gates(Arc<watch::Sender<BTreeSet<u64>>>);

impl Default for Gates {
    fn default() -> Self {
        Self(Arc::new(watch::channel(BTreeSet::new()).0))
    }
}

impl Gates {
    /// Lets the `GATED` child with parameter `n` finish.
    pub fn open(&self, n: u64) {
        self.0.send_modify(|open| {
            open.insert(n);
        });
    }

    async fn wait(&self, n: u64) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|open| open.contains(&n)).await;
    }
}

/// A fresh store with its clock and running executors.
pub struct Fixture {
    _store: TestStore,
    /// The store.
    pub db: Arc<dyn DbConnection>,
    /// The simulated clock of every executor and of the watcher.
    pub clock: SimClock,
    /// The gates of `GATED`.
    pub gates: Gates,
    executors: Vec<ExecutorTaskHandle>,
}

impl Fixture {
    /// A fresh store and the activity executor (DOUBLE, REFUSE, GATED) running.
    pub async fn new<F: StoreFactory>(factory: &F) -> Self {
        let store = factory.fresh().await;
        let mut fixture = Self {
            db: store.db.clone(),
            _store: store,
            clock: SimClock::epoch(),
            gates: Gates::default(),
            executors: Vec::new(),
        };
        let gates = fixture.gates.clone();
        let activities = ActivityWorker::new()
            .register(&DOUBLE, |_: ActivityCtx, n: u64| async move {
                Ok::<_, String>(n * 2)
            })
            .and_then(|w| {
                w.register(&REFUSE, |_: ActivityCtx, n: u64| async move {
                    Err::<u64, _>(format!("refused {n}"))
                })
            })
            .and_then(|w| {
                w.register(&GATED, move |_: ActivityCtx, n: u64| {
                    let gates = gates.clone();
                    async move {
                        gates.wait(n).await;
                        Ok::<_, String>(n)
                    }
                })
            })
            .expect("legal registrations");
        fixture.spawn(Arc::new(activities));
        fixture
    }

    /// A workflow worker over this store and clock; children get no retry.
    #[must_use]
    pub fn workflows(&self) -> WorkflowWorker<SimClock> {
        WorkflowWorker::new(self.db.clone(), self.clock.clone()).child_settings(
            component(),
            0,
            Duration::from_secs(1),
        )
    }

    /// Runs `worker` in a spawned executor with a [`LEASE`] lease.
    pub fn spawn(&mut self, worker: Arc<dyn Worker>) {
        let handle = self.executor(worker).spawn();
        self.executors.push(handle);
    }

    /// An executor of `worker` with a [`LEASE`] lease, not running: a scenario that must know
    /// when a run ended drives it with [`ExecTask::tick`] and awaits the run's task.
    #[must_use]
    pub fn executor(&self, worker: Arc<dyn Worker>) -> ExecTask<SimClock> {
        let config = ExecConfig {
            lock_expiry: LEASE,
            tick_sleep: Duration::from_millis(20),
            batch_size: 64,
            component_id: component(),
            task_limiter: None,
        };
        ExecTask::new(worker, config, self.clock.clone(), self.db.clone())
    }

    /// Stops the executors started last, first: the workflow executors, say, before a
    /// redeploy with changed code.
    pub async fn stop_last(&mut self) {
        if let Some(mut handle) = self.executors.pop() {
            handle.close().await;
        }
    }

    /// A typed client of this store.
    #[must_use]
    pub fn client(&self) -> Client<SimClock> {
        Client::new(self.db.clone(), self.clock.clone(), component())
            .retries(0, Duration::from_secs(1))
    }

    /// The log, after checking that its pending state equals the reference derivation.
    pub async fn log(&self, execution_id: &ExecutionId) -> ExecutionLog {
        crate::checked_log(self.db.as_ref(), execution_id).await
    }

    /// Polls the log (bounded by [`SAFETY`]) until `condition` holds; returns it.
    pub async fn until(
        &self,
        what: &str,
        execution_id: &ExecutionId,
        condition: impl Fn(&ExecutionLog) -> bool,
    ) -> ExecutionLog {
        let waited = tokio::time::timeout(SAFETY, async {
            loop {
                let log = self.log(execution_id).await;
                if condition(&log) {
                    return log;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("timed out waiting until {what}"))
    }

    /// One watcher tick at the clock's time, without leeway.
    pub async fn fire_timers(&self) {
        timers_watcher::tick(self.db.as_ref(), self.clock.now(), Duration::ZERO)
            .await
            .expect("watcher tick");
    }

    /// Stops every executor.
    pub async fn close(mut self) {
        while !self.executors.is_empty() {
            self.stop_last().await;
        }
    }
}

/// How many runs (`Locked` events) the log holds.
#[must_use]
pub fn runs(log: &ExecutionLog) -> usize {
    log.events
        .iter()
        .filter(|event| matches!(event.event, ExecutionEventInner::Locked(_)))
        .count()
}

/// The history events of the log, in order.
#[must_use]
pub fn history(log: &ExecutionLog) -> Vec<HistoryEvent> {
    log.events
        .iter()
        .filter_map(|event| match &event.event {
            ExecutionEventInner::HistoryEvent { event } => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// The short names of the history events, space-separated, for readable assertions.
#[must_use]
pub fn shape(log: &ExecutionLog) -> String {
    history(log)
        .iter()
        .map(|event| match event {
            HistoryEvent::Persist { .. } => "Persist",
            HistoryEvent::JoinSetCreate { .. } => "JoinSetCreate",
            HistoryEvent::JoinSetRequest { .. } => "JoinSetRequest",
            HistoryEvent::JoinNext { closing: false, .. } => "JoinNext",
            HistoryEvent::JoinNext { closing: true, .. } => "JoinNext(closing)",
            HistoryEvent::Schedule { .. } => "Schedule",
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// True when the execution waits for a join set response.
#[must_use]
pub fn is_blocked(log: &ExecutionLog) -> bool {
    matches!(
        log.pending_state,
        concepts::PendingState::BlockedByJoinSet { .. }
    )
}
