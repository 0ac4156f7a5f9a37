//! `approval`: a workflow that waits for a person (or any outside caller) to answer, and
//! finishes with the answer.
//!
//! `ctx.promise` records a child execution of the stub function `stele:stub.approval`, which
//! no executor runs: its id is `<workflow id>.n:approval_1` (`workflow::promise_id`), and
//! `stele executions complete ID --json VALUE` (or `Client::complete`) answers it once. The
//! workflow waits for it like for a child; a long wait gives up the run, and the answer
//! makes the execution due again, wherever it runs.

use serde::{Deserialize, Serialize};
use workflow::{Function, WorkflowCtx, WorkflowError};

/// The workflow: `{"subject": "deploy 1.4"}` in, the answer (any JSON value) out.
pub const APPROVAL: Function<ApprovalParams, serde_json::Value> =
    Function::new("stele:demo/workflows.approval");

/// The parameters of `approval`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalParams {
    /// What is to be approved, for the people reading the log.
    #[serde(default)]
    pub subject: String,
}

/// The workflow's code.
///
/// # Errors
/// The promise was cancelled (the workflow fails with `UnhandledChildExecutionError`).
pub async fn approval(
    ctx: WorkflowCtx,
    _params: ApprovalParams,
) -> Result<serde_json::Value, WorkflowError<String>> {
    let answer = ctx.promise::<serde_json::Value>("approval");
    Ok(answer.wait().await?)
}
