//! The conformance suite on the PostgreSQL backend: every scenario gets a database of its own,
//! created on the server that `STELE_TEST_POSTGRES_URL` names and dropped afterwards.
//!
//! Without `STELE_TEST_POSTGRES_URL` every scenario is skipped (with a printed reason), except
//! under `CI=true`, where every scenario fails: CI must run them.
//! Locally: `source .ci/postgres.sh && pg_start && cargo test -p storage-postgres`.

mod common;

use async_trait::async_trait;
use common::{TestDatabase, URL_VAR};
use conformance::{Capabilities, StoreFactory, TestStore};
use std::sync::Arc;
use storage_postgres::{PostgresConfig, PostgresStore};

/// Fresh databases on the test server.
struct PostgresFactory;

#[async_trait]
impl StoreFactory for PostgresFactory {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { persistent: true }
    }

    fn unavailable(&self) -> Option<String> {
        (common::server_url().is_none() && !common::in_ci())
            .then(|| format!("{URL_VAR} is not set"))
    }

    async fn fresh(&self) -> TestStore {
        let Some(url) = common::server_url() else {
            panic!(
                "{URL_VAR} is not set, and CI=true requires the PostgreSQL scenarios to run: \
                 start a server with `source .ci/postgres.sh && pg_start` first"
            );
        };
        let server = PostgresConfig::from_url(&url).expect("the test server URL parses");
        let database = TestDatabase::create(&server).await;
        let store = PostgresStore::connect(database.config.clone())
            .await
            .unwrap_or_else(|e| panic!("cannot open the test database: {e}"));
        TestStore {
            db: Arc::new(store),
            guard: Some(Box::new(database)),
        }
    }

    async fn reopen(&self, store: TestStore) -> Option<TestStore> {
        let TestStore { db, guard } = store;
        db.close().await;
        drop(db);
        let guard = guard?;
        let config = guard.downcast_ref::<TestDatabase>()?.config.clone();
        let reopened = PostgresStore::connect(config)
            .await
            .unwrap_or_else(|e| panic!("cannot reopen the test database: {e}"));
        Some(TestStore {
            db: Arc::new(reopened),
            guard: Some(guard),
        })
    }
}

conformance::conformance_tests!(PostgresFactory);
