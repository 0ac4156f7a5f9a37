//! Test databases on the server that `STELE_TEST_POSTGRES_URL` names, shared by this crate's
//! integration tests.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::{
    hash::{BuildHasher, RandomState},
    sync::atomic::{AtomicU64, Ordering},
};
use storage_postgres::{PostgresConfig, admin};

/// The variable that names the test server.
pub const URL_VAR: &str = "STELE_TEST_POSTGRES_URL";

/// The test server's URL, if set.
pub fn server_url() -> Option<String> {
    std::env::var(URL_VAR).ok().filter(|url| !url.is_empty())
}

/// True under CI, where the PostgreSQL tests must run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The test server, or `None` (after printing why) when it is not configured outside CI.
/// Under `CI=true` a missing server fails the test.
pub fn server_or_skip(test: &str) -> Option<PostgresConfig> {
    match server_url() {
        Some(url) => Some(PostgresConfig::from_url(&url).expect("the test server URL parses")),
        None if in_ci() => panic!(
            "{URL_VAR} is not set, and CI=true requires the PostgreSQL tests to run: start a \
             server with `source .ci/postgres.sh && pg_start` first"
        ),
        None => {
            conformance::skip(test, &format!("{URL_VAR} is not set"));
            None
        }
    }
}

/// A database name no other test uses.
pub fn unique_database_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let random = RandomState::new().hash_one(std::process::id());
    format!(
        "stele_test_{}_{}_{random:016x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A database created for one test, dropped (best effort) when this is dropped.
pub struct TestDatabase {
    /// The server (its maintenance database).
    pub server: PostgresConfig,
    /// The test database.
    pub config: PostgresConfig,
    name: String,
}

impl TestDatabase {
    /// Creates a fresh database on `server`.
    pub async fn create(server: &PostgresConfig) -> Self {
        let name = unique_database_name();
        admin::create_database(server, &name)
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let mut config = server.with_database(&name);
        config.pool_size = 12;
        Self {
            server: server.clone(),
            config,
            name,
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let server = self.server.clone();
        let name = std::mem::take(&mut self.name);
        // Drop may run inside a runtime, which cannot block on a future: use a thread with a
        // runtime of its own.
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
