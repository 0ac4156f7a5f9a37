//! The lifecycle writes where only PostgreSQL has something to get right: the schema version
//! that indexes finished times (and its migration), `prune` leaving no row behind in any
//! table, `cancel` racing the outcomes of the same tree's members from other "processes",
//! concurrent identical submits, and a cancellation waking another store's waiter.

use super::{SAFETY, open};
use chrono::{DateTime, TimeZone, Utc};
use concepts::{
    CancelOutcome, CancelRequest, CreateOutcome, DbAwait, DbClient, DbConnection, DbError,
    DbExecutor, DbTimers, DbWorkflow, ExecutionEvent, ExecutionEventInner, ExecutionId,
    FinishedExecutionError, JoinSetId, OutcomeWrite, PendingState, PruneOutcome, PruneRequest,
    ResultKind, SupportedFunctionReturnValue, Version, is_lost_race,
};
use conformance::storage_scenarios::helpers::{
    assert_state_matches_derivation, batch_creating, child_execution_request, child_request,
    create_request, delay_finished, delay_id, delay_request, execution_id, executor_id, ffqn,
    finished_ok, join_next, join_set, join_set_create, lock, plus, run_id,
};
use std::time::Duration;
use storage_postgres::{PostgresStore, SCHEMA_VERSION, admin};
use test_support::postgres::{TestDatabase, TestServer};

/// The tables that hold something of an execution.
const TABLES: [&str; 5] = [
    "t_execution",
    "t_event",
    "t_response",
    "t_join_set",
    "t_delay",
];

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap()
}

const LEASE: Duration = Duration::from_secs(60);

/// Locks `id` at `version` for a fresh run; returns the next version.
async fn lock_at(db: &PostgresStore, id: &ExecutionId, version: Version, run: u128) -> Version {
    lock(
        db,
        start(),
        id,
        run_id(run),
        version,
        executor_id(1),
        plus(start(), LEASE),
    )
    .await
    .unwrap_or_else(|e| panic!("lock {id}: {e}"))
    .1
}

/// Creates `parent` and appends, under a lock, a join set with one child per `children`
/// entry (created in the same batch) and, when `block`, a `JoinNext` on it. Returns the
/// parent's next version and the children's ids.
async fn spawn_children(
    db: &PostgresStore,
    parent: &ExecutionId,
    create_parent: bool,
    version: Version,
    children: u64,
    block: bool,
) -> (Version, JoinSetId, Vec<ExecutionId>) {
    if create_parent {
        db.create(create_request(parent.clone(), ffqn("parent"), start()))
            .await
            .unwrap();
    }
    let version = lock_at(db, parent, version, 1).await;
    let js = join_set("n:kids");
    let requests: Vec<_> = (1..=children)
        .map(|idx| child_request(parent, &js, idx, ffqn("child"), start()))
        .collect();
    let mut events = vec![join_set_create(&js)];
    events.extend(
        requests
            .iter()
            .map(|child| child_execution_request(&js, &child.execution_id)),
    );
    if block {
        events.push(join_next(&js, plus(start(), LEASE)));
    }
    let ids = requests.iter().map(|r| r.execution_id.clone()).collect();
    let version = db
        .append_batch(batch_creating(parent, version, start(), events, requests))
        .await
        .unwrap_or_else(|e| panic!("spawn children of {parent}: {e}"));
    (version, js, ids)
}

/// Finishes `id` at `version` with `Ok("done")`, answering its parent.
async fn finish(db: &PostgresStore, id: &ExecutionId, version: Version) {
    db.append_outcome(OutcomeWrite {
        execution_id: id.clone(),
        version,
        now: start(),
        event: finished_ok(serde_json::json!("done")),
        parent: id.split_to_parent(),
    })
    .await
    .unwrap_or_else(|e| panic!("finish {id}: {e}"));
}

/// The number of rows of `table` that belong to `prefix` and its descendants.
async fn rows_of(database: &TestDatabase, table: &str, prefix: &ExecutionId) -> i64 {
    let sql = format!("SELECT count(*) FROM {table} WHERE starts_with(execution_id, $1)");
    database
        .with_client(async |client| {
            client
                .query_one(&sql, &[&prefix.as_str()])
                .await
                .unwrap()
                .get(0)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_migrates_and_its_finished_executions_are_pruned() {
    let Some(server) =
        TestServer::or_skip("a_version_1_database_migrates_and_its_finished_executions_are_pruned")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    admin::migrate_to(&database.config, 1).await.unwrap();
    // Rows as a version-1 binary wrote them: finished at a time with nanoseconds, before the
    // epoch, on a whole second; and one that still runs.
    let finished_at = [
        Utc.timestamp_opt(946_684_800, 123_456_789).unwrap(),
        Utc.timestamp_opt(-2, 500_000_000).unwrap(),
        Utc.timestamp_opt(946_684_801, 0).unwrap(),
    ];
    let running = execution_id(9);
    database
        .with_client(async |client| {
            for (n, at) in (1u128..).zip(finished_at) {
                insert_v1_execution(client, &execution_id(n), Some(at)).await;
            }
            insert_v1_execution(client, &running, None).await;
        })
        .await;
    assert!(
        admin::migrate_to(&database.config, SCHEMA_VERSION + 1)
            .await
            .unwrap_err()
            .to_string()
            .contains("not one this binary knows")
    );

    let store = open(&database).await;
    let columns: Vec<(String, Option<i64>, Option<i16>)> = database
        .with_client(async |client| {
            client
                .query(
                    "SELECT execution_id, finished_at, finished_at_ns FROM t_execution \
                     ORDER BY execution_id",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect()
        })
        .await;
    let mut expected: Vec<_> = (1u128..)
        .zip(finished_at)
        .map(|(n, at)| {
            let micros = at.timestamp_micros();
            let nanos = i16::try_from(at.timestamp_subsec_nanos() % 1000).unwrap();
            (execution_id(n).to_string(), Some(micros), Some(nanos))
        })
        .collect();
    expected.push((running.to_string(), None, None));
    assert_eq!(
        columns, expected,
        "the finished times are filled in exactly"
    );

    // The migrated rows are pruned like new ones, oldest first; the running one stays.
    let first = store
        .prune(PruneRequest {
            finished_before: plus(finished_at[2], Duration::from_nanos(1)),
            limit: 2,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(
        first,
        PruneOutcome {
            trees: 2,
            executions: 2,
            kept: 0,
            next: Some((finished_at[0], execution_id(1))),
        }
    );
    let second = store
        .prune(PruneRequest {
            finished_before: plus(finished_at[2], Duration::from_nanos(1)),
            limit: 2,
            after: first.next,
        })
        .await
        .unwrap();
    assert_eq!((second.trees, second.next), (1, None));
    assert!(store.get(&running).await.is_ok());
    for n in 1..=3 {
        assert!(matches!(
            store.get(&execution_id(n)).await,
            Err(DbError::NotFound(_))
        ));
    }
    store.close().await;
}

/// Inserts an execution the way schema version 1 stored it: finished at `finished_at` (a
/// `Created` and a `Finished` event), or pending.
async fn insert_v1_execution(
    client: &tokio_postgres::Client,
    id: &ExecutionId,
    finished_at: Option<DateTime<Utc>>,
) {
    let created = create_request(id.clone(), ffqn("old"), start());
    let mut events = vec![created.to_created_event()];
    let (state, kind, pending_at, next_version) = match finished_at {
        Some(at) => {
            events.push(ExecutionEvent {
                created_at: at,
                event: ExecutionEventInner::Finished {
                    result: Ok(SupportedFunctionReturnValue::None),
                },
            });
            let state = PendingState::Finished {
                version: Version(1),
                finished_at: at,
                result_kind: ResultKind::Ok,
            };
            (state, 3i16, None, 1i64)
        }
        None => {
            let state = PendingState::PendingAt {
                scheduled_at: start(),
            };
            (state, 0, Some(start().timestamp_micros()), 1)
        }
    };
    let created_at = start().timestamp_micros();
    client
        .execute(
            "INSERT INTO t_execution (execution_id, ffqn, created_at, created_at_ns, \
             scheduled_at, scheduled_at_ns, is_top_level, next_version, state_kind, pending_at, \
             lock_expires_at, state_json, temporary_event_count, response_count, max_retries, \
             retry_exp_backoff_ns, parent_execution_id, parent_join_set_id) \
             VALUES ($1, $2, $3, 0, $3, 0, true, $4, $5, $6, NULL, $7, 0, 0, 0, 0, NULL, NULL)",
            &[
                &id.as_str(),
                &created.ffqn.to_string(),
                &created_at,
                &next_version,
                &kind,
                &pending_at,
                &serde_json::to_string(&state).unwrap(),
            ],
        )
        .await
        .unwrap();
    for (version, event) in (0i64..).zip(&events) {
        client
            .execute(
                "INSERT INTO t_event (execution_id, version, is_history, event_json) \
                 VALUES ($1, $2, false, $3)",
                &[
                    &id.as_str(),
                    &version,
                    &serde_json::to_string(event).unwrap(),
                ],
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_leaves_no_row_of_a_tree_in_any_table() {
    let Some(server) = TestServer::or_skip("prune_leaves_no_row_of_a_tree_in_any_table") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let db = open(&database).await;
    // A tree with a row in every table: two children and a grandchild (responses, join-set
    // counters) and a delay, answered (so closed).
    let root = execution_id(1);
    let (version, _, kids) = spawn_children(&db, &root, true, Version(1), 2, false).await;
    let (_, _, grandkids) = spawn_children(&db, &kids[0], false, Version(1), 1, false).await;
    let delay_js = join_set("g:sleep");
    let delay = delay_id(1);
    db.append_batch(batch_creating(
        &root,
        version,
        start(),
        vec![
            join_set_create(&delay_js),
            delay_request(&delay_js, delay, start()),
        ],
        Vec::new(),
    ))
    .await
    .unwrap();
    db.append_response(start(), &root, delay_finished(&delay_js, delay))
        .await
        .unwrap();
    // Another tree keeps running, with an open delay: its rows stay.
    let running = execution_id(2);
    db.create(create_request(running.clone(), ffqn("other"), start()))
        .await
        .unwrap();
    let version = lock_at(&db, &running, Version(1), 2).await;
    db.append_batch(batch_creating(
        &running,
        version,
        start(),
        vec![
            join_set_create(&delay_js),
            delay_request(&delay_js, delay, start()),
        ],
        Vec::new(),
    ))
    .await
    .unwrap();
    for id in grandkids.iter().chain(&kids[1..]) {
        let version = lock_at(&db, id, Version(1), 3).await;
        finish(&db, id, version).await;
    }
    for id in [&kids[0], &root] {
        let version = db.get(id).await.unwrap().next_version;
        finish(&db, id, version).await;
    }
    for table in TABLES {
        assert!(rows_of(&database, table, &root).await > 0, "{table}");
    }

    let outcome = db
        .prune(PruneRequest {
            finished_before: plus(start(), Duration::from_secs(2)),
            limit: 10,
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        PruneOutcome {
            trees: 1,
            executions: 4,
            kept: 0,
            next: None
        }
    );
    for table in TABLES {
        assert_eq!(rows_of(&database, table, &root).await, 0, "{table}");
    }
    for table in ["t_execution", "t_event", "t_delay"] {
        assert!(rows_of(&database, table, &running).await > 0, "{table}");
    }
    db.close().await;
}

/// How many times the race runs: each round a fresh tree.
const RACE_ROUNDS: u128 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_racing_the_outcomes_of_its_tree_never_deadlocks() {
    let Some(server) =
        TestServer::or_skip("cancel_racing_the_outcomes_of_its_tree_never_deadlocks")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    // Three "processes"; a deadlock would fail a write instead of being retried.
    let mut config = database.config.clone();
    config.max_transaction_retries = 0;
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(PostgresStore::connect(config.clone()).await.unwrap());
    }
    let mut outcomes_won = 0;
    for round in 0..RACE_ROUNDS {
        // root -> (leaf: locked), (middle: blocked on its child) -> grandchild: locked.
        let root = execution_id(round + 1);
        let (_, _, kids) = spawn_children(&stores[0], &root, true, Version(1), 2, true).await;
        let (leaf, middle) = (&kids[0], &kids[1]);
        let (_, _, grandkids) =
            spawn_children(&stores[0], middle, false, Version(1), 1, true).await;
        let grandchild = &grandkids[0];
        let leaf_version = lock_at(&stores[0], leaf, Version(1), 2).await;
        let grandchild_version = lock_at(&stores[0], grandchild, Version(1), 3).await;

        let finish = |store: &PostgresStore, id: &ExecutionId, version| {
            let store = store.clone();
            let write = OutcomeWrite {
                execution_id: id.clone(),
                version,
                now: start(),
                event: finished_ok(serde_json::json!("won")),
                parent: id.split_to_parent(),
            };
            tokio::spawn(async move { store.append_outcome(write).await })
        };
        let cancel = {
            let store = stores[2].clone();
            let request = CancelRequest {
                execution_id: root.clone(),
                now: start(),
                reason: "race".to_string(),
            };
            tokio::spawn(async move { store.cancel(request).await })
        };
        let leaf_write = finish(&stores[0], leaf, leaf_version);
        let grandchild_write = finish(&stores[1], grandchild, grandchild_version);
        let (cancelled, leaf_write, grandchild_write) = tokio::time::timeout(SAFETY, async {
            (
                cancel.await.unwrap(),
                leaf_write.await.unwrap(),
                grandchild_write.await.unwrap(),
            )
        })
        .await
        .expect("every write ends");

        let mut lost = 0;
        for (id, write) in [(leaf, &leaf_write), (grandchild, &grandchild_write)] {
            let result = stores[0]
                .wait_for_finished_result(id, Some(SAFETY))
                .await
                .unwrap();
            match write {
                Ok(_) => {
                    outcomes_won += 1;
                    assert_eq!(
                        result,
                        Ok(SupportedFunctionReturnValue::InfallibleOrResultOk(
                            concepts::Json(serde_json::json!("won"))
                        ))
                    );
                }
                Err(e) => {
                    assert!(is_lost_race(e), "round {round}, {id}: {e:?}");
                    lost += 1;
                    assert!(
                        matches!(result, Err(FinishedExecutionError::Cancelled { .. })),
                        "{result:?}"
                    );
                }
            }
        }
        assert_eq!(
            cancelled.unwrap(),
            CancelOutcome::Cancelled {
                executions: 2 + lost
            },
            "round {round}: root and middle, and whichever outcome lost"
        );
        for id in [&root, leaf, middle, grandchild] {
            let log = assert_state_matches_derivation(&stores[0], id).await;
            assert!(log.pending_state.is_finished(), "{id}");
        }
        for parent in [&root, middle] {
            let log = stores[0].get(parent).await.unwrap();
            let mut answered: Vec<_> = log
                .responses
                .iter()
                .map(|r| match &r.event.event {
                    concepts::JoinSetResponse::ChildExecutionFinished {
                        child_execution_id,
                        ..
                    } => child_execution_id.clone(),
                    other => panic!("{other:?}"),
                })
                .collect();
            answered.sort();
            let expected: Vec<_> = if parent == &root {
                kids.clone()
            } else {
                grandkids.clone()
            };
            assert_eq!(answered, expected, "each child answers its parent once");
        }
    }
    // Not asserted (timing decides), but the race is only a race if both sides win at times.
    println!(
        "outcomes won against the cancel: {outcomes_won} of {}",
        2 * RACE_ROUNDS
    );
    for store in stores {
        store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identical_submits_from_many_processes_create_once() {
    let Some(server) = TestServer::or_skip("identical_submits_from_many_processes_create_once")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let stores = [open(&database).await, open(&database).await];
    for n in 1..=20u128 {
        let request = create_request(execution_id(n), ffqn("submitted"), start());
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                let store = stores[i % 2].clone();
                let request = request.clone();
                tokio::spawn(async move { store.create(request).await })
            })
            .collect();
        let mut created = 0;
        for task in tasks {
            match task.await.unwrap().unwrap() {
                CreateOutcome::Created => created += 1,
                CreateOutcome::AlreadyExisted { pending_state } => assert_eq!(
                    pending_state,
                    PendingState::PendingAt {
                        scheduled_at: start()
                    }
                ),
            }
        }
        assert_eq!(created, 1, "execution {n}");
    }
    for store in stores {
        store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancellation_wakes_the_waiters_of_another_store() {
    let Some(server) = TestServer::or_skip("a_cancellation_wakes_the_waiters_of_another_store")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let canceller = open(&database).await;
    let waiter = open(&database).await;
    let root = execution_id(1);
    let (_, _, kids) = spawn_children(&canceller, &root, true, Version(1), 1, true).await;
    let waits: Vec<_> = [&root, &kids[0]]
        .into_iter()
        .map(|id| {
            let waiter = waiter.clone();
            let id = id.clone();
            tokio::spawn(async move { waiter.wait_for_finished_result(&id, Some(SAFETY)).await })
        })
        .collect();
    super::until_waiters(&waiter, |counts| counts.finished == 2).await;
    let outcome = canceller
        .cancel(CancelRequest {
            execution_id: root.clone(),
            now: start(),
            reason: "operator".to_string(),
        })
        .await
        .unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled { executions: 2 });
    for wait in waits {
        let result = tokio::time::timeout(SAFETY, wait)
            .await
            .expect("woken through NOTIFY")
            .unwrap()
            .unwrap();
        assert_eq!(
            result,
            Err(FinishedExecutionError::Cancelled {
                reason: "operator".to_string()
            })
        );
    }
    canceller.close().await;
    waiter.close().await;
}
