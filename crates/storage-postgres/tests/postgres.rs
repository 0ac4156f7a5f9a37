//! What only the PostgreSQL backend has: the migration guard, the schema version check, the
//! migration to version 3 (its vacuum trigger and due-executions function), connections that
//! neither create nor migrate a schema, wake-ups across stores through `NOTIFY`, the listener's
//! reconnection, responses that commit concurrently, `close` stopping the listener, the
//! lifecycle writes under concurrency (`lifecycle`), and the round trips of one execution
//! (`round_trips`).
//!
//! Each test uses a database of its own on the server that `STELE_TEST_POSTGRES_URL` names;
//! without it the tests are skipped (printed), except under `CI=true`, where they fail.

use chrono::{DateTime, TimeZone, Utc};
use concepts::{
    ComponentId, CreateOutcome, CreateRequest, DbAwait, DbClient, DbConnection, DbError,
    DbExecutor, DbTimers, DbWorkflow, DelayId, DuplicateKind, ExecutionId, ExecutionMetadata,
    FunctionFqn, JoinSetId, JoinSetResponse, JoinSetResponseEvent, Json, SchemaOptions,
    SchemaRefusal, derive_pending_state, kernel::WaiterCounts,
};
use std::{sync::Arc, time::Duration};
use storage_postgres::{PostgresError, PostgresStore, SCHEMA_VERSION, admin};
use test_support::postgres::{TestDatabase, TestServer};

#[path = "postgres/group.rs"]
mod group;
#[path = "postgres/lifecycle.rs"]
mod lifecycle;
#[path = "postgres/restart.rs"]
mod restart;
#[path = "postgres/round_trips.rs"]
mod round_trips;
#[path = "postgres/secrets.rs"]
mod secrets;
#[path = "postgres/tls.rs"]
mod tls;

/// The real-time safety net of every wait.
const SAFETY: Duration = Duration::from_secs(20);

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap()
}

fn ffqn(name: &str) -> FunctionFqn {
    format!("test:pkg/ifc.{name}").parse().unwrap()
}

fn execution_id(n: u128) -> ExecutionId {
    concepts::ExecutionIdTopLevel::from_parts(1, n).into()
}

fn create_request(execution_id: ExecutionId, ffqn: FunctionFqn) -> CreateRequest {
    CreateRequest {
        created_at: now(),
        execution_id,
        ffqn,
        params: Json(serde_json::json!([])),
        parent: None,
        scheduled_at: now(),
        retry_exp_backoff: Duration::from_millis(100),
        max_retries: 0,
        component_id: "activity:test".parse::<ComponentId>().unwrap(),
        metadata: ExecutionMetadata::default(),
        scheduled_by: None,
    }
}

async fn open(database: &TestDatabase) -> PostgresStore {
    PostgresStore::connect(database.config.clone())
        .await
        .expect("the store opens")
}

/// Waits (with the safety net) until `cond` holds for the store's waiter counts.
async fn until_waiters(store: &PostgresStore, cond: impl Fn(WaiterCounts) -> bool) {
    tokio::time::timeout(SAFETY, async {
        while !cond(concepts::kernel::Backend::waiter_counts(store)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the waiter registers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_starting_at_once_migrate_once() {
    let Some(server) = TestServer::or_skip("two_stores_starting_at_once_migrate_once") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let (a, b, c) = tokio::join!(open(&database), open(&database), open(&database));
    a.create(create_request(execution_id(1), ffqn("f")))
        .await
        .unwrap();
    assert_eq!(
        b.get(&execution_id(1)).await.unwrap().events.len(),
        1,
        "every store sees the same schema and data"
    );
    let again = c
        .create(create_request(execution_id(1), ffqn("f")))
        .await
        .unwrap();
    assert!(
        matches!(again, CreateOutcome::AlreadyExisted { .. }),
        "{again:?}"
    );
    for store in [a, b, c] {
        store.close().await;
    }
    assert_eq!(
        schema_versions(&database).await,
        (1..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_the_binary_is_refused() {
    let Some(server) = TestServer::or_skip("a_schema_newer_than_the_binary_is_refused") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    store.close().await;
    // Pretend a newer binary migrated the database.
    database
        .with_client(async |client| {
            client
                .execute(
                    "INSERT INTO t_schema_migration (version, description) VALUES ($1, 'from the future')",
                    &[&(SCHEMA_VERSION + 1)],
                )
                .await
                .unwrap()
        })
        .await;
    let err = PostgresStore::connect(database.config.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(err, PostgresError::Schema { refusal: SchemaRefusal::TooNew { found, supported }, .. }
            if i64::from(found) == SCHEMA_VERSION + 1 && i64::from(supported) == SCHEMA_VERSION),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("open it with a newer build"),
        "{err}"
    );
}

/// The first column of what `sql` returns, on a plain connection to `database`.
async fn first_column<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    database: &TestDatabase,
    sql: &str,
) -> Vec<T> {
    database
        .with_client(async |client| {
            client
                .query(sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect()
        })
        .await
}

/// The tables of the database's `public` schema, by name.
async fn tables(database: &TestDatabase) -> Vec<String> {
    first_column(
        database,
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY table_name",
    )
    .await
}

/// `url` with a password: the one it has, or one added to its user; and that password.
fn with_password(url: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user_info, host) = rest.split_once('@').expect("the test URL names its user");
    match user_info.split_once(':') {
        Some((_, password)) => (url.to_string(), password.to_string()),
        None => {
            let password = "not-a-real-password".to_string();
            (
                format!("{scheme}://{user_info}:{password}@{host}"),
                password,
            )
        }
    }
}

/// The versions `t_schema_migration` holds.
async fn schema_versions(database: &TestDatabase) -> Vec<i64> {
    first_column(
        database,
        "SELECT version FROM t_schema_migration ORDER BY version",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_only_refuses_a_database_without_the_schema_and_creates_nothing() {
    let Some(server) = TestServer::or_skip(
        "existing_only_refuses_a_database_without_the_schema_and_creates_nothing",
    ) else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    for config in [
        database.config.clone().existing_only(),
        database.config.clone().existing_only().without_migrations(),
    ] {
        let err = PostgresStore::connect(config).await.unwrap_err();
        assert!(
            matches!(&err, PostgresError::Schema { url, refusal: SchemaRefusal::NoSchema } if url.contains(database.name())),
            "{err:?}"
        );
        assert!(err.to_string().contains("is not a Stele database"), "{err}");
        assert_eq!(
            tables(&database).await,
            Vec::<String>::new(),
            "nothing created"
        );
    }
    // The password stays out of the message (the test server trusts loopback, so a URL with a
    // password it does not need connects as well).
    let (url, password) = with_password(&database.url);
    let config = storage_postgres::PostgresConfig::from_url(&url)
        .unwrap()
        .existing_only();
    let message = PostgresStore::connect(config)
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("is not a Stele database"), "{message}");
    assert!(!message.contains(&password), "{message}");
    // An existing Stele database opens.
    open(&database).await.close().await;
    let store = PostgresStore::connect(database.config.clone().existing_only())
        .await
        .expect("an existing Stele database opens");
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_migrations_refuses_an_older_schema_and_leaves_it_at_its_version() {
    let Some(server) = TestServer::or_skip(
        "without_migrations_refuses_an_older_schema_and_leaves_it_at_its_version",
    ) else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    admin::migrate_to(&database.config, 1).await.unwrap();
    let tables_at_1 = tables(&database).await;
    for config in [
        database.config.clone().without_migrations(),
        database.config.clone().existing_only().without_migrations(),
    ] {
        let err = PostgresStore::connect(config).await.unwrap_err();
        assert!(
            matches!(&err, PostgresError::Schema { url, refusal: SchemaRefusal::TooOld { found: 1, current } }
                if url.contains(database.name()) && i64::from(*current) == SCHEMA_VERSION),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&format!(
                "has schema version 1, older than this build's {SCHEMA_VERSION}"
            )),
            "{err}"
        );
        assert_eq!(schema_versions(&database).await, [1], "left at its version");
        assert_eq!(tables(&database).await, tables_at_1);
    }
    // `existing_only` alone migrates an older schema.
    let store = PostgresStore::connect(database.config.clone().existing_only())
        .await
        .expect("migrated");
    store.close().await;
    assert_eq!(
        schema_versions(&database).await,
        (1..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    let store = PostgresStore::connect(database.config.clone().without_migrations())
        .await
        .expect("a current schema opens without migrations");
    store.close().await;
}

/// The storage parameters of `t_execution`.
async fn execution_table_options(database: &TestDatabase) -> Vec<String> {
    first_column(
        database,
        "SELECT unnest(reloptions) FROM pg_class WHERE oid = 't_execution'::regclass ORDER BY 1",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_migrates_to_version_3_and_keeps_its_executions() {
    let Some(server) =
        TestServer::or_skip("a_version_2_database_migrates_to_version_3_and_keeps_its_executions")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    admin::migrate_to(&database.config, 2).await.unwrap();
    assert_eq!(
        execution_table_options(&database).await,
        Vec::<String>::new()
    );
    // An execution a version-2 binary wrote, pending.
    database
        .with_client(async |client| {
            client
                .batch_execute(
                    "INSERT INTO t_execution (execution_id, ffqn, created_at, created_at_ns, \
                     scheduled_at, scheduled_at_ns, is_top_level, next_version, state_kind, \
                     pending_at, state_json, temporary_event_count, response_count, \
                     max_retries, retry_exp_backoff_ns) VALUES ('E_1', 'f', 0, 0, 0, 0, true, 1, \
                     0, 0, '{}', 0, 0, 0, 0)",
                )
                .await
                .unwrap();
        })
        .await;
    let store = open(&database).await;
    store.close().await;
    assert_eq!(
        schema_versions(&database).await,
        (1..=SCHEMA_VERSION).collect::<Vec<_>>()
    );
    assert_eq!(
        execution_table_options(&database).await,
        [
            "autovacuum_vacuum_scale_factor=0",
            "autovacuum_vacuum_threshold=50000"
        ]
    );
    assert_eq!(
        first_column::<String>(&database, "SELECT execution_id FROM t_execution").await,
        ["E_1"]
    );
    assert_eq!(
        first_column::<bool>(
            &database,
            "SELECT to_regprocedure('f_due_executions(bigint, text[], bigint)') IS NOT NULL"
        )
        .await,
        [true],
        "the lock query's function"
    );
}

/// A version-7 database stored an execution created and changed in one group with its counts
/// at zero; the migration to version 8 counts its responses and temporary events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_to_version_8_recounts_responses_and_temporary_events() {
    let Some(server) = TestServer::or_skip("the_migration_to_version_8_recounts") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    admin::migrate_to(&database.config, 7).await.unwrap();
    database
        .with_client(async |client| {
            client
                .batch_execute(
                    r#"INSERT INTO t_execution (execution_id, ffqn, created_at, created_at_ns,
                     scheduled_at, scheduled_at_ns, is_top_level, next_version, state_kind,
                     pending_at, state_json, temporary_event_count, response_count,
                     max_retries, retry_exp_backoff_ns) VALUES ('E_1', 'f', 0, 0, 0, 0, true, 3,
                     0, 0, '{}', 0, 0, 5, 0);
                     INSERT INTO t_event (execution_id, version, is_history, event_json) VALUES
                     ('E_1', 1, false, '{"created_at":"2000-01-01T00:00:00Z","event":{"Locked":{}}}'),
                     ('E_1', 2, false, '{"created_at":"2000-01-01T00:00:00Z","event":{"TemporarilyFailed":{}}}');
                     INSERT INTO t_response (execution_id, idx, join_set_id, join_set_idx,
                     delay_id, response_json) VALUES ('E_1', 0, 'o:t', 0, 'D_1', '{}'),
                     ('E_1', 1, 'o:t', 1, 'D_2', '{}')"#,
                )
                .await
                .unwrap();
        })
        .await;
    let store = open(&database).await;
    store.close().await;
    let counts = "SELECT response_count * 10 + temporary_event_count FROM t_execution";
    assert_eq!(first_column::<i64>(&database, counts).await, [21]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_store_is_woken_through_notify() {
    let Some(server) = TestServer::or_skip("another_store_is_woken_through_notify") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    // Two stores stand for two processes: nothing in-process connects them.
    let writer = open(&database).await;
    let waiter = open(&database).await;
    let f = ffqn("notified");
    let long_wait = Duration::from_secs(60);
    let started = tokio::time::Instant::now();
    let wait = tokio::spawn({
        let waiter = waiter.clone();
        let ffqns: Arc<[FunctionFqn]> = Arc::from(vec![f.clone()]);
        async move { waiter.wait_for_pending(now(), ffqns, long_wait).await }
    });
    until_waiters(&waiter, |counts| counts.pending == 1).await;
    let notifications_before = waiter.listener_state().notifications;
    writer
        .create(create_request(execution_id(1), f.clone()))
        .await
        .unwrap();
    tokio::time::timeout(SAFETY, wait)
        .await
        .expect("woken through NOTIFY")
        .unwrap();
    assert!(started.elapsed() < long_wait / 4, "{:?}", started.elapsed());
    assert!(waiter.listener_state().notifications > notifications_before);
    assert_eq!(
        concepts::kernel::Backend::waiter_counts(&waiter),
        WaiterCounts::default(),
        "the waiter left its registry"
    );

    // The same for a finished result awaited in the other store.
    let result_wait = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .wait_for_finished_result(&execution_id(1), Some(SAFETY))
                .await
        }
    });
    until_waiters(&waiter, |counts| counts.finished == 1).await;
    let locked = writer
        .lock_pending(concepts::LockPendingRequest {
            batch_size: 1,
            pending_at_or_sooner: now(),
            ffqns: Arc::from(vec![f.clone()]),
            now: now(),
            component_id: "activity:test".parse().unwrap(),
            executor_id: concepts::ExecutorId::from_parts(1, 1),
            lock_expires_at: now() + chrono::TimeDelta::seconds(10),
        })
        .await
        .unwrap();
    assert_eq!(locked.len(), 1);
    writer
        .append_batch(concepts::AppendBatchRequest {
            execution_id: execution_id(1),
            version: locked[0].next_version,
            now: now(),
            events: vec![concepts::ExecutionEventInner::Finished {
                result: Ok(concepts::SupportedFunctionReturnValue::None),
            }],
            children: Vec::new(),
            leases: Vec::new(),
            answers: Vec::new(),
        })
        .await
        .unwrap();
    let result = tokio::time::timeout(SAFETY, result_wait)
        .await
        .expect("woken through NOTIFY")
        .unwrap()
        .unwrap();
    assert_eq!(result, Ok(concepts::SupportedFunctionReturnValue::None));
    writer.close().await;
    waiter.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_listener_reconnects_and_hears_later_notifications() {
    let Some(server) =
        TestServer::or_skip("a_killed_listener_reconnects_and_hears_later_notifications")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let writer = open(&database).await;
    let mut config = database.config.clone();
    config.listener_min_backoff = Duration::from_millis(10);
    let waiter = PostgresStore::connect(config).await.unwrap();
    let first = waiter.listener_state();
    assert!(first.connected);
    assert_eq!(first.connects, 1);
    let pid = first.backend_pid.expect("connected");

    // A waiter registered while the connection is cut is woken by the reconnection.
    let f = ffqn("after_reconnect");
    let long_wait = Duration::from_secs(60);
    let mut updates = waiter.listener_updates();
    assert!(admin::terminate_backend(&server.config, pid).await.unwrap());
    tokio::time::timeout(SAFETY, updates.wait_for(|s| s.connects >= 2 && s.connected))
        .await
        .expect("the listener reconnects")
        .unwrap();
    let second = waiter.listener_state();
    assert_ne!(second.backend_pid, Some(pid));

    let started = tokio::time::Instant::now();
    let wait = tokio::spawn({
        let waiter = waiter.clone();
        let ffqns: Arc<[FunctionFqn]> = Arc::from(vec![f.clone()]);
        async move { waiter.wait_for_pending(now(), ffqns, long_wait).await }
    });
    until_waiters(&waiter, |counts| counts.pending == 1).await;
    writer
        .create(create_request(execution_id(7), f))
        .await
        .unwrap();
    tokio::time::timeout(SAFETY, wait)
        .await
        .expect("woken through NOTIFY after the reconnection")
        .unwrap();
    assert!(started.elapsed() < long_wait / 4, "{:?}", started.elapsed());
    writer.close().await;
    waiter.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_responses_get_consecutive_indexes_and_duplicates_lose() {
    let Some(server) =
        TestServer::or_skip("concurrent_responses_get_consecutive_indexes_and_duplicates_lose")
    else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let stores = [open(&database).await, open(&database).await];
    let parent = execution_id(1);
    stores[0]
        .create(create_request(parent.clone(), ffqn("parent")))
        .await
        .unwrap();
    let join_set: JoinSetId = "g:sleeps".parse().unwrap();
    // 40 responses from two "processes" at once, each delay id sent twice.
    let mut tasks = Vec::new();
    for i in 0..40u128 {
        for store in &stores {
            let store = store.clone();
            let parent = parent.clone();
            let join_set = join_set.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .append_response(
                        now() + chrono::TimeDelta::milliseconds(i64::try_from(i).unwrap()),
                        &parent,
                        JoinSetResponseEvent {
                            join_set_id: join_set,
                            event: JoinSetResponse::DelayFinished {
                                delay_id: DelayId::from_parts(1, i),
                            },
                        },
                    )
                    .await
            }));
        }
    }
    let mut ok = 0;
    let mut duplicates = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => ok += 1,
            Err(DbError::Duplicate(DuplicateKind::DelayResponse { execution_id, .. }))
                if execution_id == parent =>
            {
                duplicates += 1;
            }
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!((ok, duplicates), (40, 40));
    let log = stores[1].get(&parent).await.unwrap();
    assert_eq!(log.responses.len(), 40);
    let mut delays: Vec<_> = log
        .responses
        .iter()
        .map(|r| match &r.event.event {
            JoinSetResponse::DelayFinished { delay_id } => *delay_id,
            other => panic!("{other:?}"),
        })
        .collect();
    delays.sort();
    delays.dedup();
    assert_eq!(delays.len(), 40, "each delay answered once");
    // The order is fixed once read: every later read and every index agrees.
    for start in [0, 17, 39] {
        let tail = stores[0]
            .subscribe_to_next_responses(&parent, start)
            .await
            .unwrap();
        assert_eq!(tail, log.responses[start..].to_vec());
    }
    assert_eq!(
        Some(log.pending_state.clone()),
        derive_pending_state(&log.events, &log.responses)
    );
    for store in stores {
        store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_stops_the_listener_and_refuses_calls() {
    let Some(server) = TestServer::or_skip("close_stops_the_listener_and_refuses_calls") else {
        return;
    };
    let database = TestDatabase::create(&server).await;
    let store = open(&database).await;
    let pid = store.listener_state().backend_pid.expect("connected");
    store.close().await;
    store.close().await;
    assert!(!store.listener_state().connected);
    assert!(matches!(
        store.get(&execution_id(1)).await,
        Err(DbError::Closed)
    ));
    assert!(matches!(
        store.get_expired_timers(now()).await,
        Err(DbError::Closed)
    ));
    // The server ends the listener's session once its connection is gone.
    database
        .with_client(async |client| {
            tokio::time::timeout(SAFETY, async {
                loop {
                    let row = client
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                            &[&pid],
                        )
                        .await
                        .unwrap();
                    if row.get::<_, i64>(0) == 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("the listener's session ends");
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_connection_error() {
    // Nothing listens on port 1 of loopback: connecting fails at once.
    let err =
        PostgresStore::connect_url("postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2")
            .await
            .unwrap_err();
    assert!(
        matches!(err, PostgresError::Db(DbError::Connection(_))),
        "{err:?}"
    );
}

/// A write whose caller gives up part way (its future dropped after it waited `k` times, for
/// every `k` up to past its end: while its rows load, while a statement it persists with is
/// prepared, while it commits) leaves no transaction open on a pooled connection. The
/// connection of a write that had sent its `BEGIN` went back to the pool, transaction and row
/// locks open, when the caller gave up while a statement was being prepared (each connection
/// prepares on first use; the 11th wait of this cancel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_given_up_part_way_leaves_no_transaction_open() {
    let Some(server) = TestServer::or_skip("a_write_given_up_part_way_leaves_no_transaction_open")
    else {
        return;
    };
    for waits in 1_u8..=16 {
        let database = TestDatabase::create(&server).await;
        let store = open(&database).await;
        let id = execution_id(u128::from(waits));
        store
            .create(create_request(id.clone(), ffqn("f")))
            .await
            .unwrap();
        // A cancel loads its tree first: its `BEGIN` goes out before anything is prepared.
        let request = concepts::CancelRequest {
            execution_id: id.clone(),
            now: now(),
            reason: "given up".to_owned(),
        };
        let mut cancel = Box::pin(store.cancel(request));
        let mut pending = 0;
        let finished = std::future::poll_fn(|cx| match cancel.as_mut().poll(cx) {
            std::task::Poll::Ready(outcome) => std::task::Poll::Ready(Some(outcome)),
            std::task::Poll::Pending if pending == waits => std::task::Poll::Ready(None),
            std::task::Poll::Pending => {
                pending += 1;
                std::task::Poll::Pending
            }
        })
        .await;
        drop(cancel);
        // What was sent before the caller gave up reaches the server; then nothing is left
        // waiting inside a transaction.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let open_transactions: Vec<String> = database
            .with_client(async |client| {
                let sql = "SELECT query FROM pg_stat_activity \
                           WHERE datname = current_database() AND state LIKE 'idle in transaction%'";
                let rows = client.query(sql, &[]).await.unwrap();
                rows.iter().map(|row| row.get(0)).collect()
            })
            .await;
        assert!(
            open_transactions.is_empty(),
            "after giving up on the write at its wait {waits} ({finished:?}): {open_transactions:?}"
        );
        // The store goes on working: the execution is either cancelled or cancellable.
        let again = concepts::CancelRequest {
            execution_id: id,
            now: now(),
            reason: "again".to_owned(),
        };
        store.cancel(again).await.expect("the store writes on");
        store.close().await;
    }
}
