//! L1..L4: idempotent submit (`docs/SEMANTICS.md` §10): a repeated `create` is answered and
//! writes nothing, a conflicting one is refused naming what differs, `create_batch` follows the
//! rule item by item (all or nothing), and a child's id is derived from its parent and join set.

use super::{Fixture, ok};
use crate::{
    StoreFactory,
    storage_scenarios::helpers::{
        batch_creating, child_execution_request, child_request, create_request, execution_id,
        expect_kind, expect_validation, ffqn, join_set, ms,
    },
};
use concepts::{
    CreateConflict, CreateOutcome, CreateRequest, DbClientExt, DbError, DbErrorKind, DuplicateKind,
    ExecutionId, ExecutionLog, Json, ListExecutionsFilter, PendingState, ValidationError,
};

/// The request `req` sent again later, as a submitter that lost the reply sends it: the
/// same id, function, parameters and parent, a later `created_at` and `scheduled_at`.
fn retried(req: &CreateRequest, later: chrono::DateTime<chrono::Utc>) -> CreateRequest {
    CreateRequest {
        created_at: later,
        scheduled_at: later,
        ..req.clone()
    }
}

/// Asserts that `outcome` says the execution already existed in `state`.
#[track_caller]
fn assert_already_existed(outcome: CreateOutcome, state: &PendingState) {
    assert_eq!(
        outcome,
        CreateOutcome::AlreadyExisted {
            pending_state: state.clone()
        }
    );
}

/// Every execution of the store, newest first.
async fn all_ids(f: &Fixture) -> Vec<ExecutionId> {
    f.db.list_all_executions(ListExecutionsFilter::default())
        .await
        .expect("list")
        .into_iter()
        .map(|summary| summary.execution_id)
        .collect()
}

/// L1: a `create` repeated with the same function, parameters and parent is answered
/// `AlreadyExisted` with the current state (pending, locked, finished; a child too) and writes
/// nothing: every log stays as it was and a finished execution is not revived.
pub async fn l1_repeated_create_writes_nothing<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let t0 = f.now();
    let req = create_request(execution_id(1), ffqn("submit"), t0);
    let id = f.create(req.clone()).await;
    let before = f.log(&id).await;

    f.clock.move_time_forward(ms(10)).await;
    let outcome = f.db.create(retried(&req, f.now())).await.expect("retry");
    assert_already_existed(outcome, &before.pending_state);
    assert_eq!(f.log(&id).await, before, "a repeated create writes nothing");
    assert_eq!(all_ids(&f).await, vec![id.clone()]);

    assert_eq!(f.lock_due("submit").await, vec![id.clone()]);
    let before = f.log(&id).await;
    assert!(matches!(before.pending_state, PendingState::Locked { .. }));
    let outcome = f.db.create(retried(&req, f.now())).await.expect("retry");
    assert_already_existed(outcome, &before.pending_state);
    assert_eq!(f.log(&id).await, before, "the lease is untouched");

    f.finish(&id, ok(serde_json::json!("done"))).await;
    let before = f.log(&id).await;
    f.clock.move_time_forward(ms(10)).await;
    let outcome = f.db.create(retried(&req, f.now())).await.expect("retry");
    assert_already_existed(outcome, &before.pending_state);
    assert_eq!(
        f.log(&id).await,
        before,
        "a finished execution is not revived"
    );
    f.clock.move_time_forward(ms(1_000)).await;
    let relocked = f.lock_due("submit").await;
    assert!(relocked.is_empty(), "nothing became due: {relocked:?}");

    // A child, created by its parent's batch, submitted again through `create`.
    let parent = f.top(2, "parent").await;
    let j = join_set("n:kids");
    let children = f.await_children(&parent, &j, &[ffqn("child")], None).await;
    let parent_before = f.log(&parent).await;
    let child_before = f.log(&children[0]).await;
    let child_req = child_request(&parent, &j, 1, ffqn("child"), f.now());
    let outcome = f.db.create(child_req).await.expect("retry of a child");
    assert_already_existed(outcome, &child_before.pending_state);
    assert_eq!(f.log(&children[0]).await, child_before);
    assert_eq!(f.log(&parent).await, parent_before);
}

/// The conflict `result` must be: an `ExecutionConflict` of `execution_id` naming exactly
/// `differences`.
#[track_caller]
fn assert_conflict<T: std::fmt::Debug>(
    result: Result<T, DbError>,
    execution_id: &ExecutionId,
    differences: &[CreateConflict],
) {
    let err = expect_kind(result, DbErrorKind::Duplicate);
    assert!(
        matches!(
            &err,
            DbError::Duplicate(DuplicateKind::ExecutionConflict { execution_id: id, differences: d })
                if id == execution_id && d == differences
        ),
        "{err:?}"
    );
}

/// L2: the same id with another function or other parameters is refused with a typed
/// `Duplicate` (`ExecutionConflict`) that names what differs, and writes nothing. A parent
/// cannot differ under the same id: a child's id names its parent and join set (L4), so a
/// request naming another parent is refused as invalid before anything is read.
pub async fn l2_conflicting_create_names_what_differs<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let req = create_request(execution_id(1), ffqn("submit"), f.now());
    let id = f.create(req.clone()).await;
    let before = f.log(&id).await;
    let other_params = Json(serde_json::json!([1, "three"]));

    let other_function = CreateRequest {
        ffqn: ffqn("other"),
        ..req.clone()
    };
    assert_conflict(
        f.db.create(other_function).await,
        &id,
        &[CreateConflict::Function],
    );
    let other = CreateRequest {
        params: other_params.clone(),
        ..req.clone()
    };
    assert_conflict(f.db.create(other).await, &id, &[CreateConflict::Params]);
    let both = CreateRequest {
        ffqn: ffqn("other"),
        params: other_params,
        ..req.clone()
    };
    assert_conflict(
        f.db.create(both).await,
        &id,
        &[CreateConflict::Function, CreateConflict::Params],
    );
    assert_eq!(f.log(&id).await, before, "a conflict writes nothing");

    // Another parent under a child's id.
    let parent = f.top(2, "parent").await;
    let j = join_set("n:kids");
    let child = f.await_children(&parent, &j, &[ffqn("child")], None).await;
    let child_before = f.log(&child[0]).await;
    let child_req = child_request(&parent, &j, 1, ffqn("child"), f.now());
    let orphan = CreateRequest {
        parent: None,
        ..child_req.clone()
    };
    let adopted = CreateRequest {
        parent: Some((id.clone(), j.clone())),
        ..child_req.clone()
    };
    let other_join_set = CreateRequest {
        parent: Some((parent.clone(), join_set("n:other"))),
        ..child_req
    };
    for req in [orphan, adopted, other_join_set] {
        let refused = expect_validation(f.db.create(req).await);
        assert!(
            matches!(refused, ValidationError::InvalidRequest(_)),
            "{refused:?}"
        );
    }
    assert_eq!(f.log(&child[0]).await, child_before);
    assert_eq!(all_ids(&f).await.len(), 3, "nothing was created");
}

/// L3: `create_batch` follows the rule item by item, all or nothing: a batch whose items all
/// exist identically succeeds and writes nothing; existing identical items are skipped while
/// the new ones are created; one conflicting item (stored, or earlier in the same batch)
/// refuses the whole batch; an item repeated identically within a batch is created once.
pub async fn l3_create_batch_item_by_item<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let t0 = f.now();
    let req = |n: u128| create_request(execution_id(n), ffqn("bulk"), t0);
    let with_params = |n: u128| CreateRequest {
        params: Json(serde_json::json!({"other": n})),
        ..req(n)
    };
    let first: Vec<CreateRequest> = (1..=3).map(req).collect();
    f.db.create_batch(first.clone()).await.expect("batch");
    let ids: Vec<ExecutionId> = (1..=3).map(execution_id).collect();
    let before = f.logs(&ids).await;

    f.clock.move_time_forward(ms(10)).await;
    let later = f.now();
    let again = first.iter().map(|r| retried(r, later)).collect();
    f.db.create_batch(again).await.expect("an identical batch");
    assert_eq!(
        f.logs(&ids).await,
        before,
        "an identical batch writes nothing"
    );
    assert_eq!(all_ids(&f).await.len(), 3);

    let mut grown = first.clone();
    grown.extend([req(4), req(5)]);
    f.db.create_batch(grown)
        .await
        .expect("existing and new items");
    assert_eq!(f.logs(&ids).await, before);
    for n in [4, 5] {
        let log = f.log(&execution_id(n)).await;
        assert_eq!(log.events, vec![req(n).to_created_event()]);
    }

    let conflicting = vec![req(6), req(7), with_params(2)];
    assert_conflict(
        f.db.create_batch(conflicting).await,
        &execution_id(2),
        &[CreateConflict::Params],
    );
    let other_function = vec![
        req(8),
        CreateRequest {
            ffqn: ffqn("other"),
            ..req(1)
        },
    ];
    assert_conflict(
        f.db.create_batch(other_function).await,
        &execution_id(1),
        &[CreateConflict::Function],
    );
    for n in [6, 7, 8] {
        expect_kind(f.db.get(&execution_id(n)).await, DbErrorKind::NotFound);
    }
    assert_eq!(f.logs(&ids).await, before, "a refused batch writes nothing");

    f.db.create_batch(vec![req(9), req(9)])
        .await
        .expect("an item repeated identically");
    assert_eq!(
        f.log(&execution_id(9)).await.events,
        vec![req(9).to_created_event()]
    );
    assert_conflict(
        f.db.create_batch(vec![req(10), with_params(10)]).await,
        &execution_id(10),
        &[CreateConflict::Params],
    );
    expect_kind(f.db.get(&execution_id(10)).await, DbErrorKind::NotFound);
    assert_eq!(all_ids(&f).await.len(), 6);
}

/// Asserts that `result` is `InvalidRequest`.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: Result<T, DbError>) {
    let refused = expect_validation(result);
    assert!(
        matches!(refused, ValidationError::InvalidRequest(_)),
        "{refused:?}"
    );
}

/// L4: a child's id must be `parent.next_level(join_set, idx)` and an execution without a
/// parent must have a top-level id, through `create`, `create_batch` and `append_batch`; a
/// refused request writes nothing, derived ids are accepted at every level.
pub async fn l4_child_ids_derive_from_parent<F: StoreFactory>(factory: &F) {
    let f = Fixture::new(factory).await;
    let parent = f.top(1, "parent").await;
    let other = f.top(2, "parent").await;
    let j = join_set("n:kids");
    let now = f.now();
    let child_of = |id: ExecutionId| CreateRequest {
        parent: Some((parent.clone(), j.clone())),
        ..create_request(id, ffqn("child"), now)
    };

    let wrong_join_set = child_of(parent.next_level(&join_set("n:other"), 1));
    let top_level_id = child_of(execution_id(3));
    let another_parents = child_of(other.next_level(&j, 1));
    let no_parent = create_request(parent.next_level(&j, 1), ffqn("child"), now);
    for req in [wrong_join_set, top_level_id, another_parents, no_parent] {
        let id = req.execution_id.clone();
        assert_refused(f.db.create(req).await);
        expect_kind(f.db.get(&id).await, DbErrorKind::NotFound);
    }

    // One bad item refuses a whole `create_batch`.
    let good = child_of(parent.next_level(&j, 1));
    let bad = child_of(execution_id(4));
    assert_refused(f.db.create_batch(vec![good.clone(), bad]).await);
    expect_kind(f.db.get(&good.execution_id).await, DbErrorKind::NotFound);

    // `append_batch` creating a child whose id names another parent, announced in the batch.
    let parent_before = f.log(&parent).await;
    let stray = child_of(other.next_level(&j, 2));
    let announce = vec![child_execution_request(&j, &stray.execution_id)];
    let err =
        f.db.append_batch(batch_creating(
            &parent,
            parent_before.next_version,
            now,
            announce,
            vec![stray.clone()],
        ))
        .await;
    assert_refused(err);
    assert_eq!(f.log(&parent).await, parent_before);
    expect_kind(f.db.get(&stray.execution_id).await, DbErrorKind::NotFound);

    // Derived ids, two levels down.
    let child = f.create(child_of(parent.next_level(&j, 7))).await;
    let j2 = join_set("n:grandkids");
    let grandchild = f
        .create(child_request(&child, &j2, 1, ffqn("grandchild"), now))
        .await;
    assert_eq!(grandchild, child.next_level(&j2, 1));
    let log: ExecutionLog = f.log(&grandchild).await;
    assert!(matches!(log.pending_state, PendingState::PendingAt { .. }));
}
