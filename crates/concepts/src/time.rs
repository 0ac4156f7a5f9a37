//! Time as the caller sees it: the [`ClockFn`] abstraction and saturating timestamp arithmetic.

use chrono::{DateTime, TimeDelta, Utc};

pub(crate) mod rfc3339;
use std::time::Duration;

/// The source of "now" for executors, watchers and tests.
///
/// Library code never reads the wall clock itself; it is handed a `ClockFn`, so that tests can
/// use a simulated clock and be deterministic. Storage never reads any clock: every timestamp
/// is passed in by its caller.
pub trait ClockFn: Send + Sync + Clone + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// `at + duration`, saturating at the largest representable timestamp instead of panicking.
#[must_use]
pub fn add_saturating(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_add_signed(delta))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at - duration`, saturating at the smallest representable timestamp instead of panicking.
#[must_use]
pub fn sub_saturating(at: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|delta| at.checked_sub_signed(delta))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// `duration` without its sub-microsecond digits, saturating at `u64::MAX` microseconds: what
/// every backend stores of a duration (the `Created` event keeps microseconds).
#[must_use]
pub fn truncate_duration_to_micros(duration: Duration) -> Duration {
    Duration::from_micros(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
}

/// `at` without its sub-microsecond digits.
///
/// Every backend keeps timestamps with microsecond precision (SQL backends index them as integer
/// microseconds, PostgreSQL's own types stop there), so clocks that feed storage produce whole
/// microseconds and a timestamp reads back exactly as it was written.
#[must_use]
pub fn truncate_to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at)
}
