//! Conversions between domain values and column values: the kernel's [`stored`] encodings as
//! this driver reads them, timestamps' sub-microsecond remainders, durations as nanoseconds,
//! the state kind as a number, and the state row of an execution.

use crate::error::map_pg_error;
use chrono::{DateTime, Utc};
pub(crate) use concepts::kernel::stored::micros;
use concepts::{
    DbError,
    kernel::{
        ExecutionRow,
        stored::{self, StoredRow, corrupt},
    },
};
use serde::de::DeserializeOwned;
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

/// The text of column `idx`, parsed ([`stored::parse`]); `what` names it in the error.
pub(crate) fn parsed<T: std::str::FromStr>(row: &Row, idx: usize, what: &str) -> Result<T, DbError>
where
    T::Err: std::fmt::Display,
{
    stored::parse(column(row, idx)?, what)
}

/// The JSON document of column `idx`, decoded ([`stored::from_json`]); `what` names it.
pub(crate) fn json<T: DeserializeOwned>(row: &Row, idx: usize, what: &str) -> Result<T, DbError> {
    stored::from_json(column(row, idx)?, what)
}

/// The JSON documents of the array in column `idx`, decoded; `what` names them.
pub(crate) fn documents<T: DeserializeOwned>(
    row: &Row,
    idx: usize,
    what: &str,
) -> Result<Vec<T>, DbError> {
    let texts: Vec<&str> = column(row, idx)?;
    texts
        .into_iter()
        .map(|json| stored::from_json(json, what))
        .collect()
}

/// The state row of an execution, from the columns of [`execution_columns!`].
pub(crate) fn execution_row(row: &Row) -> Result<ExecutionRow, DbError> {
    StoredRow {
        execution_id: column(row, 0)?,
        ffqn: column(row, 1)?,
        next_version: column(row, 2)?,
        pending_state: column(row, 3)?,
        temporary_event_count: column(row, 4)?,
        response_count: column(row, 5)?,
        max_retries: column(row, 6)?,
        retry_exp_backoff: Duration::from_nanos(stored::count(column(row, 7)?, "backoff (ns)")?),
        parent_execution_id: column(row, 8)?,
        parent_join_set_id: column(row, 9)?,
    }
    .decode()
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

/// The `state_kind` column value of a kind.
pub(crate) fn kind_to_i16(kind: concepts::PendingStateKind) -> i16 {
    match kind {
        concepts::PendingStateKind::PendingAt => 0,
        concepts::PendingStateKind::Locked => 1,
        concepts::PendingStateKind::BlockedByJoinSet => 2,
        concepts::PendingStateKind::Finished => 3,
    }
}
