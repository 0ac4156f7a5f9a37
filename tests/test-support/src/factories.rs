//! One conformance [`StoreFactory`] per backend, each behind the feature of its backend: the
//! same fresh stores for the backend's own run of the suite (its `tests/conformance.rs`) and
//! for the cross-backend differential test.

use async_trait::async_trait;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use concepts::DbConnection;
use conformance::{Capabilities, StoreFactory, TestStore};
use std::sync::Arc;

/// Fresh, empty memory stores; nothing persists.
#[cfg(feature = "memory")]
pub struct MemoryFactory;

#[cfg(feature = "memory")]
#[async_trait]
impl StoreFactory for MemoryFactory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { persistent: false }
    }

    async fn fresh(&self) -> TestStore {
        TestStore {
            db: Arc::new(storage_memory::MemoryStore::new()),
            guard: None,
        }
    }
}

/// A new SQLite file in a new temp dir per store, with the default (durable) settings;
/// reopening opens the same file.
#[cfg(feature = "sqlite")]
pub struct SqliteFactory;

/// Keeps the temp directory alive as long as the store, and remembers the file to reopen.
#[cfg(feature = "sqlite")]
struct SqliteGuard {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(path: &std::path::Path) -> Arc<storage_sqlite::SqlitePool> {
    let store = storage_sqlite::SqlitePool::open(storage_sqlite::SqliteConfig::new(path))
        .await
        .unwrap_or_else(|err| panic!("opening {}: {err}", path.display()));
    Arc::new(store)
}

#[cfg(feature = "sqlite")]
#[async_trait]
impl StoreFactory for SqliteFactory {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { persistent: true }
    }

    async fn fresh(&self) -> TestStore {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("stele.sqlite");
        let db = open_sqlite(&path).await;
        TestStore {
            db,
            guard: Some(Box::new(SqliteGuard { _dir: dir, path })),
        }
    }

    async fn another_process(&self, store: &TestStore) -> Option<Arc<dyn DbConnection>> {
        let guard = store.guard.as_ref()?.downcast_ref::<SqliteGuard>()?;
        Some(open_sqlite(&guard.path).await)
    }

    async fn reopen(&self, store: TestStore) -> Option<TestStore> {
        let TestStore { db, guard } = store;
        db.close().await;
        drop(db);
        let guard = guard?.downcast::<SqliteGuard>().ok()?;
        let db = open_sqlite(&guard.path).await;
        Some(TestStore {
            db,
            guard: Some(guard),
        })
    }
}

/// A new database on the test server per store ([`crate::postgres::TestDatabase`]), dropped
/// with the store's guard. Without a server every scenario is skipped with the reason, except
/// under `CI=true`, where every scenario fails ([`crate::postgres::unavailable`]).
#[cfg(feature = "postgres")]
pub struct PostgresFactory;

#[cfg(feature = "postgres")]
#[async_trait]
impl StoreFactory for PostgresFactory {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { persistent: true }
    }

    fn unavailable(&self) -> Option<String> {
        crate::postgres::unavailable()
    }

    async fn fresh(&self) -> TestStore {
        use crate::postgres::{TestDatabase, TestServer};
        let database = TestDatabase::create(&TestServer::from_env()).await;
        let store = storage_postgres::PostgresStore::connect(database.config.clone())
            .await
            .unwrap_or_else(|e| panic!("cannot open test database {}: {e}", database.name()));
        TestStore {
            db: Arc::new(store),
            guard: Some(Box::new(database)),
        }
    }

    async fn another_process(&self, store: &TestStore) -> Option<Arc<dyn DbConnection>> {
        let database = store
            .guard
            .as_ref()?
            .downcast_ref::<crate::postgres::TestDatabase>()?;
        let other = storage_postgres::PostgresStore::connect(database.config.clone())
            .await
            .unwrap_or_else(|e| panic!("cannot open test database {}: {e}", database.name()));
        Some(Arc::new(other))
    }

    async fn reopen(&self, store: TestStore) -> Option<TestStore> {
        let TestStore { db, guard } = store;
        db.close().await;
        drop(db);
        let guard = guard?;
        let config = guard
            .downcast_ref::<crate::postgres::TestDatabase>()?
            .config
            .clone();
        let reopened = storage_postgres::PostgresStore::connect(config)
            .await
            .unwrap_or_else(|e| panic!("cannot reopen the test database: {e}"));
        Some(TestStore {
            db: Arc::new(reopened),
            guard: Some(guard),
        })
    }
}
