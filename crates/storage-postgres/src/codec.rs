//! Conversions between domain values and column values: timestamps as microseconds (plus the
//! sub-microsecond remainder), versions and counters as `BIGINT`, payloads as JSON text, and
//! the state row of an execution.

use crate::error::{corrupt, map_pg_error};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionState,
    FinishedExecutionResult, JoinSetId, Version, kernel::ExecutionRow,
};
use serde::{Serialize, de::DeserializeOwned};
use std::time::Duration;
use tokio_postgres::{Row, types::FromSql};

/// The columns of `t_execution` that [`execution_row`] reads, in order.
macro_rules! execution_columns {
    () => {
        "execution_id, ffqn, next_version, state_json, temporary_event_count, response_count, \
         max_retries, retry_exp_backoff_ns, parent_execution_id, parent_join_set_id"
    };
}
pub(crate) use execution_columns;

pub(crate) fn column<'a, T: FromSql<'a>>(row: &'a Row, idx: usize) -> Result<T, DbError> {
    row.try_get(idx).map_err(map_pg_error)
}

pub(crate) fn parse_execution_id(id: &str) -> Result<ExecutionId, DbError> {
    id.parse()
        .map_err(|e| corrupt(format!("execution id `{id}`: {e}")))
}

pub(crate) fn parse_join_set_id(id: &str) -> Result<JoinSetId, DbError> {
    id.parse()
        .map_err(|e| corrupt(format!("join set id `{id}`: {e}")))
}

/// The state row of an execution, from the columns of [`execution_columns!`].
pub(crate) fn execution_row(row: &Row) -> Result<ExecutionRow, DbError> {
    let execution_id = parse_execution_id(column(row, 0)?)?;
    let ffqn: &str = column(row, 1)?;
    let ffqn = ffqn
        .parse()
        .map_err(|e| corrupt(format!("ffqn `{ffqn}` of {execution_id}: {e:?}")))?;
    let parent_id: Option<&str> = column(row, 8)?;
    let parent_join_set: Option<&str> = column(row, 9)?;
    let parent = match (parent_id, parent_join_set) {
        (Some(parent_id), Some(join_set_id)) => Some((
            parse_execution_id(parent_id)?,
            parse_join_set_id(join_set_id)?,
        )),
        _ => None,
    };
    Ok(ExecutionRow {
        ffqn,
        state: ExecutionState {
            next_version: Version(i64_to_u32(column(row, 2)?, "next_version")?),
            pending_state: from_json(column(row, 3)?, "pending state")?,
        },
        temporary_event_count: i64_to_u32(column(row, 4)?, "temporary_event_count")?,
        response_count: i64_to_count(column(row, 5)?, "response_count")?,
        max_retries: i64_to_u32(column(row, 6)?, "max_retries")?,
        retry_exp_backoff: nanos_to_duration(column(row, 7)?)?,
        parent,
        execution_id,
    })
}

/// Microseconds since the Unix epoch, rounded down. Every `DateTime<Utc>` fits.
pub(crate) fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The nanoseconds below the microsecond (0..=999), kept where the exact value is reported.
pub(crate) fn sub_micros(at: DateTime<Utc>) -> i16 {
    // `timestamp_subsec_nanos` may exceed 10^9 during a leap second; the remainder is < 1000.
    i16::try_from(at.timestamp_subsec_nanos() % 1000).unwrap_or(0)
}

/// The timestamp of `micros` and `sub_micros`.
pub(crate) fn timestamp(micros: i64, sub_micros: i16) -> Result<DateTime<Utc>, DbError> {
    let nanos = chrono::TimeDelta::nanoseconds(i64::from(sub_micros));
    DateTime::from_timestamp_micros(micros)
        .and_then(|at| at.checked_add_signed(nanos))
        .ok_or_else(|| {
            corrupt(format!(
                "timestamp {micros} us + {sub_micros} ns out of range"
            ))
        })
}

/// Saturating at `i64::MAX`, which no count reaches.
pub(crate) fn count_to_i64(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

pub(crate) fn i64_to_count(value: i64, what: &str) -> Result<u64, DbError> {
    u64::try_from(value).map_err(|_| corrupt(format!("negative {what}: {value}")))
}

pub(crate) fn i64_to_u32(value: i64, what: &str) -> Result<u32, DbError> {
    u32::try_from(value).map_err(|_| corrupt(format!("{what} out of range: {value}")))
}

pub(crate) fn version_to_i64(version: Version) -> i64 {
    i64::from(version.0)
}

/// Saturating (at 292 years).
pub(crate) fn duration_to_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

pub(crate) fn nanos_to_duration(nanos: i64) -> Result<Duration, DbError> {
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| corrupt(format!("negative duration: {nanos} ns")))
}

/// `value` as JSON text; object keys keep their order.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String, DbError> {
    serde_json::to_string(value).map_err(|e| {
        DbError::Backend(concepts::BackendError {
            message: format!("cannot encode a value as JSON: {e}"),
            retriable: false,
            source: Some(std::sync::Arc::new(e)),
        })
    })
}

/// `what` names the value in the error.
pub(crate) fn from_json<T: DeserializeOwned>(json: &str, what: &str) -> Result<T, DbError> {
    serde_json::from_str(json).map_err(|e| corrupt(format!("{what}: {e}")))
}

/// The result of the `Finished` event `json` of the finished execution `execution_id`.
pub(crate) fn finished_result_of(
    execution_id: &ExecutionId,
    json: &str,
) -> Result<FinishedExecutionResult, DbError> {
    match from_json::<ExecutionEvent>(json, "event")?.event {
        ExecutionEventInner::Finished { result } => Ok(result),
        other => Err(corrupt(format!(
            "{execution_id} is finished but its last event is {}",
            other.variant_name()
        ))),
    }
}

/// The `state_kind` column value of a kind.
pub(crate) fn kind_to_i16(kind: concepts::PendingStateKind) -> i16 {
    match kind {
        concepts::PendingStateKind::PendingAt => 0,
        concepts::PendingStateKind::Locked => 1,
        concepts::PendingStateKind::BlockedByJoinSet => 2,
        concepts::PendingStateKind::Finished => 3,
    }
}
