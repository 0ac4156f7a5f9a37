//! How values are stored in columns: timestamps as integer microseconds, durations as
//! microseconds, ids as their text form, events and states as JSON; and the state row.

use crate::error::{Result, SqliteError};
use chrono::{DateTime, Utc};
use concepts::{
    ExecutionEventInner, ExecutionState, HistoryEvent, JoinSetResponse, PendingState, Version,
    kernel::ExecutionRow,
};
use std::{str::FromStr, time::Duration};

/// A timestamp as integer microseconds since the Unix epoch (fits every `DateTime<Utc>`).
/// Index columns keep microseconds; the JSON documents keep the caller's full precision.
pub(crate) fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The timestamp of a microseconds column.
pub(crate) fn from_micros(value: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(value)
        .ok_or_else(|| SqliteError::corrupt(format!("timestamp {value} µs is out of range")))
}

/// A duration as unsigned microseconds (saturating, as the `Created` event's JSON keeps it),
/// stored bit for bit in a signed 64-bit column.
pub(crate) fn duration_to_sql(duration: Duration) -> i64 {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    i64::from_ne_bytes(micros.to_ne_bytes())
}

/// The duration of a column written by [`duration_to_sql`].
pub(crate) fn duration_from_sql(value: i64) -> Duration {
    Duration::from_micros(u64::from_ne_bytes(value.to_ne_bytes()))
}

/// A version as a column value.
pub(crate) fn version_to_sql(version: Version) -> i64 {
    i64::from(version.0)
}

/// The version of a column.
pub(crate) fn version_from_sql(value: i64) -> Result<Version> {
    u32::try_from(value)
        .map(Version)
        .map_err(|_| SqliteError::corrupt(format!("version {value} is out of range")))
}

/// A `u32` counter of a column.
pub(crate) fn u32_from_sql(value: i64, what: &str) -> Result<u32> {
    u32::try_from(value)
        .map_err(|_| SqliteError::corrupt(format!("{what} {value} is out of range")))
}

/// Parses a stored id or name.
pub(crate) fn parse<T: FromStr>(text: &str, what: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    text.parse()
        .map_err(|err| SqliteError::corrupt(format!("stored {what} `{text}`: {err}")))
}

/// The `state` column value of a state kind (a state's, or a filter's).
pub(crate) fn state_kind(kind: concepts::PendingStateKind) -> &'static str {
    match kind {
        concepts::PendingStateKind::PendingAt => "PendingAt",
        concepts::PendingStateKind::Locked => "Locked",
        concepts::PendingStateKind::BlockedByJoinSet => "BlockedByJoinSet",
        concepts::PendingStateKind::Finished => "Finished",
    }
}

/// The `kind` column of an event; history events are named by their own variant (the
/// migration to schema version 3 counts `JoinNext` events by it).
pub(crate) fn event_kind(event: &ExecutionEventInner) -> &'static str {
    match event {
        ExecutionEventInner::HistoryEvent { event } => match event {
            HistoryEvent::Persist { .. } => "Persist",
            HistoryEvent::JoinSetCreate { .. } => "JoinSetCreate",
            HistoryEvent::JoinSetRequest { .. } => "JoinSetRequest",
            HistoryEvent::JoinNext { .. } => "JoinNext",
            HistoryEvent::Schedule { .. } => "Schedule",
        },
        other => other.variant_name(),
    }
}

/// The `join_set_id` column of an event.
pub(crate) fn event_join_set(event: &ExecutionEventInner) -> Option<String> {
    match event {
        ExecutionEventInner::HistoryEvent {
            event:
                HistoryEvent::JoinSetCreate { join_set_id, .. }
                | HistoryEvent::JoinSetRequest { join_set_id, .. }
                | HistoryEvent::JoinNext { join_set_id, .. },
        } => Some(join_set_id.to_string()),
        _ => None,
    }
}

/// The `delay_id` and `child_execution_id` columns of a response.
pub(crate) fn response_keys(response: &JoinSetResponse) -> (Option<String>, Option<String>) {
    match response {
        JoinSetResponse::DelayFinished { delay_id } => (Some(delay_id.to_string()), None),
        JoinSetResponse::ChildExecutionFinished {
            child_execution_id, ..
        } => (None, Some(child_execution_id.to_string())),
    }
}

/// The columns of `t_execution_state` that the pending state determines.
pub(crate) struct StateColumns {
    pub(crate) state: &'static str,
    pub(crate) pending_at: Option<i64>,
    pub(crate) lock_expires_at: Option<i64>,
    pub(crate) executor_id: Option<String>,
    pub(crate) run_id: Option<String>,
    pub(crate) join_set_id: Option<String>,
    pub(crate) result_kind: Option<String>,
    /// When it finished (the `created_at` of its `Finished` event): the key of `prune`.
    pub(crate) finished_at: Option<i64>,
    pub(crate) json: String,
}

impl StateColumns {
    pub(crate) fn of(state: &PendingState) -> Result<Self> {
        let mut columns = StateColumns {
            state: state_kind(state.kind()),
            pending_at: None,
            lock_expires_at: None,
            executor_id: None,
            run_id: None,
            join_set_id: None,
            result_kind: None,
            finished_at: None,
            json: serde_json::to_string(state)?,
        };
        match state {
            PendingState::PendingAt { scheduled_at } => {
                columns.pending_at = Some(micros(*scheduled_at))
            }
            PendingState::Locked {
                executor_id,
                run_id,
                lock_expires_at,
            } => {
                columns.lock_expires_at = Some(micros(*lock_expires_at));
                columns.executor_id = Some(executor_id.to_string());
                columns.run_id = Some(run_id.to_string());
            }
            PendingState::BlockedByJoinSet {
                join_set_id,
                lock_expires_at,
                ..
            } => {
                columns.lock_expires_at = Some(micros(*lock_expires_at));
                columns.join_set_id = Some(join_set_id.to_string());
            }
            PendingState::Finished {
                result_kind,
                finished_at,
                ..
            } => {
                columns.result_kind = Some(result_kind.to_string());
                columns.finished_at = Some(micros(*finished_at));
            }
        }
        Ok(columns)
    }
}

/// The column list [`execution_row`] reads, in order.
pub(crate) const STATE_ROW_COLUMNS: &str = "execution_id, ffqn, next_version, state_json, \
     temporary_event_count, max_retries, retry_exp_backoff_us, parent_execution_id, \
     parent_join_set_id";

/// Decodes a row of `t_execution_state` selected with [`STATE_ROW_COLUMNS`].
///
/// `response_count` is left at 0: it is not stored, because responses are numbered by the
/// autoincrement id of `t_response` (arrival order), so nothing here uses
/// [`PlannedResponse::idx`](concepts::kernel::PlannedResponse).
pub(crate) fn execution_row(row: &rusqlite::Row<'_>) -> Result<ExecutionRow> {
    let execution_id: String = row.get(0)?;
    let ffqn: String = row.get(1)?;
    let state_json: String = row.get(3)?;
    let parent_execution_id: Option<String> = row.get(7)?;
    let parent_join_set_id: Option<String> = row.get(8)?;
    let parent = match (parent_execution_id, parent_join_set_id) {
        (Some(id), Some(join_set)) => Some((
            parse(&id, "parent execution id")?,
            parse(&join_set, "join set id")?,
        )),
        (None, None) => None,
        _ => {
            return Err(SqliteError::corrupt(format!(
                "execution {execution_id} has half a parent"
            )));
        }
    };
    Ok(ExecutionRow {
        execution_id: parse(&execution_id, "execution id")?,
        ffqn: parse(&ffqn, "function name")?,
        state: ExecutionState {
            next_version: version_from_sql(row.get(2)?)?,
            pending_state: serde_json::from_str(&state_json)?,
        },
        temporary_event_count: u32_from_sql(row.get(4)?, "temporary event count")?,
        response_count: 0,
        max_retries: u32_from_sql(row.get(5)?, "max retries")?,
        retry_exp_backoff: duration_from_sql(row.get(6)?),
        parent,
    })
}
