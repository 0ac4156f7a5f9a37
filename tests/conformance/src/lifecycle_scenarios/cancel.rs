//! L5..L10: cancellation (`docs/SEMANTICS.md` §11) of a pending, a locked, a blocked and a
//! finished execution, recursively over a tree with each parent's response, and the timers
//! watcher afterwards.

use super::{
    Fixture, LEASE, assert_finished_with, cancelled, child_responses, finished_version, ok,
};
use crate::{
    StoreFactory,
    storage_scenarios::helpers::{
        append, delay_id, execution_id, expect_kind, ffqn, join_set, locked, ms, plus,
    },
};
use concepts::{
    CancelOutcome, CancelRequest, DbErrorKind, ExecutionEventInner, ExecutionId, ExpiredTimer,
    OutcomeWrite, PendingState, SupportedFunctionReturnValue, Version, is_lost_race,
};
use std::time::Duration;
use timers_watcher::TickProgress;

/// L5: cancelling a pending execution finishes it with `Cancelled { reason }` at its next
/// version, at the time of the request, in one write; its waiters learn the result, and no
/// executor locks it afterwards. A reason longer than `CancelRequest::MAX_REASON_BYTES` is
/// refused (`ReasonTooLong`) and writes nothing.
pub async fn l5_cancel_pending<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let id = f.top(1, "work").await;
    f.clock.move_time_forward(ms(5)).await;
    let at = f.now();

    let too_long =
        f.db.cancel(CancelRequest {
            execution_id: id.clone(),
            now: at,
            reason: "é".repeat(CancelRequest::MAX_REASON_BYTES / 2 + 1),
        })
        .await;
    assert!(
        matches!(
            too_long,
            Err(concepts::DbError::Validation(
                concepts::ValidationError::ReasonTooLong { length, limit }
            )) if length == CancelRequest::MAX_REASON_BYTES + 2
                && limit == CancelRequest::MAX_REASON_BYTES
        ),
        "{too_long:?}"
    );
    assert_eq!(f.log(&id).await.events.len(), 1, "nothing written");

    assert_eq!(
        f.cancel(&id, "no longer needed").await,
        CancelOutcome::Cancelled { executions: 1 }
    );
    let log = f.log(&id).await;
    assert_eq!(log.events.len(), 2, "`Created`, then `Finished`");
    assert_finished_with(&log, &cancelled("no longer needed"), at);
    assert_eq!(
        f.db.wait_for_finished_result(&id, Some(Duration::ZERO))
            .await
            .expect("finished"),
        cancelled("no longer needed")
    );
    f.clock.move_time_forward(ms(1_000)).await;
    assert!(
        f.lock_due("work").await.is_empty(),
        "a cancelled execution is never locked"
    );
}

/// L6: cancelling a locked execution finishes it at the version after its `Locked` event;
/// the lease holder's outcome and lease extension are then refused as a lost race, and its
/// lease is no longer an expired timer.
pub async fn l6_cancel_locked<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let id = f.top(1, "work").await;
    assert_eq!(f.lock_due("work").await, vec![id.clone()]);
    let PendingState::Locked {
        executor_id,
        run_id,
        lock_expires_at,
    } = f.log(&id).await.pending_state
    else {
        panic!("locked")
    };
    f.clock.move_time_forward(ms(100)).await;
    let at = f.now();

    assert_eq!(
        f.cancel(&id, "operator").await,
        CancelOutcome::Cancelled { executions: 1 }
    );
    let log = f.log(&id).await;
    assert_finished_with(&log, &cancelled("operator"), at);
    assert_eq!(finished_version(&log), Version(2));

    let late = OutcomeWrite::new(
        id.clone(),
        Version(2),
        f.now(),
        ExecutionEventInner::Finished {
            result: Ok(SupportedFunctionReturnValue::None),
        },
        None,
    );
    let err = f.db.append_outcome(late).await.expect_err("refused");
    assert!(is_lost_race(&err), "a lost race, not {err:?}");
    let extension = locked(executor_id, run_id, plus(lock_expires_at, LEASE));
    let err = append(f.db.as_ref(), &id, Version(2), f.now(), extension)
        .await
        .expect_err("refused");
    assert!(is_lost_race(&err), "a lost race, not {err:?}");
    assert_eq!(f.log(&id).await, log, "the holder wrote nothing");
    let timers =
        f.db.get_expired_timers(lock_expires_at)
            .await
            .expect("timers");
    assert!(timers.is_empty(), "{timers:?}");
}

/// L7: cancelling a child its parent awaits answers the parent in the same write, with the
/// child's finished version and `Cancelled` result, and the blocked parent becomes pending at
/// that time; cancelling an execution blocked on a join set finishes it and the children it
/// awaits.
pub async fn l7_cancel_blocked_by_join_set<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let parent = f.top(1, "parent").await;
    let j = join_set("n:kids");
    let kids = f
        .await_children(&parent, &j, &[ffqn("child"), ffqn("child")], None)
        .await;
    let sibling_before = f.log(&kids[1]).await;
    f.clock.move_time_forward(ms(300)).await;
    let at = f.now();

    assert_eq!(
        f.cancel(&kids[0], "child not needed").await,
        CancelOutcome::Cancelled { executions: 1 }
    );
    let child = f.log(&kids[0]).await;
    assert_finished_with(&child, &cancelled("child not needed"), at);
    let parent_log = f.log(&parent).await;
    assert_eq!(
        child_responses(&parent_log),
        vec![(
            kids[0].clone(),
            finished_version(&child),
            cancelled("child not needed"),
            at
        )]
    );
    assert_eq!(parent_log.responses[0].event.join_set_id, j);
    assert_eq!(
        parent_log.pending_state,
        PendingState::PendingAt { scheduled_at: at },
        "the parent takes the result like any other"
    );
    assert_eq!(
        f.log(&kids[1]).await,
        sibling_before,
        "a sibling is untouched"
    );

    // The blocked execution itself, awaiting a child and a delay.
    let sleeper = f.top(2, "parent").await;
    let delay = (delay_id(1), plus(at, Duration::from_secs(60)));
    let awaited = f
        .await_children(&sleeper, &j, &[ffqn("child")], Some(delay))
        .await;
    f.clock.move_time_forward(ms(300)).await;
    let at = f.now();
    assert_eq!(
        f.cancel(&sleeper, "blocked").await,
        CancelOutcome::Cancelled { executions: 2 }
    );
    let sleeper_log = f.log(&sleeper).await;
    assert_finished_with(&sleeper_log, &cancelled("blocked"), at);
    let awaited_log = f.log(&awaited[0]).await;
    assert_finished_with(&awaited_log, &cancelled("blocked"), at);
    assert_eq!(
        child_responses(&sleeper_log),
        vec![(
            awaited[0].clone(),
            finished_version(&awaited_log),
            cancelled("blocked"),
            at
        )],
        "the cancelled child answers its (cancelled) parent"
    );
}

/// L8: cancelling a finished execution writes nothing and answers `AlreadyFinished` with its
/// result; so does cancelling twice (with the first cancellation's reason). A finished child
/// does not answer its parent again, and an unknown id is `NotFound`.
pub async fn l8_cancel_finished_writes_nothing<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let done = f.top(1, "work").await;
    f.finish(&done, ok(serde_json::json!({"total": 3}))).await;
    let before = f.log(&done).await;
    assert_eq!(
        f.cancel(&done, "too late").await,
        CancelOutcome::AlreadyFinished {
            result: ok(serde_json::json!({"total": 3}))
        }
    );
    assert_eq!(f.log(&done).await, before);

    let twice = f.top(2, "work").await;
    f.cancel(&twice, "first").await;
    let before = f.log(&twice).await;
    f.clock.move_time_forward(ms(10)).await;
    assert_eq!(
        f.cancel(&twice, "second").await,
        CancelOutcome::AlreadyFinished {
            result: cancelled("first")
        }
    );
    assert_eq!(
        f.log(&twice).await,
        before,
        "cancelling twice is not an error"
    );

    let parent = f.top(3, "parent").await;
    let j = join_set("n:kids");
    let kids = f.await_children(&parent, &j, &[ffqn("child")], None).await;
    f.finish(&kids[0], ok(serde_json::json!(1))).await;
    let parent_before = f.log(&parent).await;
    let child_before = f.log(&kids[0]).await;
    assert!(matches!(
        f.cancel(&kids[0], "too late").await,
        CancelOutcome::AlreadyFinished { .. }
    ));
    assert_eq!(f.log(&kids[0]).await, child_before);
    assert_eq!(f.log(&parent).await, parent_before, "no second response");
    // The parent, unfinished, is cancelled alone: its finished child is left as it is.
    assert_eq!(
        f.cancel(&parent, "stop").await,
        CancelOutcome::Cancelled { executions: 1 }
    );
    assert_eq!(f.log(&kids[0]).await, child_before);

    let unknown = execution_id(99);
    let err =
        f.db.cancel(CancelRequest {
            execution_id: unknown.clone(),
            now: f.now(),
            reason: "who?".to_owned(),
        })
        .await;
    expect_kind(err, DbErrorKind::NotFound);
}

/// Asserts that every id of `ids` finished with `cancelled(reason)` at `at`.
async fn assert_all_cancelled(f: &Fixture, ids: &[&ExecutionId], reason: &str) {
    let at = f.now();
    for id in ids {
        assert_finished_with(&f.log(id).await, &cancelled(reason), at);
    }
}

/// The child responses of `id`'s log, sorted by child id.
async fn sorted_child_responses(
    f: &Fixture,
    id: &ExecutionId,
) -> Vec<(
    ExecutionId,
    Version,
    concepts::FinishedExecutionResult,
    chrono::DateTime<chrono::Utc>,
)> {
    let mut responses = child_responses(&f.log(id).await);
    responses.sort_by(|a, b| a.0.cmp(&b.0));
    responses
}

/// L9: cancel recurses over a three-level tree in one write: the execution and every
/// unfinished descendant finish with `Cancelled`, each answering its parent (finished version,
/// result, time); finished members are left alone. Cancelling a middle execution stops its
/// subtree only, and its parent, blocked on the join set, becomes pending with the
/// `Cancelled` result.
pub async fn l9_cancel_recurses_over_a_tree<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (j, ja) = (join_set("n:kids"), join_set("n:grandkids"));
    let root = f.top(1, "root").await;
    let kids = f
        .await_children(&root, &j, &[ffqn("mid"), ffqn("leaf"), ffqn("leaf")], None)
        .await;
    let (mid, leaf, done) = (&kids[0], &kids[1], &kids[2]);
    let grandkids = f
        .await_children(mid, &ja, &[ffqn("leaf"), ffqn("leaf")], None)
        .await;
    let (grandkid, done_grandkid) = (&grandkids[0], &grandkids[1]);
    f.finish(done, ok(serde_json::json!("c"))).await;
    f.finish(done_grandkid, ok(serde_json::json!("a2"))).await;
    let finished_before = f.logs(&[done.clone(), done_grandkid.clone()]).await;
    f.clock.move_time_forward(ms(500)).await;
    let at = f.now();

    assert_eq!(
        f.cancel(&root, "tree").await,
        CancelOutcome::Cancelled { executions: 4 }
    );
    assert_all_cancelled(&f, &[&root, mid, grandkid, leaf], "tree").await;
    assert_eq!(
        f.logs(&[done.clone(), done_grandkid.clone()]).await,
        finished_before,
        "finished members are left alone"
    );
    let version_of = |log: &concepts::ExecutionLog| finished_version(log);
    let mid_version = version_of(&f.log(mid).await);
    let leaf_version = version_of(&f.log(leaf).await);
    let grandkid_version = version_of(&f.log(grandkid).await);
    let done_version = version_of(&finished_before[0]);
    let done_grandkid_version = version_of(&finished_before[1]);
    let t_done = finished_before[0]
        .events
        .last()
        .expect("finished")
        .created_at;
    assert_eq!(
        sorted_child_responses(&f, &root).await,
        vec![
            (mid.clone(), mid_version, cancelled("tree"), at),
            (leaf.clone(), leaf_version, cancelled("tree"), at),
            (
                done.clone(),
                done_version,
                ok(serde_json::json!("c")),
                t_done
            ),
        ]
    );
    assert_eq!(
        sorted_child_responses(&f, mid).await,
        vec![
            (grandkid.clone(), grandkid_version, cancelled("tree"), at),
            (
                done_grandkid.clone(),
                done_grandkid_version,
                ok(serde_json::json!("a2")),
                t_done
            ),
        ]
    );

    // A middle execution: its subtree stops, its blocked parent takes the result.
    let root2 = f.top(2, "root").await;
    let mid2 = f.await_children(&root2, &j, &[ffqn("mid")], None).await;
    let leaf2 = f.await_children(&mid2[0], &ja, &[ffqn("leaf")], None).await;
    f.clock.move_time_forward(ms(500)).await;
    let at = f.now();
    assert_eq!(
        f.cancel(&mid2[0], "subtree").await,
        CancelOutcome::Cancelled { executions: 2 }
    );
    assert_all_cancelled(&f, &[&mid2[0], &leaf2[0]], "subtree").await;
    let mid2_version = finished_version(&f.log(&mid2[0]).await);
    let leaf2_version = finished_version(&f.log(&leaf2[0]).await);
    assert_eq!(
        sorted_child_responses(&f, &mid2[0]).await,
        vec![(leaf2[0].clone(), leaf2_version, cancelled("subtree"), at)]
    );
    let root2_log = f.log(&root2).await;
    assert_eq!(
        child_responses(&root2_log),
        vec![(mid2[0].clone(), mid2_version, cancelled("subtree"), at)]
    );
    assert_eq!(
        root2_log.pending_state,
        PendingState::PendingAt { scheduled_at: at },
        "the root is not cancelled: it takes the result"
    );
    assert_eq!(f.lock_due("root").await, vec![root2.clone()]);
}

/// L10: once cancelled, an execution's lease and its open delays (and those of its cancelled
/// descendants) are no longer expired timers: `get_expired_timers` reports none of them and a
/// watcher tick long after every expiry writes nothing.
pub async fn l10_watcher_ignores_what_was_cancelled<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let t0 = f.now();
    let j = join_set("n:kids");
    let (jd, jl) = (join_set("o:sleep"), join_set("n:leaf"));
    let leased = f.top(1, "work").await;
    assert_eq!(f.lock_due("work").await, vec![leased.clone()]);
    let sleeper = f.top(2, "sleeper").await;
    f.await_children(&sleeper, &jd, &[], Some((delay_id(1), plus(t0, LEASE))))
        .await;
    let root = f.top(3, "root").await;
    let kids = f
        .await_children(&root, &j, &[ffqn("sleeper"), ffqn("leaf")], None)
        .await;
    f.await_children(&kids[0], &jl, &[], Some((delay_id(2), plus(t0, LEASE))))
        .await;
    assert_eq!(f.lock_due("leaf").await, vec![kids[1].clone()]);
    let far = plus(t0, Duration::from_secs(3_600));
    let timers = f.db.get_expired_timers(far).await.expect("timers");
    assert_eq!(
        timers.len(),
        4,
        "two leases and two delays to start with: {timers:?}"
    );

    f.clock.move_time_forward(ms(100)).await;
    for id in [&leased, &sleeper, &root] {
        assert!(matches!(
            f.cancel(id, "stop").await,
            CancelOutcome::Cancelled { .. }
        ));
    }
    let timers: Vec<ExpiredTimer> = f.db.get_expired_timers(far).await.expect("timers");
    assert!(timers.is_empty(), "cancelled leases and delays: {timers:?}");

    let ids = [
        leased.clone(),
        sleeper.clone(),
        root.clone(),
        kids[0].clone(),
        kids[1].clone(),
    ];
    let before = f.logs(&ids).await;
    f.clock.move_time_to(far);
    let progress = timers_watcher::tick(f.db.as_ref(), far, Duration::ZERO)
        .await
        .expect("watcher tick");
    assert_eq!(progress, TickProgress::default());
    assert_eq!(f.logs(&ids).await, before, "the watcher wrote nothing");
}
