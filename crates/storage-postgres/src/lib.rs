//! The PostgreSQL storage backend of Stele: one database shared by many executor, watcher and
//! client processes on many machines.
//!
//! ```no_run
//! # async fn example() -> Result<(), storage_postgres::PostgresError> {
//! use storage_postgres::{PostgresConfig, PostgresStore};
//!
//! let config = PostgresConfig::from_url("postgres://stele@db.internal:5432/stele?pool_size=32")?;
//! let store = PostgresStore::connect(config).await?; // migrates, starts the listener
//! let db: std::sync::Arc<dyn concepts::DbConnection> = std::sync::Arc::new(store.clone());
//! // ... hand `db` to executors, the timers watcher, clients ...
//! concepts::DbConnection::close(&store).await;
//! # Ok(()) }
//! ```
//!
//! # Running many processes
//!
//! Every process opens its own [`PostgresStore`] on the same database (the same URL). Nothing
//! else is shared: the database is the only coordination point. Executors of any process
//! lock disjoint executions, appends to one execution serialize on its row lock, and every
//! write wakes the waiters of every process through `NOTIFY`. Give the server
//! `max_connections` of at least (processes x (`pool_size` + 1)).
//!
//! A write's notifications are sent right after its `COMMIT`, not inside its transaction (where
//! `NOTIFY` would hold a database-wide lock through the commit's WAL flush): a process that dies
//! between the two sends none, so the others learn of that write only when they look again
//! (executors and the timers watcher poll every `tick_sleep`). The write does not wait for its
//! notifications to run: they are handed to the connection behind the `COMMIT`.
//!
//! # Connections, TLS and a failing server
//!
//! Every connection of a store (the pool's, the listener's) and of [`admin`] is opened by one
//! connector: `sslmode` as libpq names it ([`SslMode`]), over rustls with the `ring` provider,
//! trusting the [`RootCertificates`] of the configuration; a failed negotiation or certificate
//! check is [`PostgresError::Tls`], which says what to change. No message and no log line holds
//! a password: URLs are shown as [`PostgresConfig::redacted_url`].
//!
//! [`PostgresStore::connect`] makes one attempt unless [`PostgresConfig::wait_for_server`]
//! lets it retry a server it cannot reach. Once open, a store recovers by itself from a server
//! that restarts or crashes: a call in flight is answered with [`concepts::DbError::Connection`]
//! (retriable), closed pooled connections are replaced on the next call, and the listener
//! reconnects, listens again and wakes every waiter.
//!
//! # Schema
//!
//! [`PostgresStore::connect`] applies the embedded migrations, once however many processes
//! start at once, and refuses a schema newer than the binary's ([`SCHEMA_VERSION`]) with a
//! [`SchemaRefusal`](concepts::SchemaRefusal); [`admin::migrate_to`] applies them up to a given
//! version without opening a store. [`SchemaOptions`](concepts::SchemaOptions) (`existing_only`,
//! `without_migrations`) connects without changing the schema.
//!
//! # How it works
//!
//! Every rule of a write is [`concepts::kernel`]'s: this crate loads the rows a write names
//! under row locks, persists the kernel's plan with the `COMMIT` in one pipeline, and lets
//! concurrent writes share a transaction, planned together by the kernel's `GroupPlanner`.
//! `docs/ARCHITECTURE.md` (section `storage-postgres`) describes the design.

pub mod admin;
mod codec;
mod config;
mod error;
mod load;
mod notify;
mod persist;
mod pipeline;
mod reads;
mod schedules;
mod schema;
#[cfg(test)]
mod tests;
mod tls;
mod writer;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT, PostgresConfig,
};
pub use error::PostgresError;
pub use notify::ListenerState;
pub use schema::SCHEMA_VERSION;
pub use tls::{RootCertificates, SslMode};

use concepts::{
    DbError,
    kernel::{self, WaiterHub},
};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, Runtime};
use error::map_pool_error;
use std::sync::{Arc, Mutex};
use tokio::{sync::watch, task::JoinHandle};

/// A store on one PostgreSQL database. Clones share the pool and the listener.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    config: PostgresConfig,
    shutdown: watch::Sender<bool>,
    listener_state: watch::Receiver<ListenerState>,
    listener_task: Mutex<Option<JoinHandle<()>>>,
    writer: Arc<writer::Writer>,
    /// The group writer; it stops when the last store handle drops it.
    groups: kernel::Groups,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The listener task stops when it sees this (or the sender dropped).
        let _ = self.shutdown.send(true);
        self.writer.pool.close();
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("config", &self.inner.config)
            .field("closed", &self.inner.writer.hub.is_closed())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Opens a store: builds the pool, applies the migrations (see the crate docs), and starts
    /// the notification listener, returning once it listens.
    pub async fn connect(config: PostgresConfig) -> Result<Self, PostgresError> {
        let tls = tls::Tls::new(&config)?;
        // The default recycling only checks that a returned connection is still open.
        let recycling = ManagerConfig::default();
        let manager = Manager::from_connect(config.pool_pg_config(), tls.clone(), recycling);
        let pool = Pool::builder(manager)
            .max_size(config.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(config.connect_timeout))
            .build()
            .map_err(|e| {
                let problem = format!("cannot build the connection pool: {e}");
                error::invalid_config(config.redacted_url(), problem)
            })?;
        {
            let mut client = first_connection(&pool, &config).await?;
            schema::migrate(&mut client, SCHEMA_VERSION, &config).await?;
        }
        let hub = Arc::new(WaiterHub::new());
        let (state_tx, mut state_rx) = watch::channel(ListenerState::default());
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(notify::run_listener(
            config.clone(),
            tls,
            Arc::clone(&hub),
            state_tx,
            shutdown_rx,
        ));
        // The listener connects and then listens, each within `connect_timeout`.
        let first_listen_timeout = config.connect_timeout.saturating_mul(2);
        let listening =
            tokio::time::timeout(first_listen_timeout, state_rx.wait_for(|s| s.connected))
                .await
                .is_ok_and(|seen| seen.is_ok());
        if !listening {
            let _ = shutdown_tx.send(true);
            task.abort();
            pool.close();
            return Err(DbError::Connection(format!(
                "the notification listener could not connect to {}",
                config.redacted_url()
            ))
            .into());
        }
        let writer = Arc::new(writer::Writer {
            pool,
            hub,
            max_transaction_retries: config.max_transaction_retries,
            trips: pipeline::Trips::default(),
        });
        let slots = writer::Writer::groups_in_flight(config.pool_size);
        let groups = kernel::Groups::spawn(Arc::clone(&writer), slots);
        Ok(Self {
            inner: Arc::new(Inner {
                writer,
                groups,
                config,
                shutdown: shutdown_tx,
                listener_state: state_rx,
                listener_task: Mutex::new(Some(task)),
            }),
        })
    }

    /// [`PostgresStore::connect`] with a configuration parsed from `url`.
    pub async fn connect_url(url: &str) -> Result<Self, PostgresError> {
        Self::connect(PostgresConfig::from_url(url)?).await
    }

    /// The configuration it was opened with.
    #[must_use]
    pub fn config(&self) -> &PostgresConfig {
        &self.inner.config
    }

    /// The listener connection's current state.
    #[must_use]
    pub fn listener_state(&self) -> ListenerState {
        self.inner.listener_state.borrow().clone()
    }

    /// A receiver that sees every change of the listener's state (connects, notifications).
    #[must_use]
    pub fn listener_updates(&self) -> watch::Receiver<ListenerState> {
        self.inner.listener_state.clone()
    }

    /// How many groups of writes may be in flight at once, each on a pooled connection of its
    /// own (see "How it works" in the crate docs).
    #[must_use]
    pub fn group_slots(&self) -> usize {
        writer::Writer::groups_in_flight(self.inner.config.pool_size)
    }

    /// How many round trips to the server this store's calls have waited for so far, for tests
    /// and diagnostics: each pipeline sent and awaited together counts one, whatever its length;
    /// neither the listener nor the first preparation of a statement on a connection counts.
    #[must_use]
    pub fn round_trips(&self) -> u64 {
        self.inner.writer.trips.count()
    }

    /// A pooled connection for a read of one round trip.
    async fn reader(&self) -> Result<Object, DbError> {
        self.inner.writer.hub.ensure_open()?;
        let client = self.inner.writer.pool.get().await.map_err(map_pool_error)?;
        self.inner.writer.trips.one();
        Ok(client)
    }
}

/// The first pooled connection of a store that opens: retried while the server cannot be
/// reached, for [`PostgresConfig::wait_for_server`], with the listener's backoff.
async fn first_connection(pool: &Pool, config: &PostgresConfig) -> Result<Object, PostgresError> {
    let deadline = config
        .wait_for_server
        .and_then(|wait| tokio::time::Instant::now().checked_add(wait));
    let mut backoff = config.listener_min_backoff;
    loop {
        let err = match pool.get().await {
            Ok(client) => return Ok(client),
            Err(deadpool_postgres::PoolError::Backend(e)) => error::connect_error(config, e),
            Err(e) => map_pool_error(e).into(),
        };
        let unreachable = matches!(err, PostgresError::Db(DbError::Connection(_)));
        let next = tokio::time::Instant::now() + backoff;
        if !unreachable || deadline.is_some_and(|deadline| next > deadline) {
            return Err(err);
        }
        tracing::warn!(url = config.redacted_url(), error = %err, ?backoff,
            "cannot reach the PostgreSQL server; retrying");
        tokio::time::sleep_until(next).await;
        backoff = (backoff * 2).min(config.listener_max_backoff);
    }
}
