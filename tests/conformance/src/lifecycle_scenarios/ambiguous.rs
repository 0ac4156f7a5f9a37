//! L18..L20: ambiguous commits. A store wrapper ([`ForwardingDb`]) lets a write commit and
//! then answers `DbError::Connection`, as a server restarted between the commit and its
//! reply does; the executor (which retries its outcome), the timers watcher (which looks again
//! on its next tick) and a client (which retries by hand) must all end with the right log:
//! nothing duplicated, nothing lost.

use super::{Fixture, LEASE, assert_finished_with, cancelled, child_responses, ok};
use crate::{
    StoreFactory,
    executor_scenarios::workers::{ScriptedWorker, Step, test_component_id},
    storage_scenarios::helpers::{
        SAFETY, child_request, create_request, delay_id, execution_id, ffqn, join_set, ms, plus,
    },
};
use concepts::{
    CancelOutcome, CancelRequest, CompleteOutcome, CompleteRequest, CreateOutcome, CreateRequest,
    DbClient, DbError, ExecutionEventInner, ExecutionId, ExecutionLog, FinishedExecutionError,
    FunctionFqn, JoinSetResponse, Json, PendingState, PruneOutcome, PruneRequest,
    SupportedFunctionReturnValue,
};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};
use test_utils::forwarding::{Fault, ForwardingDb, Write};
use timers_watcher::TickProgress;

/// How many writes [`losing_first_replies`] saw, per key.
type Seen = Arc<Mutex<HashMap<String, u32>>>;

/// The error the wrapper answers after the commit.
fn lost_reply() -> DbError {
    DbError::Connection("injected: the connection dropped after the commit".to_owned())
}

/// Forwards to `inner`; of the writes that `key` names, the first one per key commits and
/// then answers [`lost_reply`], the others pass. Counts the named writes per key.
fn losing_first_replies(
    inner: Arc<dyn concepts::DbConnection>,
    key: impl Fn(&Write<'_>) -> Option<String> + Send + Sync + 'static,
) -> (Arc<ForwardingDb>, Seen) {
    let seen = Seen::default();
    let counted = seen.clone();
    let store = ForwardingDb::new(inner, move |write: &Write<'_>| {
        let Some(key) = key(write) else {
            return Fault::Pass;
        };
        let mut seen = counted.lock().unwrap_or_else(PoisonError::into_inner);
        let count = seen.entry(key).or_default();
        *count += 1;
        if *count == 1 {
            Fault::LoseReply(lost_reply())
        } else {
            Fault::Pass
        }
    });
    (store, seen)
}

fn seen(seen: &Seen, key: &ExecutionId) -> u32 {
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key.to_string())
        .copied()
        .unwrap_or_default()
}

/// How many events of `log` `pick` accepts.
fn count_events(log: &ExecutionLog, pick: impl Fn(&ExecutionEventInner) -> bool) -> usize {
    log.events.iter().filter(|e| pick(&e.event)).count()
}

fn is_finished(event: &ExecutionEventInner) -> bool {
    matches!(event, ExecutionEventInner::Finished { .. })
}

/// L18: the executor's `Finished` commits but its reply is lost: the executor writes it again
/// (a retriable error), finds the log moved on and stops. Exactly two attempts; one
/// `Finished`, with the worker's value; the parent of a child has exactly one response; and
/// the watcher finds no lease to resolve afterwards.
pub async fn l18_ambiguous_outcome_write_is_not_repeated<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (store, attempts) = losing_first_replies(f.db.clone(), |write| match write {
        Write::Outcome(outcome) => Some(outcome.execution_id.to_string()),
        _ => None,
    });
    let value = Json(serde_json::json!({"sum": 7}));
    let worker = ScriptedWorker::new(ffqn("work"), vec![Step::Ok(value.clone())]);
    let exec = f.executor(Arc::new(worker), store);
    let alone = f.top(1, "work").await;
    let parent = f.top(2, "parent").await;
    let child = f
        .await_children(&parent, &join_set("n:kids"), &[ffqn("work")], None)
        .await
        .remove(0);
    let at = f.now();

    let progress = exec.tick(at).await.expect("tick");
    let ran = tokio::time::timeout(SAFETY, progress.wait_for_tasks())
        .await
        .expect("the workers end")
        .expect("no panic");
    assert_eq!(ran.len(), 2);
    let result = Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(value));
    for id in [&alone, &child] {
        assert_eq!(
            seen(&attempts, id),
            2,
            "{id}: the write, and one retry that finds it written"
        );
        let log = f.log(id).await;
        assert_finished_with(&log, &result, at);
        assert_eq!(count_events(&log, is_finished), 1, "{id}");
    }
    let parent_log = f.log(&parent).await;
    assert_eq!(child_responses(&parent_log).len(), 1, "one response");

    let ids = [alone, parent, child];
    let before = f.logs(&ids).await;
    f.clock.move_time_forward(LEASE).await;
    let progress = timers_watcher::tick(f.db.as_ref(), f.now(), Duration::ZERO)
        .await
        .expect("watcher tick");
    assert_eq!(progress, TickProgress::default(), "no lease is left");
    assert_eq!(f.logs(&ids).await, before);
}

/// L19: each write of a watcher tick commits but its reply is lost (a lease timed out with a
/// retry left, a child's lease timed out for good, a delay fired): the next tick finds
/// nothing to do and writes nothing. Each log holds exactly one `TemporarilyTimedOut`,
/// `Finished` or `DelayFinished`, and the child's parent exactly one response.
pub async fn l19_ambiguous_watcher_write_is_not_repeated<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (store, _seen) = losing_first_replies(f.db.clone(), |write| match write {
        Write::Outcome(outcome) => Some(outcome.execution_id.to_string()),
        Write::Outcomes(outcomes) => Some(
            outcomes
                .iter()
                .map(|o| o.execution_id.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        Write::Response { execution_id, .. } => Some(execution_id.to_string()),
        _ => None,
    });
    let t0 = f.now();
    let retried = f.top(1, "work").await;
    let parent = f.top(2, "parent").await;
    let j = join_set("n:kids");
    let last_try = CreateRequest {
        max_retries: 0,
        ..child_request(&parent, &j, 1, ffqn("work"), t0)
    };
    let child = f
        .await_requests(&parent, &j, vec![last_try], None)
        .await
        .remove(0);
    let sleeper = f.top(3, "sleeper").await;
    let sleep = join_set("o:sleep");
    f.await_children(&sleeper, &sleep, &[], Some((delay_id(1), plus(t0, LEASE))))
        .await;
    let mut locked = f.lock_due("work").await;
    locked.sort();
    assert_eq!(locked, vec![retried.clone(), child.clone()]);

    f.clock.move_time_forward(LEASE).await;
    let at = f.now();
    timers_watcher::tick(store.as_ref(), at, Duration::ZERO)
        .await
        .expect("the tick reads its timers");
    let ids = [
        retried.clone(),
        parent.clone(),
        child.clone(),
        sleeper.clone(),
    ];
    let before = f.logs(&ids).await;
    let again = timers_watcher::tick(store.as_ref(), at, Duration::ZERO)
        .await
        .expect("watcher tick");
    assert_eq!(again, TickProgress::default(), "nothing is left to do");
    assert_eq!(f.logs(&ids).await, before, "the second tick wrote nothing");

    let timed_out = count_events(&before[0], |e| {
        matches!(e, ExecutionEventInner::TemporarilyTimedOut { .. })
    });
    assert_eq!(timed_out, 1, "one timeout of the lease");
    assert!(matches!(
        before[0].pending_state,
        PendingState::PendingAt { .. }
    ));
    assert_finished_with(
        &before[2],
        &Err(FinishedExecutionError::PermanentTimeout),
        at,
    );
    assert_eq!(count_events(&before[2], is_finished), 1);
    assert_eq!(
        child_responses(&before[1]).len(),
        1,
        "one response to the parent"
    );
    let delays = before[3]
        .responses
        .iter()
        .filter(|r| matches!(r.event.event, JoinSetResponse::DelayFinished { .. }));
    assert_eq!(delays.count(), 1, "the delay fired once");
    assert_eq!(
        before[3].pending_state,
        PendingState::PendingAt { scheduled_at: at }
    );
}

/// A typed function for the client part of L20.
const SUBMITTED: workflow::Function<u64, u64> = workflow::Function::new("test:pkg/ifc@1.0.0.typed");

/// L20: a client's `create`, `create_locked`, `create_batch`, typed `submit_with_id`, `cancel`,
/// `complete` and `prune` commit but their replies are lost (a retriable `Connection` error); the caller
/// sends each again and is answered as for a repeated request (`AlreadyExisted`, success,
/// `AlreadyFinished`, `AlreadyCompleted`, nothing left to prune). Every log holds each write
/// once: one `Created`, one `Finished`, one response per child.
pub async fn l20_ambiguous_client_writes_are_safe_to_retry<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let (store, _seen) = losing_first_replies(f.db.clone(), |write| match write {
        Write::Create(req) | Write::CreateLocked(req, _) => Some(req.execution_id.to_string()),
        Write::CreateBatch(_) => Some("create_batch".to_owned()),
        Write::Cancel(req) => Some(req.execution_id.to_string()),
        Write::Complete(req) => Some(req.execution_id.to_string()),
        Write::Prune(_) => Some("prune".to_owned()),
        _ => None,
    });
    let now = f.now();

    let req = create_request(execution_id(1), ffqn("work"), now);
    assert_lost(store.create(req.clone()).await);
    let created = f.log(&req.execution_id).await;
    assert_eq!(created.events, vec![req.to_created_event()]);
    assert_eq!(
        store.create(req.clone()).await.expect("retry"),
        CreateOutcome::AlreadyExisted {
            pending_state: created.pending_state.clone()
        }
    );
    assert_eq!(f.log(&req.execution_id).await, created);

    // Created locked: the repeat, under another lease, finds the first one.
    let req = create_request(execution_id(7), ffqn("work"), now);
    let lease = |n| concepts::Locked {
        component_id: test_component_id(),
        executor_id: crate::storage_scenarios::helpers::executor_id(n),
        run_id: crate::storage_scenarios::helpers::run_id(n),
        lock_expires_at: now + chrono::TimeDelta::seconds(1),
    };
    assert_lost(store.create_locked(req.clone(), lease(1)).await);
    let created = f.log(&req.execution_id).await;
    assert_eq!(created.events.len(), 2, "`Created` and the first lease");
    assert_eq!(
        store
            .create_locked(req.clone(), lease(2))
            .await
            .expect("retry"),
        CreateOutcome::AlreadyExisted {
            pending_state: created.pending_state.clone()
        }
    );
    assert_eq!(f.log(&req.execution_id).await, created);

    let batch: Vec<CreateRequest> = [2, 3]
        .map(|n| create_request(execution_id(n), ffqn("work"), now))
        .to_vec();
    assert_lost(store.create_batch(batch.clone()).await);
    store.create_batch(batch.clone()).await.expect("retry");
    for req in &batch {
        assert_eq!(
            f.log(&req.execution_id).await.events,
            vec![req.to_created_event()]
        );
    }

    let client = workflow::Client::new(store.clone(), f.clock.clone(), test_component_id());
    let typed = execution_id(4);
    match client.submit_with_id(typed.clone(), &SUBMITTED, &7).await {
        Err(workflow::ClientError::Db(err)) => assert!(err.is_retriable(), "{err:?}"),
        Err(err) => panic!("expected the lost reply, got {err:?}"),
        Ok(_) => panic!("the reply was to be lost"),
    }
    let retried = client
        .submit_with_id(typed.clone(), &SUBMITTED, &7)
        .await
        .expect("the submitter retries");
    assert!(!retried.created, "the lost submission had created it");
    assert_eq!(retried.handle.execution_id(), &typed);
    assert_eq!(f.log(&typed).await.events.len(), 1, "one `Created`");

    let parent = f.top(5, "parent").await;
    let kids = f
        .await_children(&parent, &join_set("n:kids"), &[ffqn("work")], None)
        .await;
    let cancel = CancelRequest {
        execution_id: kids[0].clone(),
        now: f.now(),
        reason: "stop".to_owned(),
    };
    assert_lost(store.cancel(cancel.clone()).await);
    assert_eq!(
        store.cancel(cancel).await.expect("retry"),
        CancelOutcome::AlreadyFinished {
            result: cancelled("stop")
        }
    );
    assert_eq!(count_events(&f.log(&kids[0]).await, is_finished), 1);
    assert_eq!(child_responses(&f.log(&parent).await).len(), 1);

    let waiting = f.top(6, "parent").await;
    let stub = f
        .await_children(&waiting, &join_set("n:approval"), &[stub_fn()], None)
        .await
        .remove(0);
    let complete = CompleteRequest {
        execution_id: stub.clone(),
        now: f.now(),
        value: SupportedFunctionReturnValue::InfallibleOrResultOk(Json(serde_json::json!("yes"))),
    };
    assert_lost(store.complete(complete.clone()).await);
    assert_eq!(
        store.complete(complete).await.expect("retry"),
        CompleteOutcome::AlreadyCompleted
    );
    assert_eq!(count_events(&f.log(&stub).await, is_finished), 1);
    assert_eq!(child_responses(&f.log(&waiting).await).len(), 1);

    for req in &batch {
        f.finish(&req.execution_id, ok(serde_json::json!("done")))
            .await;
    }
    f.clock.move_time_forward(ms(1)).await;
    let prune = PruneRequest {
        finished_before: f.now(),
        limit: 10,
        after: None,
    };
    let kept = [
        execution_id(1),
        typed,
        parent,
        kids[0].clone(),
        waiting,
        stub,
    ];
    let kept_before = f.logs(&kept).await;
    assert_lost(store.prune(prune.clone()).await);
    assert_eq!(
        store.prune(prune).await.expect("retry"),
        PruneOutcome::default(),
        "the first call pruned them"
    );
    for req in &batch {
        assert!(store.get(&req.execution_id).await.is_err(), "pruned");
    }
    assert_eq!(f.logs(&kept).await, kept_before, "nothing else was lost");
}

/// Asserts that `result` is the lost reply: a retriable error.
#[track_caller]
fn assert_lost<T: std::fmt::Debug>(result: Result<T, DbError>) {
    match result {
        Err(err) => assert!(err.is_retriable(), "a retriable error: {err:?}"),
        Ok(answer) => panic!("the reply was to be lost, got {answer:?}"),
    }
}

fn stub_fn() -> FunctionFqn {
    FunctionFqn::stub("approval").expect("legal stub name")
}

/// L23: an executor's `lock_pending` commits but its reply is lost. The executions it locked
/// are held by a lease no run of the executor knows; its next tick gives them back
/// (`Unlocked`, due at once, no retry used) before it locks again, and runs them. An
/// execution with no retry left finishes with the worker's value: before, it waited for its
/// lease to end and the watcher finished it `PermanentTimeout`, never having run. After it,
/// no lease is left for the watcher.
pub async fn l23_executions_of_a_lost_lock_answer_run_at_the_next_tick<F: StoreFactory>(
    factory: &F,
) {
    let f = Fixture::new(factory).await;
    let (store, locks) = losing_first_replies(f.db.clone(), |write| match write {
        Write::LockPending(_) => Some("lock".to_owned()),
        _ => None,
    });
    let value = Json(serde_json::json!({"ran": true}));
    let worker = ScriptedWorker::new(ffqn("work"), vec![Step::Ok(value.clone())]);
    let exec = f.executor(Arc::new(worker), store);
    let last_try = CreateRequest {
        max_retries: 0,
        ..create_request(execution_id(1), ffqn("work"), f.now())
    };
    let id = f.create(last_try).await;
    let at = f.now();

    let lost = exec.tick(at).await;
    assert!(lost.is_err(), "the lock's reply is lost");
    assert!(
        matches!(f.log(&id).await.pending_state, PendingState::Locked { .. }),
        "the lock committed"
    );
    let progress = exec.tick(at).await.expect("tick");
    let ran = tokio::time::timeout(SAFETY, progress.wait_for_tasks())
        .await
        .expect("the worker ends")
        .expect("no panic");
    assert_eq!(ran.len(), 1, "the given-back execution ran");
    let log = f.log(&id).await;
    let result = Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(value));
    assert_finished_with(&log, &result, at);
    let kinds: Vec<_> = log.events.iter().map(|e| e.event.variant_name()).collect();
    assert_eq!(
        kinds,
        ["Created", "Locked", "Unlocked", "Locked", "Finished"],
        "given back without a retry used"
    );
    assert_eq!(
        locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get("lock")
            .copied(),
        Some(2),
        "one lost lock, one that ran it"
    );

    f.clock.move_time_forward(LEASE).await;
    let progress = timers_watcher::tick(f.db.as_ref(), f.now(), Duration::ZERO)
        .await
        .expect("watcher tick");
    assert_eq!(progress, TickProgress::default(), "no lease is left");
}
