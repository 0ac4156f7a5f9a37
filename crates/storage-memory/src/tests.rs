//! Unit tests of what is specific to the memory backend: waiter registries that shrink when
//! waiters leave, waiters released by `close`, timer keys that do not collide, indexes left
//! untouched by a failing write, indexes emptied of what `prune` deletes and of the lease and
//! delays `cancel` closes, index keys that order and give back their times as the times do.

use super::*;
use chrono::TimeZone;
use concepts::kernel::WaiterCounts;
use concepts::{
    AppendBatchRequest, CancelOutcome, CancelRequest, CreateRequest, DbAwait, DbClient,
    DbConnection, DbErrorKind, DbExecutor, DbTimers, DbWorkflow, DelayId, ExecutionEventInner,
    ExecutionIdTopLevel, ExecutionMetadata, ExecutorId, ExpiredTimer, HistoryEvent, JoinSetId,
    JoinSetRequest, JoinSetResponse, JoinSetResponseEvent, Json, Locked, OutcomeWrite,
    PruneOutcome, PruneRequest, RunId, SupportedFunctionReturnValue, ValidationError,
};
use state::TimerKey;
use std::time::Duration;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0)
        .single()
        .expect("valid date")
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + chrono::TimeDelta::milliseconds(ms)
}

fn ffqn() -> FunctionFqn {
    "ns:pkg/ifc.fn".parse().expect("valid ffqn")
}

fn id(n: u128) -> ExecutionId {
    ExecutionIdTopLevel::from_parts(1, n).into()
}

fn create_req(execution_id: ExecutionId) -> CreateRequest {
    CreateRequest {
        created_at: t0(),
        execution_id,
        ffqn: ffqn(),
        params: Json(serde_json_array()),
        parent: None,
        scheduled_at: t0(),
        retry_exp_backoff: Duration::from_millis(100),
        max_retries: 1,
        component_id: "activity:test".parse().expect("valid component id"),
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    }
}

fn serde_json_array() -> serde_json::Value {
    serde_json::json!([])
}

const SAFETY: Duration = Duration::from_secs(10);

#[tokio::test]
async fn waiters_leave_no_entry_behind() {
    let store = MemoryStore::new();
    let e = id(1);
    store.create(create_req(e.clone())).await.unwrap();

    // Timed out waits.
    let err = store
        .wait_for_finished_result(&e, Some(Duration::from_millis(10)))
        .await;
    assert_eq!(err.unwrap_err().kind(), DbErrorKind::Timeout);
    let dropped = tokio::time::timeout(
        Duration::from_millis(10),
        store.subscribe_to_next_responses(&e, 0),
    )
    .await;
    assert!(
        dropped.is_err(),
        "no response yet, the subscription must still be waiting"
    );
    store
        .wait_for_pending(
            t0() - chrono::TimeDelta::seconds(1),
            Arc::from([ffqn()]),
            Duration::from_millis(10),
        )
        .await;
    assert_eq!(
        concepts::kernel::Backend::waiter_counts(&store),
        WaiterCounts::default()
    );

    // Woken waits.
    let responses = tokio::spawn({
        let store = store.clone();
        let e = e.clone();
        async move { store.subscribe_to_next_responses(&e, 0).await }
    });
    let finished = tokio::spawn({
        let store = store.clone();
        let e = e.clone();
        async move { store.wait_for_finished_result(&e, Some(SAFETY)).await }
    });
    wait_until_registered(&store, counts(0, 1, 1)).await;
    store
        .append_response(
            t0(),
            &e,
            JoinSetResponseEvent {
                join_set_id: "o:sleep".parse().unwrap(),
                event: JoinSetResponse::DelayFinished {
                    delay_id: DelayId::from_parts(1, 1),
                },
            },
        )
        .await
        .unwrap();
    assert_eq!(responses.await.unwrap().unwrap().len(), 1);
    store
        .append_batch(AppendBatchRequest::events(
            e.clone(),
            Version(1),
            t0(),
            vec![ExecutionEventInner::Finished {
                result: Ok(SupportedFunctionReturnValue::None),
            }],
        ))
        .await
        .unwrap();
    assert_eq!(
        finished.await.unwrap().unwrap(),
        Ok(SupportedFunctionReturnValue::None)
    );
    assert_eq!(
        concepts::kernel::Backend::waiter_counts(&store),
        WaiterCounts::default()
    );
}

fn counts(pending: usize, responses: usize, finished: usize) -> WaiterCounts {
    WaiterCounts {
        pending,
        responses,
        finished,
    }
}

/// Waits (with a real-time safety net) until the expected waiters registered.
async fn wait_until_registered(store: &MemoryStore, expected: WaiterCounts) {
    tokio::time::timeout(SAFETY, async {
        while concepts::kernel::Backend::waiter_counts(store) != expected {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("waiters registered");
}

#[tokio::test]
async fn close_releases_every_waiter() {
    let store = MemoryStore::new();
    let e = id(1);
    store.create(create_req(e.clone())).await.unwrap();
    let responses = tokio::spawn({
        let store = store.clone();
        let e = e.clone();
        async move { store.subscribe_to_next_responses(&e, 0).await }
    });
    let finished = tokio::spawn({
        let store = store.clone();
        let e = e.clone();
        async move { store.wait_for_finished_result(&e, None).await }
    });
    let pending = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .wait_for_pending(
                    t0() - chrono::TimeDelta::seconds(1),
                    Arc::from([ffqn()]),
                    SAFETY * 10,
                )
                .await;
        }
    });
    wait_until_registered(&store, counts(1, 1, 1)).await;
    store.close().await;
    store.close().await;
    let released = tokio::time::timeout(SAFETY, async {
        (
            responses.await.unwrap(),
            finished.await.unwrap(),
            pending.await.unwrap(),
        )
    })
    .await
    .expect("close releases the waiters");
    assert_eq!(released.0.unwrap_err().kind(), DbErrorKind::Closed);
    assert_eq!(released.1.unwrap_err().kind(), DbErrorKind::Closed);
    assert_eq!(
        concepts::kernel::Backend::waiter_counts(&store),
        WaiterCounts::default()
    );
}

#[tokio::test]
async fn a_lease_and_delays_at_the_same_instant_do_not_collide() {
    let store = MemoryStore::new();
    let e = id(1);
    store.create(create_req(e.clone())).await.unwrap();
    let expiry = at(1000);
    let join_set: JoinSetId = "o:sleep".parse().unwrap();
    let delays = [DelayId::from_parts(1, 2), DelayId::from_parts(1, 1)];
    let executor_id = ExecutorId::from_parts(1, 1);
    let run_id = RunId::from_parts(1, 1);
    let locked = ExecutionEventInner::Locked(Locked {
        component_id: "activity:test".parse().unwrap(),
        executor_id,
        run_id,
        lock_expires_at: expiry,
    });
    let mut version = store
        .append_batch(AppendBatchRequest::events(
            e.clone(),
            Version(1),
            t0(),
            vec![locked],
        ))
        .await
        .unwrap();
    for delay_id in delays {
        let delay_request = ExecutionEventInner::HistoryEvent {
            event: HistoryEvent::JoinSetRequest {
                join_set_id: join_set.clone(),
                request: JoinSetRequest::DelayRequest {
                    delay_id,
                    expires_at: expiry,
                },
            },
        };
        version = store
            .append_batch(AppendBatchRequest::events(
                e.clone(),
                version,
                t0(),
                vec![delay_request],
            ))
            .await
            .unwrap();
    }
    let timers = store.get_expired_timers(expiry).await.unwrap();
    assert_eq!(timers.len(), 3, "{timers:?}");
    assert!(matches!(&timers[0], ExpiredTimer::Lock(lock) if lock.next_version == version));
    assert!(matches!(&timers[1], ExpiredTimer::Delay(d) if d.delay_id == delays[1]));
    assert!(matches!(&timers[2], ExpiredTimer::Delay(d) if d.delay_id == delays[0]));
    assert!(store.get_expired_timers(at(999)).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_failing_write_leaves_every_index_untouched() {
    let store = MemoryStore::new();
    let e = id(1);
    store.create(create_req(e.clone())).await.unwrap();
    let before = store.get(&e).await.unwrap();
    let timers_before = store.lock_state().timers.clone();
    let pending_before = store.lock_state().pending.clone();
    let err = store
        .append_batch(AppendBatchRequest::events(
            e.clone(),
            Version(1),
            t0(),
            vec![
                ExecutionEventInner::Locked(Locked {
                    component_id: "activity:test".parse().unwrap(),
                    executor_id: ExecutorId::from_parts(1, 1),
                    run_id: RunId::from_parts(1, 1),
                    lock_expires_at: at(100),
                }),
                ExecutionEventInner::HistoryEvent {
                    event: HistoryEvent::JoinSetRequest {
                        join_set_id: "o:sleep".parse().unwrap(),
                        request: JoinSetRequest::DelayRequest {
                            delay_id: DelayId::from_parts(1, 1),
                            expires_at: at(50),
                        },
                    },
                },
                ExecutionEventInner::Created(Box::new(concepts::Created {
                    ffqn: ffqn(),
                    params: Json(serde_json_array()),
                    parent: None,
                    scheduled_at: t0(),
                    retry_exp_backoff: Duration::ZERO,
                    max_retries: 0,
                    component_id: "activity:test".parse().unwrap(),
                    metadata: ExecutionMetadata::default(),
                    scheduled_by: None,
                })),
            ],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.as_validation(),
        Some(&ValidationError::CreatedEventAppended)
    );
    assert_eq!(store.get(&e).await.unwrap(), before);
    assert_eq!(store.lock_state().timers, timers_before);
    assert_eq!(store.lock_state().pending, pending_before);
    // The refused batch left no delay behind: requesting it now is not a repeat.
    let delay_request = ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: "o:sleep".parse().unwrap(),
            request: JoinSetRequest::DelayRequest {
                delay_id: DelayId::from_parts(1, 1),
                expires_at: at(50),
            },
        },
    };
    let version = store
        .append_batch(AppendBatchRequest::events(
            e.clone(),
            Version(1),
            t0(),
            vec![delay_request],
        ))
        .await
        .unwrap();
    assert_eq!(version, Version(2));
}

fn delay_request(delay_id: DelayId, expires_at: DateTime<Utc>) -> ExecutionEventInner {
    ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: "o:sleep".parse().unwrap(),
            request: JoinSetRequest::DelayRequest {
                delay_id,
                expires_at,
            },
        },
    }
}

fn finished() -> ExecutionEventInner {
    ExecutionEventInner::Finished {
        result: Ok(SupportedFunctionReturnValue::None),
    }
}

/// Creates `parent` with a child in join set `n:batch` and an open delay: the child's id.
async fn create_tree(store: &MemoryStore, parent: &ExecutionId) -> ExecutionId {
    store.create(create_req(parent.clone())).await.unwrap();
    let join_set: JoinSetId = "n:batch".parse().unwrap();
    let child = parent.next_level(&join_set, 1);
    let child_request = ExecutionEventInner::HistoryEvent {
        event: HistoryEvent::JoinSetRequest {
            join_set_id: join_set.clone(),
            request: JoinSetRequest::ChildExecutionRequest {
                child_execution_id: child.clone(),
            },
        },
    };
    let mut batch = AppendBatchRequest::events(
        parent.clone(),
        Version(1),
        t0(),
        vec![
            delay_request(DelayId::from_parts(1, 1), at(5_000)),
            child_request,
        ],
    );
    batch.children.push(CreateRequest {
        parent: Some((parent.clone(), join_set)),
        ..create_req(child.clone())
    });
    store.append_batch(batch).await.unwrap();
    child
}

/// What the store's indexes hold about `execution_id`, by index name.
fn indexed(store: &MemoryStore, execution_id: &ExecutionId) -> Vec<&'static str> {
    store.mentions(execution_id)
}

#[tokio::test]
async fn prune_leaves_no_index_entry_of_what_it_deleted() {
    let store = MemoryStore::new();
    let (pruned, kept) = (id(1), id(2));
    let pruned_child = create_tree(&store, &pruned).await;
    let kept_child = create_tree(&store, &kept).await;
    let child_done = OutcomeWrite::new(
        pruned_child.clone(),
        Version(1),
        at(10),
        finished(),
        pruned_child.split_to_parent().as_ref(),
    );
    store.append_outcome(child_done).await.unwrap();
    for parent in [&pruned, &kept] {
        // Finished before its delay fired: the delay's timer is still indexed.
        let done = AppendBatchRequest::events(parent.clone(), Version(3), at(20), vec![finished()]);
        store.append_batch(done).await.unwrap();
    }
    assert_eq!(
        indexed(&store, &pruned),
        ["record", "by_created", "timers", "finished"]
    );
    assert_eq!(
        indexed(&store, &pruned_child),
        ["record", "by_created", "children"]
    );

    let outcome = store
        .prune(PruneRequest {
            finished_before: at(1_000),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        PruneOutcome {
            trees: 1,
            executions: 2,
            kept: 1,
            next: None
        }
    );
    for execution_id in [&pruned, &pruned_child] {
        let left = indexed(&store, execution_id);
        assert!(left.is_empty(), "{execution_id} is still in {left:?}");
    }
    // The kept tree (its child is still pending) is whole.
    assert_eq!(
        indexed(&store, &kept),
        ["record", "by_created", "timers", "finished"]
    );
    assert_eq!(
        indexed(&store, &kept_child),
        ["record", "by_created", "pending", "children"]
    );
}

#[tokio::test]
async fn cancel_removes_the_lease_and_the_delays_from_the_timers_index() {
    let store = MemoryStore::new();
    let parent = id(1);
    let child = create_tree(&store, &parent).await;
    let lock = ExecutionEventInner::Locked(Locked {
        component_id: "activity:test".parse().unwrap(),
        executor_id: ExecutorId::from_parts(1, 1),
        run_id: RunId::from_parts(1, 1),
        lock_expires_at: at(1_000),
    });
    let locking = AppendBatchRequest::events(parent.clone(), Version(3), t0(), vec![lock]);
    let version = store.append_batch(locking).await.unwrap();
    let second_delay = delay_request(DelayId::from_parts(1, 2), at(5_000));
    let delaying = AppendBatchRequest::events(parent.clone(), version, t0(), vec![second_delay]);
    store.append_batch(delaying).await.unwrap();
    let timers = |store: &MemoryStore| -> Vec<TimerKey> {
        store.lock_state().timers.oldest_first().cloned().collect()
    };
    assert_eq!(timers(&store).len(), 3, "the lease and two delays");

    let outcome = store
        .cancel(CancelRequest {
            execution_id: parent.clone(),
            now: at(10),
            reason: "test".to_owned(),
        })
        .await
        .unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled { executions: 2 });
    assert_eq!(timers(&store), []);
    assert!(
        store
            .get_expired_timers(at(10_000))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        indexed(&store, &parent),
        ["record", "by_created", "finished"]
    );
    assert_eq!(
        indexed(&store, &child),
        ["record", "by_created", "children"]
    );
}

/// Times across chrono's whole range: its ends, years before the common era, the epoch and a
/// nanosecond before it, a leap second, and a spread of instants between them.
fn times_across_the_range() -> Vec<DateTime<Utc>> {
    let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
        .and_then(|date| date.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
        .expect("a leap second")
        .and_utc();
    let mut times = vec![
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::MAX_UTC,
        DateTime::UNIX_EPOCH,
        DateTime::UNIX_EPOCH - chrono::TimeDelta::nanoseconds(1),
        Utc.with_ymd_and_hms(-44, 3, 15, 12, 0, 0)
            .single()
            .expect("valid"),
        Utc.with_ymd_and_hms(2024, 12, 31, 23, 59, 59)
            .single()
            .expect("valid"),
        leap,
        t0(),
    ];
    let (min, max) = (
        DateTime::<Utc>::MIN_UTC.timestamp(),
        DateTime::<Utc>::MAX_UTC.timestamp(),
    );
    let span = u64::try_from(max - min).expect("ordered");
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    for _ in 0..2_000 {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        let secs = min + i64::try_from((state >> 1) % span).expect("in range");
        let nanos = u32::try_from(state % 1_000_000_000).expect("below 10^9");
        times.push(DateTime::from_timestamp(secs, nanos).expect("in range"));
    }
    times
}

#[test]
fn index_keys_order_as_their_times_and_give_them_back() {
    let execution_id = id(7);
    let times = times_across_the_range();
    for time in &times {
        assert_eq!(state::At::new(*time, &execution_id).time(), *time);
    }
    for a in &times {
        for b in times.iter().step_by(37) {
            let (key_a, key_b) = (
                state::At::new(*a, &execution_id),
                state::At::new(*b, &execution_id),
            );
            assert_eq!(key_a.cmp(&key_b), a.cmp(b), "{a} against {b}");
            assert_eq!(key_a.at_or_before(*b), a <= b, "{a} at or before {b}");
        }
    }
    // At one time, keys order as their ids, byte by byte: top-level ids apart anywhere in
    // their ULID, a parent before its children.
    let parent = id(1 << 79);
    let join_set_id: JoinSetId = "n:batch".parse().expect("valid join set");
    let mut ids: Vec<ExecutionId> = (0..40).map(|shift| id(1 << (shift * 2))).collect();
    ids.extend([
        parent.next_level(&join_set_id, 1),
        parent.next_level(&join_set_id, 2),
        parent,
    ]);
    for time in times.iter().step_by(400) {
        for a in &ids {
            for b in &ids {
                let (key_a, key_b) = (state::At::new(*time, a), state::At::new(*time, b));
                // The lead holds an id's first 28 bytes: a child and its parent tie there.
                let lead = |id: &ExecutionId| id.as_str().as_bytes()[..28].to_vec();
                assert_eq!(key_a.cmp(&key_b), lead(a).cmp(&lead(b)), "{a} against {b}");
            }
        }
    }
}
