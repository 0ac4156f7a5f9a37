//! Proptest strategies for ids, JSON payloads and events.

use chrono::{DateTime, TimeZone, Utc};
use concepts::{
    ComponentId, DelayId, ExecutionEventInner, ExecutionId, ExecutionIdTopLevel, ExecutorId,
    FunctionFqn, HistoryEvent, JoinSetId, JoinSetKind, JoinSetRequest, Json, Locked, PersistKind,
    RunId,
};
use proptest::prelude::*;

/// Any ULID-based id's parts.
fn ulid_parts() -> impl Strategy<Value = (u64, u128)> {
    (
        0u64..(1 << 48),
        any::<u128>().prop_map(|r| r & ((1 << 80) - 1)),
    )
}

/// A top-level execution id.
pub fn execution_id_top_level() -> impl Strategy<Value = ExecutionId> {
    ulid_parts().prop_map(|(t, r)| ExecutionIdTopLevel::from_parts(t, r).into())
}

/// A join set id with any kind and a legal (possibly empty) name.
pub fn join_set_id() -> impl Strategy<Value = JoinSetId> {
    (
        prop_oneof![
            Just(JoinSetKind::OneOff),
            Just(JoinSetKind::Named),
            Just(JoinSetKind::Generated)
        ],
        "[a-zA-Z0-9_/-]{0,12}",
    )
        .prop_map(|(kind, name)| {
            JoinSetId::new(kind, name).expect("the regex only makes legal names")
        })
}

/// An execution id: top level, or derived up to three levels deep.
pub fn execution_id() -> impl Strategy<Value = ExecutionId> {
    (
        execution_id_top_level(),
        proptest::collection::vec((join_set_id(), 1u64..1000), 0..3),
    )
        .prop_map(|(top, steps)| {
            steps.iter().fold(top, |parent, (join_set_id, idx)| {
                parent.next_level(join_set_id, *idx)
            })
        })
}

/// An executor id.
pub fn executor_id() -> impl Strategy<Value = ExecutorId> {
    ulid_parts().prop_map(|(t, r)| ExecutorId::from_parts(t, r))
}

/// A run id.
pub fn run_id() -> impl Strategy<Value = RunId> {
    ulid_parts().prop_map(|(t, r)| RunId::from_parts(t, r))
}

/// A delay id.
pub fn delay_id() -> impl Strategy<Value = DelayId> {
    ulid_parts().prop_map(|(t, r)| DelayId::from_parts(t, r))
}

/// A function name whose interface may contain dots.
pub fn ffqn() -> impl Strategy<Value = FunctionFqn> {
    ("[a-z][a-z0-9:/@.-]{0,20}[a-z0-9]", "[a-z][a-z0-9_-]{0,12}")
        .prop_map(|(ifc, f)| FunctionFqn::new(ifc, f).expect("the regexes only make legal names"))
}

/// A component id.
pub fn component_id() -> impl Strategy<Value = ComponentId> {
    ("[a-z][a-z0-9_-]{0,10}", "[a-z][a-z0-9:/_.-]{0,16}")
        .prop_map(|(t, n)| ComponentId::new(t, n).expect("the regexes only make legal names"))
}

/// A timestamp between 2000 and 2100, with microsecond precision (what every backend keeps).
pub fn timestamp() -> impl Strategy<Value = DateTime<Utc>> {
    let start = Utc
        .with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or_default();
    (0i64..3_155_760_000_000_000)
        .prop_map(move |micros| start + chrono::TimeDelta::microseconds(micros))
}

/// A JSON value up to a small depth; objects keep their key order.
pub fn json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[ -~]{0,10}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::vec(("[a-z]{1,6}", inner), 0..4)
                .prop_map(|entries| { serde_json::Value::Object(entries.into_iter().collect()) }),
        ]
    })
    .prop_map(Json)
}

/// A history event.
pub fn history_event() -> impl Strategy<Value = HistoryEvent> {
    prop_oneof![
        (json(), "[a-z]{1,8}").prop_map(|(value, kind)| HistoryEvent::Persist {
            value,
            kind: PersistKind::Custom(kind)
        }),
        join_set_id().prop_map(|join_set_id| HistoryEvent::JoinSetCreate {
            join_set_id,
            closing_strategy: concepts::ClosingStrategy::Complete
        }),
        (join_set_id(), delay_id(), timestamp()).prop_map(|(join_set_id, delay_id, expires_at)| {
            HistoryEvent::JoinSetRequest {
                join_set_id,
                request: JoinSetRequest::DelayRequest {
                    delay_id,
                    expires_at,
                },
            }
        }),
        (join_set_id(), timestamp(), any::<bool>()).prop_map(
            |(join_set_id, run_expires_at, closing)| {
                HistoryEvent::JoinNext {
                    join_set_id,
                    run_expires_at,
                    closing,
                }
            }
        ),
        (execution_id(), timestamp()).prop_map(|(execution_id, scheduled_at)| {
            HistoryEvent::Schedule {
                execution_id,
                scheduled_at,
            }
        }),
    ]
}

/// An event that can be appended (anything but `Created`).
pub fn appendable_event() -> impl Strategy<Value = ExecutionEventInner> {
    prop_oneof![
        (component_id(), executor_id(), run_id(), timestamp()).prop_map(
            |(component_id, executor_id, run_id, lock_expires_at)| {
                ExecutionEventInner::Locked(Locked {
                    component_id,
                    executor_id,
                    run_id,
                    lock_expires_at,
                })
            }
        ),
        (timestamp(), "[ -~]{0,10}").prop_map(|(backoff_expires_at, reason)| {
            ExecutionEventInner::Unlocked {
                backoff_expires_at,
                reason,
            }
        }),
        (
            timestamp(),
            "[ -~]{0,10}",
            proptest::option::of("[ -~]{0,10}")
        )
            .prop_map(|(backoff_expires_at, reason_inner, detail)| {
                ExecutionEventInner::TemporarilyFailed {
                    backoff_expires_at,
                    reason_full: format!("activity trap: {reason_inner}"),
                    reason_inner,
                    detail,
                }
            }),
        timestamp().prop_map(
            |backoff_expires_at| ExecutionEventInner::TemporarilyTimedOut { backoff_expires_at }
        ),
        json().prop_map(|value| ExecutionEventInner::Finished {
            result: Ok(concepts::SupportedFunctionReturnValue::InfallibleOrResultOk(value))
        }),
        history_event().prop_map(|event| ExecutionEventInner::HistoryEvent { event }),
    ]
}
