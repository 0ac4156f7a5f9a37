//! Every storage call of the workflow layer, in one place: the run's appends, waits and
//! cancellations of its promises ([`RunStore`]), and the typed client's creates, result
//! waits, cancellations and completions.
//!
//! Kept small on purpose: when the storage traits change shape, this is the module to adapt.

use crate::driver::RunIo;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest,
    CreateRequest, DbClient, DbConnection, DbError, ExecutionEventInner, ExecutionId,
    FinishedExecutionResult, FunctionFqn, HistoryEvent, JoinSetResponseEventOuter, Json, Lease,
    Version,
};
use executor::{Cancellation, LocalExecutors, Reservation};
use futures_util::{FutureExt as _, future::BoxFuture};
use std::{collections::HashMap, sync::Arc, time::Duration};

/// The storage of one run of one execution.
pub(crate) struct RunStore {
    pub db: Arc<dyn DbConnection>,
    pub execution_id: ExecutionId,
    /// The executor's watch on the execution's end.
    pub cancellation: Cancellation,
    /// The executors of this process, which run the children they give a lease at once.
    pub local: LocalExecutors,
}

#[async_trait]
impl RunIo for RunStore {
    async fn append(
        &self,
        version: Version,
        now: DateTime<Utc>,
        events: Vec<HistoryEvent>,
        children: Vec<CreateRequest>,
    ) -> Result<Version, DbError> {
        let leased = reserve(&self.local, &children, now);
        let request = AppendBatchRequest {
            execution_id: self.execution_id.clone(),
            version,
            now,
            events: events
                .into_iter()
                .map(|event| ExecutionEventInner::HistoryEvent { event })
                .collect(),
            children,
            leases: (leased.iter())
                .map(|(reservation, child)| Lease {
                    execution_id: child.execution_id.clone(),
                    locked: reservation.locked().clone(),
                })
                .collect(),
            answers: Vec::new(),
        };
        match self.db.append_batch(request).await {
            Ok(version) => {
                for (reservation, child) in leased {
                    reservation.start(child);
                }
                Ok(version)
            }
            Err(err) => {
                if err.is_retriable() && !leased.is_empty() {
                    executor::start_if_written(self.db.as_ref(), leased).await;
                }
                Err(err)
            }
        }
    }

    async fn next_responses(
        &self,
        start: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        self.db
            .subscribe_to_next_responses(&self.execution_id, start)
            .await
    }

    async fn history_event_version(&self, index: usize) -> Option<Version> {
        let log = self.db.get(&self.execution_id).await.ok()?;
        crate::worker::history_version(&log, index)
    }

    async fn children_created(
        &self,
        children: Vec<ExecutionId>,
    ) -> Result<HashMap<ExecutionId, (FunctionFqn, Json)>, DbError> {
        children_created(self.db.as_ref(), children).await
    }

    fn cancelled(&self) -> BoxFuture<'static, FinishedExecutionResult> {
        self.cancellation.cancelled(&self.execution_id).boxed()
    }

    async fn cancel(
        &self,
        children: Vec<ExecutionId>,
        now: DateTime<Utc>,
        reason: String,
    ) -> Result<(), DbError> {
        for execution_id in children {
            let request = CancelRequest {
                execution_id,
                now,
                reason: reason.clone(),
            };
            self.db.cancel(request).await?;
        }
        Ok(())
    }
}

/// A lease of a local executor for each of `children` whose function one runs with a permit
/// free (`LocalExecutors::reserve`), with the child's request; once a function has no free
/// permit, its further children are not asked for (a fan-out creates thousands).
fn reserve(
    local: &LocalExecutors,
    children: &[CreateRequest],
    now: DateTime<Utc>,
) -> Vec<(Reservation, CreateRequest)> {
    let mut leased = Vec::new();
    let mut exhausted: Vec<&FunctionFqn> = Vec::new();
    for child in children {
        if child.scheduled_at > now || exhausted.contains(&&child.ffqn) {
            continue;
        }
        match local.reserve(&child.ffqn, now) {
            Some(reservation) => leased.push((reservation, child.clone())),
            None => exhausted.push(&child.ffqn),
        }
    }
    leased
}

/// The function and parameters of each of `children`, from their `Created` events, read at
/// once.
pub(crate) async fn children_created(
    db: &dyn DbClient,
    children: Vec<ExecutionId>,
) -> Result<HashMap<ExecutionId, (FunctionFqn, Json)>, DbError> {
    let events = db.created_events(&children).await?;
    let created = children
        .into_iter()
        .zip(events)
        .filter_map(|(child, event)| match event.event {
            ExecutionEventInner::Created { ffqn, params, .. } => Some((child, (ffqn, params))),
            _ => None,
        });
    Ok(created.collect())
}

/// Cancels an execution and its unfinished descendants.
pub(crate) async fn cancel(
    db: &dyn DbClient,
    request: CancelRequest,
) -> Result<CancelOutcome, DbError> {
    db.cancel(request).await
}

/// Completes a stub execution (a promise).
pub(crate) async fn complete(
    db: &dyn DbClient,
    request: CompleteRequest,
) -> Result<CompleteOutcome, DbError> {
    db.complete(request).await
}

/// The finished result, waiting at most `timeout` (`None`: without limit).
pub(crate) async fn wait_for_result(
    db: &dyn DbClient,
    execution_id: &ExecutionId,
    timeout: Option<Duration>,
) -> Result<FinishedExecutionResult, DbError> {
    db.wait_for_finished_result(execution_id, timeout).await
}
