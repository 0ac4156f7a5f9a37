//! The server fails under a store (issue 11 §3), on the spare server
//! (`test_support::spare_server`), which these tests stop abruptly (`pg_ctl stop -m
//! immediate`) and start again: `connect` waits for a server that is not up yet
//! (`wait_for_server`); a write waiting in the server when it crashes is answered with a
//! retriable error; afterwards the pool hands out live connections (the next call succeeds)
//! and the listener is connected and subscribed again, by itself.

use super::{create_request, execution_id, ffqn, now, until_waiters};
use concepts::{
    DbClient, DbConnection, DbExecutor, ExecutionEventInner, ExecutorId, FunctionFqn,
    LockPendingRequest, OutcomeWrite, SupportedFunctionReturnValue,
};
use std::{
    io::Write,
    sync::{Arc, Mutex},
    time::Duration,
};
use storage_postgres::{PostgresConfig, PostgresStore, admin};
use test_support::spare_server::SpareServer;

/// The real-time safety net of every wait.
const SAFETY: Duration = Duration::from_secs(60);

/// A fresh database on the spare server; its store config (pool of 4, fast listener backoff)
/// and the admin config of the server.
pub(super) async fn spare_database(
    server: &SpareServer,
    test: &str,
) -> (PostgresConfig, PostgresConfig) {
    let name = format!("stele_{test}_{}", std::process::id());
    let admin_config =
        PostgresConfig::from_url(&server.url("postgres", "127.0.0.1", "postgres", "")).unwrap();
    admin::drop_database(&admin_config, &name).await.unwrap();
    admin::create_database(&admin_config, &name).await.unwrap();
    let mut config =
        PostgresConfig::from_url(&server.url("postgres", "127.0.0.1", &name, "pool_size=4"))
            .unwrap();
    config.listener_min_backoff = Duration::from_millis(10);
    config.listener_max_backoff = Duration::from_millis(200);
    (config, admin_config)
}

/// Log lines written by the tracing subscriber of one test, with a signal per line.
#[derive(Clone)]
struct Lines {
    text: Arc<Mutex<String>>,
    written: tokio::sync::watch::Sender<usize>,
}

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text
            .lock()
            .unwrap()
            .push_str(&String::from_utf8_lossy(buf));
        self.written.send_modify(|n| *n += 1);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn connect_waits_for_a_server_that_is_not_up_yet() {
    let Some(server) = SpareServer::lock("connect_waits_for_a_server_that_is_not_up_yet") else {
        return;
    };
    let (mut config, admin_config) = spare_database(&server, "late_server").await;
    let lines = Lines {
        text: Arc::default(),
        written: tokio::sync::watch::Sender::new(0),
    };
    let mut written = lines.written.subscribe();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    server.crash();
    // Without a wait, the error comes at once and is a connection error (retriable).
    let err = PostgresStore::connect(config.clone()).await.unwrap_err();
    assert!(
        matches!(err, storage_postgres::PostgresError::Db(ref e) if e.is_retriable()),
        "{err:?}"
    );
    config.wait_for_server = Some(SAFETY);
    let connecting = PostgresStore::connect(config);
    tokio::pin!(connecting);
    // The server starts once `connect` has failed and said it retries.
    tokio::select! {
        result = &mut connecting => panic!("connect returned while the server was down: {result:?}"),
        _ = written.wait_for(|_| lines.text.lock().unwrap().contains("cannot reach the PostgreSQL server; retrying")) => {}
    }
    server.start();
    let store = tokio::time::timeout(SAFETY, connecting)
        .await
        .expect("connect returns once the server is up")
        .expect("and the store opens");
    assert!(store.listener_state().connected);
    store
        .create(create_request(execution_id(1), ffqn("late")))
        .await
        .unwrap();
    store.close().await;
    admin::drop_database(&admin_config, store.config().database_name().unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_answers_the_write_in_flight_retriably_and_the_store_recovers_by_itself() {
    let Some(server) = SpareServer::lock("a_crash_answers_the_write_in_flight_retriably") else {
        return;
    };
    let (config, admin_config) = spare_database(&server, "crash").await;
    let writer = PostgresStore::connect(config.clone()).await.unwrap();
    let waiter = PostgresStore::connect(config.clone()).await.unwrap();
    let f = ffqn("crash");
    let id = execution_id(1);
    writer
        .create(create_request(id.clone(), f.clone()))
        .await
        .unwrap();
    let locked = writer
        .lock_pending(LockPendingRequest {
            batch_size: 1,
            pending_at_or_sooner: now(),
            ffqns: Arc::from(vec![f.clone()]),
            now: now(),
            component_id: "activity:test".parse().unwrap(),
            executor_id: ExecutorId::from_parts(1, 1),
            lock_expires_at: now() + chrono::TimeDelta::seconds(60),
        })
        .await
        .unwrap();
    let finished = OutcomeWrite::new(
        id.clone(),
        locked[0].next_version,
        now(),
        ExecutionEventInner::Finished {
            result: Ok(SupportedFunctionReturnValue::None),
        },
        None,
    );

    // Another session holds the execution's row, so the write waits in the server.
    let database = config.database_name().unwrap().to_string();
    let blocker_url = format!(
        "postgres://postgres@127.0.0.1:{}/{database}?sslmode=disable",
        server.port
    );
    let (blocker, connection) = tokio_postgres::connect(&blocker_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let blocker_driver = tokio::spawn(connection);
    blocker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM t_execution WHERE execution_id = '{id}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let in_flight = tokio::spawn({
        let writer = writer.clone();
        let finished = finished.clone();
        async move { writer.append_outcome(finished).await }
    });
    let deadline = tokio::time::Instant::now() + SAFETY;
    loop {
        let waiting: i64 = blocker
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
                 AND application_name = 'stele' AND wait_event_type = 'Lock'",
                &[&database],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the write never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let mut updates = waiter.listener_updates();
    server.crash();
    let err = tokio::time::timeout(SAFETY, in_flight)
        .await
        .expect("the write in flight is answered")
        .unwrap()
        .unwrap_err();
    assert!(err.is_retriable(), "the write in flight: {err:?}");
    drop(blocker);
    let _ = blocker_driver.await;
    server.start();

    // The listener reconnects by itself, and hears what is written afterwards.
    tokio::time::timeout(SAFETY, updates.wait_for(|s| s.connects >= 2 && s.connected))
        .await
        .expect("the listener reconnects after the restart")
        .unwrap();
    // The next call of the writer succeeds: no dead pooled connection is handed out.
    writer
        .append_outcome(finished)
        .await
        .expect("the retried write succeeds at once after the restart");
    let log = writer.get(&id).await.unwrap();
    let finished_events = log
        .events
        .iter()
        .filter(|e| matches!(e.event, ExecutionEventInner::Finished { .. }))
        .count();
    assert_eq!(finished_events, 1, "{log:#?}");

    let later = ffqn("after_the_crash");
    let long_wait = Duration::from_secs(600);
    let wait = tokio::spawn({
        let waiter = waiter.clone();
        let ffqns: Arc<[FunctionFqn]> = Arc::from(vec![later.clone()]);
        async move { waiter.wait_for_pending(now(), ffqns, long_wait).await }
    });
    until_waiters(&waiter, |counts| counts.pending == 1).await;
    writer
        .create(create_request(execution_id(2), later))
        .await
        .unwrap();
    tokio::time::timeout(SAFETY, wait)
        .await
        .expect("woken through NOTIFY after the restart, long before its max wait")
        .unwrap();
    writer.close().await;
    waiter.close().await;
    admin::drop_database(&admin_config, &database)
        .await
        .unwrap();
}

/// A listener whose backoff is an hour still reconnects as soon as the store's next call has
/// reached the restarted server: the pool's new connection tells it the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_reconnects_as_soon_as_the_store_reaches_the_restarted_server() {
    let Some(server) = SpareServer::lock("the_listener_reconnects_as_soon_as_the_server_is_back")
    else {
        return;
    };
    let (mut config, admin_config) = spare_database(&server, "listener_back").await;
    config.listener_min_backoff = Duration::from_secs(3600);
    config.listener_max_backoff = Duration::from_secs(3600);
    let store = PostgresStore::connect(config).await.unwrap();
    let mut updates = store.listener_updates();
    server.crash();
    tokio::time::timeout(SAFETY, updates.wait_for(|s| !s.connected))
        .await
        .expect("the listener sees its connection cut")
        .unwrap();
    server.start();
    store
        .create(create_request(execution_id(1), ffqn("back")))
        .await
        .expect("the first call after the restart succeeds");
    tokio::time::timeout(SAFETY, updates.wait_for(|s| s.connects >= 2 && s.connected))
        .await
        .expect("the listener reconnects long before its hour of backoff")
        .unwrap();
    let database = store.config().database_name().unwrap().to_string();
    store.close().await;
    admin::drop_database(&admin_config, &database)
        .await
        .unwrap();
}
