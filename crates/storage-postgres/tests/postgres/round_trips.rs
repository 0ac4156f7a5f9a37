//! What one execution costs in round trips on an idle store ([`PostgresStore::round_trips`]):
//! `create` one (no load: the write itself proves the id new), `lock_pending` two (the load
//! of the due rows, then the writes, the `COMMIT` and the read of the histories in one
//! pipeline), `append_outcome` two (the load, then the writes and the `COMMIT`). A repeated
//! `create` costs the load it skipped, and is answered as before.

use super::open;
use chrono::{DateTime, TimeZone, Utc};
use concepts::{
    CreateOutcome, DbClient, DbError, DbExecutor, DuplicateKind, LockPendingRequest, OutcomeWrite,
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

/// Creates, locks and finishes execution `n`; returns the round trips of each step.
async fn one_execution(store: &PostgresStore, n: u128) -> [u64; 3] {
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
    let locked = locked.unwrap();
    assert_eq!(locked.len(), 1);
    assert_eq!(locked[0].execution_id, id);
    assert_eq!(
        locked[0].event_history.len(),
        0,
        "a fresh execution has no history"
    );
    let write = OutcomeWrite {
        execution_id: id.clone(),
        version: locked[0].next_version,
        now: start(),
        event: finished_ok(serde_json::json!("done")),
        parent: None,
    };
    let (finish, finished) = trips_of(store, store.append_outcome(write)).await;
    finished.unwrap();
    [create, lock, finish]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_execution_costs_five_round_trips() {
    let Some(server) = TestServer::or_skip("one_execution_costs_five_round_trips") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    // The first calls of a connection prepare its statements; those are not counted.
    one_execution(&store, 1).await;
    // create: BEGIN, the inserts, COMMIT and NOTIFY in one pipeline; lock_pending: the load,
    // then the writes, COMMIT and the histories; append_outcome: the load, then the writes and
    // COMMIT.
    assert_eq!(
        one_execution(&store, 2).await,
        [1, 2, 2],
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
    let mut config = database.config.clone();
    config.max_transaction_retries = 0;
    let store = PostgresStore::connect(config)
        .await
        .expect("the store opens");
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
