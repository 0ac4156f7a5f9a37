//! Retry math: when a temporary failure is retried, and when an `Unlocked` execution returns.
//!
//! The n-th failure (n = temporary event count + 1) is retried after
//! `retry_exp_backoff * 2^(n-1)` while `n <= max_retries`; otherwise it is permanent.
//! All multiplication saturates.

use std::time::Duration;

/// `base * 2^exponent`, saturating at `Duration::MAX`.
#[must_use]
pub fn exp_backoff(base: Duration, exponent: u32) -> Duration {
    match 2u32.checked_pow(exponent) {
        Some(factor) => base.saturating_mul(factor),
        None if base.is_zero() => Duration::ZERO,
        None => Duration::MAX,
    }
}

/// The backoff before retrying the next failure, or `None` when that failure is permanent.
///
/// `temporary_event_count` is the number of `TemporarilyFailed` and `TemporarilyTimedOut`
/// events already in the log.
#[must_use]
pub fn retry_backoff(
    temporary_event_count: u32,
    max_retries: u32,
    retry_exp_backoff: Duration,
) -> Option<Duration> {
    let n = temporary_event_count.saturating_add(1);
    (n <= max_retries).then(|| exp_backoff(retry_exp_backoff, n - 1))
}

/// True when the next failure can still be retried.
#[must_use]
pub fn can_be_retried(temporary_event_count: u32, max_retries: u32) -> bool {
    temporary_event_count.saturating_add(1) <= max_retries
}

/// The backoff of an `Unlocked` event: `retry_exp_backoff * 2^temporary_event_count`.
/// It uses up no retry.
#[must_use]
pub fn unlock_backoff(temporary_event_count: u32, retry_exp_backoff: Duration) -> Duration {
    exp_backoff(retry_exp_backoff, temporary_event_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS100: Duration = Duration::from_millis(100);

    #[test]
    fn retries_double_until_max_retries() {
        assert_eq!(retry_backoff(0, 3, MS100), Some(MS100));
        assert_eq!(retry_backoff(1, 3, MS100), Some(MS100 * 2));
        assert_eq!(retry_backoff(2, 3, MS100), Some(MS100 * 4));
        assert_eq!(retry_backoff(3, 3, MS100), None);
    }

    #[test]
    fn zero_max_retries_makes_first_failure_permanent() {
        assert_eq!(retry_backoff(0, 0, MS100), None);
        assert!(!can_be_retried(0, 0));
    }

    #[test]
    fn retry_forever_saturates() {
        assert_eq!(
            retry_backoff(u32::MAX, u32::MAX, MS100),
            Some(Duration::MAX)
        );
        assert_eq!(retry_backoff(40, u32::MAX, MS100), Some(Duration::MAX));
        assert_eq!(
            retry_backoff(40, u32::MAX, Duration::ZERO),
            Some(Duration::ZERO)
        );
        assert!(can_be_retried(u32::MAX - 1, u32::MAX));
    }

    #[test]
    fn unlock_backoff_uses_count_as_exponent() {
        assert_eq!(unlock_backoff(0, MS100), MS100);
        assert_eq!(unlock_backoff(2, MS100), MS100 * 4);
        assert_eq!(unlock_backoff(64, MS100), Duration::MAX);
    }
}
