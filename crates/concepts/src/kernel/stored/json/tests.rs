//! The documents written by hand are the ones serde_json writes, for every value.

use super::*;
use crate::{ComponentId, ExecutorId, RunId, Version, time::rfc3339::tests::any_timestamp};
use chrono::{DateTime, Utc};
use proptest::prelude::*;

/// Mostly a timestamp of the years a store writes (the hand-written path), with each of the
/// four fraction lengths; sometimes any that chrono holds (written by serde).
fn a_timestamp() -> impl Strategy<Value = DateTime<Utc>> {
    let usual = (0_i64..4_102_444_800, any_timestamp()).prop_filter_map(
        "a representable time",
        |(seconds, any)| {
            DateTime::from_timestamp(seconds, any.timestamp_subsec_nanos() % 1_000_000_000)
        },
    );
    prop_oneof![4 => usual, 1 => any_timestamp()]
}

fn any_ulid_parts() -> impl Strategy<Value = (u64, u128)> {
    (
        0..(1_u64 << 48),
        any::<u128>().prop_map(|random| random >> 48),
    )
}

fn any_result_kind() -> impl Strategy<Value = ResultKind> {
    prop_oneof![
        Just(ResultKind::Ok),
        Just(ResultKind::FallibleError),
        Just(ResultKind::Timeout),
        Just(ResultKind::UnhandledChildExecutionError),
        Just(ResultKind::PermanentFailure),
        Just(ResultKind::Cancelled),
    ]
}

/// Every state but `BlockedByJoinSet` (which serde writes): each written by hand when its
/// timestamp is one the fast path takes.
fn any_state() -> impl Strategy<Value = PendingState> {
    prop_oneof![
        a_timestamp().prop_map(|scheduled_at| PendingState::PendingAt { scheduled_at }),
        (any_ulid_parts(), any_ulid_parts(), a_timestamp()).prop_map(
            |((t1, r1), (t2, r2), lock_expires_at)| PendingState::Locked {
                executor_id: ExecutorId::from_parts(t1, r1),
                run_id: RunId::from_parts(t2, r2),
                lock_expires_at,
            }
        ),
        (any::<u32>(), a_timestamp(), any_result_kind()).prop_map(
            |(version, finished_at, result_kind)| PendingState::Finished {
                version: Version(version),
                finished_at,
                result_kind,
            }
        ),
    ]
}

/// A component name with what JSON must escape in it (quotes, backslashes, characters beyond
/// ASCII) as often as not.
fn any_component_id() -> impl Strategy<Value = ComponentId> {
    ("[a-z_-]{1,8}", "[a-z\"\\\\/é😀<>]{1,12}").prop_filter_map("a valid id", |(kind, name)| {
        ComponentId::new(kind, name).ok()
    })
}

fn any_locked_event() -> impl Strategy<Value = ExecutionEvent> {
    let locked = (
        any_component_id(),
        any_ulid_parts(),
        any_ulid_parts(),
        a_timestamp(),
    );
    (a_timestamp(), locked).prop_map(|(created_at, (component_id, (t1, r1), (t2, r2), ends))| {
        ExecutionEvent {
            created_at,
            event: ExecutionEventInner::Locked(Locked {
                component_id,
                executor_id: ExecutorId::from_parts(t1, r1),
                run_id: RunId::from_parts(t2, r2),
                lock_expires_at: ends,
            }),
        }
    })
}

/// A JSON value of a few levels, with strings JSON must escape.
fn any_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[a-z\"\\\\\n\u{1}é😀]{0,8}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z\"]{0,4}", inner, 0..4)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

fn any_finished_event() -> impl Strategy<Value = ExecutionEvent> {
    let value = prop_oneof![
        Just(SupportedFunctionReturnValue::None),
        any_json().prop_map(|v| SupportedFunctionReturnValue::InfallibleOrResultOk(crate::Json(v))),
        any_json().prop_map(|v| SupportedFunctionReturnValue::FallibleResultErr(crate::Json(v))),
    ];
    (a_timestamp(), value).prop_map(|(created_at, value)| ExecutionEvent {
        created_at,
        event: ExecutionEventInner::Finished { result: Ok(value) },
    })
}

fn any_created_event() -> impl Strategy<Value = ExecutionEvent> {
    let ids = (any_ulid_parts(), any_ulid_parts()).prop_map(|((t1, r1), (t2, r2))| {
        (
            crate::ExecutionId::from(crate::ExecutionIdTopLevel::from_parts(t1, r1)),
            crate::ExecutionId::from(crate::ExecutionIdTopLevel::from_parts(t2, r2)),
        )
    });
    let names = ("[a-z]{1,6}", "[a-z\"é]{1,6}", "[a-z0-9_-]{1,6}");
    let metadata = prop::collection::btree_map("[a-z\"]{1,6}", "[a-z\"\\\\ ]{0,6}", 0..3);
    let numbers = (any::<u64>(), any::<u32>(), any::<bool>(), any::<bool>());
    (
        a_timestamp(),
        a_timestamp(),
        any_json(),
        any_component_id(),
        ids,
        names,
        metadata,
        numbers,
    )
        .prop_filter_map(
            "valid names",
            |(
                created_at,
                scheduled_at,
                params,
                component_id,
                (id, by),
                (ifc, function, join_set),
                metadata,
                (backoff, retries, child, scheduled),
            )| {
                let ffqn = format!("{ifc}:pkg/ifc.{function}").parse().ok()?;
                let parent = child
                    .then(|| format!("o:{join_set}").parse().ok().map(|js| (id, js)))
                    .flatten();
                Some(ExecutionEvent {
                    created_at,
                    event: ExecutionEventInner::Created(Box::new(Created {
                        ffqn,
                        params: crate::Json(params),
                        parent,
                        scheduled_at,
                        retry_exp_backoff: std::time::Duration::from_nanos(backoff),
                        max_retries: retries,
                        component_id,
                        metadata: crate::ExecutionMetadata(metadata),
                        scheduled_by: scheduled.then_some(by),
                    })),
                })
            },
        )
}

proptest! {
    #[test]
    fn a_created_event_is_written_as_serde_writes_it(event in any_created_event()) {
        prop_assert_eq!(event_json(&event).unwrap(), serde_json::to_string(&event).unwrap());
    }

    #[test]
    fn a_successful_finished_event_is_written_as_serde_writes_it(event in any_finished_event()) {
        prop_assert_eq!(event_json(&event).unwrap(), serde_json::to_string(&event).unwrap());
    }

    #[test]
    fn a_state_is_written_as_serde_writes_it(state in any_state()) {
        prop_assert_eq!(state_json(&state).unwrap(), serde_json::to_string(&state).unwrap());
    }

    #[test]
    fn a_locked_event_is_written_as_serde_writes_it(event in any_locked_event()) {
        prop_assert_eq!(event_json(&event).unwrap(), serde_json::to_string(&event).unwrap());
    }
}

#[test]
fn a_usual_locked_state_is_the_expected_text() {
    let at = chrono::DateTime::from_timestamp(1_796_000_000, 123_456_000).unwrap();
    let state = PendingState::Locked {
        executor_id: ExecutorId::from_parts(1, 2),
        run_id: RunId::from_parts(3, 4),
        lock_expires_at: at,
    };
    let expected = format!(
        r#"{{"Locked":{{"executor_id":"{}","run_id":"{}","lock_expires_at":"2026-11-30T00:53:20.123456Z"}}}}"#,
        ExecutorId::from_parts(1, 2),
        RunId::from_parts(3, 4),
    );
    assert_eq!(state_json(&state).unwrap(), expected);
}
