//! How values are stored in columns: timestamps as integer microseconds, durations as
//! microseconds, ids as their text form, events and states as JSON; and the state row.

use crate::error::{Result, SqliteError};
use chrono::{DateTime, Utc};
use concepts::{
    ExecutionEventInner, ExecutionState, JoinSetResponse, PendingState, Version,
    kernel::ExecutionRow,
};
use rusqlite::types::{ToSqlOutput, Value};
use std::{str::FromStr, time::Duration};

/// A timestamp as integer microseconds since the Unix epoch (fits every `DateTime<Utc>`).
/// Index columns keep microseconds; the JSON documents keep the caller's full precision.
pub(crate) fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

pub(crate) fn from_micros(value: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(value)
        .ok_or_else(|| SqliteError::Corrupt(format!("timestamp {value} µs is out of range")))
}

/// A duration as unsigned microseconds (saturating, as the `Created` event's JSON keeps it),
/// stored bit for bit in a signed 64-bit column.
pub(crate) fn duration_to_sql(duration: Duration) -> i64 {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    micros.cast_signed()
}

pub(crate) fn duration_from_sql(value: i64) -> Duration {
    Duration::from_micros(value.cast_unsigned())
}

/// A count, length or index as a column value (saturating).
pub(crate) fn int_to_sql(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

pub(crate) fn version_from_sql(value: i64) -> Result<Version> {
    u32_from_sql(value, "version").map(Version)
}

pub(crate) fn u32_from_sql(value: i64, what: &str) -> Result<u32> {
    u32::try_from(value)
        .map_err(|_| SqliteError::Corrupt(format!("{what} {value} is out of range")))
}

pub(crate) fn parse<T: FromStr>(text: &str, what: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    text.parse()
        .map_err(|err| SqliteError::Corrupt(format!("stored {what} `{text}`: {err}")))
}

/// The `kind` column of an event; history events are named by their own variant (the
/// migration to schema version 3 counts `JoinNext` events by it).
pub(crate) fn event_kind(event: &ExecutionEventInner) -> &'static str {
    match event {
        ExecutionEventInner::HistoryEvent { event } => event.variant_name(),
        other => other.variant_name(),
    }
}

/// The `join_set_id` column of an event.
pub(crate) fn event_join_set(event: &ExecutionEventInner) -> Option<String> {
    match event {
        ExecutionEventInner::HistoryEvent { event } => event.join_set_id().map(ToString::to_string),
        _ => None,
    }
}

/// The `delay_id` and `child_execution_id` columns of a response.
pub(crate) fn response_keys(response: &JoinSetResponse) -> (Option<String>, Option<String>) {
    let child = response.child_execution_id().map(ToString::to_string);
    (response.delay_id().map(|id| id.to_string()), child)
}

pub(crate) fn nullable<T: Into<Value>>(value: Option<T>) -> ToSqlOutput<'static> {
    ToSqlOutput::Owned(value.into())
}

/// The values of the columns of `t_execution_state` that a write changes, in their order, bound
/// as `?1..?12` by both the insert and the update of a state row.
pub(crate) fn state_columns(row: &ExecutionRow) -> Result<Vec<ToSqlOutput<'_>>> {
    let state = &row.state.pending_state;
    let (executor_id, run_id, join_set_id, result_kind) = match state {
        PendingState::Locked {
            executor_id,
            run_id,
            ..
        } => (
            Some(executor_id.to_string()),
            Some(run_id.to_string()),
            None,
            None,
        ),
        PendingState::BlockedByJoinSet { join_set_id, .. } => {
            (None, None, Some(join_set_id.to_string()), None)
        }
        PendingState::Finished { result_kind, .. } => (None, None, None, Some(result_kind)),
        PendingState::PendingAt { .. } => (None, None, None, None),
    };
    Ok(vec![
        row.execution_id.as_str().into(),
        i64::from(row.state.next_version.0).into(),
        state.kind().to_string().into(),
        nullable(state.pending_at().map(micros)),
        nullable(state.lock_expires_at().map(micros)),
        nullable(executor_id),
        nullable(run_id),
        nullable(join_set_id),
        nullable(result_kind.map(ToString::to_string)),
        serde_json::to_string(state)?.into(),
        i64::from(row.temporary_event_count).into(),
        nullable(state.finished_at().map(micros)),
    ])
}

/// The column list [`execution_row`] reads, in order.
pub(crate) const STATE_ROW_COLUMNS: &str = "execution_id, ffqn, next_version, state_json, \
     temporary_event_count, max_retries, retry_exp_backoff_us, parent_execution_id, \
     parent_join_set_id";

/// Decodes a row of `t_execution_state` selected with [`STATE_ROW_COLUMNS`]. `response_count`
/// is not stored (0): responses are numbered by the autoincrement id of `t_response`, so
/// nothing here uses [`PlannedResponse::idx`](concepts::kernel::PlannedResponse).
pub(crate) fn execution_row(row: &rusqlite::Row<'_>) -> Result<ExecutionRow> {
    let execution_id: String = row.get(0)?;
    let parent: (Option<String>, Option<String>) = (row.get(7)?, row.get(8)?);
    let parent = match parent {
        (Some(id), Some(join_set)) => Some((
            parse(&id, "parent execution id")?,
            parse(&join_set, "join set id")?,
        )),
        (None, None) => None,
        _ => {
            let message = format!("execution {execution_id} has half a parent");
            return Err(SqliteError::Corrupt(message));
        }
    };
    Ok(ExecutionRow {
        execution_id: parse(&execution_id, "execution id")?,
        ffqn: parse(&row.get::<_, String>(1)?, "function name")?,
        state: ExecutionState {
            next_version: version_from_sql(row.get(2)?)?,
            pending_state: serde_json::from_str(&row.get::<_, String>(3)?)?,
        },
        temporary_event_count: u32_from_sql(row.get(4)?, "temporary event count")?,
        response_count: 0,
        max_retries: u32_from_sql(row.get(5)?, "max retries")?,
        retry_exp_backoff: duration_from_sql(row.get(6)?),
        parent,
    })
}
