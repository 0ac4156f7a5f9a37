//! The conformance suite: every scenario of Stele's contract, `docs/SEMANTICS.md` at the root of
//! the repository, as a `pub async fn` that takes a [`StoreFactory`], so that every storage
//! backend runs the same code.
//!
//! Scenarios are named by their ids, which `docs/SEMANTICS.md` cites where a rule is tested; the
//! documentation of each scenario function says what it checks, and each module lists its ids:
//!
//! - S1..S32, [`storage_scenarios`]: the storage traits, their rules, their waits and their
//!   portable error kinds (§1-§5 of the contract).
//! - E1..E26, [`executor_scenarios`]: the executor's table, retries and backoff, the timers
//!   watcher, children answering their parents, the task limiter, the executor loop (§5-§8).
//! - D1, [`differential`]: a seeded random sequence of writes applied to a backend, every state
//!   checked against the reference derivation, the dumps of every backend compared (§3).
//! - P1..P3, [`persistence_scenarios`]: what a backend that persists keeps across a close, a
//!   crash and its durability settings.
//! - W1..W23, [`workflow_scenarios`]: the `workflow` crate: what each operation records,
//!   replay, determinism and parked executions, warm and cold waits, the lifecycle as a
//!   workflow meets it, the typed schedules client, patches, typed joins, per-call options and
//!   a workflow's status (§14-§19).
//! - L1..L23, [`lifecycle_scenarios`]: idempotent submit, cancellation, durable promises,
//!   retention, and ambiguous commits (§10-§13, §4.11).
//! - C1..C13, [`schedule_scenarios`]: schedules stored and changed, the overlap policies,
//!   catch-up, triggers and backfills, daylight saving, racing passes, the scheduler's
//!   cancellations, jitter (§19).
//!
//! A backend runs the whole list with one macro line in its `tests/conformance.rs`:
//!
//! ```text
//! conformance::conformance_tests!(MyBackendFactory);
//! ```
//!
//! which expands to one `#[tokio::test]` per scenario, named after it. A scenario that needs a
//! capability the backend lacks passes after printing `SKIPPED: <reason>` on its stdout;
//! `cargo xtask conformance` reads those lines (through `--show-output`) and prints the reason
//! in its table, so nothing is skipped silently.
//!
//! This crate depends on no backend.

pub mod differential;
pub mod executor_scenarios;
pub mod lifecycle_scenarios;
pub mod persistence_scenarios;
pub mod schedule_scenarios;
pub mod storage_scenarios;
pub mod workflow_scenarios;

use async_trait::async_trait;
use concepts::DbConnection;
use std::{any::Any, sync::Arc};

pub use test_utils::{set_up, skip};

/// What a backend can do beyond the common contract; scenarios that need more are skipped
/// with a printed reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// The store survives `close` and can be reopened (P scenarios).
    pub persistent: bool,
}

/// A fresh store for one scenario, with whatever must live as long as it (a temp dir, say).
pub struct TestStore {
    /// The store.
    pub db: Arc<dyn DbConnection>,
    /// Dropped after the store: keeps temp files, servers or databases alive.
    pub guard: Option<Box<dyn Any + Send + Sync>>,
}

/// Makes fresh stores of one backend.
#[async_trait]
pub trait StoreFactory: Send + Sync + 'static {
    /// The backend's name, for the summary table.
    fn name(&self) -> &'static str;

    /// What the backend supports.
    fn capabilities(&self) -> Capabilities;

    /// A new, empty store.
    async fn fresh(&self) -> TestStore;

    /// `Some(reason)` when this backend cannot run here (its server is not configured, say):
    /// every generated test then calls [`skip`] with the reason and passes without running its
    /// scenario. The default, `None`, runs everything.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// A second handle on `store`'s data, opened as another process would (its own
    /// connections, its own waiters); `None` when the backend lives in one process.
    async fn another_process(&self, store: &TestStore) -> Option<Arc<dyn DbConnection>> {
        let _ = store;
        None
    }

    /// Closes `store` and opens the same data again; `None` when not persistent.
    async fn reopen(&self, store: TestStore) -> Option<TestStore> {
        drop(store);
        None
    }
}

/// The log of `execution_id`, after checking that its stored pending state equals the
/// reference derivation of `concepts`.
///
/// # Panics
/// When the read fails or the states differ: the scenario fails.
pub async fn checked_log(
    db: &dyn DbConnection,
    execution_id: &concepts::ExecutionId,
) -> concepts::ExecutionLog {
    let log = db.get(execution_id).await.expect("get");
    let derived = concepts::derive_pending_state(&log.events, &log.responses);
    assert_eq!(
        Some(&log.pending_state),
        derived.as_ref(),
        "stored vs derived state"
    );
    log
}

/// Expands to one `#[tokio::test]` per scenario for the given [`StoreFactory`] value.
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::storage_scenario_tests!($factory);
        $crate::executor_scenario_tests!($factory);
        $crate::differential_tests!($factory);
        $crate::persistence_scenario_tests!($factory);
        $crate::workflow_scenario_tests!($factory);
        $crate::lifecycle_scenario_tests!($factory);
        $crate::schedule_scenario_tests!($factory);
    };
}

/// Generates the tests of a list of scenario functions (internal to the suite's macros).
#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_tests {
    ($factory:expr; $module:ident; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::set_up();
                let factory = &$factory;
                if let Some(reason) = $crate::StoreFactory::unavailable(factory) {
                    $crate::skip(stringify!($name), &reason);
                    return;
                }
                $crate::$module::$name(factory).await;
            }
        )*
    };
}
