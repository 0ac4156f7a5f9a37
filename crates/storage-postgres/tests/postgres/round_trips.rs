//! What one execution costs in round trips on an idle store ([`PostgresStore::round_trips`]):
//! `create` one (no load: the write itself proves the id new), `lock_pending` two (the load
//! of the due rows, then the writes, the `COMMIT` and the read of the histories in one
//! pipeline), `append_outcome` of that lease one (planned on the row as the lock wrote it,
//! which the write checks under the row lock). A repeated `create`, and an outcome whose row
//! changed meanwhile, cost the load they skipped, and are answered as before.

use super::open;
use chrono::{DateTime, TimeZone, Utc};
use concepts::{
    CreateOutcome, DbAwait, DbClient, DbError, DbExecutor, DuplicateKind, LockPendingRequest,
    LockedExecution, OutcomeWrite, is_lost_race,
};
use conformance::storage_scenarios::helpers::{
    component_id, create_request, execution_id, executor_id, ffqn, finished_ok, plus,
};
use std::{sync::Arc, time::Duration};
use storage_postgres::PostgresStore;
use test_support::postgres::{TestDatabase, TestServer};

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap()
}

/// The round trips of `call`.
async fn trips_of<T>(store: &PostgresStore, call: impl Future<Output = T>) -> (u64, T) {
    let before = store.round_trips();
    let output = call.await;
    (store.round_trips() - before, output)
}

/// Creates and locks execution `n`; returns the round trips of each and the lease.
async fn create_and_lock(store: &PostgresStore, n: u128) -> (u64, u64, LockedExecution) {
    let id = execution_id(n);
    let (create, outcome) = trips_of(
        store,
        store.create(create_request(id.clone(), ffqn("f"), start())),
    )
    .await;
    assert_eq!(outcome.unwrap(), CreateOutcome::Created);
    let request = LockPendingRequest {
        batch_size: 1,
        pending_at_or_sooner: start(),
        ffqns: Arc::from([ffqn("f")]),
        now: start(),
        component_id: component_id(),
        executor_id: executor_id(1),
        lock_expires_at: plus(start(), Duration::from_secs(60)),
    };
    let (lock, locked) = trips_of(store, store.lock_pending(request)).await;
    let mut locked = locked.unwrap();
    assert_eq!(locked.len(), 1);
    assert_eq!(locked[0].execution_id, id);
    assert!(
        locked[0].event_history.is_empty(),
        "a fresh execution has no history"
    );
    (create, lock, locked.remove(0))
}

/// The `Finished` outcome of `locked` with `value`.
fn finish(locked: &LockedExecution, value: &str) -> OutcomeWrite {
    OutcomeWrite {
        execution_id: locked.execution_id.clone(),
        version: locked.next_version,
        now: start(),
        event: finished_ok(serde_json::json!(value)),
        parent: None,
    }
}

/// A store of `database` that retries nothing: what a test pins must not depend on the retry
/// budget.
async fn without_retries(database: &TestDatabase) -> PostgresStore {
    let mut config = database.config.clone();
    config.max_transaction_retries = 0;
    PostgresStore::connect(config)
        .await
        .expect("the store opens")
}

/// Creates, locks and finishes execution `n`; returns the round trips of each step.
async fn one_execution(store: &PostgresStore, n: u128) -> [u64; 3] {
    let (create, lock, locked) = create_and_lock(store, n).await;
    let (finish, finished) = trips_of(store, store.append_outcome(finish(&locked, "done"))).await;
    finished.unwrap();
    [create, lock, finish]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_execution_costs_four_round_trips() {
    let Some(server) = TestServer::or_skip("one_execution_costs_four_round_trips") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    // The first calls of a connection prepare its statements; those are not counted.
    one_execution(&store, 1).await;
    // create: BEGIN, the inserts, COMMIT and NOTIFY in one pipeline; lock_pending: the load,
    // then the writes, COMMIT and the histories; append_outcome: BEGIN, the check of the row,
    // the writes, COMMIT and NOTIFY.
    assert_eq!(
        one_execution(&store, 2).await,
        [1, 2, 1],
        "create, lock, finish"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_create_loads_and_is_answered_as_a_repeat_or_a_conflict() {
    let Some(server) =
        TestServer::or_skip("a_repeated_create_loads_and_is_answered_as_a_repeat_or_a_conflict")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    // No retries: answering a repeat must not depend on the retry budget.
    let store = without_retries(&database).await;
    let id = execution_id(7);
    let request = create_request(id.clone(), ffqn("f"), start());
    assert_eq!(
        store.create(request.clone()).await.unwrap(),
        CreateOutcome::Created
    );
    let (trips, repeated) = trips_of(&store, store.create(request.clone())).await;
    assert!(
        matches!(repeated, Ok(CreateOutcome::AlreadyExisted { .. })),
        "{repeated:?}"
    );
    assert_eq!(trips, 3, "the refused insert, then the load and its answer");
    let mut other = request;
    other.ffqn = ffqn("g");
    let conflict = store.create(other).await.unwrap_err();
    assert!(
        matches!(
            conflict,
            DbError::Duplicate(DuplicateKind::ExecutionConflict { .. })
        ),
        "a conflict: {conflict:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_whose_row_changed_since_the_lock_loads_and_loses_its_race() {
    let Some(server) =
        TestServer::or_skip("an_outcome_whose_row_changed_since_the_lock_loads_and_loses_its_race")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    // No retries: falling back to the load must not depend on the retry budget.
    let store = without_retries(&database).await;
    let other = open(&database).await;
    one_execution(&store, 1).await;
    let (_, _, locked) = create_and_lock(&store, 2).await;
    // Another process writes an outcome first: the row this store locked has moved on.
    other
        .append_outcome(finish(&locked, "theirs"))
        .await
        .unwrap();
    let (trips, ours) = trips_of(&store, store.append_outcome(finish(&locked, "ours"))).await;
    let err = ours.unwrap_err();
    assert!(is_lost_race(&err), "{err:?}");
    assert_eq!(
        trips, 3,
        "the refused check, then the load and its rollback"
    );
    let result = store
        .wait_for_finished_result(&locked.execution_id, Some(Duration::ZERO))
        .await
        .unwrap();
    assert!(format!("{result:?}").contains("theirs"), "{result:?}");
}
