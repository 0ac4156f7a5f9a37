//! E22, E23 and E24: a dead process's many leases expiring at once: the watcher times them out
//! a batch to a transaction (`append_outcomes`), each accepted or refused on its own, and a
//! durable sleep due in the same pass is delivered before them. E25 and E26: a restarted node
//! takes its previous process's leases back before they expire, and hands back the executions
//! that process's runs kept waiting warm.

use super::{BACKOFF, Fixture};
use crate::{
    StoreFactory, checked_log,
    storage_scenarios::{
        assert_still_waiting,
        helpers::{
            batch, batch_creating, child_execution_request, child_request, create_request,
            delay_finished, delay_id, delay_request, execution_id, executor_id, expect_validation,
            ffqn, finished_ok, join_next, join_set, join_set_create, lock_pending_now, plus,
        },
        join_within_safety,
    },
};
use concepts::{
    ClockFn, CreateRequest, DelayId, ExecutionEventInner, ExecutionId, ExpiredLock, ExpiredTimer,
    FinishedExecutionError, JoinSetId, JoinSetResponse, OutcomeWrite, PendingState,
    ValidationError, Version, is_lost_race,
};
use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};
use test_utils::forwarding::{Fault, ForwardingDb, Write};
use timers_watcher::{LEASES_PER_WRITE, TickProgress, expired_lock_write};

/// The lease of these scenarios.
const LEASE: Duration = Duration::from_secs(1);

impl Fixture {
    /// `count` top-level executions of `work` with ids `first..`, one retry each, in one batch.
    async fn create_work(&self, first: u128, count: u128) -> Vec<ExecutionId> {
        let requests: Vec<CreateRequest> = (first..first + count)
            .map(|n| CreateRequest {
                max_retries: 1,
                retry_exp_backoff: BACKOFF,
                ..create_request(execution_id(n), ffqn("work"), self.clock.now())
            })
            .collect();
        let ids = requests.iter().map(|r| r.execution_id.clone()).collect();
        self.db.create_batch(requests).await.expect("create_batch");
        ids
    }

    /// A top-level execution `n` that submits `children` children of `work` without retries
    /// (and, with `delay`, a delay in the same join set), then awaits them.
    async fn parent(
        &self,
        n: u128,
        children: u64,
        delay: Option<(DelayId, chrono::DateTime<chrono::Utc>)>,
    ) -> (ExecutionId, JoinSetId, Vec<ExecutionId>) {
        let now = self.clock.now();
        let parent = execution_id(n);
        self.db
            .create(create_request(parent.clone(), ffqn("parent"), now))
            .await
            .expect("create the parent");
        let j = join_set("n:kids");
        let requests: Vec<CreateRequest> = (1..=children)
            .map(|idx| CreateRequest {
                max_retries: 0,
                ..child_request(&parent, &j, idx, ffqn("work"), now)
            })
            .collect();
        let mut events = vec![join_set_create(&j)];
        events.extend(
            requests
                .iter()
                .map(|c| child_execution_request(&j, &c.execution_id)),
        );
        if let Some((delay_id, expires_at)) = delay {
            events.push(delay_request(&j, delay_id, expires_at));
        }
        events.push(join_next(&j, now));
        let ids = requests.iter().map(|c| c.execution_id.clone()).collect();
        self.db
            .append_batch(batch_creating(&parent, Version(1), now, events, requests))
            .await
            .expect("the parent submits its children");
        (parent, j, ids)
    }

    /// Locks every due execution of `work` now, as a process that then dies.
    async fn lock_all(&self, expected: usize) {
        let locked = lock_pending_now(
            self.db.as_ref(),
            &Arc::from([ffqn("work")]),
            expected + 1,
            self.clock.now(),
            executor_id(1),
            LEASE,
        )
        .await;
        assert_eq!(locked.len(), expected, "every execution is locked");
    }

    /// The expired leases the store reports now.
    async fn expired_locks(&self) -> Vec<ExpiredLock> {
        let timers = self.db.get_expired_timers(self.clock.now()).await;
        let timers = timers.expect("get_expired_timers");
        timers
            .into_iter()
            .filter_map(|t| match t {
                ExpiredTimer::Lock(lock) => Some(lock),
                ExpiredTimer::Delay(_) => None,
            })
            .collect()
    }
}

/// The children whose responses `log` holds, in arrival order, with their join-set results.
fn answered_children(log: &concepts::ExecutionLog) -> Vec<(ExecutionId, bool)> {
    log.responses
        .iter()
        .filter_map(|r| match &r.event.event {
            JoinSetResponse::ChildExecutionFinished {
                child_execution_id,
                result,
                ..
            } => Some((
                child_execution_id.clone(),
                matches!(result, Err(FinishedExecutionError::PermanentTimeout)),
            )),
            JoinSetResponse::DelayFinished { .. } => None,
        })
        .collect()
}

/// E22: more leases than one write takes expire at once: one watcher pass times out every one
/// of them, a retry left or not, and the three children of one parent, timed out for good in
/// the same write, answer it with three responses in their order; a subscriber of the parent's
/// responses from its third on (one response was stored before) gets the last two.
pub async fn e22_many_leases_time_out_in_one_pass<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let count = u128::try_from(LEASES_PER_WRITE).expect("fits") + 100;
    let work = f.create_work(1, count).await;
    let (parent, j, children) = f.parent(count + 1, 3, None).await;
    f.lock_all(work.len() + children.len()).await;
    let nap = join_set("n:nap");
    (f.db
        .append_response(f.clock.now(), &parent, delay_finished(&nap, delay_id(1))))
    .await
    .expect("a response before the children's");
    let mut subscriber = tokio::spawn({
        let (db, parent) = (Arc::clone(&f.db), parent.clone());
        async move { db.subscribe_to_next_responses(&parent, 2).await }
    });
    assert_still_waiting(&mut subscriber, "a subscriber from the third response").await;

    f.clock.move_time_forward(LEASE).await;
    let now = f.clock.now();
    let progress = timers_watcher::tick(f.db.as_ref(), now, Duration::ZERO)
        .await
        .expect("watcher tick");
    assert_eq!(
        progress,
        TickProgress {
            expired_locks: work.len() + children.len(),
            expired_async_timers: 0
        }
    );
    let retry = ExecutionEventInner::TemporarilyTimedOut {
        backoff_expires_at: plus(now, BACKOFF),
    };
    for id in &work {
        assert_eq!(f.last_event(id).await, retry, "{id}");
    }
    let timeout = ExecutionEventInner::Finished {
        result: Err(FinishedExecutionError::PermanentTimeout),
    };
    for id in &children {
        assert_eq!(f.last_event(id).await, timeout, "{id}");
    }
    let parent_log = checked_log(f.db.as_ref(), &parent).await;
    let expected: Vec<_> = children.iter().map(|c| (c.clone(), true)).collect();
    assert_eq!(answered_children(&parent_log), expected);
    let from_third = join_within_safety(subscriber, "a subscriber from the third response").await;
    assert_eq!(from_third.expect("responses"), parent_log.responses[2..]);
    assert!(matches!(
        parent_log.pending_state,
        PendingState::PendingAt { .. }
    ));
    let again = timers_watcher::tick(f.db.as_ref(), now, Duration::ZERO).await;
    assert_eq!(again.expect("tick"), TickProgress::default(), "once");

    // The parent consumes the other two responses: its join set counted all three.
    let locked = lock_pending_now(
        f.db.as_ref(),
        &Arc::from([ffqn("parent")]),
        1,
        now,
        executor_id(2),
        LEASE,
    )
    .await;
    assert_eq!(locked.len(), 1, "the answered parent is due");
    let run_ends = plus(now, LEASE);
    let next = vec![join_next(&j, run_ends), join_next(&j, run_ends)];
    f.db.append_batch(batch(&parent, locked[0].next_version, now, next))
        .await
        .expect("two more JoinNext");
    let parent_log = checked_log(f.db.as_ref(), &parent).await;
    assert!(
        !matches!(
            parent_log.pending_state,
            PendingState::BlockedByJoinSet { .. }
        ),
        "every JoinNext found its response: {:?}",
        parent_log.pending_state
    );
}

/// E23: a durable sleep due in the same pass as 10,000 expired leases (due after them, so that
/// a pass in expiry order would reach it last) is delivered first, and the leases take ten
/// writes, not 10,000.
pub async fn e23_sleep_fires_before_ten_thousand_expiries<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let work = f.create_work(1, 10_000).await;
    let t0 = f.clock.now();
    let wakes_at = plus(t0, LEASE + Duration::from_millis(1));
    let delay_id = crate::storage_scenarios::helpers::delay_id(1);
    let (sleeper, _, _) = f.parent(20_000, 0, Some((delay_id, wakes_at))).await;
    f.lock_all(work.len()).await;

    let writes: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let seen = writes.clone();
    let store = ForwardingDb::new(f.db.clone(), move |write: &Write<'_>| {
        let kind = match write {
            Write::Response { .. } => "response",
            Write::Outcomes(_) => "outcomes",
            Write::Outcome(_) => "outcome",
            _ => "other",
        };
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(kind);
        Fault::Pass
    });
    f.clock.move_time_to(wakes_at);
    let progress = timers_watcher::tick(store.as_ref(), wakes_at, Duration::ZERO)
        .await
        .expect("watcher tick");
    assert_eq!(
        progress,
        TickProgress {
            expired_locks: work.len(),
            expired_async_timers: 1
        }
    );
    let writes = writes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut expected = vec!["response"];
    expected.extend(std::iter::repeat_n("outcomes", 10_000 / LEASES_PER_WRITE));
    assert_eq!(
        writes, expected,
        "the sleep first, then the leases in batches"
    );
    let log = checked_log(f.db.as_ref(), &sleeper).await;
    assert_eq!(log.responses.len(), 1);
    assert_eq!(log.responses[0].created_at, wakes_at);
    for id in [&work[0], &work[work.len() - 1]] {
        assert!(matches!(
            f.last_event(id).await,
            ExecutionEventInner::TemporarilyTimedOut { .. }
        ));
    }
}

/// E24: a stale entry among expired leases (its worker finished it after the watcher read it)
/// is refused alone: the leases before and after it, a sibling child among them, are timed out
/// in the same write, and the parent holds both children's responses, each once. An empty
/// batch is refused.
pub async fn e24_stale_entry_among_expired_leases<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let work = f.create_work(1, 2).await;
    let (parent, j, children) = f.parent(3, 2, None).await;
    f.lock_all(4).await;
    f.clock.move_time_forward(LEASE).await;
    let now = f.clock.now();
    let mut expired = f.expired_locks().await;
    expired.sort_by(|a, b| a.execution_id.cmp(&b.execution_id));
    assert_eq!(expired.len(), 4);

    // The first child's worker finishes it (answering the parent) after the watcher read it.
    let stale = &children[0];
    let version = expired
        .iter()
        .find(|l| l.execution_id == *stale)
        .expect("the child's lease")
        .next_version;
    let parent_of = (parent.clone(), j);
    let finish = OutcomeWrite::new(
        stale.clone(),
        version,
        now,
        finished_ok(serde_json::json!("done")),
        Some(&parent_of),
    );
    f.db.append_outcome(finish).await.expect("the worker wins");

    let order = [&work[0], stale, &children[1], &work[1]];
    let writes = order
        .iter()
        .map(|id| {
            let lock = expired
                .iter()
                .find(|l| l.execution_id == **id)
                .expect("lease");
            expired_lock_write(lock, now)
        })
        .collect();
    let results = f.db.append_outcomes(writes).await.expect("append_outcomes");
    assert_eq!(results.len(), 4);
    assert!(
        results[0].is_ok() && results[2].is_ok() && results[3].is_ok(),
        "{results:?}"
    );
    let refused = results[1].as_ref().expect_err("the stale entry is refused");
    assert!(is_lost_race(refused), "{refused}");

    assert!(matches!(
        f.last_event(&work[0]).await,
        ExecutionEventInner::TemporarilyTimedOut { .. }
    ));
    assert!(matches!(
        f.last_event(&work[1]).await,
        ExecutionEventInner::TemporarilyTimedOut { .. }
    ));
    assert_eq!(
        f.last_event(stale).await,
        finished_ok(serde_json::json!("done"))
    );
    let parent_log = checked_log(f.db.as_ref(), &parent).await;
    assert_eq!(
        answered_children(&parent_log),
        vec![(stale.clone(), false), (children[1].clone(), true)]
    );

    let empty = f.db.append_outcomes(Vec::new()).await;
    assert_eq!(
        expect_validation(empty),
        ValidationError::EmptyBatch("append_outcomes")
    );
}

/// E25: a restarted node takes back the leases of its previous process
/// (`timers_watcher::take_back_leases`): of the leases its executor id holds, those expiring
/// before the bound are timed out at once with the retry due at the restart; a lease of
/// another executor, and one of its own expiring at or after the bound (taken since the
/// restart), are left alone; the old run's outcome is refused by the version check, and the
/// taken-back execution can be locked at once. With no retry left it is a permanent timeout.
pub async fn e25_restarted_node_takes_back_its_leases<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let ffqns: Arc<[concepts::FunctionFqn]> = Arc::from([ffqn("work")]);
    let (mine, other_executor) = (executor_id(1), executor_id(2));
    let lock = |executor, expected: usize| {
        let ffqns = ffqns.clone();
        let (db, now) = (f.db.clone(), f.clock.now());
        async move {
            let locked = lock_pending_now(db.as_ref(), &ffqns, 1, now, executor, LEASE).await;
            assert_eq!(locked.len(), expected);
            locked
        }
    };
    let old = f.create_work(1, 1).await;
    let old_run = lock(mine, 1).await.remove(0);
    let others = f.create_work(2, 1).await;
    lock(other_executor, 1).await;
    let exhausted = CreateRequest {
        max_retries: 0,
        ..create_request(execution_id(3), ffqn("work"), f.clock.now())
    };
    f.db.create(exhausted.clone()).await.expect("create");
    lock(mine, 1).await;
    // The restart: the bound is its time plus the lease; a lease taken after it is kept.
    f.clock.move_time_forward(LEASE / 2).await;
    let restart = f.clock.now();
    let bound = plus(restart, LEASE);
    let new = f.create_work(4, 1).await;
    lock(mine, 1).await;

    let taken = timers_watcher::take_back_leases(f.db.as_ref(), mine, bound, restart)
        .await
        .expect("take back");
    assert_eq!(taken, 2);
    assert_eq!(
        f.last_event(&old[0]).await,
        ExecutionEventInner::TemporarilyTimedOut {
            backoff_expires_at: restart
        }
    );
    assert_eq!(
        f.last_event(&exhausted.execution_id).await,
        ExecutionEventInner::Finished {
            result: Err(FinishedExecutionError::PermanentTimeout)
        }
    );
    for kept in [&others[0], &new[0]] {
        assert!(matches!(
            checked_log(f.db.as_ref(), kept).await.pending_state,
            PendingState::Locked { .. }
        ));
    }
    let late = OutcomeWrite::new(
        old[0].clone(),
        old_run.next_version,
        restart,
        finished_ok(serde_json::json!("late")),
        None,
    );
    let refused = f.db.append_outcome(late).await.expect_err("fenced");
    assert!(is_lost_race(&refused), "{refused}");
    let relocked = lock(mine, 1).await;
    assert_eq!(relocked[0].execution_id, old[0]);
    let again = timers_watcher::take_back_leases(f.db.as_ref(), mine, bound, restart)
        .await
        .expect("take back");
    assert_eq!(again, 0, "the lease taken since the restart is kept");
}

impl Fixture {
    /// A top-level execution `n` of `parent`, locked by `executor` now, that submitted one
    /// child of `work` and waits warm for it until its lease's end.
    async fn warm_parent(&self, n: u128, executor: concepts::ExecutorId) -> ExecutionId {
        let now = self.clock.now();
        let parent = execution_id(n);
        self.db
            .create(create_request(parent.clone(), ffqn("parent"), now))
            .await
            .expect("create the parent");
        let ffqns = Arc::from([ffqn("parent")]);
        let mut locked = lock_pending_now(self.db.as_ref(), &ffqns, 2, now, executor, LEASE).await;
        assert_eq!(locked.len(), 1);
        let locked = locked.remove(0);
        let j = join_set("n:kid");
        let child = CreateRequest {
            max_retries: 0,
            ..child_request(&parent, &j, 1, ffqn("work"), now)
        };
        let events = vec![
            join_set_create(&j),
            child_execution_request(&j, &child.execution_id),
            join_next(&j, locked.locked_event.lock_expires_at),
        ];
        self.db
            .append_batch(batch_creating(
                &parent,
                locked.next_version,
                now,
                events,
                vec![child],
            ))
            .await
            .expect("the parent submits its child and waits warm");
        parent
    }

    /// Locks the children of `work` due now, as a live executor does: each ends by
    /// [`Fixture::finish_child`].
    async fn lock_children(&self, expected: usize) -> Vec<concepts::LockedExecution> {
        let now = self.clock.now();
        let ffqns = Arc::from([ffqn("work")]);
        let locked = lock_pending_now(
            self.db.as_ref(),
            &ffqns,
            expected + 1,
            now,
            executor_id(9),
            LEASE,
        )
        .await;
        assert_eq!(locked.len(), expected);
        locked
    }

    /// Finishes the locked child `child` of `parent` now: its response arrives at the parent.
    async fn finish_child(&self, parent: &ExecutionId, children: &[concepts::LockedExecution]) {
        let child = children
            .iter()
            .find(|child| child.parent.as_ref().is_some_and(|(p, _)| p == parent))
            .expect("the parent's child");
        let write = OutcomeWrite::new(
            child.execution_id.clone(),
            child.next_version,
            self.clock.now(),
            finished_ok(serde_json::json!("done")),
            child.parent.as_ref(),
        );
        self.db
            .append_outcome(write)
            .await
            .expect("the child finishes");
    }
}

/// E26: a restarted node hands back the executions its previous process's runs kept waiting
/// warm (`timers_watcher::take_back_warm_runs`): one whose response arrived before the restart
/// is `Unlocked` at once, due at the restart with no retry used; one still blocked is handed
/// back once its response arrives; a warm wait of another executor is left to its deadline.
/// The dead run's next write is refused by the version check, and the handed-back execution
/// can be locked at once.
pub async fn e26_restarted_node_hands_back_its_warm_waits<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (mine, other_executor) = (executor_id(1), executor_id(2));
    let answered = f.warm_parent(1, mine).await;
    let blocked = f.warm_parent(2, mine).await;
    let others = f.warm_parent(3, other_executor).await;
    let deadline = plus(f.clock.now(), LEASE);
    let children = f.lock_children(3).await;
    f.clock.move_time_forward(LEASE / 4).await;
    for parent in [&answered, &others] {
        f.finish_child(parent, &children).await;
        assert_eq!(
            f.state(parent).await,
            PendingState::PendingAt {
                scheduled_at: deadline
            },
            "due only at the dead run's deadline"
        );
    }
    let dead_run_version = f.log(&answered).await.next_version;
    f.clock.move_time_forward(LEASE / 4).await;
    let restart = f.clock.now();
    let bound = plus(restart, LEASE);

    let taking_back = {
        let (db, clock) = (f.db.clone(), f.clock.clone());
        tokio::spawn(async move {
            timers_watcher::take_back_warm_runs(db.as_ref(), mine, bound, &clock).await
        })
    };
    f.finish_child(&blocked, &children).await;
    let handed_back = taking_back
        .await
        .expect("the task")
        .expect("take back warm runs");
    assert_eq!(handed_back, 2);
    for parent in [&answered, &blocked] {
        assert_eq!(
            f.last_event(parent).await,
            ExecutionEventInner::Unlocked {
                backoff_expires_at: restart,
                reason: timers_watcher::TAKEN_BACK.to_string(),
            }
        );
        assert_eq!(
            f.log(parent)
                .await
                .events
                .iter()
                .filter(|e| e.event.is_temporary_event())
                .count(),
            0
        );
    }
    assert_eq!(
        f.state(&others).await,
        PendingState::PendingAt {
            scheduled_at: deadline
        },
        "another executor's warm wait is left alone"
    );
    let late = OutcomeWrite::new(
        answered.clone(),
        dead_run_version,
        restart,
        finished_ok(serde_json::json!("late")),
        None,
    );
    let refused = f.db.append_outcome(late).await.expect_err("fenced");
    assert!(is_lost_race(&refused), "{refused}");
    let ffqns = Arc::from([ffqn("parent")]);
    let relocked = lock_pending_now(f.db.as_ref(), &ffqns, 4, restart, mine, LEASE).await;
    let mut relocked: Vec<_> = relocked.into_iter().map(|l| l.execution_id).collect();
    relocked.sort();
    assert_eq!(relocked, vec![answered, blocked]);
    let again = timers_watcher::take_back_warm_runs(f.db.as_ref(), mine, bound, &f.clock)
        .await
        .expect("take back warm runs");
    assert_eq!(again, 0, "the runs locked since the restart are kept");
}
