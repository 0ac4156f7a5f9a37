//! `fanout`: a workflow that submits `flaky` children into a join set, awaits every one of
//! them in arrival order, and finishes with a summary of their results.
//!
//! Written as ordinary async Rust on the `workflow` crate, which records each step in the
//! execution's log, creates the children in the same transaction as their requests, waits for
//! their responses without giving up the run while the lease allows, and replays the log if
//! the run is interrupted. Children that fail are counted, not propagated: a workflow that
//! cannot go on without them would write `child.into_result::<T>()?` instead.
//!
//! The children are `<parent>.n:children_<k>`, so a replay finds them again.

use super::flaky::FlakyParams;
use serde::{Deserialize, Serialize};
use workflow::{Function, Response, WorkflowCtx, WorkflowError};

/// The workflow: `{"children": 4, "fail_probability": 0.35, "work_ms": 20}` in, a
/// [`FanoutSummary`] out.
pub const FANOUT: Function<FanoutParams, FanoutSummary> =
    Function::new("stele:demo/workflows.fanout");

/// Its children: the `flaky` activity, whose value counts its `attempts`.
pub const FLAKY: Function<FlakyParams, serde_json::Value> =
    Function::new("stele:demo/activities.flaky");

/// The parameters of `fanout`; each child gets `fail_probability` and `work_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanoutParams {
    /// How many children to submit.
    pub children: u32,
    /// The children's probability of failing an attempt.
    pub fail_probability: f64,
    /// How long each child attempt works.
    #[serde(default)]
    pub work_ms: u64,
}

/// The value of `fanout`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanoutSummary {
    /// How many children were submitted.
    pub children: u32,
    /// How many finished with a value.
    pub succeeded: u64,
    /// How many failed for good.
    pub failed: u64,
    /// The attempts the successful ones took in all.
    pub child_attempts: u64,
}

/// The workflow's code.
///
/// # Errors
/// None of its own: failed children are counted in the summary.
pub async fn fanout(
    ctx: WorkflowCtx,
    params: FanoutParams,
) -> Result<FanoutSummary, WorkflowError<String>> {
    let children = ctx.join_set_named("children");
    let child = FlakyParams {
        fail_probability: params.fail_probability,
        work_ms: params.work_ms,
    };
    for _ in 0..params.children {
        children.submit(&FLAKY, &child);
    }
    let mut summary = FanoutSummary {
        children: params.children,
        ..FanoutSummary::default()
    };
    while let Some(Response::Child(response)) = children.next().await {
        match response.into_result::<serde_json::Value>() {
            Ok(value) => {
                summary.succeeded += 1;
                summary.child_attempts += value["attempts"].as_u64().unwrap_or(1);
            }
            Err(_) => summary.failed += 1,
        }
    }
    Ok(summary)
}
