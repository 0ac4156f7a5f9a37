//! The demo's functions with their settings (the four of its workload, and `approval`, which
//! `stele submit` and `stele serve` run), and the batch of executions `stele demo` submits.
//!
//! Every number here is chosen so that the default workload (200 top-level executions) runs
//! in well under a minute on two cores while showing each mechanism several times: retries
//! with backoff, lease timeouts resolved by the watcher, fan-out to children, durable sleeps.

use crate::workers::{
    approval::ApprovalParams, dice, fanout::FanoutParams, flaky::FlakyParams,
    sleeper::SleeperParams, slow::SlowParams,
};
use chrono::{DateTime, Utc};
use concepts::{ComponentId, CreateRequest, ExecutionId, ExecutionMetadata, FunctionFqn, Json};
use node::{Catalog, CatalogFunction, ExecutionDefaults};
use std::{collections::BTreeMap, time::Duration};

/// One function of the demo and how its executions are created and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoFunction {
    /// A short name for tables: `flaky`, `slow`, `fanout`, `sleeper`, `approval`.
    pub name: &'static str,
    /// The function.
    pub ffqn: FunctionFqn,
    /// The component that runs it.
    pub component_id: ComponentId,
    /// The lease of each run (the executor's `lock_expiry`).
    pub lock_expiry: Duration,
    /// How many temporary failures or timeouts are retried.
    pub max_retries: u32,
    /// The first retry's backoff; each further retry doubles it.
    pub retry_exp_backoff: Duration,
}

/// The functions of the demo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoFunctions {
    /// An activity that fails at random ([`crate::workers::flaky`]); also the fan-out's children.
    pub flaky: DemoFunction,
    /// An activity that sometimes outlives its lease ([`crate::workers::slow`]).
    pub slow: DemoFunction,
    /// A workflow that fans out to `flaky` children ([`crate::workers::fanout`]).
    pub fanout: DemoFunction,
    /// A workflow that sleeps durably ([`crate::workers::sleeper`]).
    pub sleeper: DemoFunction,
    /// A workflow that awaits a durable promise ([`crate::workers::approval`]); the demo's
    /// batch has none, `stele submit` and `stele serve` run it.
    pub approval: DemoFunction,
}

fn function(
    name: &'static str,
    ffqn: &str,
    component_id: &str,
    lock_expiry_ms: u64,
    max_retries: u32,
    retry_exp_backoff_ms: u64,
) -> DemoFunction {
    DemoFunction {
        name,
        ffqn: ffqn.parse().expect("a legal function name"),
        component_id: component_id.parse().expect("a legal component id"),
        lock_expiry: Duration::from_millis(lock_expiry_ms),
        max_retries,
        retry_exp_backoff: Duration::from_millis(retry_exp_backoff_ms),
    }
}

impl DemoFunctions {
    /// The demo's functions and their settings.
    ///
    /// # Panics
    /// Never: the names are fixed and legal.
    #[must_use]
    pub fn new() -> Self {
        Self {
            flaky: function(
                "flaky",
                crate::workers::fanout::FLAKY.name(),
                "activity:flaky",
                2_000,
                5,
                100,
            ),
            slow: function(
                "slow",
                "stele:demo/activities.slow",
                "activity:slow",
                1_000,
                3,
                200,
            ),
            fanout: function(
                "fanout",
                crate::workers::fanout::FANOUT.name(),
                "workflow:fanout",
                2_000,
                3,
                500,
            ),
            sleeper: function(
                "sleeper",
                crate::workers::sleeper::SLEEPER.name(),
                "workflow:sleeper",
                2_000,
                3,
                500,
            ),
            approval: function(
                "approval",
                crate::workers::approval::APPROVAL.name(),
                "workflow:approval",
                2_000,
                3,
                500,
            ),
        }
    }

    /// All five, in a fixed order.
    #[must_use]
    pub fn all(&self) -> [&DemoFunction; 5] {
        [
            &self.flaky,
            &self.slow,
            &self.fanout,
            &self.sleeper,
            &self.approval,
        ]
    }

    /// The demo function of `ffqn`, if it is one.
    #[must_use]
    pub fn by_ffqn(&self, ffqn: &FunctionFqn) -> Option<&DemoFunction> {
        self.all()
            .into_iter()
            .find(|function| function.ffqn == *ffqn)
    }
}

impl DemoFunction {
    /// How a submitted execution of it is created.
    #[must_use]
    pub fn defaults(&self) -> ExecutionDefaults {
        ExecutionDefaults {
            component_id: self.component_id.clone(),
            max_retries: self.max_retries,
            retry_exp_backoff: self.retry_exp_backoff,
        }
    }
}

/// How `stele submit` creates an execution of a function that is not one of the demo's:
/// component `cli:stele-submit`, with the typed client's retries (3, one second first).
///
/// # Panics
/// Never: the component id is fixed and legal.
#[must_use]
pub fn other_function_defaults() -> ExecutionDefaults {
    ExecutionDefaults::new(ComponentId::new("cli", "stele-submit").expect("a legal component id"))
}

/// The demo's functions as a `node::Catalog`: each with its component and retries, and a
/// check that refuses parameters its worker could not decode. What `stele submit` submits
/// through, and the catalog of `stele serve`'s node (and so of its HTTP API).
#[must_use]
pub fn catalog(functions: &DemoFunctions) -> Catalog {
    let entry =
        |function: &DemoFunction| CatalogFunction::new(function.ffqn.clone(), function.defaults());
    Catalog::new()
        .with(entry(&functions.flaky).params::<FlakyParams>())
        .with(entry(&functions.slow).params::<SlowParams>())
        .with(entry(&functions.fanout).params::<FanoutParams>())
        .with(entry(&functions.sleeper).params::<SleeperParams>())
        .with(entry(&functions.approval).params::<ApprovalParams>())
        .unknown_functions(other_function_defaults())
}

impl Default for DemoFunctions {
    fn default() -> Self {
        Self::new()
    }
}

/// The probability that an attempt of `flaky` (top-level or child) fails.
pub const FLAKY_FAIL_PROBABILITY: f64 = 0.35;
/// The probability that an attempt of `slow` outlives its lease.
pub const SLOW_TIMEOUT_PROBABILITY: f64 = 0.3;

/// Which function the `index`-th execution runs: 9 in 20 `flaky`, 4 `slow`, 4 `fanout`,
/// 3 `sleeper`, interleaved so that even a small workload has each kind.
#[must_use]
pub fn kind_of(index: usize) -> &'static str {
    const PATTERN: [&str; 20] = [
        "flaky", "slow", "fanout", "sleeper", "flaky", "flaky", "slow", "fanout", "flaky",
        "sleeper", "flaky", "slow", "fanout", "flaky", "flaky", "slow", "fanout", "flaky",
        "sleeper", "flaky",
    ];
    PATTERN[index % PATTERN.len()]
}

/// A number in `0..modulus` drawn reproducibly for the `index`-th execution.
fn draw(index: usize, label: &str, modulus: u64) -> u64 {
    let index = u64::try_from(index).unwrap_or(u64::MAX);
    dice::hash64(&[&index.to_le_bytes(), label.as_bytes()]) % modulus.max(1)
}

/// The parameters of the `index`-th execution of function `kind`.
#[must_use]
pub fn params_of(kind: &str, index: usize) -> serde_json::Value {
    match kind {
        "slow" => serde_json::json!({
            "timeout_probability": SLOW_TIMEOUT_PROBABILITY,
            "work_ms": 150 + draw(index, "work", 300),
        }),
        "fanout" => serde_json::json!({
            "children": 3 + draw(index, "children", 4),
            "fail_probability": FLAKY_FAIL_PROBABILITY,
            "work_ms": 50 + draw(index, "work", 150),
        }),
        "sleeper" => serde_json::json!({ "sleep_ms": 2_000 + draw(index, "sleep", 6_000) }),
        "approval" => serde_json::json!({ "subject": format!("request {index}") }),
        _ => serde_json::json!({
            "fail_probability": FLAKY_FAIL_PROBABILITY,
            "work_ms": 50 + draw(index, "work", 200),
        }),
    }
}

/// The demo's batch: `count` top-level executions created and scheduled at `now`, for one
/// `create_batch`. The children of `fanout` are not in it: each parent creates its own.
#[must_use]
pub fn workload(functions: &DemoFunctions, count: usize, now: DateTime<Utc>) -> Vec<CreateRequest> {
    let metadata = ExecutionMetadata(BTreeMap::from([(
        "submitted_by".to_string(),
        "stele demo".to_string(),
    )]));
    (0..count)
        .map(|index| {
            let kind = kind_of(index);
            let function = match kind {
                "slow" => &functions.slow,
                "fanout" => &functions.fanout,
                "sleeper" => &functions.sleeper,
                _ => &functions.flaky,
            };
            CreateRequest {
                created_at: now,
                execution_id: ExecutionId::generate_at(now),
                ffqn: function.ffqn.clone(),
                params: Json(params_of(kind, index)),
                parent: None,
                scheduled_at: now,
                retry_exp_backoff: function.retry_exp_backoff,
                max_retries: function.max_retries,
                component_id: function.component_id.clone(),
                metadata: metadata.clone(),
                scheduled_by: None,
            }
        })
        .collect()
}
