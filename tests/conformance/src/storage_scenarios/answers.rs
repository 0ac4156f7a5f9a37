//! S28: a parent's batch records the answers of its children (`AppendBatchRequest::answers`):
//! each child's `Finished` and the parent's response as `append_outcome` records them, before
//! the batch's events, in one transaction; a batch whose answer breaks a rule, or whose
//! response would not take the place the run consumed it at, writes nothing.

use super::{LEASE, assert_still_waiting, helpers::*, join_within_safety};
use crate::StoreFactory;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, ChildAnswer, ClockFn, CreateRequest, DbConnection, DbErrorKind,
    ExecutionEventInner, ExecutionId, ExecutionLog, JoinSetId, OutcomeWrite, ValidationError,
    Version, is_lost_race,
};
use std::sync::Arc;
use test_utils::SimClock;

/// One step of the parent at `version`: it asks for `child` in `join_set_id` (created under a
/// lease), waits for it warm, and records `answers` first.
fn step(
    parent: &ExecutionId,
    version: Version,
    now: DateTime<Utc>,
    join_set_id: &JoinSetId,
    child: &CreateRequest,
    answers: Vec<ChildAnswer>,
) -> AppendBatchRequest {
    let events = vec![
        child_execution_request(join_set_id, &child.execution_id),
        join_next(join_set_id, plus(now, LEASE)),
    ];
    AppendBatchRequest {
        leases: vec![lease(&child.execution_id, plus(now, LEASE))],
        answers,
        ..batch_creating(parent, version, now, events, vec![child.clone()])
    }
}

/// The logs of `ids`; an execution that does not exist reads as `None`.
async fn logs(db: &dyn DbConnection, ids: &[&ExecutionId]) -> Vec<Option<ExecutionLog>> {
    let mut logs = Vec::new();
    for id in ids {
        logs.push(db.get(id).await.ok());
    }
    logs
}

/// S28: the parent asks for a child, which an executor of its process runs under a lease; the
/// child's `Finished` is handed to the parent instead of written, and the parent's next batch
/// records it: the child's log ends with it at the version its run read, the parent has the
/// response at the index its run consumed it (a waiter of the parent's responses is handed it),
/// and the batch's events and its next child follow, in one write. Before that, each of these
/// batches is refused and writes nothing: an answer whose response would take another place
/// (`AnswerOutOfPlace`), two answers of one child, an answer that is not a `Finished`, one of an
/// execution whose parent is another, one at a version the child's log is not at
/// (`VersionMismatch`), and a valid answer in a batch at a version the parent's log is not at.
/// Recording the same answer again is a lost race and writes nothing.
pub async fn s28_batch_records_child_answers<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let (f, child_f) = (ffqn("s28"), ffqn("s28-child"));
    let parent = execution_id(1);
    db.create(create_request(parent.clone(), f, now))
        .await
        .expect("create the parent");
    let kids = join_set("n:kids");
    let child = |idx: u64| child_request(&parent, &kids, idx, child_f.clone(), now);
    let (first, second) = (child(1), child(2));

    // The first step: the child created locked, the parent waiting for it.
    let mut first_step = step(&parent, Version(1), now, &kids, &first, Vec::new());
    first_step.events.insert(0, join_set_create(&kids));
    let version = db.append_batch(first_step).await.expect("the first step");
    assert_eq!(version, Version(4));

    // The child's run ends; its outcome is not written.
    let outcome = |event: ExecutionEventInner, version: Version| {
        OutcomeWrite::new(
            first.execution_id.clone(),
            version,
            now,
            event,
            first.parent.as_ref(),
        )
    };
    let done = outcome(finished_ok(serde_json::json!("one")), Version(2));
    let answer = |outcome: &OutcomeWrite, response_idx: u64| ChildAnswer {
        outcome: outcome.clone(),
        response_idx,
    };

    // Each refusal writes nothing.
    let stranger = OutcomeWrite {
        parent: Some((execution_id(9), kids.clone())),
        ..done.clone()
    };
    let refusals = [
        (version, vec![answer(&done, 1)]),
        (version, vec![answer(&done, 0), answer(&done, 0)]),
        (version, vec![answer(&outcome(persist(1), Version(2)), 0)]),
        (version, vec![answer(&stranger, 0)]),
        (
            version,
            vec![answer(&outcome(done.event.clone(), Version(3)), 0)],
        ),
        (Version(3), vec![answer(&done, 0)]),
    ];
    let ids = [&parent, &first.execution_id, &second.execution_id];
    let before = logs(db, &ids).await;
    assert!(before[2].is_none());
    for (n, (at, answers)) in refusals.into_iter().enumerate() {
        let refused = db
            .append_batch(step(&parent, at, now, &kids, &second, answers))
            .await;
        let err = refused.expect_err("refused");
        match n {
            0 => assert!(
                matches!(
                    err.as_validation(),
                    Some(ValidationError::AnswerOutOfPlace {
                        child,
                        expected: 1,
                        found: 0,
                    }) if *child == first.execution_id
                ),
                "refusal {n}: {err:?}"
            ),
            4 | 5 => assert_eq!(err.kind(), DbErrorKind::VersionMismatch, "refusal {n}"),
            _ => assert!(
                matches!(
                    err.as_validation(),
                    Some(ValidationError::InvalidRequest(_))
                ),
                "refusal {n}: {err:?}"
            ),
        }
        assert_eq!(logs(db, &ids).await, before, "refusal {n} wrote something");
    }

    // The second step records the answer; a waiter of the parent's responses is handed it.
    let waiter = {
        let (db, parent) = (Arc::clone(&store.db), parent.clone());
        tokio::spawn(async move { db.subscribe_to_next_responses(&parent, 0).await })
    };
    let mut waiter = waiter;
    assert_still_waiting(&mut waiter, "the waiter of the parent's responses").await;
    let version = db
        .append_batch(step(
            &parent,
            version,
            now,
            &kids,
            &second,
            vec![answer(&done, 0)],
        ))
        .await
        .expect("the second step, with the first child's answer");
    assert_eq!(version, Version(6));
    let (_, response) = done.parent_response().expect("a child's Finished answers");
    let handed = join_within_safety(waiter, "the waiter of the parent's responses").await;
    assert_eq!(handed.expect("the responses"), vec![response.clone()]);

    let child_log = assert_state_matches_derivation(db, &first.execution_id).await;
    assert_eq!(child_log.events.len(), 3, "Created, Locked, Finished");
    assert_eq!(child_log.events[2].event, done.event);
    assert_eq!(child_log.events[2].created_at, now);
    assert!(child_log.pending_state.is_finished());
    let parent_log = assert_state_matches_derivation(db, &parent).await;
    assert_eq!(parent_log.responses, vec![response]);
    assert_eq!(parent_log.next_version, Version(6));
    let second_log = assert_state_matches_derivation(db, &second.execution_id).await;
    assert_eq!(second_log.next_version, Version(2), "created locked");

    // The same answer again is a lost race, and the batch writes nothing.
    let third = child(3);
    let ids = [&parent, &first.execution_id, &third.execution_id];
    let before = logs(db, &ids).await;
    let again = db
        .append_batch(step(
            &parent,
            version,
            now,
            &kids,
            &third,
            vec![answer(&done, 1)],
        ))
        .await
        .expect_err("the same answer again");
    assert!(is_lost_race(&again), "{again:?}");
    assert_eq!(logs(db, &ids).await, before);
    expect_kind(db.get(&third.execution_id).await, DbErrorKind::NotFound);
}

/// S29: the place an answer must take counts every response the parent has, also one stored
/// while the parent waited for another join set, which changes neither its state nor its log
/// (a delay of its own timer join set). After that response, an answer at the place the
/// parent's run would have consumed it before it (0) is refused with `AnswerOutOfPlace` and
/// writes nothing; at the next place (1) it is recorded, after the delay's response.
pub async fn s29_answer_place_counts_every_response<F: StoreFactory>(factory: &F) {
    let store = factory.fresh().await;
    let db = store.db.as_ref();
    let clock = SimClock::epoch();
    let now = clock.now();
    let (f, child_f) = (ffqn("s29"), ffqn("s29-child"));
    let parent = execution_id(1);
    db.create(create_request(parent.clone(), f.clone(), now))
        .await
        .expect("create the parent");
    let (kids, timer) = (join_set("n:kids"), join_set("o:timer"));
    let child = |idx: u64| child_request(&parent, &kids, idx, child_f.clone(), now);
    let (first, second) = (child(1), child(2));

    // The first step: a timer requested, the child created locked, the parent waiting for it.
    let mut first_step = step(&parent, Version(1), now, &kids, &first, Vec::new());
    let timer_events = [
        join_set_create(&kids),
        join_set_create(&timer),
        delay_request(&timer, delay_id(1), plus(now, LEASE)),
    ];
    first_step.events.splice(0..0, timer_events);
    let version = db.append_batch(first_step).await.expect("the first step");
    assert_eq!(version, Version(6));

    // The timer's response arrives while the parent waits for its child.
    let delay = delay_finished(&timer, delay_id(1));
    db.append_response(now, &parent, delay.clone())
        .await
        .expect("the timer's response");
    let parent_log = assert_state_matches_derivation(db, &parent).await;
    assert_eq!(parent_log.next_version, version, "no event");
    assert_eq!(parent_log.responses.len(), 1);

    let done = OutcomeWrite::new(
        first.execution_id.clone(),
        Version(2),
        now,
        finished_ok(serde_json::json!("one")),
        first.parent.as_ref(),
    );
    let answer = |response_idx: u64| ChildAnswer {
        outcome: done.clone(),
        response_idx,
    };
    let ids = [&parent, &first.execution_id, &second.execution_id];
    let before = logs(db, &ids).await;
    let refused = db
        .append_batch(step(&parent, version, now, &kids, &second, vec![answer(0)]))
        .await
        .expect_err("an answer at the place before the timer's response");
    assert!(
        matches!(
            refused.as_validation(),
            Some(ValidationError::AnswerOutOfPlace {
                child,
                expected: 0,
                found: 1,
            }) if *child == first.execution_id
        ),
        "{refused:?}"
    );
    assert_eq!(logs(db, &ids).await, before, "the refusal wrote something");

    db.append_batch(step(&parent, version, now, &kids, &second, vec![answer(1)]))
        .await
        .expect("the answer at the place after the timer's response");
    let (_, response) = done.parent_response().expect("a child's Finished answers");
    let parent_log = assert_state_matches_derivation(db, &parent).await;
    let arrived: Vec<_> = parent_log.responses.iter().map(|r| &r.event).collect();
    assert_eq!(arrived, vec![&delay, &response.event]);
    let child_log = assert_state_matches_derivation(db, &first.execution_id).await;
    assert_eq!(child_log.events[2].event, done.event);
}
