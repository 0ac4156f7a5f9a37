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
//! # Connections and TLS
//!
//! Every connection of a store (the pool's, the listener's) and of [`admin`] is opened by one
//! connector built from [`PostgresConfig::ssl_mode`] and
//! [`PostgresConfig::root_certificates`]: `sslmode` as libpq names it, over rustls with the
//! `ring` provider (no system OpenSSL). `prefer` (the default) encrypts when the server offers
//! TLS, `require` insists, `verify-ca` also checks the certificate against the roots, and
//! `verify-full` also checks that it names the URL's host (see [`SslMode`] for the table).
//! The roots are Mozilla's list compiled in, a PEM file named by `sslrootcert=PATH`, or
//! certificates given in code ([`PostgresConfig::with_root_certificates`]). A failed
//! negotiation or certificate check is [`PostgresError::Tls`], which says what to change.
//! No message and no log line holds a password: URLs are shown as
//! [`PostgresConfig::redacted_url`] (every password the driver would read replaced by `***`)
//! and driver errors carry none.
//!
//! # When the server fails
//!
//! [`PostgresStore::connect`] makes one attempt unless [`PostgresConfig::wait_for_server`]
//! (`wait_for_server_s` in the URL) lets it retry a server it cannot reach, with the
//! listener's backoff; a refused password, a TLS failure or a missing database are returned
//! at once. Once open, a store recovers by itself from a server that restarts or crashes: a
//! call in flight is answered with [`concepts::DbError::Connection`] (retriable; the executor
//! retries its outcome writes, and a lease that is not written is recovered by the timers
//! watcher), closed pooled connections are replaced on the next call, and the listener
//! reconnects, listens again and wakes every waiter (it retries at once when a pooled
//! connection reaches the server again, without sleeping out its backoff).
//!
//! # Schema
//!
//! Migrations are embedded and applied by [`PostgresStore::connect`] in one transaction that
//! first takes `pg_advisory_xact_lock`, so two processes starting at once do not both migrate;
//! the applied versions are kept in `t_schema_migration`, and a database whose schema is newer
//! than the binary's ([`SCHEMA_VERSION`]) is refused with [`PostgresError::SchemaTooNew`].
//! [`admin::migrate_to`] applies them up to a given version without opening a store.
//! A tool that must not change what it connects to says so in its [`PostgresConfig`]:
//! [`PostgresConfig::existing_only`] creates nothing (a database without Stele's tables is
//! refused with [`PostgresError::NoSchema`], and not even `t_schema_migration` is created),
//! [`PostgresConfig::without_migrations`] refuses an older schema with
//! [`PostgresError::SchemaTooOld`] and leaves it at its version.
//!
//! - `t_execution`: one row per execution, the state index: next version, the exact pending
//!   state (`state_json`) plus the columns that are queried: `state_kind`, `pending_at` (set
//!   only while `PendingAt`), `lock_expires_at` (set only while `Locked`), `finished_at` and
//!   `finished_at_ns` (set only while `Finished`, since schema version 2), the temporary event
//!   count, the response count, retry settings and parent. Partial indexes on
//!   `(pending_at, execution_id)` and `(ffqn, pending_at, execution_id)` serve `lock_pending`,
//!   one on `(lock_expires_at, execution_id)` serves expired leases, one on
//!   `(finished_at, finished_at_ns, execution_id)` of finished top-level executions serves
//!   `prune`, and one on `(created_at, created_at_ns, execution_id)` serves
//!   `list_executions`. The descendants of an execution are a range of the primary key (see
//!   [`concepts::kernel::descendant_bounds`]). Since schema version 3 autovacuum takes the
//!   table after a fixed number of dead rows (50,000), not a fraction of it: the dead entries
//!   that every state change leaves in the partial indexes lie ahead of the live ones that
//!   `lock_pending` reads, and with a fractional trigger they grew with the history stored.
//!   Version 3 also adds `f_due_executions`, the read of due executions (see **Lock**).
//! - `t_event`: the log, keyed by `(execution_id, version)`, each event as JSON text.
//! - `t_response`: responses keyed by `(execution_id, idx)` where `idx` is the arrival order,
//!   with `join_set_idx`, the order within the join set. Partial unique indexes on
//!   `(execution_id, delay_id) WHERE delay_id IS NOT NULL` and
//!   `(execution_id, child_execution_id) WHERE child_execution_id IS NOT NULL` back up the
//!   kernel's duplicate check (a constraint over nullable columns would let duplicates
//!   through).
//! - `t_join_set`: per execution and join set, the `JoinNext` and response counts, so that a
//!   write needs no scan of the log.
//! - `t_delay`: every requested delay, with `is_open` until its `DelayFinished` is stored; a
//!   partial index on open delays' `(expires_at, execution_id)` serves expired delays.
//!
//! Timestamps are `BIGINT` microseconds since the epoch, compared as integers (never as text);
//! the exact values (to the nanosecond) are kept in the JSON of events, responses and states,
//! and in `*_ns` remainder columns where a row reports a time back. Ids are `TEXT COLLATE "C"`,
//! so ties order byte-wise like `ExecutionId`'s `Ord` on every server locale. Payloads are JSON
//! text, not `JSONB`: `JSONB` would reorder the keys of parameters and results.
//!
//! # Writes
//!
//! Every write follows the protocol of [`concepts::kernel`], which owns every rule: the
//! request names its [`Keys`], this backend loads them into a
//! [`Snapshot`], the kernel plans, this backend persists the plan
//! and, once committed, hands its wake-ups on. What this backend does is the loading, the
//! locking and the writing, each one `READ COMMITTED` transaction:
//!
//! - **Load.** The `BEGIN` and every load the keys ask for go out in one pipeline: the rows of
//!   the executions written or created, with one `SELECT ... WHERE execution_id = ANY($1)
//!   ORDER BY execution_id FOR UPDATE`; then, each with one statement and only when the keys
//!   name any, the `Created` events of the executions to create that exist (the children of
//!   `append_batch`, a `create` run again), the descendants of the subtrees
//!   (`execution_id >= '<root>.' AND execution_id < '<root>/'`, locked in id order), `prune`'s candidates, finished results, open delays, the
//!   join-set counters with the times of the responses the next `JoinNext` events consume,
//!   the delays, and the child responses. The server runs a pipeline in order, so every read
//!   after the row locks sees the latest committed state. The follow-up keys of `cancel` (the
//!   join sets and open delays of what it cancels) and `prune` (the trees of its candidates)
//!   go out in a second pipeline in the same transaction. A `create` or `create_batch` loads
//!   nothing: it is planned on the empty snapshot (its keys name only the executions it
//!   creates), and the primary keys of `t_execution` and `t_event` check that assumption in the
//!   write itself; an id that is stored rolls the transaction back, and the write runs again
//!   with the load, on which the kernel answers the repeat or the conflict (not counted as a
//!   retry). Likewise an outcome (`append_outcome`) of a lease this store's `lock_pending`
//!   took, when it names that execution alone (no parent to answer) at the locked version and
//!   no other write of the store is in flight (under load a write that ends a round trip
//!   sooner would only make the next groups smaller), is planned on the row as the lock wrote
//!   it: the first statement after its `BEGIN` locks the row and checks the columns a write
//!   changes (next version, pending state, temporary event and response counts), and divides
//!   by zero when one differs, which aborts the transaction before anything is stored; the
//!   outcome then runs again with the load. The rows are kept only from locks taken while no
//!   other write was in flight; each is used once; at most 4,096 are kept.
//! - **Subtrees.** A descendant created by a transaction that committed while the locking
//!   statement waited for a row is not in that statement's snapshot. So the locking statement
//!   is followed, in the same pipeline, by a plain read of the members: once every member
//!   found (and the root) is locked, nothing can create another below them, and a read that
//!   finds no member more proves the set complete; otherwise both run again.
//! - **Lock.** Every write that waits for row locks takes them in id order, so writes never
//!   wait for each other in a circle (a finishing child and its parent: the parent's id is a
//!   prefix of the child's). `lock_pending` never waits: it finds due executions with
//!   `FOR UPDATE SKIP LOCKED`, ordered by `(pending_at, execution_id)`, `LIMIT batch_size`
//!   (per function, in the order of the `(ffqn, pending_at, execution_id)` index, by the
//!   schema's function `f_due_executions`, planned without bitmap scans or sorts), so
//!   two processes never lock the same execution (a row another transaction holds is
//!   skipped, one it moved out of `PendingAt` no longer matches when re-checked); the logs of
//!   what it locked are read after the `COMMIT`, by two statements in the `COMMIT`'s pipeline
//!   ([`concepts::kernel::hand_over`]), so that no row lock is held while a long log is read.
//!   `prune` finds its candidates the same way,
//!   ordered by `(finished_at, execution_id)`: a tree another write holds waits for the next
//!   pass. A deadlock or serialization failure that happens anyway (overlapping
//!   `create_batch` calls of two processes) is retried
//!   ([`PostgresConfig::max_transaction_retries`] times) and then returned as retriable.
//! - **Plans.** The statements of the hot path that look up many ids or read the due
//!   executions are written so that no statistics can make them read a whole table or every
//!   due row (a `LATERAL` lookup per id, `f_due_executions` for the due ones): a new store's
//!   connections cache generic plans while its tables are empty, and the statistics of a
//!   table that grew by a million rows may be hours old. Every write transaction also begins
//!   with `enable_seqscan` and `enable_bitmapscan` off (`SET LOCAL`), and pooled sessions run
//!   without JIT, for the same reason.
//! - **Persist.** The plan's changes are written with a few multi-row `UNNEST` statements, one
//!   per table and kind of change, over prepared statements cached per connection, sent in
//!   one pipeline with the `COMMIT` (behind the `BEGIN` when nothing was loaded), the
//!   notifications and the reads of `lock_pending`'s hand-over behind them: one round trip.
//!   On an idle store a `create` thus costs one round trip, a `lock_pending` two and the
//!   `append_outcome` of its lease one ([`PostgresStore::round_trips`] counts them). When
//!   the server refuses a statement the transaction is aborted and its `COMMIT` rolls it back.
//!   A response is stored under its receiver's row lock, so its index never changes
//!   afterwards, even when children finish concurrently. What `prune` deletes goes in one
//!   more statement: every row of those executions in every table.
//! - **Groups.** Concurrent writes that name their executions (`create`, `append_batch`,
//!   `append_outcome`, `append_response`, `complete`) go through a group writer: writes that
//!   name no execution in common share one transaction, one load of all their keys (one
//!   locking statement), one kernel plan each on that snapshot, one pipeline of statements
//!   with all their changes, and one commit (outcomes may name a parent in common: they are
//!   planned together, one after the other, as `append_outcomes` is); up to [`PostgresStore::group_slots`] groups are in
//!   flight at once (a write that finds one free runs at once), and under load each takes
//!   what queued meanwhile. A write the kernel refuses changes nothing and the rest commit;
//!   when the database refuses the group, nothing of it is stored and each write runs again
//!   alone, so every write stays all or nothing.
//!   The `writer` module has the details. `lock_pending`, `cancel`, `prune` and
//!   `create_batch` run alone.
//! - Reads of several tables (`get`) run in one `REPEATABLE READ READ ONLY` transaction.
//!
//! # Notifications
//!
//! The waits (`wait_for_pending`, `subscribe_to_next_responses`, `wait_for_finished_result`)
//! use the kernel's [`WaiterHub`]. A committed write hands its
//! wake-ups to this process's hub and publishes them on the channel `stele`:
//! `p:<micros>:<ffqn>` when an execution of that function became pending at that time (one per
//! function and transaction, the earliest), `r:<execution id>` when its responses grew,
//! `f:<execution id>` when it finished, `*` for "anything may have happened"; the wake-ups of
//! one transaction are packed, separated by spaces, into as few payloads as fit (one for a
//! group of hundreds of writes), and a payload with a part it does not know wakes everyone.
//! Each store keeps
//! one dedicated listener connection (`LISTEN stele`) that delivers what it hears to its hub.
//!
//! The `pg_notify` calls (one statement for all the payloads of a transaction, however many
//! writes shared it) run right after the write's `COMMIT`, in the same pipeline on the same
//! connection, in a one-statement transaction of their own with `synchronous_commit` off: a
//! notification is thus never seen before the write it announces (after a refused statement
//! they announce a write that rolled back: a hint about nothing, which waiters tolerate). They are deliberately not part of the
//! write transaction: a transaction that notifies takes a database-wide lock at commit and
//! keeps it through its WAL flush, which serialized every committing writer (measured here:
//! 5,000 concurrent `Finished` appends took 2.7x longer). If the process dies between the
//! commit and the notification, that one hint is lost, which the contract allows.
//!
//! A lost listener connection is reopened with exponential backoff
//! ([`PostgresConfig::listener_min_backoff`] to [`PostgresConfig::listener_max_backoff`]); after
//! each (re)connection every waiter is woken once, since anything may have been missed.
//! Notifications stay hints: executors still poll every `tick_sleep`.
//!
//! # Errors
//!
//! Driver errors are mapped in one place: SQLSTATE `23505` (unique violation) becomes
//! [`concepts::DbError::Duplicate`] with the kind named by the constraint (the backstop for
//! two processes creating or answering the same thing at once; a `create` or `create_batch`
//! that lost such a race runs again, and the kernel answers the repeat or the conflict it
//! finds), `40001` / `40P01` a
//! retriable backend error, a lost connection [`concepts::DbError::Connection`], a closed
//! store [`concepts::DbError::Closed`], anything else a backend error carrying the server's
//! message and SQLSTATE. Every other error comes from the kernel, the same as on every other
//! backend. Timestamps are compared at microsecond precision in SQL; the exact value decides
//! where a row is read back (the order of due executions and expired leases).

pub mod admin;
mod codec;
mod config;
mod error;
mod load;
mod notify;
mod persist;
mod pipeline;
mod reads;
mod schema;
#[cfg(test)]
mod tests;
mod tls;
mod trips;
mod writer;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT, PostgresConfig,
};
pub use error::PostgresError;
pub use notify::ListenerState;
pub use schema::SCHEMA_VERSION;
pub use tls::{RootCertificates, SslMode};

use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredTimer,
    FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter, ListExecutionsFilter,
    LockPendingRequest, LockedExecution, Pagination, Version,
    kernel::{self, Forward, KnownRows, WaiterCounts, WaiterHub, Write},
};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use error::map_pool_error;
use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};
use tokio::{sync::watch, task::JoinHandle};

/// A store on one PostgreSQL database. Clones share the pool and the listener.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    config: PostgresConfig,
    hub: Arc<WaiterHub>,
    shutdown: watch::Sender<bool>,
    listener_state: watch::Receiver<ListenerState>,
    listener_task: Mutex<Option<JoinHandle<()>>>,
    writer: Arc<writer::Writer>,
    /// The group writer; it stops when the last store handle drops it.
    groups: writer::Groups,
}

/// At most this many rows of the leases this store took are kept, for their outcomes to be
/// planned on (a lease whose outcome another process writes is never taken out): past it,
/// they are all dropped.
const MAX_KNOWN_ROWS: usize = 4_096;

impl Drop for Inner {
    fn drop(&mut self) {
        // The listener task stops when it sees this (or the sender dropped).
        let _ = self.shutdown.send(true);
        self.pool.close();
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("config", &self.inner.config)
            .field("closed", &self.inner.hub.is_closed())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Opens a store: builds the pool, applies the migrations (see the crate docs), and starts
    /// the notification listener, returning once it listens.
    pub async fn connect(config: PostgresConfig) -> Result<Self, PostgresError> {
        let tls = config.tls()?;
        let manager = Manager::from_connect(
            config.pool_pg_config(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(config.connect_timeout))
            .build()
            .map_err(|e| PostgresError::InvalidConfig {
                url: config.redacted_url().to_string(),
                problem: format!("cannot build the connection pool: {e}"),
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
        let first = tokio::time::timeout(notify::first_listen_timeout(&config), async {
            state_rx.wait_for(|s| s.connected).await.map(|_| ())
        })
        .await;
        if !matches!(first, Ok(Ok(_))) {
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
            pool: pool.clone(),
            hub: Arc::clone(&hub),
            max_transaction_retries: config.max_transaction_retries,
            trips: trips::Trips::default(),
            known: KnownRows::new(MAX_KNOWN_ROWS),
        });
        let groups = writer::Groups::spawn(
            Arc::clone(&writer),
            writer::Writer::groups_in_flight(config.pool_size),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                writer,
                groups,
                config,
                hub,
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

    /// How many groups of writes may be in flight at once (each on a pooled connection of its
    /// own): see "Writes" in the crate docs.
    #[must_use]
    pub fn group_slots(&self) -> usize {
        writer::Writer::groups_in_flight(self.inner.config.pool_size)
    }

    /// How many round trips to the server this store's calls have waited for so far: each
    /// pipeline of statements sent and awaited together counts one, whatever its length
    /// (statements prepared on a connection for the first time are not counted: that happens
    /// once per connection and statement). The listener's connection is not counted. For tests
    /// and diagnostics: see "Writes" in the crate docs for what each call costs.
    #[must_use]
    pub fn round_trips(&self) -> u64 {
        self.trips().count()
    }

    fn trips(&self) -> &trips::Trips {
        &self.inner.writer.trips
    }

    /// The number of registered waiters of each kind.
    #[must_use]
    pub fn waiter_counts(&self) -> WaiterCounts {
        self.inner.hub.counts()
    }

    async fn client(&self) -> Result<Object, DbError> {
        self.inner.hub.ensure_open()?;
        self.inner.pool.get().await.map_err(map_pool_error)
    }

    /// A pooled connection for a read of `trips` round trips.
    async fn reader(&self, trips: u64) -> Result<Object, DbError> {
        let client = self.client().await?;
        for _ in 0..trips {
            self.trips().one();
        }
        Ok(client)
    }

    async fn any_due(&self, at: DateTime<Utc>, ffqns: &[FunctionFqn]) -> Result<bool, DbError> {
        let client = self.reader(1).await?;
        reads::any_due(&client, at, ffqns).await
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
            Err(e) => error::connect_pool_error(config, e),
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

impl kernel::Backend for PostgresStore {
    async fn write<W: Forward>(&self, write: W) -> Result<W::Reply, DbError> {
        self.inner.hub.ensure_open()?;
        let keys = write.keys()?;
        let (job, answer) = kernel::queue(write, keys);
        self.inner.groups.write(&self.inner.writer, job).await;
        answer.get().await
    }

    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        self.inner.hub.ensure_open()?;
        let keys = req.keys()?;
        if req.locks_nothing() {
            return Ok(Vec::new());
        }
        let mut lock = writer::Lock(req, keys);
        let (plan, _, locked) = self.inner.writer.transact(&mut lock, false).await?;
        // An outcome is planned on its leased row only when it runs alone (`Groups::write`):
        // a lock taken while writes are in flight would fill the table for nothing.
        if self.inner.groups.idle() {
            self.inner.writer.known.remember(&plan);
        }
        Ok(locked)
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        let is_due = self.any_due(pending_at_or_sooner, &ffqns);
        self.inner
            .hub
            .wait_for_pending(pending_at_or_sooner, Arc::clone(&ffqns), max_wait, is_due)
            .await;
    }
    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        self.inner
            .hub
            .wait_for_responses(execution_id, || async {
                let client = self.reader(1).await?;
                let responses = reads::responses_from(&client, execution_id, start_idx).await?;
                Ok((!responses.is_empty()).then_some(responses))
            })
            .await
    }
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        let client = self.reader(1).await?;
        reads::expired_timers(&client, at).await
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        let client = self.reader(1).await?;
        reads::get(&client, execution_id).await
    }

    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        let client = self.reader(1).await?;
        reads::execution_event(&client, execution_id, version).await
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        let client = self.reader(1).await?;
        reads::list_executions(&client, &filter, &pagination).await
    }
    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        self.inner
            .hub
            .wait_for_finished(execution_id, timeout, || async {
                let client = self.reader(1).await?;
                reads::finished_result(&client, execution_id).await
            })
            .await
    }
    async fn close(&self) {
        if !self.inner.hub.close() {
            return;
        }
        self.inner.pool.close();
        let _ = self.inner.shutdown.send(true);
        let task = self
            .inner
            .listener_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task
            && tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
        {
            tracing::warn!("the notification listener did not stop within 5 s");
        }
    }
}
