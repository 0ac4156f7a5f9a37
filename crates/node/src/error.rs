//! Why a node refuses to start: [`NodeError`], one variant per configuration that cannot work,
//! each with a message that says what to change.

use concepts::IdParseError;
use timers_watcher::PrunerConfigError;
use workflow::RegistrationError;

/// A node that cannot work as configured; [`crate::NodeBuilder::start`] starts nothing then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// A function handle's name is not a legal function name.
    #[error("cannot register {name}: {source}")]
    InvalidFunctionName {
        /// The name as written.
        name: &'static str,
        /// Why it is not legal.
        source: IdParseError,
    },
    /// Two registrations (or two workers) run the same function.
    #[error(
        "{function} is registered twice on this node: each function runs on one worker, so \
         register it once (two workers of one function would each lock its executions)"
    )]
    DuplicateFunction {
        /// The function.
        function: String,
    },
    /// A worker exports no function: its executor would never lock anything.
    #[error("{worker} exports no function: register one on it, or leave it out")]
    NoFunctions {
        /// Which worker (its component and position).
        worker: String,
    },
    /// The node's shared concurrency is 0.
    #[error(
        "the node's concurrency is 0: no run could ever start; give it how many runs may be in \
         flight at once over all its executors (16, say)"
    )]
    ZeroConcurrency,
    /// An executor's own concurrency is 0.
    #[error(
        "the concurrency of {worker} is 0: none of its runs could ever start; give it how many \
         of its runs may be in flight at once, or none to share the node's"
    )]
    ZeroWorkerConcurrency {
        /// Which worker.
        worker: String,
    },
    /// An executor's lease is 0.
    #[error(
        "the lock expiry of {worker} is 0: every lease would expire as it is taken; give it \
         longer than one run takes (10 s, say)"
    )]
    ZeroLockExpiry {
        /// Which worker.
        worker: String,
    },
    /// An executor's batch is 0.
    #[error(
        "the batch size of {worker} is 0: give it how many executions one lock may take (16, \
         say)"
    )]
    ZeroBatchSize {
        /// Which worker.
        worker: String,
    },
    /// An executor's poll is 0.
    #[error(
        "the tick sleep of {worker} is 0: its loop would ask the store without a pause; give it \
         the longest wait between two looks for due work (250 ms, say)"
    )]
    ZeroTickSleep {
        /// Which worker.
        worker: String,
    },
    /// The timers watcher's tick is 0.
    #[error(
        "the timers watcher's tick is 0: it would ask the store without a pause; give it how \
         often to look for expired leases and sleeps (250 ms, say)"
    )]
    ZeroWatcherTick,
    /// The retention task cannot work as configured.
    #[error("the retention task: {0}")]
    Pruner(#[from] PrunerConfigError),
    /// No worker, no watcher, no retention task, no background task: the node would do
    /// nothing.
    #[error(
        "the node has nothing to run: register an activity, a workflow or a worker, or keep the \
         timers watcher, a retention task or a background task"
    )]
    NothingToRun,
    /// A schedule given to [`crate::NodeBuilder::schedule`] that the node's catalog refuses.
    #[error("cannot keep schedule {name}: {source}")]
    Schedule {
        /// The schedule.
        name: concepts::schedule::ScheduleName,
        /// Why.
        source: crate::schedules::ScheduleRefused,
    },
    /// [`crate::NodeBuilder::describe`] named a function no worker of the node runs.
    #[error(
        "the catalog describes {function}, which no worker of this node runs: register it, or \
         leave its description out"
    )]
    DescribedFunctionNotRun {
        /// The function.
        function: String,
    },
    /// [`crate::NodeBuilder::identity`] was given an empty name.
    #[error(
        "the node's identity is empty: give it a name that stays the same across its restarts \
         (the host's name, `worker-1`), or leave it out"
    )]
    EmptyIdentity,
    /// `start` was called outside a tokio runtime.
    #[error(
        "a node runs its tasks on a tokio runtime: call `start` from within one (inside \
         `#[tokio::main]`, say)"
    )]
    NoRuntime,
}

impl From<RegistrationError> for NodeError {
    fn from(err: RegistrationError) -> Self {
        match err {
            RegistrationError::InvalidName { name, source } => {
                Self::InvalidFunctionName { name, source }
            }
            RegistrationError::Duplicate(name) => Self::DuplicateFunction {
                function: name.to_string(),
            },
        }
    }
}
