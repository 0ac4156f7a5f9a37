//! D1 across backends: for the printed seed (replay with `STELE_SEED`) and a few seeds derived
//! from it, the differential sequence runs on the memory backend (the reference) and on every
//! other backend, each time on a fresh store, and the canonical dumps must be identical.
//! A failure names the seed and the first line that differs.
//!
//! PostgreSQL joins when `STELE_TEST_POSTGRES_URL` names a server (a fresh database per run,
//! dropped afterwards); without it the PostgreSQL test prints `SKIPPED: ...` and passes, except
//! under `CI=true`, where a missing server fails it.

use async_trait::async_trait;
use conformance::{
    Capabilities, StoreFactory, TestStore,
    differential::{Dump, derive_seed, run_differential},
};
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};
use storage_memory::MemoryStore;
use storage_postgres::{PostgresConfig, PostgresStore, admin};
use storage_sqlite::{SqliteConfig, SqlitePool};

/// Seeds derived from the printed one and run after it.
const DERIVED_SEEDS: u64 = 3;
/// The variable that names the PostgreSQL test server.
const POSTGRES_URL_VAR: &str = "STELE_TEST_POSTGRES_URL";

/// The reference: fresh memory stores.
struct MemoryFactory;

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
            db: Arc::new(MemoryStore::new()),
            guard: None,
        }
    }
}

/// A new SQLite file in a new temp dir per store, with the default (durable) settings.
struct SqliteFactory;

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
        let path = dir.path().join("differential.sqlite");
        let db = SqlitePool::open(SqliteConfig::new(&path))
            .await
            .unwrap_or_else(|err| panic!("opening {}: {err}", path.display()));
        TestStore {
            db: Arc::new(db),
            guard: Some(Box::new(dir)),
        }
    }
}

/// A new database on the test server per store, dropped with the store's guard.
struct PostgresFactory {
    server: PostgresConfig,
}

/// A database created for one run; dropped (best effort) when this is dropped.
struct PostgresDatabase {
    server: PostgresConfig,
    name: String,
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        let server = self.server.clone();
        let name = std::mem::take(&mut self.name);
        // Dropped inside the test's runtime, which cannot block on a future: drop the
        // database from a thread with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime
                .block_on(admin::drop_database(&server, &name))
                .map_err(|e| format!("cannot drop test database {name}: {e}"))
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("{e}");
        }
    }
}

#[async_trait]
impl StoreFactory for PostgresFactory {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { persistent: true }
    }

    async fn fresh(&self) -> TestStore {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "stele_differential_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        admin::create_database(&self.server, &name)
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let database = PostgresDatabase {
            server: self.server.clone(),
            name,
        };
        let store = PostgresStore::connect(self.server.with_database(&database.name))
            .await
            .unwrap_or_else(|e| panic!("cannot open test database {}: {e}", database.name));
        TestStore {
            db: Arc::new(store),
            guard: Some(Box::new(database)),
        }
    }
}

/// The printed seed, then the seeds derived from it.
fn seeds() -> Vec<u64> {
    let base = test_utils::seed();
    let mut seeds = vec![base];
    for idx in 1..=DERIVED_SEEDS {
        let seed = derive_seed(base, idx);
        eprintln!("derived seed #{idx} = {seed} (replays with the base seed)");
        seeds.push(seed);
    }
    seeds
}

/// A dump that compares nothing (no successes, or no refusals) would make equality vacuous.
fn assert_meaningful(dump: &Dump) {
    let ok = dump.lines.iter().filter(|l| l.contains(" -> Ok(")).count();
    let err = dump.lines.iter().filter(|l| l.contains(" -> Err(")).count();
    assert!(
        ok > 0 && err > 0,
        "seed {}: the dump has {ok} successes and {err} errors; nothing was compared",
        dump.seed
    );
}

/// Runs every seed on the memory reference and on `backend`; their dumps must be identical.
async fn compare_with_memory<F: StoreFactory>(backend: &F) {
    let started = Instant::now();
    let mut lines = 0;
    for seed in seeds() {
        let reference = run_differential(&MemoryFactory, seed).await;
        assert_meaningful(&reference);
        let dump = run_differential(backend, seed).await;
        reference.assert_same(
            &dump,
            &format!(
                "memory (left) vs {} (right), replay with {}=<base seed printed above>",
                backend.name(),
                test_utils::SEED_ENV
            ),
        );
        lines += dump.lines.len();
    }
    eprintln!(
        "memory and {} agree on {} seeds ({lines} dump lines) in {:?}",
        backend.name(),
        DERIVED_SEEDS + 1,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_dumps_equal_memory_dumps() {
    test_utils::set_up();
    compare_with_memory(&SqliteFactory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dumps_equal_memory_dumps() {
    test_utils::set_up();
    let url = std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty());
    let Some(url) = url else {
        let in_ci = std::env::var("CI").is_ok_and(|ci| ci == "true");
        assert!(
            !in_ci,
            "{POSTGRES_URL_VAR} is not set, and CI=true requires the PostgreSQL differential \
             test to run: start a server with `source .ci/postgres.sh && pg_start` first"
        );
        conformance::skip(
            "postgres_dumps_equal_memory_dumps",
            &format!("postgres: {POSTGRES_URL_VAR} is not set"),
        );
        return;
    };
    let server = PostgresConfig::from_url(&url)
        .unwrap_or_else(|e| panic!("{POSTGRES_URL_VAR} does not parse: {e}"));
    compare_with_memory(&PostgresFactory { server }).await;
}
