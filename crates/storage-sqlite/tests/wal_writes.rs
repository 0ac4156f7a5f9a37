//! Which writer writes its WAL frames through `sqlite_wal_batch` (alone in its test binary:
//! the VFS's counters are the process's): a store under `synchronous=FULL` or `EXTRA`, whose
//! commits sync the log, and not one under `NORMAL` or `OFF`, whose commits would reach other
//! connections before the buffer was written.

use concepts::{
    ComponentId, CreateRequest, DbClient, DbConnection, ExecutionIdTopLevel, ExecutionMetadata,
    FunctionFqn, Json,
};
use std::{path::Path, time::Duration};
use storage_sqlite::{SqliteConfig, SqlitePool, Synchronous};

async fn open_and_create(path: &Path, synchronous: Synchronous) {
    let store = SqlitePool::open(SqliteConfig::new(path).with_synchronous(synchronous))
        .await
        .expect("opens");
    let at = chrono::DateTime::UNIX_EPOCH;
    let ffqn: FunctionFqn = "ns:pkg/ifc.fn".parse().expect("a valid ffqn");
    store
        .create(CreateRequest {
            created_at: at,
            execution_id: ExecutionIdTopLevel::from_parts(1, 1).into(),
            ffqn,
            params: Json(serde_json::json!([])),
            parent: None,
            scheduled_at: at,
            retry_exp_backoff: Duration::from_millis(100),
            max_retries: 0,
            component_id: ComponentId::new("activity", "test").expect("a valid component id"),
            metadata: ExecutionMetadata::default(),
            scheduled_by: None,
        })
        .await
        .expect("creates");
    store.close().await;
}

#[tokio::test]
async fn a_store_gathers_its_wal_writes_only_when_each_commit_syncs() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (n, synchronous) in [Synchronous::Normal, Synchronous::Off]
        .into_iter()
        .enumerate()
    {
        let before = sqlite_wal_batch::counters();
        open_and_create(
            &dir.path().join(format!("unsynced-{n}.sqlite")),
            synchronous,
        )
        .await;
        assert_eq!(sqlite_wal_batch::counters(), before, "{synchronous:?}");
    }
    for (n, synchronous) in [Synchronous::Full, Synchronous::Extra]
        .into_iter()
        .enumerate()
    {
        let before = sqlite_wal_batch::counters();
        open_and_create(&dir.path().join(format!("synced-{n}.sqlite")), synchronous).await;
        let after = sqlite_wal_batch::counters();
        // The migration's commit and the create's, each of several frames.
        assert!(
            after.written >= before.written + 2,
            "{synchronous:?}: {before:?} then {after:?}"
        );
        assert!(
            after.gathered >= 2 * (after.written - before.written),
            "{after:?}"
        );
    }
}
