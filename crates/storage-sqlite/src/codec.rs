//! How values are stored in columns (the kernel's [`stored`] encodings: timestamps and
//! durations as microseconds, ids as their text, events and states as JSON) as this driver
//! binds and reads them; and the state row.

use crate::error::Result;
use concepts::{
    ExecutionEventInner, JoinSetResponse,
    kernel::{
        ExecutionRow,
        stored::{self, StoredRow, micros, state_json, to_i64},
    },
};
use rusqlite::{
    Error::FromSqlConversionFailure,
    types::{FromSqlError, ToSqlOutput, Value},
};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// A duration as unsigned microseconds (saturating, as the `Created` event's JSON keeps it),
/// stored bit for bit in a signed 64-bit column.
pub(crate) fn duration_to_sql(duration: Duration) -> i64 {
    let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
    micros.cast_signed()
}

/// The text of column `idx`, borrowed from the row (no copy); `None` for NULL.
pub(crate) fn text_or_null<'r>(row: &'r rusqlite::Row<'_>, idx: usize) -> Result<Option<&'r str>> {
    let value = row.get_ref(idx)?;
    let failed = |err: FromSqlError| FromSqlConversionFailure(idx, value.data_type(), err.into());
    Ok(value.as_str_or_null().map_err(failed)?)
}

/// The text of column `idx`, borrowed from the row (no copy).
pub(crate) fn text<'r>(row: &'r rusqlite::Row<'_>, idx: usize) -> Result<&'r str> {
    let value = row.get_ref(idx)?;
    let failed = |err: FromSqlError| FromSqlConversionFailure(idx, value.data_type(), err.into());
    Ok(value.as_str().map_err(failed)?)
}

/// The text of column `idx`, parsed ([`stored::parse`]); `what` names it in the error.
pub(crate) fn parsed<T: std::str::FromStr>(
    row: &rusqlite::Row<'_>,
    idx: usize,
    what: &str,
) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    Ok(stored::parse(text(row, idx)?, what)?)
}

/// The JSON document of column `idx`, decoded ([`stored::from_json`]).
pub(crate) fn json<T: DeserializeOwned>(row: &rusqlite::Row<'_>, idx: usize) -> Result<T> {
    Ok(stored::from_json(text(row, idx)?, "document")?)
}

/// The timestamp of column `idx` ([`stored::from_micros`]).
pub(crate) fn time(row: &rusqlite::Row<'_>, idx: usize) -> Result<chrono::DateTime<chrono::Utc>> {
    Ok(stored::from_micros(row.get(idx)?)?)
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
/// as `?1..?9` by both the insert and the updates of a state row.
pub(crate) fn state_columns(row: &ExecutionRow) -> Result<Vec<ToSqlOutput<'_>>> {
    let state = &row.state.pending_state;
    Ok(vec![
        row.execution_id.as_str().into(),
        i64::from(row.state.next_version.0).into(),
        state.kind().to_string().into(),
        nullable(state.pending_at().map(micros)),
        nullable(state.lock_expires_at().map(micros)),
        state_json(state)?.into(),
        i64::from(row.temporary_event_count).into(),
        nullable(state.finished_at().map(micros)),
        to_i64(row.response_count).into(),
    ])
}

/// The column list [`execution_row`] reads, in order.
pub(crate) const STATE_ROW_COLUMNS: &str = "execution_id, ffqn, next_version, state_json, \
     temporary_event_count, max_retries, retry_exp_backoff_us, parent_execution_id, \
     parent_join_set_id, response_count";

/// Decodes a row of `t_execution_state` selected with [`STATE_ROW_COLUMNS`].
pub(crate) fn execution_row(row: &rusqlite::Row<'_>) -> Result<ExecutionRow> {
    let stored = StoredRow {
        execution_id: text(row, 0)?,
        ffqn: text(row, 1)?,
        next_version: row.get(2)?,
        pending_state: text(row, 3)?,
        temporary_event_count: row.get(4)?,
        response_count: row.get(9)?,
        max_retries: row.get(5)?,
        retry_exp_backoff: Duration::from_micros(row.get::<_, i64>(6)?.cast_unsigned()),
        parent_execution_id: text_or_null(row, 7)?,
        parent_join_set_id: text_or_null(row, 8)?,
    };
    Ok(stored.decode()?)
}
