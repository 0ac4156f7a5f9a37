//! What a workload looks like, read from the store alone: live counts of execution states for
//! progress, and the final summary (outcomes, retries, timeouts, latency, the exactly-once
//! check), computed from the event logs.
//!
//! Nothing here trusts the process that ran the workload: a summary printed after a crash and
//! a resume is computed from the same logs as one printed after an uninterrupted run.

use chrono::{DateTime, Utc};
use concepts::DbClientExt as _;
use concepts::{
    DbClient, DbError, ExecutionEventInner, ExecutionId, ExecutionLog, JoinSetResponse,
    ListExecutionsFilter, PendingState, ResultKind, Version,
};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The whole log of every execution in the store.
///
/// # Errors
/// The store's error.
pub async fn load_logs(db: &dyn DbClient) -> Result<Vec<ExecutionLog>, DbError> {
    let executions = db
        .list_all_executions(ListExecutionsFilter::default())
        .await?;
    let mut logs = Vec::with_capacity(executions.len());
    for execution in executions {
        logs.push(db.get(&execution.execution_id).await?);
    }
    Ok(logs)
}

/// How many executions are in each state right now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    /// Due now or later, first run or a workflow woken by a response (not a retry).
    pub pending: u64,
    /// Pending because a run failed or timed out (a temporary event is the last event).
    pub retrying: u64,
    /// Locked by an executor: a run is in progress (or its process died and the lease has not
    /// expired yet).
    pub running: u64,
    /// Waiting for a join set response (a child to finish, a delay to fire).
    pub blocked: u64,
    /// Finished.
    pub finished: u64,
}

impl StateCounts {
    /// Every execution.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.pending + self.retrying + self.running + self.blocked + self.finished
    }

    /// True when every execution finished (and there is at least one).
    #[must_use]
    pub fn all_finished(&self) -> bool {
        self.finished > 0 && self.finished == self.total()
    }
}

/// Counts the executions in each state.
///
/// A pending execution counts as retrying when the last event of its log is
/// `TemporarilyFailed` or `TemporarilyTimedOut`. Only pending executions past their first event
/// are looked at (one event read each); new ones are pending by construction.
///
/// # Errors
/// The store's error.
pub async fn count_states(db: &dyn DbClient) -> Result<StateCounts, DbError> {
    let mut counts = StateCounts::default();
    for execution in db
        .list_all_executions(ListExecutionsFilter::default())
        .await?
    {
        match execution.pending_state {
            PendingState::PendingAt { .. } if execution.next_version > Version(1) => {
                let last = Version(execution.next_version.0 - 1);
                match db.get_execution_event(&execution.execution_id, last).await {
                    Ok(event) if event.event.is_temporary_event() => counts.retrying += 1,
                    Ok(_) => counts.pending += 1,
                    // Moved on since the listing (a new event appended): no longer a retry.
                    Err(DbError::NotFound(_)) => counts.pending += 1,
                    Err(err) => return Err(err),
                }
            }
            PendingState::PendingAt { .. } => counts.pending += 1,
            PendingState::Locked { .. } => counts.running += 1,
            PendingState::BlockedByJoinSet { .. } => counts.blocked += 1,
            PendingState::Finished { .. } => counts.finished += 1,
        }
    }
    Ok(counts)
}

/// End-to-end latency of top-level executions: `finished_at - created_at`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Median, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, in milliseconds.
    pub p99_ms: f64,
    /// Slowest, in milliseconds.
    pub max_ms: f64,
}

/// The exactly-once check: each execution has exactly one `Finished` event, and each finished
/// child's result reached its parent exactly once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ExactlyOnce {
    /// Executions with exactly one `Finished` event.
    pub finished_once: u64,
    /// Executions with none.
    pub not_finished: u64,
    /// Executions with more than one (never expected: the store refuses a second one).
    pub finished_more_than_once: u64,
    /// Finished children whose parent holds exactly one response from them.
    pub child_results_delivered_once: u64,
    /// Finished children whose parent holds no response from them.
    pub child_results_missing: u64,
    /// Finished children whose parent holds several responses from them.
    pub child_results_duplicated: u64,
}

impl ExactlyOnce {
    /// True when nothing was lost and nothing was done twice.
    #[must_use]
    pub fn holds(&self) -> bool {
        self.not_finished == 0
            && self.finished_more_than_once == 0
            && self.child_results_missing == 0
            && self.child_results_duplicated == 0
    }
}

/// A workload's summary, computed from its logs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Every execution.
    pub executions: u64,
    /// Executions submitted by a client.
    pub top_level: u64,
    /// Executions created by a parent.
    pub children: u64,
    /// Finished executions.
    pub finished: u64,
    /// Finished executions by result kind (`Ok`, `PermanentFailure`, `Timeout`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// Finished executions by function, then result kind.
    pub outcomes_by_function: BTreeMap<String, BTreeMap<String, u64>>,
    /// `TemporarilyFailed` events: failed attempts that were retried.
    pub retries: u64,
    /// `TemporarilyTimedOut` events: runs that outlived their lease and were retried.
    pub timeouts: u64,
    /// End-to-end latency of finished top-level executions, if any finished.
    pub latency: Option<Latency>,
    /// From the first creation to the last finish, in seconds.
    pub span_seconds: f64,
    /// The exactly-once check.
    pub exactly_once: ExactlyOnce,
}

/// Summarizes a workload from the logs of all its executions.
#[must_use]
pub fn summarize(logs: &[ExecutionLog]) -> Summary {
    let mut summary = Summary {
        executions: 0,
        top_level: 0,
        children: 0,
        finished: 0,
        outcomes: BTreeMap::new(),
        outcomes_by_function: BTreeMap::new(),
        retries: 0,
        timeouts: 0,
        latency: None,
        span_seconds: 0.0,
        exactly_once: ExactlyOnce::default(),
    };
    let mut latencies_ms = Vec::new();
    let mut first_created: Option<DateTime<Utc>> = None;
    let mut last_finished: Option<DateTime<Utc>> = None;
    // (parent, child) -> how many responses the parent holds from that child.
    let mut delivered: HashMap<(&ExecutionId, &ExecutionId), u64> = HashMap::new();
    for log in logs {
        for response in &log.responses {
            if let JoinSetResponse::ChildExecutionFinished {
                child_execution_id, ..
            } = &response.event.event
            {
                *delivered
                    .entry((&log.execution_id, child_execution_id))
                    .or_default() += 1;
            }
        }
    }
    for log in logs {
        summary.executions += 1;
        let created_at = log.events.first().map(|event| event.created_at);
        if let Some(created_at) = created_at {
            first_created = Some(first_created.map_or(created_at, |first| first.min(created_at)));
        }
        let created = log.events.first().and_then(|event| event.event.created());
        let parent = created.and_then(|created| created.parent.as_ref());
        if parent.is_some() {
            summary.children += 1;
        } else {
            summary.top_level += 1;
        }
        let mut finishes = Vec::new();
        for event in &log.events {
            match &event.event {
                ExecutionEventInner::TemporarilyFailed { .. } => summary.retries += 1,
                ExecutionEventInner::TemporarilyTimedOut { .. } => summary.timeouts += 1,
                ExecutionEventInner::Finished { result } => {
                    finishes.push((event.created_at, ResultKind::of(result)));
                }
                _ => {}
            }
        }
        match finishes.as_slice() {
            [] => summary.exactly_once.not_finished += 1,
            [_] => summary.exactly_once.finished_once += 1,
            _ => summary.exactly_once.finished_more_than_once += 1,
        }
        let Some(&(finished_at, kind)) = finishes.first() else {
            continue;
        };
        summary.finished += 1;
        last_finished = Some(last_finished.map_or(finished_at, |last| last.max(finished_at)));
        *summary.outcomes.entry(kind.to_string()).or_default() += 1;
        let function = log
            .ffqn()
            .map_or_else(|| "?".to_string(), ToString::to_string);
        *summary
            .outcomes_by_function
            .entry(function)
            .or_default()
            .entry(kind.to_string())
            .or_default() += 1;
        match (parent, created_at) {
            (None, Some(created_at)) => {
                #[expect(
                    clippy::cast_precision_loss,
                    reason = "latencies in microseconds are far below 2^53"
                )]
                let ms = (finished_at - created_at)
                    .num_microseconds()
                    .unwrap_or(i64::MAX) as f64
                    / 1_000.0;
                latencies_ms.push(ms);
            }
            (Some((parent_id, _)), _) => {
                match delivered.get(&(parent_id, &log.execution_id)).copied() {
                    None | Some(0) => summary.exactly_once.child_results_missing += 1,
                    Some(1) => summary.exactly_once.child_results_delivered_once += 1,
                    Some(_) => summary.exactly_once.child_results_duplicated += 1,
                }
            }
            (None, None) => {}
        }
    }
    summary.latency = latency(&mut latencies_ms);
    if let (Some(first), Some(last)) = (first_created, last_finished) {
        #[expect(
            clippy::cast_precision_loss,
            reason = "a span in microseconds is far below 2^53"
        )]
        let seconds = (last - first).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6;
        summary.span_seconds = seconds;
    }
    summary
}

/// The nearest-rank percentiles of `samples` (sorted in place).
fn latency(samples: &mut [f64]) -> Option<Latency> {
    samples.sort_by(f64::total_cmp);
    let max_ms = *samples.last()?;
    Some(Latency {
        p50_ms: percentile(samples, 50),
        p99_ms: percentile(samples, 99),
        max_ms,
    })
}

/// The nearest-rank `p`-th percentile of sorted, non-empty `samples`.
fn percentile(samples: &[f64], p: usize) -> f64 {
    let rank = (p * samples.len()).div_ceil(100).max(1);
    samples[rank.min(samples.len()) - 1]
}

#[cfg(test)]
mod tests;
