//! How the SQL backends store the kernel's values in columns and read them back, written once:
//! timestamps as integer microseconds since the Unix epoch (what both index and compare),
//! counts and versions as signed 64-bit integers, ids and names as their text, states, events
//! and responses as JSON, and an execution's state row from its columns ([`StoredRow`]). A
//! value that does not decode is a corrupt store ([`corrupt`]), never a panic. Each backend
//! reads its columns with its own driver and hands the values here.

use super::snapshot::ExecutionRow;
use crate::{
    DbError, DuplicateKind, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionState,
    FinishedExecutionResult, Version,
};
use chrono::{DateTime, Utc};
use serde::{Serialize, de::DeserializeOwned};
use std::{fmt::Display, str::FromStr, time::Duration};

mod json;
pub use json::{event_json, state_json};

/// The error of a stored value that does not decode: a corrupt row, or one that a newer build
/// wrote.
pub fn corrupt(what: impl Display) -> DbError {
    DbError::backend(format!("corrupt data in the database: {what}"), false, None)
}

/// Parses a stored text (an id, a function name); `what` names it in the error.
pub fn parse<T: FromStr>(text: &str, what: &str) -> Result<T, DbError>
where
    T::Err: Display,
{
    text.parse()
        .map_err(|err| corrupt(format_args!("stored {what} `{text}`: {err}")))
}

/// Decodes a stored JSON document; `what` names it in the error.
pub fn from_json<T: DeserializeOwned>(json: &str, what: &str) -> Result<T, DbError> {
    serde_json::from_str(json).map_err(|err| corrupt(format_args!("{what}: {err}")))
}

/// `value` as a JSON document (object keys keep their order). Written into a buffer of 1,000
/// bytes: a state or an event is a few hundred, and `serde_json::to_string` starts at 128 and
/// copies the document at each doubling.
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String, DbError> {
    let encode = |err: serde_json::Error| {
        let message = format!("cannot encode a value as JSON: {err}");
        DbError::backend(message, false, Some(std::sync::Arc::new(err)))
    };
    let mut json = Vec::with_capacity(JSON_CAPACITY);
    serde_json::to_writer(&mut json, value).map_err(encode)?;
    // serde_json writes UTF-8 only; the check is a pass over mostly ASCII.
    String::from_utf8(json).map_err(|err| corrupt(format_args!("JSON not in UTF-8: {err}")))
}

/// The buffer [`to_json`] starts with.
const JSON_CAPACITY: usize = 1000;

/// A timestamp as integer microseconds since the Unix epoch, rounded down (every
/// `DateTime<Utc>` fits). What the JSON documents keep is the caller's full precision.
#[must_use]
pub fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// The timestamp of [`micros`].
pub fn from_micros(value: i64) -> Result<DateTime<Utc>, DbError> {
    DateTime::from_timestamp_micros(value)
        .ok_or_else(|| corrupt(format_args!("timestamp {value} µs is out of range")))
}

/// A count, length, index or version as a column value (saturating at `i64::MAX`, which none
/// reaches).
pub fn to_i64(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

/// A column value read back as a `u32` or `u64` count (or version); `what` names it in the
/// error.
pub fn count<T: TryFrom<i64>>(value: i64, what: &str) -> Result<T, DbError> {
    T::try_from(value).map_err(|_| corrupt(format_args!("{what} {value} is out of range")))
}

/// The result of the finished execution `execution_id` from its stored `Finished` event.
pub fn finished_result(
    execution_id: &ExecutionId,
    event_json: &str,
) -> Result<FinishedExecutionResult, DbError> {
    match from_json::<ExecutionEvent>(event_json, "event")?.event {
        ExecutionEventInner::Finished { result } => Ok(result),
        other => Err(corrupt(format_args!(
            "{execution_id} is finished, but the event at its finished version is {}",
            other.variant_name()
        ))),
    }
}

/// A stored key that a backend keeps unique, whose violation by a write that lost a race is a
/// duplicate the kernel names ([`UniqueKey::duplicate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniqueKey {
    /// An execution's row: `(execution_id)`.
    Execution,
    /// An event of an execution's log: `(execution_id, version)`; at version 0, the `Created`
    /// event, a duplicate execution.
    Event,
    /// The response to a delay: `(execution_id, delay_id)`.
    DelayResponse,
    /// The response of a child: `(execution_id, child_execution_id)`.
    ChildResponse,
    /// A schedule: `(name)`.
    Schedule,
}

impl UniqueKey {
    /// The duplicate that a violation of this key with `values` (its columns' text, in order)
    /// means; `None` for an event after version 0, or values that are not this key's.
    #[must_use]
    pub fn duplicate(self, values: &[&str]) -> Option<DuplicateKind> {
        let id = |text: &str| text.parse::<ExecutionId>().ok();
        match (self, values) {
            (Self::Execution, [execution_id]) | (Self::Event, [execution_id, "0"]) => {
                Some(DuplicateKind::Execution(id(execution_id)?))
            }
            (Self::DelayResponse, [execution_id, delay_id]) => Some(DuplicateKind::DelayResponse {
                execution_id: id(execution_id)?,
                delay_id: delay_id.parse().ok()?,
            }),
            (Self::ChildResponse, [execution_id, child]) => Some(DuplicateKind::ChildResponse {
                execution_id: id(execution_id)?,
                child_execution_id: id(child)?,
            }),
            (Self::Schedule, [name]) => Some(DuplicateKind::Schedule(name.parse().ok()?)),
            _ => None,
        }
    }
}

/// The columns of an execution's state row as a backend read them, decoded into the kernel's
/// [`ExecutionRow`] by [`StoredRow::decode`].
#[derive(Debug, Clone, Copy)]
pub struct StoredRow<'a> {
    /// The execution's id.
    pub execution_id: &'a str,
    /// Its function.
    pub ffqn: &'a str,
    /// Its next version.
    pub next_version: i64,
    /// Its pending state, as JSON.
    pub pending_state: &'a str,
    /// Its `TemporarilyFailed` and `TemporarilyTimedOut` events so far.
    pub temporary_event_count: i64,
    /// Its responses so far (0 for a backend that numbers responses otherwise).
    pub response_count: i64,
    /// How many failures are retried.
    pub max_retries: i64,
    /// The first retry's backoff.
    pub retry_exp_backoff: Duration,
    /// The parent's id, for a child.
    pub parent_execution_id: Option<&'a str>,
    /// The join set of the parent, for a child.
    pub parent_join_set_id: Option<&'a str>,
}

impl StoredRow<'_> {
    /// The row; a value that does not decode, or a parent without its join set, is
    /// [`corrupt`].
    pub fn decode(self) -> Result<ExecutionRow, DbError> {
        let execution_id: ExecutionId = parse(self.execution_id, "execution id")?;
        let parent = match (self.parent_execution_id, self.parent_join_set_id) {
            (Some(parent), Some(join_set)) => Some((
                parse(parent, "parent execution id")?,
                parse(join_set, "join set id")?,
            )),
            (None, None) => None,
            _ => return Err(corrupt(format_args!("{execution_id} has half a parent"))),
        };
        Ok(ExecutionRow {
            ffqn: parse(self.ffqn, "function name")?,
            state: ExecutionState {
                next_version: Version(count(self.next_version, "next version")?),
                pending_state: from_json(self.pending_state, "pending state")?,
            },
            temporary_event_count: count(self.temporary_event_count, "temporary event count")?,
            response_count: count(self.response_count, "response count")?,
            max_retries: count(self.max_retries, "max retries")?,
            retry_exp_backoff: self.retry_exp_backoff,
            parent,
            execution_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(parent: (Option<&'a str>, Option<&'a str>)) -> StoredRow<'a> {
        StoredRow {
            execution_id: "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0.n:a_1",
            ffqn: "ns:pkg/ifc.fn",
            next_version: 3,
            pending_state: r#"{"PendingAt":{"scheduled_at":"1970-01-01T00:00:00Z"}}"#,
            temporary_event_count: 1,
            response_count: 2,
            max_retries: 4,
            retry_exp_backoff: Duration::from_millis(5),
            parent_execution_id: parent.0,
            parent_join_set_id: parent.1,
        }
    }

    #[test]
    fn a_stored_row_decodes_and_a_corrupt_one_is_refused() {
        let parent = (Some("E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0"), Some("n:a"));
        let decoded = row(parent).decode().unwrap();
        assert_eq!(decoded.state.next_version, Version(3));
        assert_eq!(decoded.response_count, 2);
        assert_eq!(decoded.parent.unwrap().1.to_string(), "n:a");
        let half = row((parent.0, None)).decode().unwrap_err();
        assert!(half.to_string().contains("half a parent"), "{half}");
        let negative = StoredRow {
            next_version: -1,
            ..row((None, None))
        };
        let err = negative.decode().unwrap_err();
        assert!(err.to_string().contains("next version -1"), "{err}");
        assert!(!err.is_retriable());
        let bad_id = StoredRow {
            execution_id: "not an id",
            ..row((None, None))
        };
        assert!(bad_id.decode().is_err());
    }

    #[test]
    fn timestamps_are_whole_microseconds_and_out_of_range_ones_are_corrupt() {
        let at = DateTime::from_timestamp(-1, 999_999_999).unwrap();
        assert_eq!(
            from_micros(micros(at)).unwrap(),
            at - chrono::TimeDelta::nanoseconds(999)
        );
        assert!(from_micros(i64::MAX).is_err());
        assert_eq!(to_i64(u64::MAX), i64::MAX);
        assert!(count::<u32>(i64::from(u32::MAX) + 1, "n").is_err());
    }

    #[test]
    fn a_unique_key_names_its_duplicate_or_none() {
        let id = "E_01JZ8ZK3F8G3N9Q7V5W2X4Y6Z0";
        let execution = Some(DuplicateKind::Execution(id.parse().unwrap()));
        assert_eq!(UniqueKey::Execution.duplicate(&[id]), execution);
        assert_eq!(UniqueKey::Event.duplicate(&[id, "0"]), execution);
        assert_eq!(UniqueKey::Event.duplicate(&[id, "3"]), None);
        assert_eq!(UniqueKey::Execution.duplicate(&[id, "0"]), None);
        assert_eq!(UniqueKey::Execution.duplicate(&["not an id"]), None);
        let child = format!("{id}.n:batch_1");
        assert_eq!(
            UniqueKey::ChildResponse.duplicate(&[id, &child]),
            Some(DuplicateKind::ChildResponse {
                execution_id: id.parse().unwrap(),
                child_execution_id: child.parse().unwrap(),
            })
        );
    }
}
