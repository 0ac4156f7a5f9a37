//! The workflow workload of `durability-node` (`--workload workflow`): each top-level
//! execution is a workflow that records a random value, fans out to three no-op children,
//! sleeps durably, and calls one more no-op child with the sum of their results.
//!
//! Its result depends on its index only ([`expected_result`]), and its history has a fixed
//! shape ([`EXPECTED_SHAPE`]), so that `tests/crash.rs` can check, after any number of kills,
//! that every workflow finished as an uninterrupted run would, with every step recorded once.

use concepts::HistoryEvent;
use std::time::Duration;
use workflow::{Function, Response, WorkflowCtx, WorkflowError};

/// The workflow.
pub const FLOW: Function<[u64; 1], u64> = Function::new("durability:node/flows@1.0.0.flow");
/// Its children: the node's no-op function, which returns the first element of its parameters.
pub const NOOP: Function<[u64; 1], u64> = Function::new(crate::FFQN);

/// How long each workflow sleeps between its fan-out and its last call.
const SLEEP: Duration = Duration::from_millis(200);

/// The history every workflow records, as `<kind> <join set>` per event, in order.
pub const EXPECTED_SHAPE: [&str; 14] = [
    "Persist",
    "JoinSetCreate n:children",
    "JoinSetRequest n:children",
    "JoinSetRequest n:children",
    "JoinSetRequest n:children",
    "JoinNext n:children",
    "JoinNext n:children",
    "JoinNext n:children",
    "JoinSetCreate o:2",
    "JoinSetRequest o:2",
    "JoinNext o:2",
    "JoinSetCreate o:3-noop",
    "JoinSetRequest o:3-noop",
    "JoinNext o:3-noop",
];

/// One history event as `<kind> <join set>`, the form of [`EXPECTED_SHAPE`].
#[must_use]
pub fn shape_of(event: &HistoryEvent) -> String {
    match event {
        HistoryEvent::Persist { .. } => "Persist".to_string(),
        HistoryEvent::JoinSetCreate { join_set_id, .. } => format!("JoinSetCreate {join_set_id}"),
        HistoryEvent::JoinSetRequest { join_set_id, .. } => {
            format!("JoinSetRequest {join_set_id}")
        }
        HistoryEvent::JoinNext { join_set_id, .. } => format!("JoinNext {join_set_id}"),
        HistoryEvent::Schedule { .. } => "Schedule".to_string(),
    }
}

/// The result of the workflow of index `idx`: what an uninterrupted run returns.
#[must_use]
pub fn expected_result(idx: u64) -> u64 {
    (1..=3).map(|k| idx * 10 + k).sum()
}

/// The workflow's code.
///
/// # Errors
/// An unhandled child failure.
pub async fn flow(ctx: WorkflowCtx, params: [u64; 1]) -> Result<u64, WorkflowError<String>> {
    let idx = params[0];
    let salt = ctx.random_u64(0..=1_000).await;
    let children = ctx.join_set_named("children");
    for k in 1..=3 {
        children.submit(&NOOP, &[idx * 10 + k]);
    }
    let mut sum = 0;
    while let Some(Response::Child(child)) = children.next().await {
        sum += child.into_result::<u64>()?;
    }
    ctx.sleep(SLEEP).await;
    let echoed = ctx.call(&NOOP, &[sum + salt]).await?;
    Ok(echoed - salt)
}

/// The patch of [`flow_v2`].
pub const PATCH: &str = "plus-one";

/// The result of the workflow of index `idx` under version 2's new branch.
#[must_use]
pub fn expected_result_v2(idx: u64) -> u64 {
    expected_result(idx) + 1
}

/// Version 2 of [`flow`] (`--workflow-version 2`): after the fan-out, behind the patch
/// [`PATCH`], its last call asks for one more. An execution whose log (recorded by version 1)
/// goes on past the fan-out keeps version 1's branch and result; one that reaches the patch
/// past its recorded history takes the new branch ([`expected_result_v2`]). Its history is
/// [`EXPECTED_SHAPE`] with the patch's marker (`Persist`) after the fan-out.
///
/// # Errors
/// An unhandled child failure.
pub async fn flow_v2(ctx: WorkflowCtx, params: [u64; 1]) -> Result<u64, WorkflowError<String>> {
    let idx = params[0];
    let salt = ctx.random_u64(0..=1_000).await;
    let children = ctx.join_set_named("children");
    for k in 1..=3 {
        children.submit(&NOOP, &[idx * 10 + k]);
    }
    let mut sum = 0;
    while let Some(Response::Child(child)) = children.next().await {
        sum += child.into_result::<u64>()?;
    }
    let more = u64::from(ctx.patched(PATCH).await);
    ctx.sleep(SLEEP).await;
    let echoed = ctx.call(&NOOP, &[sum + more + salt]).await?;
    Ok(echoed - salt)
}
