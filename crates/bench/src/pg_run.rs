//! A database of its own on the PostgreSQL server for one part of the benchmark, made fresh
//! and dropped afterwards.

use anyhow::Context;
use concepts::DbConnection;
use std::sync::Arc;
use storage_postgres::{PostgresConfig, PostgresStore, admin};

/// A database of its own on the PostgreSQL server, dropped by [`PostgresRun::drop_database`].
pub(crate) struct PostgresRun {
    server: PostgresConfig,
    /// The server's URL, as given.
    pub(crate) server_url: String,
    /// The database's name.
    pub(crate) name: String,
}

impl PostgresRun {
    pub(crate) async fn create(server_url: &str, label: &str) -> anyhow::Result<Self> {
        let server = PostgresConfig::from_url(server_url)?;
        let name = format!("stele_bench_{}_{label}", std::process::id());
        admin::create_database(&server, &name)
            .await
            .with_context(|| format!("creating database {name} on {}", server.redacted_url()))?;
        Ok(Self {
            server,
            server_url: server_url.to_string(),
            name,
        })
    }

    pub(crate) async fn connect(&self) -> anyhow::Result<Arc<dyn DbConnection>> {
        let store = PostgresStore::connect(self.server.with_database(&self.name))
            .await
            .with_context(|| format!("connecting to database {}", self.name))?;
        Ok(Arc::new(store))
    }

    pub(crate) async fn drop_database(self) -> anyhow::Result<()> {
        admin::drop_database(&self.server, &self.name)
            .await
            .with_context(|| format!("dropping database {}", self.name))
    }
}
