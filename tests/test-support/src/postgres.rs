//! The PostgreSQL test server that `STELE_TEST_POSTGRES_URL` names, and a throw-away database
//! on it per test ([`TestDatabase`]), dropped when the test is done with it.
//!
//! Without the variable a test follows [`test_utils::skip_reason`] ([`unavailable`],
//! [`TestServer::or_skip`]). Locally: `source .ci/postgres.sh && pg_start`, which exports it.

use std::{
    hash::{BuildHasher, RandomState},
    sync::atomic::{AtomicU64, Ordering},
};
use storage_postgres::{PostgresConfig, admin};

/// The variable that names the test server, a `postgres://` URL of its maintenance database.
pub const URL_VAR: &str = "STELE_TEST_POSTGRES_URL";

/// How to get a server, for the message of a test that CI requires.
const START_A_SERVER: &str = "start a server with `source .ci/postgres.sh && pg_start` first";

/// The pool of a test database's [`TestDatabase::config`]: more than a scenario's concurrent
/// calls, far below the server's `max_connections` when test binaries run at once.
const POOL_SIZE: usize = 12;

/// The URL of the test server, if [`URL_VAR`] is set and not empty.
#[must_use]
pub fn server_url() -> Option<String> {
    std::env::var(URL_VAR).ok().filter(|url| !url.is_empty())
}

/// Why the PostgreSQL tests cannot run here: `None` when [`URL_VAR`] names a server.
///
/// # Panics
/// Under `CI=true` when it names none ([`test_utils::skip_reason`]).
#[must_use]
#[track_caller]
pub fn unavailable() -> Option<String> {
    if server_url().is_some() {
        return None;
    }
    Some(test_utils::skip_reason(
        format!("{URL_VAR} is not set"),
        START_A_SERVER,
    ))
}

/// The test server: its URL as given (for child processes) and parsed (for stores).
#[derive(Debug, Clone)]
pub struct TestServer {
    /// The URL that [`URL_VAR`] holds.
    pub url: String,
    /// The same, parsed.
    pub config: PostgresConfig,
}

impl TestServer {
    /// The test server, or `None` once `test` is skipped (printed) because there is none.
    ///
    /// # Panics
    /// Under `CI=true` when there is none, and when the URL does not parse.
    #[must_use]
    #[track_caller]
    pub fn or_skip(test: &str) -> Option<Self> {
        if let Some(reason) = unavailable() {
            test_utils::skip(test, &reason);
            return None;
        }
        Some(Self::from_env())
    }

    /// The test server, for a caller that checked [`unavailable`].
    ///
    /// # Panics
    /// When [`URL_VAR`] names no server or does not parse.
    #[must_use]
    #[track_caller]
    pub fn from_env() -> Self {
        let Some(url) = server_url() else {
            panic!("{URL_VAR} is not set: {START_A_SERVER}");
        };
        let config = PostgresConfig::from_url(&url)
            .unwrap_or_else(|e| panic!("{URL_VAR} does not parse: {e}"));
        Self { url, config }
    }
}

/// A database no other test uses, created on the test server and dropped (best effort, on a
/// thread of its own) when this is dropped, even when the test panics.
pub struct TestDatabase {
    /// The server it lives on.
    pub server: TestServer,
    /// The database, with a pool of 12 connections.
    pub config: PostgresConfig,
    /// The server's URL naming this database (its query parameters kept), for child
    /// processes.
    pub url: String,
    name: String,
}

impl TestDatabase {
    /// Creates a fresh database on `server`.
    ///
    /// # Panics
    /// When the server refuses.
    pub async fn create(server: &TestServer) -> Self {
        let name = unique_database_name();
        admin::create_database(&server.config, &name)
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let mut config = server.config.with_database(&name);
        config.pool_size = POOL_SIZE;
        Self {
            server: server.clone(),
            config,
            url: url_with_database(&server.url, &name),
            name,
        }
    }

    /// The database's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `query` on a plain driver connection to this database, for what no store offers
    /// (reading the catalog, forging a row), and closes the connection.
    ///
    /// # Panics
    /// When the connection cannot be opened.
    pub async fn with_client<T>(&self, query: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
        let (client, connection) =
            tokio_postgres::connect(&driver_url(&self.url), tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("a driver connection to {}: {e}", self.name));
        let driver = tokio::spawn(connection);
        let result = query(&client).await;
        drop(client);
        let _ = driver.await;
        result
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let server = self.server.config.clone();
        let name = std::mem::take(&mut self.name);
        // Drop may run inside a runtime, which cannot block on a future: drop the database
        // from a thread with a runtime of its own.
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

/// A database name no other test uses, in this process or another.
fn unique_database_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let random = RandomState::new().hash_one(std::process::id());
    format!(
        "stele_test_{}_{}_{random:016x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// `url` with its database replaced by `name` (query parameters kept).
#[must_use]
pub fn url_with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let after_scheme = base.find("://").map_or(0, |at| at + 3);
    let host_end = base[after_scheme..]
        .find('/')
        .map_or(base.len(), |at| after_scheme + at);
    format!("{}/{name}{query}", &base[..host_end])
}

/// `url` without the store's own query parameters (`pool_size`, `statement_timeout_ms`), which
/// the driver does not know, for a plain driver connection.
#[must_use]
pub fn driver_url(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or_default();
            !pair.is_empty() && key != "pool_size" && key != "statement_timeout_ms"
        })
        .collect();
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_another_database_and_keep_their_parameters() {
        assert_eq!(
            url_with_database("postgres://u:p@h:5/postgres?pool_size=4", "x"),
            "postgres://u:p@h:5/x?pool_size=4"
        );
        assert_eq!(url_with_database("postgres://h", "x"), "postgres://h/x");
        assert_eq!(
            url_with_database("postgresql://h/db", "x"),
            "postgresql://h/x"
        );
    }

    #[test]
    fn driver_urls_lose_the_store_parameters_only() {
        assert_eq!(
            driver_url("postgres://h/x?pool_size=4&connect_timeout=2&statement_timeout_ms=0"),
            "postgres://h/x?connect_timeout=2"
        );
        assert_eq!(driver_url("postgres://h/x?pool_size=4"), "postgres://h/x");
        assert_eq!(driver_url("postgres://h/x"), "postgres://h/x");
    }

    #[test]
    fn database_names_are_unique_and_plain() {
        let (a, b) = (unique_database_name(), unique_database_name());
        assert_ne!(a, b);
        for name in [a, b] {
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name}"
            );
        }
    }
}
