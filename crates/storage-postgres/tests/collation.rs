//! Schedule names are ordered byte by byte on every backend (the memory store's `BTreeMap`,
//! SQLite's `BINARY` collation, PostgreSQL's `COLLATE "C"` since schema version 9), also on a
//! PostgreSQL database whose default collation is a language's (ICU `en-US` here), where text
//! without a collation of its own sorts `a` before `B`.

use concepts::{
    ComponentId, DbSchedules, Json,
    schedule::{CreateScheduleRequest, Definition, RunSettings},
};
use std::time::Duration;
use test_support::postgres::{TestServer, url_with_database};

#[tokio::test]
async fn schedules_list_in_byte_order_whatever_the_database_collation() {
    let Some(server) = TestServer::or_skip("schedules_list_in_byte_order") else {
        return;
    };
    let name = format!("stele_icu_{}", std::process::id());
    let (admin, connection) = tokio_postgres::connect(
        &test_support::postgres::driver_url(&server.url),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 \
             LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        ))
        .await
        .unwrap();
    let store =
        storage_postgres::PostgresStore::connect_url(&url_with_database(&server.url, &name))
            .await
            .unwrap();
    let now = "2026-01-01T00:00:00Z".parse().unwrap();
    for n in ["B", "a", "a-c", "ab"] {
        let definition = Definition::new(
            n.parse().unwrap(),
            "test:pkg/ifc.tick".parse().unwrap(),
            Json(serde_json::json!([])),
            "every 1h".parse().unwrap(),
        );
        let settings = RunSettings {
            component_id: "activity:test".parse::<ComponentId>().unwrap(),
            max_retries: 0,
            retry_exp_backoff: Duration::from_secs(1),
        };
        let req = CreateScheduleRequest {
            definition,
            settings,
            now,
        };
        store.create_schedule(req).await.unwrap();
    }
    let listed: Vec<String> = (store.list_schedules(None, 10).await.unwrap())
        .iter()
        .map(|row| row.name().to_string())
        .collect();
    let first_page: Vec<String> = (store.list_schedules(None, 2).await.unwrap())
        .iter()
        .map(|row| row.name().to_string())
        .collect();
    drop(store);
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .unwrap();
    // What the memory and SQLite backends answer: byte order.
    assert_eq!(
        listed,
        ["B", "a", "a-c", "ab"],
        "first page: {first_page:?}"
    );
}
