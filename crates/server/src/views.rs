//! The model's types turned into the API's documents ([`crate::types`]): one function per
//! shape, so that the JSON a client reads (and what the web UI shows) changes only when this
//! file does.

use crate::types::{
    EventData, EventView, ExecutionView, HistoryView, ParentView, ResponseData, ResponseView,
    ResultView, StateData, StateView, SummaryView,
};
use chrono::{DateTime, Utc};
use concepts::{
    ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog, ExecutionSummary,
    FinishedExecutionError, FinishedExecutionResult, HistoryEvent, JoinSetId, JoinSetRequest,
    JoinSetResponse, JoinSetResponseEventOuter, PARKED_EXPLAINED, PendingState, ResultKind,
    SupportedFunctionReturnValue,
};
use std::time::Duration;

/// `2026-01-31 12:00:01.234 UTC`.
fn words(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `ok`, `error`, `timeout`, `unhandled_child_error`, `failed`, `cancelled`: the `kind`s of
/// [`ResultView`] ([`ResultKind::name`]).
pub fn result_kind(kind: ResultKind) -> &'static str {
    kind.name()
}

/// Where an execution stands, in words and as data.
pub fn state(state: &PendingState) -> StateView {
    let (summary, data) = match state {
        _ if state.is_parked() => (
            format!("Parked: {PARKED_EXPLAINED}"),
            StateData::Parked {
                reason: None,
                since: None,
            },
        ),
        PendingState::PendingAt { scheduled_at } => (
            format!("PendingAt {}", words(*scheduled_at)),
            StateData::Pending {
                scheduled_at: *scheduled_at,
            },
        ),
        PendingState::Locked {
            executor_id,
            run_id,
            lock_expires_at,
        } => (
            format!("Locked until {}", words(*lock_expires_at)),
            StateData::Locked {
                executor_id: executor_id.to_string(),
                run_id: run_id.to_string(),
                lock_expires_at: *lock_expires_at,
            },
        ),
        PendingState::BlockedByJoinSet {
            join_set_id,
            lock_expires_at,
            closing,
        } => (
            format!(
                "BlockedByJoinSet {join_set_id}{}",
                if *closing { " (closing)" } else { "" }
            ),
            StateData::Blocked {
                join_set_id: join_set_id.to_string(),
                lock_expires_at: *lock_expires_at,
                closing: *closing,
            },
        ),
        PendingState::Finished {
            version,
            finished_at,
            result_kind: kind,
        } => (
            format!("Finished ({kind}) at {}", words(*finished_at)),
            StateData::Finished {
                version: version.0,
                finished_at: *finished_at,
                result_kind: result_kind(*kind).to_string(),
            },
        ),
    };
    StateView { summary, data }
}

/// A finished execution's result, by kind.
pub fn result(result: &FinishedExecutionResult) -> ResultView {
    match result {
        Ok(SupportedFunctionReturnValue::None) => ResultView::Ok {
            value: serde_json::Value::Null,
        },
        Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(value)) => ResultView::Ok {
            value: value.0.clone(),
        },
        Ok(SupportedFunctionReturnValue::FallibleResultErr(value)) => ResultView::Error {
            value: value.0.clone(),
        },
        Err(FinishedExecutionError::PermanentTimeout) => ResultView::Timeout,
        Err(FinishedExecutionError::UnhandledChildExecutionError {
            child_execution_id,
            root_cause_id,
        }) => ResultView::UnhandledChildError {
            child_id: child_execution_id.to_string(),
            root_cause_id: root_cause_id.to_string(),
        },
        Err(FinishedExecutionError::PermanentFailure {
            reason_full,
            kind,
            detail,
            ..
        }) => ResultView::Failed {
            failure: kind.to_string(),
            reason: reason_full.clone(),
            detail: detail.clone(),
        },
        Err(FinishedExecutionError::Cancelled { reason }) => ResultView::Cancelled {
            reason: reason.clone(),
        },
        // The model may learn new kinds of failure; a client sees them as failures.
        Err(other) => ResultView::Failed {
            failure: "Other".to_string(),
            reason: other.to_string(),
            detail: None,
        },
    }
}

fn parent(parent: Option<&(ExecutionId, JoinSetId)>) -> Option<ParentView> {
    parent.map(|(id, join_set_id)| ParentView {
        id: id.to_string(),
        join_set_id: join_set_id.to_string(),
    })
}

/// One row of a listing.
pub fn summary(summary: &ExecutionSummary) -> SummaryView {
    SummaryView {
        id: summary.execution_id.to_string(),
        function: summary.ffqn.to_string(),
        state: state(&summary.pending_state),
        created_at: summary.created_at,
        scheduled_at: summary.scheduled_at,
        next_version: summary.next_version.0,
    }
}

/// The document of one execution; `None` for a log without its `Created` event, which no
/// backend returns.
pub fn execution(log: &ExecutionLog) -> Option<ExecutionView> {
    let created = log.events.first()?;
    let concepts::Created {
        ffqn,
        params,
        parent: parent_of,
        scheduled_at,
        retry_exp_backoff,
        max_retries,
        component_id,
        metadata,
        ..
    } = created.event.created()?;
    Some(ExecutionView {
        id: log.execution_id.to_string(),
        function: ffqn.to_string(),
        params: params.0.clone(),
        component: component_id.to_string(),
        max_retries: *max_retries,
        retry_exp_backoff_ms: millis(*retry_exp_backoff),
        parent: parent(parent_of.as_ref()),
        created_at: created.created_at,
        scheduled_at: *scheduled_at,
        state: log.parked().map_or_else(
            || state(&log.pending_state),
            |(reason, since)| StateView {
                summary: format!(
                    "Parked since {}: {reason}; {PARKED_EXPLAINED}",
                    words(since)
                ),
                data: StateData::Parked {
                    reason: Some(reason.to_string()),
                    since: Some(since),
                },
            },
        ),
        result: log.finished_result().map(result),
        next_version: log.next_version.0,
        events: log.event_count(),
        metadata: metadata.0.clone(),
        status: log.status().map(|status| status.0.clone()),
        responses: log.responses.iter().map(response).collect(),
    })
}

fn response(response: &JoinSetResponseEventOuter) -> ResponseView {
    let data = match &response.event.event {
        JoinSetResponse::DelayFinished { delay_id } => ResponseData::DelayFinished {
            delay_id: delay_id.to_string(),
        },
        JoinSetResponse::ChildExecutionFinished {
            child_execution_id,
            result: child_result,
            ..
        } => ResponseData::ChildFinished {
            child_id: child_execution_id.to_string(),
            result: result(child_result),
        },
    };
    ResponseView {
        created_at: response.created_at,
        join_set_id: response.event.join_set_id.to_string(),
        response: data,
    }
}

/// The event at `version` of a log.
pub fn event(version: u32, event: &ExecutionEvent) -> EventView {
    let data = match &event.event {
        ExecutionEventInner::Created(created) => EventData::Created {
            function: created.ffqn.to_string(),
            params: created.params.0.clone(),
            parent: parent(created.parent.as_ref()),
            scheduled_at: created.scheduled_at,
            component: created.component_id.to_string(),
            max_retries: created.max_retries,
            retry_exp_backoff_ms: millis(created.retry_exp_backoff),
        },
        ExecutionEventInner::Locked(locked) => EventData::Locked {
            component: locked.component_id.to_string(),
            executor_id: locked.executor_id.to_string(),
            run_id: locked.run_id.to_string(),
            lock_expires_at: locked.lock_expires_at,
        },
        ExecutionEventInner::Unlocked {
            backoff_expires_at,
            reason,
        } => EventData::Unlocked {
            backoff_expires_at: *backoff_expires_at,
            reason: reason.clone(),
        },
        ExecutionEventInner::TemporarilyFailed {
            backoff_expires_at,
            reason_full,
            detail,
            ..
        } => EventData::TemporarilyFailed {
            backoff_expires_at: *backoff_expires_at,
            reason: reason_full.clone(),
            detail: detail.clone(),
        },
        ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at } => {
            EventData::TemporarilyTimedOut {
                backoff_expires_at: *backoff_expires_at,
            }
        }
        ExecutionEventInner::Finished { result: finished } => EventData::Finished {
            result: result(finished),
        },
        ExecutionEventInner::HistoryEvent { event } => EventData::History {
            step: history(event),
        },
    };
    EventView {
        version,
        created_at: event.created_at,
        event: data,
    }
}

fn history(event: &HistoryEvent) -> HistoryView {
    match event {
        HistoryEvent::Persist { value, .. } => HistoryView::Persist {
            value: value.0.clone(),
        },
        HistoryEvent::JoinSetCreate { join_set_id, .. } => HistoryView::JoinSetCreate {
            join_set_id: join_set_id.to_string(),
        },
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request: JoinSetRequest::ChildExecutionRequest { child_execution_id },
        } => HistoryView::ChildRequest {
            join_set_id: join_set_id.to_string(),
            child_id: child_execution_id.to_string(),
        },
        HistoryEvent::JoinSetRequest {
            join_set_id,
            request:
                JoinSetRequest::DelayRequest {
                    delay_id,
                    expires_at,
                },
        } => HistoryView::DelayRequest {
            join_set_id: join_set_id.to_string(),
            delay_id: delay_id.to_string(),
            expires_at: *expires_at,
        },
        HistoryEvent::JoinNext {
            join_set_id,
            run_expires_at,
            closing,
        } => HistoryView::JoinNext {
            join_set_id: join_set_id.to_string(),
            run_expires_at: *run_expires_at,
            closing: *closing,
        },
        HistoryEvent::Schedule {
            execution_id,
            scheduled_at,
        } => HistoryView::Schedule {
            id: execution_id.to_string(),
            scheduled_at: *scheduled_at,
        },
    }
}
