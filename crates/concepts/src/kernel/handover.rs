//! What a worker is handed when `lock_pending` locks an execution: the kernel grants the lease
//! in the write ([`LockGrant`], from the state row alone), and the backend reads the history
//! afterwards, outside the write transaction, for [`hand_over`] to assemble the
//! [`LockedExecution`]. The events below the locked version are append-only, so what is read
//! after the commit, cut at the locked version, is exactly what the write saw. Responses are
//! handed over as read: every one stored at the lock, and perhaps some that arrived since
//! (responses are only appended, in arrival order, so those are the ones the worker would
//! otherwise get next from `subscribe_to_next_responses`: as if the lock were a moment
//! later).

use super::plan::inconsistent;
use super::snapshot::{ExecutionRow, LogRows};
use crate::{DbError, ExecutionEventInner, Locked, LockedExecution, Version};

/// A lease `lock_pending` granted: the row after the lock and the `Locked` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockGrant {
    /// The execution's row after the lock (its next version follows the `Locked` event).
    pub row: ExecutionRow,
    /// The version the `Locked` event was appended at: the worker is handed the events
    /// below it.
    pub locked_at: Version,
    /// The lease.
    pub locked_event: Locked,
}

impl LockGrant {
    /// How many events the worker is handed (versions `0..locked_at`): what the backend reads
    /// after the commit, with every response stored by then.
    #[must_use]
    pub fn events_handed_over(&self) -> usize {
        usize::try_from(self.locked_at.0).unwrap_or(usize::MAX)
    }
}

/// The execution a worker is handed for `grant`, from its history read after the commit
/// (`log` may hold events appended after the lock: it is cut at the locked version).
pub fn hand_over(grant: LockGrant, mut log: LogRows) -> Result<LockedExecution, DbError> {
    let events = grant.events_handed_over();
    let row = grant.row;
    if log.events.len() < events {
        return Err(inconsistent(format!(
            "execution {} was locked at version {}, its log holds {} events",
            row.execution_id,
            grant.locked_at,
            log.events.len(),
        )));
    }
    log.events.truncate(events);
    let mut history = log.events.into_iter();
    let Some(ExecutionEventInner::Created {
        params,
        metadata,
        scheduled_at,
        ..
    }) = history.next().map(|e| e.event)
    else {
        return Err(inconsistent(format!(
            "version 0 of execution {} is not `Created`",
            row.execution_id
        )));
    };
    Ok(LockedExecution {
        execution_id: row.execution_id,
        next_version: row.state.next_version,
        metadata,
        locked_event: grant.locked_event,
        ffqn: row.ffqn,
        params,
        event_history: history
            .filter_map(|e| match e.event {
                ExecutionEventInner::HistoryEvent { event } => Some(event),
                _ => None,
            })
            .collect(),
        responses: log.responses,
        scheduled_at,
        retry_exp_backoff: row.retry_exp_backoff,
        max_retries: row.max_retries,
        parent: row.parent,
        temporary_event_count: row.temporary_event_count,
    })
}
