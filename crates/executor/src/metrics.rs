//! What the executor records (names in `concepts::metrics`, the table in `docs/METRICS.md`):
//! per lock, how long each execution waited after it was due; per attempt, from its lock to
//! its outcome and what the outcome was, once it is written; per executor and tick, its runs
//! in flight and free slots.
//!
//! The handles are registered once, when the executor is made ([`Meters::new`]), for each
//! function it runs and each label value: a run records through them without building a key
//! or a label, so recording costs an increment (and nothing with no recorder). A program
//! installs its recorder before it makes its executors.

use ::metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use chrono::{DateTime, Utc};
use concepts::{
    ComponentId, ExecutionEventInner, FunctionFqn, LockedExecution, ResultKind,
    metrics::{self as m},
};
use std::sync::Arc;

/// Seconds from `from` to `to`, never negative. Most such pairs fall on one day, whose
/// seconds since midnight and nanoseconds are fields: a tenth of the instructions of a chrono
/// `Duration` or of two Unix timestamps.
fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    use chrono::Timelike as _;
    let (from, to) = (from.naive_utc(), to.naive_utc());
    let days = if from.date() == to.date() {
        0
    } else {
        to.date().signed_duration_since(from.date()).num_days()
    };
    // `NaiveTime`'s seconds since midnight is its field; `NaiveDateTime`'s is computed back
    // from its hour, minute and second.
    let (from, to) = (from.time(), to.time());
    let seconds = days * 86_400 + i64::from(to.num_seconds_from_midnight())
        - i64::from(from.num_seconds_from_midnight());
    let nanos = i64::from(to.nanosecond()) - i64::from(from.nanosecond());
    #[expect(
        clippy::cast_precision_loss,
        reason = "a duration in seconds and nanoseconds"
    )]
    let seconds = seconds as f64 + nanos as f64 / 1e9;
    seconds.max(0.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Finished(ResultKind),
    TemporarilyFailed,
    TimedOut,
    Unlocked,
}

impl Outcome {
    pub(crate) fn of(event: &ExecutionEventInner) -> Self {
        match event {
            ExecutionEventInner::Finished { result } => Self::Finished(ResultKind::of(result)),
            ExecutionEventInner::TemporarilyFailed { .. } => Self::TemporarilyFailed,
            ExecutionEventInner::TemporarilyTimedOut { .. } => Self::TimedOut,
            _ => Self::Unlocked,
        }
    }
}

/// Every result label of `stele_attempts_total`, in the order of [`FunctionMeters::attempts`].
const RESULTS: [&str; 5] = [
    "finished",
    "temporarily_failed",
    "timed_out",
    "unlocked",
    "by_worker",
];

/// Every outcome kind an executor writes, in the order of [`FunctionMeters::finished`]: not a
/// cancellation, which only `cancel` writes (counted by the storage kernel).
const KINDS: [ResultKind; 5] = [
    ResultKind::Ok,
    ResultKind::FallibleError,
    ResultKind::Timeout,
    ResultKind::UnhandledChildExecutionError,
    ResultKind::PermanentFailure,
];

/// The handles of one function.
#[derive(Debug)]
pub(crate) struct FunctionMeters {
    schedule_to_start: Histogram,
    attempt_duration: Histogram,
    created_to_finished: Histogram,
    retries: Counter,
    attempts: [Counter; 5],
    finished: [Counter; 5],
}

impl FunctionMeters {
    fn new(function: &FunctionFqn) -> Self {
        let name = function.to_string();
        Self {
            schedule_to_start: histogram!(m::SCHEDULE_TO_START, m::FUNCTION => name.clone()),
            attempt_duration: histogram!(m::ATTEMPT_DURATION, m::FUNCTION => name.clone()),
            created_to_finished: histogram!(m::CREATED_TO_FINISHED, m::FUNCTION => name.clone()),
            retries: counter!(m::RETRIES, m::FUNCTION => name.clone()),
            attempts: RESULTS.map(
                |result| counter!(m::ATTEMPTS, m::FUNCTION => name.clone(), m::RESULT => result),
            ),
            finished: KINDS.map(|kind| {
                counter!(
                    m::EXECUTIONS_FINISHED,
                    m::FUNCTION => name.clone(),
                    m::OUTCOME => kind.name()
                )
            }),
        }
    }

    /// An attempt locked at `ran.0` whose outcome was written at `ran.1`, of an execution
    /// first scheduled at `scheduled_at`.
    pub(crate) fn attempt(
        &self,
        ran: (DateTime<Utc>, DateTime<Utc>),
        outcome: Outcome,
        scheduled_at: DateTime<Utc>,
    ) {
        if !m::enabled() {
            return;
        }
        let now = ran.1;
        self.attempt_duration.record(seconds(ran.0, now));
        let result = match outcome {
            Outcome::Finished(kind) => {
                let index = match kind {
                    ResultKind::Ok => 0,
                    ResultKind::FallibleError => 1,
                    ResultKind::Timeout => 2,
                    ResultKind::UnhandledChildExecutionError => 3,
                    // Not written by an executor; a failure of some kind, never `ok`.
                    ResultKind::PermanentFailure | ResultKind::Cancelled => 4,
                };
                self.finished[index].increment(1);
                self.created_to_finished.record(seconds(scheduled_at, now));
                0
            }
            Outcome::TemporarilyFailed => {
                self.retries.increment(1);
                1
            }
            Outcome::TimedOut => {
                self.retries.increment(1);
                2
            }
            Outcome::Unlocked => 3,
        };
        self.attempts[result].increment(1);
    }

    /// An attempt locked at `ran.0` whose worker wrote its own outcome (a workflow's run),
    /// returning at `ran.1`.
    pub(crate) fn attempt_by_worker(&self, ran: (DateTime<Utc>, DateTime<Utc>)) {
        if !m::enabled() {
            return;
        }
        self.attempt_duration.record(seconds(ran.0, ran.1));
        self.attempts[4].increment(1);
    }
}

/// The handles of one executor: one set per function, its runs in flight and free slots.
#[derive(Debug)]
pub(crate) struct Meters {
    /// Few (an executor runs a handful of functions): a scan finds one fastest.
    functions: Vec<(FunctionFqn, Arc<FunctionMeters>)>,
    in_flight: Gauge,
    free_slots: Gauge,
}

impl Meters {
    pub(crate) fn new(component: &ComponentId, functions: &[FunctionFqn]) -> Self {
        let component = component.to_string();
        Self {
            functions: functions
                .iter()
                .map(|function| (function.clone(), Arc::new(FunctionMeters::new(function))))
                .collect(),
            in_flight: gauge!(m::RUNS_IN_FLIGHT, m::COMPONENT => component.clone()),
            free_slots: gauge!(m::FREE_SLOTS, m::COMPONENT => component),
        }
    }

    /// The handles of `locked`'s function (registered now if the store handed over a
    /// function the executor of several did not name), after recording how long it had been due; none
    /// while recording is off.
    pub(crate) fn locked(
        &self,
        locked: &LockedExecution,
        now: DateTime<Utc>,
    ) -> Option<Arc<FunctionMeters>> {
        if !m::enabled() {
            return None;
        }
        let meters = match self.functions.as_slice() {
            // `lock_pending` hands over only the functions asked: with one, nothing to find.
            [(_, only)] => only.clone(),
            functions => (functions.iter())
                .find(|(function, _)| *function == locked.ffqn)
                .map_or_else(
                    || Arc::new(FunctionMeters::new(&locked.ffqn)),
                    |(_, meters)| meters.clone(),
                ),
        };
        meters.schedule_to_start.record(seconds(locked.due_at, now));
        Some(meters)
    }

    /// After a tick: the runs it holds and the free slots.
    pub(crate) fn tick(&self, in_flight: usize, free: usize) {
        if !m::enabled() {
            return;
        }
        #[expect(clippy::cast_precision_loss, reason = "counts of runs")]
        {
            self.in_flight.set(in_flight as f64);
            self.free_slots.set(free as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;
    use chrono::{DateTime, Utc};

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("an RFC 3339 time")
    }

    #[test]
    fn seconds_agree_with_chrono_on_one_day_across_days_and_backwards() {
        for (from, to) in [
            ("2026-12-03T10:00:00.250Z", "2026-12-03T10:00:01.125Z"),
            ("2026-12-03T23:59:59.900Z", "2026-12-04T00:00:00.100Z"),
            ("2024-02-28T12:00:00Z", "2024-03-01T12:00:00.000001Z"),
        ] {
            let expected = (at(to) - at(from)).as_seconds_f64();
            assert!(
                (seconds(at(from), at(to)) - expected).abs() < 1e-9,
                "{from} {to}"
            );
        }
        let (earlier, later) = (at("2026-12-03T10:00:00Z"), at("2026-12-03T10:00:05Z"));
        assert_eq!(seconds(later, earlier), 0.0, "never negative");
    }
}
