//! Persistence scenarios (P) for backends that persist (`docs/SEMANTICS.md` §4.1, §9):
//!
//! - P1, here ([`p1_close_and_reopen`]): what was committed before `close` is all there after
//!   reopening: every log, response, next version, pending state and expired timer, and the
//!   reopened store takes writes.
//! - P2, the crash scenario, runs real processes and lives in `tests/durability`: a node killed
//!   with SIGKILL in the middle of its work loses no acknowledged write, and after restarts
//!   every execution finishes exactly once (none lost, none duplicated, none submitted again,
//!   every lease of the killed node recovered by the timers watcher); a node killed while it
//!   submits leaves all of its batch or none of it; workflows killed at several points finish
//!   with the result of an uninterrupted run, every child and every step recorded once.
//! - P3, the durability settings, is backend-specific and tested in each backend's own tests:
//!   the store reports its effective settings as read back from the connection (for SQLite,
//!   `journal_mode` and `synchronous`), and a test checks them.

use crate::{
    StoreFactory, skip,
    storage_scenarios::helpers::{
        append, assert_state_matches_derivation, batch_creating, child_execution_request,
        child_request, create_request, delay_finished, delay_id, delay_request, executor_id, ffqn,
        finished_ok, join_next, join_set, join_set_create, lock, persist, plus, run_id,
    },
};
use concepts::{ClockFn, DbConnection, ExecutionId, ExpiredTimer, Version};
use std::time::Duration;
use test_utils::SimClock;

/// Expands to one test per scenario of this module.
#[macro_export]
macro_rules! persistence_scenario_tests {
    ($factory:expr) => {
        $crate::__scenario_tests!($factory; persistence_scenarios; p1_close_and_reopen);
    };
}

/// Everything observable about a set of executions: their logs (with responses, next version
/// and pending state) and the expired timers at a time.
async fn snapshot(
    db: &dyn DbConnection,
    ids: &[ExecutionId],
    timers_at: chrono::DateTime<chrono::Utc>,
) -> (Vec<concepts::ExecutionLog>, Vec<ExpiredTimer>) {
    let mut logs = Vec::new();
    for id in ids {
        logs.push(assert_state_matches_derivation(db, id).await);
    }
    let timers = db
        .get_expired_timers(timers_at)
        .await
        .expect("expired timers");
    (logs, timers)
}

/// P1: close and reopen; every log, response, next version, pending state and timer is as it
/// was, and the reopened store takes writes.
pub async fn p1_close_and_reopen<F: StoreFactory>(factory: &F) {
    if !factory.capabilities().persistent {
        skip(
            "p1_close_and_reopen",
            &format!(
                "{} keeps nothing across close (not persistent)",
                factory.name()
            ),
        );
        return;
    }
    let store = factory.fresh().await;
    let db = store.db.clone();
    let clock = SimClock::epoch();
    let now = clock.now();
    let lease = plus(now, Duration::from_secs(10));

    // Pending, not yet due.
    let pending = crate::storage_scenarios::helpers::execution_id(1);
    let mut later = create_request(
        pending.clone(),
        ffqn("p1"),
        plus(now, Duration::from_secs(60)),
    );
    later.params = concepts::Json(serde_json::json!({"z": 1, "a": [2, {"y": 3, "b": 4}]}));
    db.create(later).await.expect("create pending");

    // Locked, with a history event.
    let held = crate::storage_scenarios::helpers::execution_id(2);
    db.create(create_request(held.clone(), ffqn("p1"), now))
        .await
        .expect("create");
    lock(
        db.as_ref(),
        now,
        &held,
        run_id(1),
        Version(1),
        executor_id(1),
        lease,
    )
    .await
    .expect("lock");
    append(db.as_ref(), &held, Version(2), now, persist(7))
        .await
        .expect("persist");

    // A parent blocked on a child, with an open delay in another join set, and a response.
    let parent = crate::storage_scenarios::helpers::execution_id(3);
    let children = join_set("n:kids");
    let sleeps = join_set("o:sleep");
    db.create(create_request(parent.clone(), ffqn("p1"), now))
        .await
        .expect("create parent");
    lock(
        db.as_ref(),
        now,
        &parent,
        run_id(2),
        Version(1),
        executor_id(1),
        lease,
    )
    .await
    .expect("lock parent");
    let child = parent.next_level(&children, 1);
    db.append_batch(batch_creating(
        &parent,
        Version(2),
        now,
        vec![
            join_set_create(&children),
            child_execution_request(&children, &child),
            join_set_create(&sleeps),
            delay_request(&sleeps, delay_id(1), plus(now, Duration::from_secs(5))),
            delay_request(&sleeps, delay_id(2), plus(now, Duration::from_secs(500))),
            join_next(&children, now),
        ],
        vec![child_request(&parent, &children, 1, ffqn("p1-child"), now)],
    ))
    .await
    .expect("parent's batch");
    db.append_response(
        plus(now, Duration::from_secs(1)),
        &parent,
        delay_finished(&sleeps, delay_id(1)),
    )
    .await
    .expect("a delay response");

    // Finished.
    let done = crate::storage_scenarios::helpers::execution_id(4);
    db.create(create_request(done.clone(), ffqn("p1"), now))
        .await
        .expect("create");
    append(
        db.as_ref(),
        &done,
        Version(1),
        now,
        finished_ok(serde_json::json!({"b": 1, "a": 2})),
    )
    .await
    .expect("finish");

    let ids = [pending, held, parent, child, done];
    let timers_at = plus(now, Duration::from_secs(1000));
    let before = snapshot(db.as_ref(), &ids, timers_at).await;
    drop(db);

    let reopened = factory
        .reopen(store)
        .await
        .expect("a persistent backend reopens");
    let after = snapshot(reopened.db.as_ref(), &ids, timers_at).await;
    assert_eq!(
        after.0, before.0,
        "logs, responses, versions and states survive reopening"
    );
    assert_eq!(after.1, before.1, "timers survive reopening");
    assert_eq!(
        before.1.len(),
        2,
        "the lease of `held` and the parent's open delay"
    );

    // The reopened store takes writes where the old one left off.
    let held = &ids[1];
    let next = append(
        reopened.db.as_ref(),
        held,
        Version(3),
        now,
        finished_ok(serde_json::json!(null)),
    )
    .await
    .expect("append after reopening");
    assert_eq!(next, Version(3));
    assert_state_matches_derivation(reopened.db.as_ref(), held).await;
}
