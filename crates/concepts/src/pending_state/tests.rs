//! Tests of the pending-state derivation, the locking rules and the incremental transitions.

use super::*;
use crate::{
    event::{
        ExecutionMetadata, JoinSetResponse, JoinSetResponseEvent, Json,
        SupportedFunctionReturnValue,
    },
    ids::{ComponentId, DelayId, FunctionFqn},
};
use chrono::TimeZone;
use std::time::Duration;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_000_000 + secs, 0).unwrap()
}

fn ev(secs: i64, event: ExecutionEventInner) -> ExecutionEvent {
    ExecutionEvent {
        created_at: t(secs),
        event,
    }
}

fn created(scheduled: i64) -> ExecutionEvent {
    ev(
        0,
        ExecutionEventInner::Created(Box::new(crate::Created {
            ffqn: FunctionFqn::new("ns:pkg/ifc", "f").unwrap(),
            params: Json(serde_json::json!([])),
            parent: None,
            scheduled_at: t(scheduled),
            retry_exp_backoff: Duration::from_secs(1),
            max_retries: 3,
            component_id: ComponentId::new("activity", "test").unwrap(),
            metadata: ExecutionMetadata::default(),
            scheduled_by: None,
        })),
    )
}

fn exr() -> ExecutorId {
    ExecutorId::from_parts(1, 1)
}

fn run(n: u128) -> RunId {
    RunId::from_parts(1, n)
}

fn locked(at: i64, until: i64, run_n: u128) -> ExecutionEvent {
    ev(
        at,
        ExecutionEventInner::Locked(Locked {
            component_id: ComponentId::new("activity", "test").unwrap(),
            executor_id: exr(),
            run_id: run(run_n),
            lock_expires_at: t(until),
        }),
    )
}

fn js(name: &str) -> JoinSetId {
    JoinSetId::new(crate::ids::JoinSetKind::Named, name).unwrap()
}

fn join_next(at: i64, j: &JoinSetId, run_expires: i64) -> ExecutionEvent {
    ev(
        at,
        ExecutionEventInner::HistoryEvent {
            event: HistoryEvent::JoinNext {
                join_set_id: j.clone(),
                run_expires_at: t(run_expires),
                closing: false,
            },
        },
    )
}

fn delay_response(at: i64, j: &JoinSetId, n: u128) -> JoinSetResponseEventOuter {
    JoinSetResponseEventOuter {
        created_at: t(at),
        event: JoinSetResponseEvent {
            join_set_id: j.clone(),
            event: JoinSetResponse::DelayFinished {
                delay_id: DelayId::from_parts(1, n),
            },
        },
    }
}

/// Replays `events` and `responses` (each response arriving after the event at its index)
/// through the incremental transitions and checks every intermediate state against the
/// reference derivation.
fn replay_incrementally(
    events: &[ExecutionEvent],
    responses: &[(usize, JoinSetResponseEventOuter)],
) -> PendingState {
    let mut state: Option<ExecutionState> = None;
    let mut seen_responses: Vec<JoinSetResponseEventOuter> = Vec::new();
    for (idx, event) in events.iter().enumerate() {
        let log = &events[..=idx];
        state = Some(match &state {
            None => ExecutionState {
                next_version: Version(1),
                pending_state: derive_pending_state(log, &[]).unwrap(),
            },
            Some(state) => state.after_append(event, |j| {
                let n = count_join_next(log, j);
                seen_responses
                    .iter()
                    .filter(|r| r.event.join_set_id == *j)
                    .nth(n - 1)
                    .map(|r| r.created_at)
            }),
        });
        for (_, response) in responses.iter().filter(|(after, _)| *after == idx) {
            seen_responses.push(response.clone());
            let j = &response.event.join_set_id;
            let count = seen_responses
                .iter()
                .filter(|r| r.event.join_set_id == *j)
                .count();
            state = state
                .map(|s| s.after_response(j, response.created_at, count, count_join_next(log, j)));
        }
        let state = state.as_ref().unwrap();
        assert_eq!(
            Some(&state.pending_state),
            derive_pending_state(log, &seen_responses).as_ref(),
            "after event {idx}"
        );
    }
    state.unwrap().pending_state
}

#[test]
fn created_is_pending_at_scheduled_time() {
    assert_eq!(
        derive_pending_state(&[created(5)], &[]),
        Some(PendingState::PendingAt { scheduled_at: t(5) })
    );
    assert_eq!(derive_pending_state(&[], &[]), None);
}

#[test]
fn history_events_are_skipped() {
    let events = [
        created(0),
        locked(1, 10, 1),
        ev(
            2,
            ExecutionEventInner::HistoryEvent {
                event: HistoryEvent::Persist {
                    value: Json(serde_json::json!(1)),
                    kind: crate::event::PersistKind::Custom("x".into()),
                },
            },
        ),
    ];
    let state = replay_incrementally(&events, &[]);
    assert!(
        matches!(state, PendingState::Locked { lock_expires_at, .. } if lock_expires_at == t(10))
    );
}

#[test]
fn finished_records_version_and_kind() {
    let events = [
        created(0),
        locked(1, 10, 1),
        ev(
            2,
            ExecutionEventInner::Finished {
                result: Ok(SupportedFunctionReturnValue::FallibleResultErr(Json(
                    serde_json::json!("e"),
                ))),
            },
        ),
    ];
    assert_eq!(
        replay_incrementally(&events, &[]),
        PendingState::Finished {
            version: Version(2),
            finished_at: t(2),
            result_kind: ResultKind::FallibleError,
        }
    );
}

#[test]
fn join_next_blocks_until_nth_response() {
    let j = js("a");
    let other = js("b");
    let events = [
        created(0),
        locked(1, 100, 1),
        join_next(2, &j, 50),
        join_next(3, &j, 60),
    ];
    // Blocked after the first JoinNext; a response for another join set changes nothing.
    let responses = [
        (2, delay_response(4, &other, 1)),
        (2, delay_response(70, &j, 2)),
    ];
    // The first response for `a` arrived at 70 > run_expires_at 50: pending at 70.
    // The second JoinNext (run_expires_at 60) has no second response: blocked.
    let state = replay_incrementally(&events, &responses);
    assert_eq!(
        state,
        PendingState::BlockedByJoinSet {
            join_set_id: j.clone(),
            lock_expires_at: t(60),
            closing: false
        }
    );
    let mut with_second = responses.to_vec();
    with_second.push((3, delay_response(65, &j, 3)));
    assert_eq!(
        replay_incrementally(&events, &with_second),
        PendingState::PendingAt {
            scheduled_at: t(65)
        }
    );
}

#[test]
fn response_before_join_next_makes_it_pending_at_once() {
    let j = js("a");
    let events = [created(0), locked(1, 100, 1), join_next(5, &j, 50)];
    let state = replay_incrementally(&events, &[(1, delay_response(3, &j, 1))]);
    assert_eq!(
        state,
        PendingState::PendingAt {
            scheduled_at: t(50)
        }
    );
}

#[test]
fn two_join_nexts_need_two_responses() {
    let j = js("a");
    let events = [
        created(0),
        locked(1, 100, 1),
        join_next(2, &j, 10),
        join_next(3, &j, 10),
    ];
    let state = replay_incrementally(&events, &[(3, delay_response(20, &j, 1))]);
    assert!(
        matches!(state, PendingState::BlockedByJoinSet { .. }),
        "{state:?}"
    );
}

#[test]
fn locking_rules() {
    let pending = PendingState::PendingAt {
        scheduled_at: t(10),
    };
    assert_eq!(
        pending.can_lock(t(9), exr(), run(1), t(20)),
        Err(ValidationError::NotYetPending {
            scheduled_at: t(10)
        })
    );
    assert_eq!(pending.can_lock(t(10), exr(), run(1), t(20)), Ok(()));
    assert!(matches!(
        pending.can_lock(t(10), exr(), run(1), t(10)),
        Err(ValidationError::InvalidExpiryDate { .. })
    ));
    let held = PendingState::Locked {
        executor_id: exr(),
        run_id: run(1),
        lock_expires_at: t(20),
    };
    assert_eq!(
        held.can_lock(t(15), exr(), run(1), t(30)),
        Ok(()),
        "the same run extends"
    );
    assert_eq!(
        held.can_lock(t(15), exr(), run(2), t(30)),
        Err(ValidationError::AlreadyLocked)
    );
    assert_eq!(
        held.can_lock(t(15), ExecutorId::from_parts(2, 2), run(1), t(30)),
        Err(ValidationError::AlreadyLocked)
    );
    assert_eq!(
        held.can_lock(t(25), ExecutorId::from_parts(2, 2), run(3), t(30)),
        Err(ValidationError::AlreadyLocked),
        "an expired lease is not taken over"
    );
    let blocked = PendingState::BlockedByJoinSet {
        join_set_id: js("a"),
        lock_expires_at: t(1),
        closing: false,
    };
    assert!(matches!(
        blocked.can_lock(t(5), exr(), run(1), t(30)),
        Err(ValidationError::BlockedByJoinSet { .. })
    ));
    let finished = PendingState::Finished {
        version: Version(2),
        finished_at: t(1),
        result_kind: ResultKind::Ok,
    };
    assert_eq!(
        finished.can_lock(t(5), exr(), run(1), t(30)),
        Err(ValidationError::AlreadyFinished)
    );
}

#[test]
fn append_validation_order() {
    let finished = ExecutionState {
        next_version: Version(2),
        pending_state: PendingState::Finished {
            version: Version(2),
            finished_at: t(1),
            result_kind: ResultKind::Ok,
        },
    };
    let any_event = ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: t(3),
    };
    for version in [0, 2, 3, 99] {
        let err = finished
            .validate_append(Version(version), t(2), &any_event)
            .unwrap_err();
        assert_eq!(
            err,
            AppendRefused::Invalid(ValidationError::AlreadyFinished),
            "at version {version}"
        );
    }
    let open = ExecutionState {
        next_version: Version(3),
        pending_state: PendingState::PendingAt { scheduled_at: t(0) },
    };
    assert!(matches!(
        open.validate_append(Version(2), t(2), &any_event),
        Err(AppendRefused::VersionMismatch {
            appending_version: Version(2),
            expected_version: Version(3)
        })
    ));
    let created_event = created(0).event;
    assert_eq!(
        open.validate_append(Version(3), t(2), &created_event),
        Err(AppendRefused::Invalid(
            ValidationError::CreatedEventAppended
        ))
    );
    assert!(
        open.validate_append(Version(3), t(2), &locked(2, 1, 1).event)
            .is_err(),
        "expiry before now"
    );
    assert!(
        open.validate_append(Version(3), t(2), &locked(2, 10, 1).event)
            .is_ok()
    );
}

#[test]
fn finished_keeps_its_version_as_next() {
    let state = ExecutionState {
        next_version: Version(2),
        pending_state: PendingState::PendingAt { scheduled_at: t(0) },
    };
    let next = state.after_append(
        &ev(
            3,
            ExecutionEventInner::Finished {
                result: Err(crate::event::FinishedExecutionError::PermanentTimeout),
            },
        ),
        |_| None,
    );
    assert_eq!(next.next_version, Version(2));
    assert!(matches!(
        next.pending_state,
        PendingState::Finished {
            version: Version(2),
            result_kind: ResultKind::Timeout,
            ..
        }
    ));
}
