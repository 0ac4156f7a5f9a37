//! The conformance suite on the SQLite backend: a fresh temp-file database per scenario.

use async_trait::async_trait;
use conformance::{Capabilities, StoreFactory, TestStore};
use std::{path::PathBuf, sync::Arc};
use storage_sqlite::{SqliteConfig, SqlitePool};

/// Keeps the temp directory alive as long as the store, and remembers the file to reopen.
struct Guard {
    dir: tempfile::TempDir,
    path: PathBuf,
}

struct SqliteFactory;

async fn open(path: PathBuf) -> Arc<SqlitePool> {
    let store = SqlitePool::open(SqliteConfig::new(&path))
        .await
        .unwrap_or_else(|err| panic!("opening {}: {err}", path.display()));
    Arc::new(store)
}

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
        let db = open(path.clone()).await;
        TestStore {
            db,
            guard: Some(Box::new(Guard { dir, path })),
        }
    }

    async fn reopen(&self, store: TestStore) -> Option<TestStore> {
        let TestStore { db, guard } = store;
        db.close().await;
        drop(db);
        let guard = guard?.downcast::<Guard>().ok()?;
        let db = open(guard.path.clone()).await;
        let _keep = &guard.dir;
        Some(TestStore {
            db,
            guard: Some(guard),
        })
    }
}

conformance::conformance_tests!(SqliteFactory);
