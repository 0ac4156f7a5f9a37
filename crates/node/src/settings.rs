//! How each executor of a node works ([`ExecutorSettings`]), and the defaults of the node's
//! executors, timers watcher and retention task.

use concepts::ComponentId;
use std::time::Duration;
use timers_watcher::{PrunerConfig, TimersWatcherConfig};

/// How one executor of a node works; [`ExecutorSettings::default`] gives the defaults, and a
/// struct update changes what differs:
///
/// ```
/// use node::ExecutorSettings;
/// use std::time::Duration;
///
/// let slow_activities = ExecutorSettings {
///     lock_expiry: Duration::from_secs(60),
///     ..ExecutorSettings::default()
/// };
/// assert_eq!(slow_activities.batch_size, 16);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorSettings {
    /// How long a lease lasts (10 s): longer than one run of the worker takes, or the timers
    /// watcher times the run out while it works. A workflow waits for its children in memory
    /// for most of its lease before it gives up its run.
    pub lock_expiry: Duration,
    /// How many due executions one lock takes at most (16).
    pub batch_size: usize,
    /// The longest the executor waits before it looks for due work again (250 ms). The
    /// store's notifications wake it sooner for new work; this poll finds a retry whose
    /// backoff ended, and work another process wrote to a SQLite file.
    pub tick_sleep: Duration,
    /// The component written into each `Locked` event; `None` is `activity:default` for the
    /// node's activities, `workflow:default` for its workflows and `worker:default` for any
    /// other worker.
    pub component_id: Option<ComponentId>,
    /// A bound of this executor's own on its runs in flight, instead of the node's shared one
    /// ([`crate::NodeBuilder::concurrency`]); `None` takes the node's.
    pub concurrency: Option<usize>,
}

impl Default for ExecutorSettings {
    fn default() -> Self {
        Self {
            lock_expiry: Duration::from_secs(10),
            batch_size: 16,
            tick_sleep: Duration::from_millis(250),
            component_id: None,
            concurrency: None,
        }
    }
}

/// The timers watcher of a node unless [`crate::NodeBuilder::timers_watcher`] says otherwise:
/// a look every 250 ms for leases and durable sleeps that expired at least 100 ms ago (the
/// leeway lets a worker about to finish write its own outcome first).
pub const DEFAULT_WATCHER: TimersWatcherConfig = TimersWatcherConfig {
    tick_sleep: Duration::from_millis(250),
    leeway: Duration::from_millis(100),
};

/// How often the retention task of [`crate::NodeBuilder::retention`] runs: every minute.
pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// How many top-level executions one transaction of the retention task of
/// [`crate::NodeBuilder::retention`] examines: 1,000.
pub const DEFAULT_PRUNE_BATCH: usize = 1_000;

/// The retention task that keeps finished trees for `retention`, with the default interval
/// and batch.
pub(crate) fn pruner_config(retention: Duration) -> PrunerConfig {
    PrunerConfig {
        retention,
        interval: DEFAULT_PRUNE_INTERVAL,
        batch: DEFAULT_PRUNE_BATCH,
    }
}

/// What kind of worker an executor runs, for its default component and its name in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkerKind {
    /// The node's own `ActivityWorker` (`NodeBuilder::activity`).
    Activities,
    /// The node's own `WorkflowWorker` (`NodeBuilder::workflow`).
    Workflows,
    /// A worker given to `NodeBuilder::worker`, the n-th (from 1).
    Other(usize),
}

impl WorkerKind {
    pub(crate) fn default_component(self) -> ComponentId {
        let (kind, name) = match self {
            Self::Activities => ("activity", "default"),
            Self::Workflows => ("workflow", "default"),
            Self::Other(_) => ("worker", "default"),
        };
        ComponentId::new(kind, name).expect("a legal component id")
    }

    /// How an error names the worker.
    pub(crate) fn describe(self, component_id: &ComponentId) -> String {
        match self {
            Self::Activities => format!("the node's activities (component {component_id})"),
            Self::Workflows => format!("the node's workflows (component {component_id})"),
            Self::Other(n) => format!("worker {n} (component {component_id})"),
        }
    }
}
