//! W21: a child run by an executor of its parent's process hands its answer to the parent's
//! run, which takes it as its response at once and records it with its next write
//! (`AppendBatchRequest::answers`, `docs/SEMANTICS.md` §4.4 and §6): a step of a workflow
//! calling an activity commits once.

use super::fixture::{DOUBLE, LEASE, SAFETY, component, spawn_local};
use crate::StoreFactory;
use concepts::{ClockFn, DbConnection, DbError, ExecutionEventInner, ExecutionId, OutcomeWrite};
use executor::{LocalExecutors, Worker};
use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use test_utils::{
    SimClock,
    forwarding::{Fault, ForwardingDb, Write},
};
use workflow::{ActivityCtx, ActivityWorker, Client, Function, WorkflowCtx, WorkflowError};

const STEPS: Function<u64, u64> = Function::new("test:workflow/answers.steps");

/// Doubles `n` three times, one call after the other.
async fn steps(ctx: WorkflowCtx, n: u64) -> Result<u64, WorkflowError<String>> {
    let mut value = n;
    for _ in 0..3 {
        value = ctx.call(&DOUBLE, &value).await?;
    }
    Ok(value)
}

/// What the store was asked to write, as the scenario checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// An `append_batch` of the execution, with the children it answers.
    Batch(ExecutionId, Vec<ExecutionId>),
    /// An `append_outcome`.
    Outcome(ExecutionId),
    /// An `append_outcomes`.
    Outcomes(Vec<ExecutionId>),
}

fn ids(writes: &[OutcomeWrite]) -> Vec<ExecutionId> {
    writes.iter().map(|w| w.execution_id.clone()).collect()
}

/// W21: three serial calls of an activity whose executor runs in the workflow's process. Each
/// child runs once, under the lease it was created with, and hands its `Finished` over: the
/// parent's next step records it (its batch answers the child), the last by itself before the
/// parent's result; no child writes its own outcome. The logs are those `append_outcome` would
/// have made: the child's `Finished` after its `Locked`, the parent's responses in the order of
/// the calls, at the time of each child's outcome. Then, when the batch that records an answer
/// fails (refused once, nothing written), the run ends, the answer is recorded on its own (its
/// first attempt refused too, with an error worth a retry), and the run after the lease's
/// expiry replays the step and finishes with the same result, the child having run once.
pub async fn w21_children_answer_their_parent_in_its_next_write<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let refuse_an_answer = Arc::new(AtomicBool::new(false));
    let refuse_alone = Arc::new(AtomicBool::new(false));
    let hook = {
        let (seen, refuse_an_answer) = (Arc::clone(&seen), Arc::clone(&refuse_an_answer));
        let refuse_alone = Arc::clone(&refuse_alone);
        let refused = || DbError::Connection("refused by the scenario".to_string());
        move |write: &Write<'_>| {
            let noted = match write {
                Write::AppendBatch(req) => {
                    let answered = req.answers.iter().map(|a| a.outcome.execution_id.clone());
                    let answered: Vec<_> = answered.collect();
                    if !answered.is_empty() && refuse_an_answer.swap(false, Ordering::SeqCst) {
                        return Fault::Refuse(refused());
                    }
                    Some(Seen::Batch(req.execution_id.clone(), answered))
                }
                Write::Outcome(write) => Some(Seen::Outcome(write.execution_id.clone())),
                Write::Outcomes(_) if refuse_alone.swap(false, Ordering::SeqCst) => {
                    return Fault::Refuse(refused());
                }
                Write::Outcomes(writes) => Some(Seen::Outcomes(ids(writes))),
                _ => None,
            };
            seen.lock().unwrap().extend(noted);
            Fault::Pass
        }
    };
    let db: Arc<dyn DbConnection> = ForwardingDb::new(store.db.clone(), hook);
    let clock = SimClock::epoch();
    let local = LocalExecutors::new();
    let spawn = |worker: Arc<dyn Worker>| spawn_local((&db, &clock, &local), worker, LEASE);
    let activities = ActivityWorker::new()
        .register(&DOUBLE, |_: ActivityCtx, n: u64| async move {
            Ok::<_, String>(n * 2)
        })
        .expect("a legal registration");
    let workflows = workflow::WorkflowWorker::new(db.clone(), clock.clone())
        .child_settings(component(), 0, Duration::from_secs(1))
        .register(&STEPS, steps)
        .expect("a legal registration");
    let mut executors = vec![spawn(Arc::new(activities)), spawn(Arc::new(workflows))];
    // Retried once its lease expires, after a millisecond.
    let client =
        Client::new(db.clone(), clock.clone(), component()).retries(1, Duration::from_millis(1));

    // Three steps, each child's answer recorded by the parent.
    let handle = client.submit(&STEPS, &1).await.expect("submitted");
    assert_eq!(handle.result_within(SAFETY).await.expect("the result"), 8);
    let parent = handle.execution_id().clone();
    let log = crate::checked_log(db.as_ref(), &parent).await;
    let children: Vec<ExecutionId> = (log.responses.iter())
        .filter_map(|r| r.event.event.child_execution_id().cloned())
        .collect();
    assert_eq!(children.len(), 3, "{:?}", log.responses);
    let writes = std::mem::take(&mut *seen.lock().unwrap());
    let wrote = |expected: &Seen| writes.iter().any(|w| w == expected);
    assert!(
        wrote(&Seen::Batch(parent.clone(), vec![children[0].clone()])),
        "{writes:?}"
    );
    assert!(
        wrote(&Seen::Batch(parent.clone(), vec![children[1].clone()])),
        "{writes:?}"
    );
    assert!(
        wrote(&Seen::Outcomes(vec![children[2].clone()])),
        "{writes:?}"
    );
    let own = |w: &Seen| matches!(w, Seen::Outcome(id) if children.contains(id));
    assert!(
        !writes.iter().any(own),
        "a child wrote its own outcome: {writes:?}"
    );
    for (child, response) in children.iter().zip(&log.responses) {
        let child_log = crate::checked_log(db.as_ref(), child).await;
        let kinds: Vec<&str> = (child_log.events.iter())
            .map(|event| event.event.variant_name())
            .collect();
        assert_eq!(kinds, ["Created", "Locked", "Finished"], "{child}");
        assert_eq!(child_log.events[2].created_at, response.created_at);
    }

    // The batch that records the first answer fails: the run ends, the answer is recorded on
    // its own, and the next run replays the step.
    refuse_an_answer.store(true, Ordering::SeqCst);
    refuse_alone.store(true, Ordering::SeqCst);
    let handle = client.submit(&STEPS, &5).await.expect("submitted");
    let parent = handle.execution_id().clone();
    let first = parent.next_level(&"o:1-double".parse().expect("a join set id"), 1);
    let waited = tokio::time::timeout(SAFETY, async {
        loop {
            let answered = (db.get(&parent).await).is_ok_and(|log| !log.responses.is_empty());
            let refused =
                !refuse_an_answer.load(Ordering::SeqCst) && !refuse_alone.load(Ordering::SeqCst);
            if answered && refused {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    waited.await.expect("the first answer recorded on its own");
    clock
        .move_time_forward(LEASE + Duration::from_secs(1))
        .await;
    timers_watcher::tick(db.as_ref(), clock.now(), Duration::ZERO)
        .await
        .expect("the watcher's tick");
    clock.move_time_forward(Duration::from_secs(1)).await;
    assert_eq!(handle.result_within(SAFETY).await.expect("the result"), 40);
    let first_log = crate::checked_log(db.as_ref(), &first).await;
    let runs = (first_log.events.iter())
        .filter(|event| matches!(event.event, ExecutionEventInner::Locked(_)))
        .count();
    assert_eq!(runs, 1, "the first child ran once");
    for executor in &mut executors {
        executor.close().await;
    }
}
