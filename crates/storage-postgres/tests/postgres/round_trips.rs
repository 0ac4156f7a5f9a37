//! What one execution costs in round trips on an idle store ([`PostgresStore::round_trips`]):
//! `create` one (no load: the write itself proves the id new), `lock_pending` two (the load
//! of the due rows, then the writes, the `COMMIT` and the read of the histories in one
//! pipeline), `append_outcome` of that lease one (planned on the row as the lock wrote it,
//! which the write checks under the row lock). A repeated `create`, and an outcome whose row
//! changed meanwhile, cost the load they skipped, and are answered as before; and neither leaves
//! an `ERROR` in the server's log, since both are expected.

use super::open;
use chrono::{DateTime, TimeZone, Utc};
use concepts::{
    CreateOutcome, DbAwait, DbClient, DbConnection, DbError, DbExecutor, DbTimers, DbWorkflow,
    DuplicateKind, LockPendingRequest, LockedExecution, OutcomeWrite, PendingState, Version,
    is_lost_race,
};
use conformance::storage_scenarios::helpers::{
    batch, component_id, create_request, delay_finished, delay_id, execution_id, executor_id, ffqn,
    finished_ok, join_next, join_set, join_set_create, plus,
};
use std::{sync::Arc, time::Duration};
use storage_postgres::{PostgresConfig, PostgresStore};
use test_support::{
    postgres::{TestDatabase, TestServer},
    spare_server::SpareServer,
};

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

/// A store of `config`'s database that retries nothing: what a test pins must not depend on the
/// retry budget.
async fn without_retries(config: &PostgresConfig) -> PostgresStore {
    let mut config = config.clone();
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
    repeated_creates(&without_retries(&database.config).await).await;
}

/// A `create` repeated, one that conflicts, and a `create_batch` that repeats one of its ids:
/// each planned on the assumption that its ids are new, refuted, loaded and answered.
async fn repeated_creates(store: &PostgresStore) {
    let id = execution_id(7);
    let request = create_request(id.clone(), ffqn("f"), start());
    assert_eq!(
        store.create(request.clone()).await.unwrap(),
        CreateOutcome::Created
    );
    let (trips, repeated) = trips_of(store, store.create(request.clone())).await;
    assert!(
        matches!(repeated, Ok(CreateOutcome::AlreadyExisted { .. })),
        "{repeated:?}"
    );
    assert_eq!(trips, 3, "the refuted write, then the load and its answer");
    let mut other = request.clone();
    other.ffqn = ffqn("g");
    let conflict = store.create(other).await.unwrap_err();
    assert!(
        matches!(
            conflict,
            DbError::Duplicate(DuplicateKind::ExecutionConflict { .. })
        ),
        "a conflict: {conflict:?}"
    );
    let new = create_request(execution_id(8), ffqn("f"), start());
    store.create_batch(vec![request, new]).await.unwrap();
    assert_eq!(store.get(&execution_id(8)).await.unwrap().events.len(), 1);
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
    let store = without_retries(&database.config).await;
    let other = open(&database).await;
    an_outcome_loses_to_another_store(&store, &other).await;
}

/// `store` locks an execution, `other` writes its outcome first, and `store`'s outcome, planned
/// on the row as its lock left it, is refuted, loaded and answered as the race it lost.
async fn an_outcome_loses_to_another_store(store: &PostgresStore, other: &PostgresStore) {
    one_execution(store, 1).await;
    let (_, _, locked) = create_and_lock(store, 2).await;
    // Another process writes an outcome first: the row this store locked has moved on.
    other
        .append_outcome(finish(&locked, "theirs"))
        .await
        .unwrap();
    let (trips, ours) = trips_of(store, store.append_outcome(finish(&locked, "ours"))).await;
    let err = ours.unwrap_err();
    assert!(is_lost_race(&err), "{err:?}");
    assert_eq!(
        trips, 3,
        "the refuted check, then the load and its rollback"
    );
    let result = store
        .wait_for_finished_result(&locked.execution_id, Some(Duration::ZERO))
        .await
        .unwrap();
    assert!(format!("{result:?}").contains("theirs"), "{result:?}");
}

/// A refuted assumption is an expected path: the server logs no `ERROR` for it (nor for
/// anything else these writes do). On the spare server, whose log only the test that holds it
/// makes the server write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuted_assumptions_leave_no_error_in_the_server_log() {
    let Some(server) = SpareServer::lock("refuted_assumptions_leave_no_error_in_the_server_log")
    else {
        return;
    };
    let (config, _) = super::restart::spare_database(&server, "quiet").await;
    let store = without_retries(&config).await;
    let other = without_retries(&config).await;
    let log = server.log_path();
    let logged = || std::fs::read(&log).expect("the spare server's log");
    let before = logged().len();
    repeated_creates(&store).await;
    an_outcome_loses_to_another_store(&store, &other).await;
    store.close().await;
    other.close().await;
    let after = logged();
    let errors: Vec<String> = String::from_utf8_lossy(&after[before..])
        .lines()
        .filter(|line| line.contains("ERROR:"))
        .map(str::to_string)
        .collect();
    assert!(errors.is_empty(), "the server logged: {errors:#?}");
}

/// A write that creates a join set is planned, on its execution's known row, on the assumption
/// that the join set has no counters yet; the write checks that, and a join set created again
/// (by a workflow whose code changed, say) while its counters are stored is refuted, loaded and
/// answered on what the load found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_set_created_again_is_refuted_by_its_stored_counters() {
    let Some(server) =
        TestServer::or_skip("a_join_set_created_again_is_refuted_by_its_stored_counters")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = without_retries(&database.config).await;
    let (_, _, locked) = create_and_lock(&store, 1).await;
    let id = locked.execution_id.clone();
    let (one, two) = (join_set("g:one"), join_set("g:two"));
    // Each response stores its join set's counters; the row is kept with the last one only.
    for (j, n) in [(&one, 1), (&two, 2)] {
        (store.append_response(start(), &id, delay_finished(j, delay_id(n))))
            .await
            .unwrap();
    }
    let events = vec![join_set_create(&two)];
    let known = batch(&id, locked.next_version, start(), events);
    let (trips, version) = trips_of(&store, store.append_batch(known)).await;
    let version = version.unwrap();
    assert_eq!(trips, 1, "the join set the row was kept with: no load");
    let response = delay_finished(&two, delay_id(3));
    store.append_response(start(), &id, response).await.unwrap();
    let again = batch(&id, version, start(), vec![join_set_create(&one)]);
    let (trips, appended) = trips_of(&store, store.append_batch(again)).await;
    appended.unwrap();
    assert_eq!(trips, 3, "the refuted write, then the load and its answer");
    // The counters stored are those of the log: one's response is there for its `JoinNext`.
    let run_ends = plus(start(), Duration::from_secs(60));
    let next = batch(
        &id,
        Version(version.0 + 1),
        start(),
        vec![join_next(&one, run_ends)],
    );
    store.append_batch(next).await.unwrap();
    let log = store.get(&id).await.unwrap();
    assert!(
        !matches!(log.pending_state, PendingState::BlockedByJoinSet { .. }),
        "{:?}",
        log.pending_state
    );
}
