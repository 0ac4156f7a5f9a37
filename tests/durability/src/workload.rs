//! The executions a node runs and how the node and the tests read the store and the clock.

use chrono::{DateTime, Utc};
use concepts::DbClientExt as _;
use concepts::{
    ClockFn, ComponentId, CreateRequest, DbConnection, DbError, ExecutionId, ExecutionIdTopLevel,
    ExecutionMetadata, FunctionFqn, Json, ListExecutionsFilter, PendingStateKind,
};
use std::time::Duration;

/// The function every execution runs.
pub const FFQN: &str = "durability:node/work@1.0.0.noop";
/// The ULID timestamp part of every execution id: ids are a function of the index only, so
/// that two nodes submitting at once collide (one of them gets `Duplicate`) instead of both
/// submitting.
pub const ID_MS: u64 = 1_700_000_000_000;

/// The id of the `idx`-th execution (from 0).
#[must_use]
pub fn execution_id(idx: usize) -> ExecutionId {
    ExecutionId::from(ExecutionIdTopLevel::from_parts(ID_MS, idx as u128 + 1))
}

/// The executions a node runs: no-op runs of [`FFQN`] whose result is their parameter, or
/// workflows ([`crate::flows`]) whose children are.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The function of the top-level executions: [`FFQN`] or the workflow, parsed.
    pub ffqn: FunctionFqn,
    /// The component every execution belongs to.
    pub component_id: ComponentId,
}

impl Workload {
    /// The workload.
    ///
    /// # Errors
    /// Never in practice: the names are constants; the error is what parsing them returned.
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            ffqn: FFQN.parse()?,
            component_id: ComponentId::new("activity", "durability-noop")?,
        })
    }

    /// The workflow workload: each execution is a [`crate::flows::FLOW`].
    ///
    /// # Errors
    /// Never in practice, as [`Workload::new`].
    pub fn workflows() -> anyhow::Result<Self> {
        Ok(Self {
            ffqn: crate::flows::FLOW.ffqn()?,
            ..Self::new()?
        })
    }

    /// The request of the `idx`-th execution, created and due at `now`, with parameter
    /// `[idx]`.
    #[must_use]
    pub fn request(
        &self,
        idx: usize,
        now: DateTime<Utc>,
        retry_exp_backoff: Duration,
        max_retries: u32,
    ) -> CreateRequest {
        CreateRequest {
            created_at: now,
            execution_id: execution_id(idx),
            ffqn: self.ffqn.clone(),
            params: Json(serde_json::json!([idx])),
            parent: None,
            scheduled_at: now,
            retry_exp_backoff,
            max_retries,
            component_id: self.component_id.clone(),
            metadata: ExecutionMetadata::default(),
            scheduled_by: None,
        }
    }
}

/// Every top-level execution id in `state` (every one for `None`): the executions submitted,
/// not the children of workflows.
///
/// # Errors
/// What the store returned.
pub async fn list_ids(
    db: &dyn DbConnection,
    state: Option<PendingStateKind>,
) -> Result<Vec<ExecutionId>, DbError> {
    let filter = ListExecutionsFilter {
        state,
        top_level_only: true,
        ..ListExecutionsFilter::default()
    };
    let all = db.list_all_executions(filter).await?;
    Ok(all
        .into_iter()
        .map(|summary| summary.execution_id)
        .collect())
}

/// The wall clock in milliseconds since the epoch, comparable across processes of one machine.
#[must_use]
pub fn wall_ms() -> i64 {
    executor::Now.now().timestamp_millis()
}

#[cfg(test)]
mod tests;
