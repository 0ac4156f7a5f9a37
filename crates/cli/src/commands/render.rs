//! Text forms of times, durations, states, results and events, for tables and timelines.

use chrono::{DateTime, Utc};
use comfy_table::{Table, presets};
use concepts::{
    ExecutionEvent, ExecutionEventInner, FinishedExecutionError, FinishedExecutionResult,
    HistoryEvent, JoinSetRequest, JoinSetResponse, JoinSetResponseEventOuter, PendingState,
    SupportedFunctionReturnValue,
};
use std::time::Duration;

/// A table with a header row and no borders, aligned with spaces: easy to read and to grep.
pub fn table<I, S>(header: I) -> Table
where
    I: IntoIterator<Item = S>,
    S: Into<comfy_table::Cell>,
{
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_header(header);
    table
}

/// The table as text, without the spaces that pad the last column.
pub fn finish(table: &Table) -> String {
    let mut text = String::new();
    for line in table.to_string().lines() {
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// `2025-01-31 12:00:01.234 UTC`.
pub fn datetime(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
}

/// `12:00:01.234`.
pub fn time(at: DateTime<Utc>) -> String {
    at.format("%H:%M:%S%.3f").to_string()
}

/// `+1.234s` after `origin` (`-0.010s` before it).
pub fn offset(origin: DateTime<Utc>, at: DateTime<Utc>) -> String {
    let micros = (at - origin).num_microseconds().unwrap_or(i64::MAX);
    let sign = if micros < 0 { "-" } else { "+" };
    let micros = micros.unsigned_abs();
    format!(
        "{sign}{}.{:03}s",
        micros / 1_000_000,
        (micros % 1_000_000) / 1_000
    )
}

/// `250 ms`, `1.5 s`.
pub fn duration(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// `420 ms`, `5.81 s` for a number of milliseconds.
pub fn millis(ms: f64) -> String {
    if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1_000.0)
    }
}

/// The state with its time: `Finished (Ok) at ...`, `PendingAt ...`, `Locked until ...`,
/// `BlockedByJoinSet n:children`.
pub fn state(state: &PendingState) -> String {
    match state {
        _ if state.is_parked() => "Parked".to_string(),
        PendingState::PendingAt { scheduled_at } => {
            format!("PendingAt {}", datetime(*scheduled_at))
        }
        PendingState::Locked {
            lock_expires_at, ..
        } => format!("Locked until {}", datetime(*lock_expires_at)),
        PendingState::BlockedByJoinSet {
            join_set_id,
            closing,
            ..
        } => {
            let closing = if *closing { " (closing)" } else { "" };
            format!("BlockedByJoinSet {join_set_id}{closing}")
        }
        PendingState::Finished {
            finished_at,
            result_kind,
            ..
        } => format!("Finished ({result_kind}) at {}", datetime(*finished_at)),
    }
}

/// The state in full, for `show`.
pub fn state_detail(state: &PendingState) -> String {
    match state {
        PendingState::PendingAt { scheduled_at } => {
            format!("PendingAt: due at {}", datetime(*scheduled_at))
        }
        PendingState::Locked {
            executor_id,
            run_id,
            lock_expires_at,
        } => format!(
            "Locked by {executor_id}, run {run_id}, lease until {}",
            datetime(*lock_expires_at)
        ),
        PendingState::BlockedByJoinSet {
            join_set_id,
            lock_expires_at,
            closing,
        } => format!(
            "BlockedByJoinSet: awaiting the next response of {join_set_id}{} (run expired at {})",
            if *closing { ", closing" } else { "" },
            datetime(*lock_expires_at)
        ),
        PendingState::Finished {
            version,
            finished_at,
            result_kind,
        } => format!(
            "Finished ({result_kind}) at {}, version {version}",
            datetime(*finished_at)
        ),
    }
}

/// `Ok {"attempts":2}`, `Err (returned by the function) {...}`,
/// `PermanentFailure (ActivityTrap): ...`, `Cancelled: <reason>`.
pub fn result(result: &FinishedExecutionResult) -> String {
    match result {
        Ok(SupportedFunctionReturnValue::None) => "Ok".to_string(),
        Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(value)) => format!("Ok {value}"),
        Ok(SupportedFunctionReturnValue::FallibleResultErr(value)) => {
            format!("Err (returned by the function) {value}")
        }
        Err(FinishedExecutionError::PermanentTimeout) => "PermanentTimeout".to_string(),
        Err(err @ FinishedExecutionError::UnhandledChildExecutionError { .. }) => {
            format!("UnhandledChildExecutionError: {err}")
        }
        Err(FinishedExecutionError::PermanentFailure {
            reason_full, kind, ..
        }) => format!("PermanentFailure ({kind}): {reason_full}"),
        Err(FinishedExecutionError::Cancelled { reason }) => format!("Cancelled: {reason}"),
        // An error kind added later: its message, until it gets a rendering of its own.
        Err(err) => err.to_string(),
    }
}

/// The name of an event for the timeline: the variant, or the history event's variant.
pub fn event_name(event: &ExecutionEventInner) -> &'static str {
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

/// What an event says, in a line; times as offsets from `origin` (the creation).
pub fn event_details(origin: DateTime<Utc>, event: &ExecutionEvent) -> String {
    let at = |t: DateTime<Utc>| format!("{} ({})", time(t), offset(origin, t));
    match &event.event {
        ExecutionEventInner::Created(created) => {
            let concepts::Created {
                ffqn,
                params,
                parent,
                scheduled_at,
                ..
            } = &**created;
            let parent = parent
                .as_ref()
                .map(|(parent, join_set)| format!(", child of {parent} in {join_set}"))
                .unwrap_or_default();
            format!("{ffqn} {params}, due at {}{parent}", at(*scheduled_at))
        }
        ExecutionEventInner::Locked(locked) => format!(
            "by {} ({}), run {}, lease until {}",
            locked.executor_id,
            locked.component_id,
            locked.run_id,
            at(locked.lock_expires_at)
        ),
        ExecutionEventInner::Unlocked {
            backoff_expires_at,
            reason,
        } if *backoff_expires_at == concepts::PARKED_UNTIL => {
            format!("{reason}; parked until code agrees with its log")
        }
        ExecutionEventInner::Unlocked {
            backoff_expires_at,
            reason,
        } => format!("{reason}; due again at {}", at(*backoff_expires_at)),
        ExecutionEventInner::TemporarilyFailed {
            backoff_expires_at,
            reason_full,
            ..
        } => format!("{reason_full}; retry at {}", at(*backoff_expires_at)),
        ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at } => {
            format!("the lease expired; retry at {}", at(*backoff_expires_at))
        }
        ExecutionEventInner::Finished { result: finished } => result(finished),
        ExecutionEventInner::HistoryEvent { event: history } => match history {
            HistoryEvent::Persist { value, kind } => format!("{kind:?} = {value}"),
            HistoryEvent::JoinSetCreate { join_set_id, .. } => format!("{join_set_id}"),
            HistoryEvent::JoinSetRequest {
                join_set_id,
                request,
            } => match request {
                JoinSetRequest::ChildExecutionRequest { child_execution_id } => {
                    format!("{join_set_id}: child {child_execution_id}")
                }
                JoinSetRequest::DelayRequest {
                    delay_id,
                    expires_at,
                } => format!("{join_set_id}: {delay_id} until {}", at(*expires_at)),
            },
            HistoryEvent::JoinNext {
                join_set_id,
                run_expires_at,
                closing,
            } => {
                let closing = if *closing { " (closing)" } else { "" };
                if *run_expires_at <= event.created_at {
                    format!("await {join_set_id}{closing}, run given up until a response")
                } else {
                    format!(
                        "await {join_set_id}{closing}, run kept until {}",
                        at(*run_expires_at)
                    )
                }
            }
            HistoryEvent::Schedule {
                execution_id,
                scheduled_at,
            } => format!("{execution_id} at {}", at(*scheduled_at)),
        },
    }
}

/// The kind and details of a response.
pub fn response(response: &JoinSetResponseEventOuter) -> (&'static str, String) {
    match &response.event.event {
        JoinSetResponse::DelayFinished { delay_id } => ("DelayFinished", format!("{delay_id}")),
        JoinSetResponse::ChildExecutionFinished {
            child_execution_id,
            finished_version,
            result: finished,
        } => (
            "ChildExecutionFinished",
            format!(
                "{child_execution_id} (version {finished_version}): {}",
                result(finished)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_durations_read_well() {
        let origin = DateTime::from_timestamp_millis(1_000_000).unwrap();
        let later = DateTime::from_timestamp_millis(1_001_234).unwrap();
        assert_eq!(offset(origin, later), "+1.234s");
        assert_eq!(offset(later, origin), "-1.234s");
        assert_eq!(duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(duration(Duration::from_millis(1_500)), "1.5 s");
        assert_eq!(millis(420.4), "420 ms");
        assert_eq!(millis(5_812.0), "5.81 s");
    }

    #[test]
    fn tables_lose_their_trailing_padding() {
        let mut t = table(["A", "LONG HEADER"]);
        t.add_row(["value", "x"]);
        let text = finish(&t);
        assert!(text.lines().all(|line| !line.ends_with(' ')), "{text:?}");
        assert_eq!(text.lines().count(), 2);
    }
}
