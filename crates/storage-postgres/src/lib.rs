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
//! # Schema
//!
//! Migrations are embedded and applied by [`PostgresStore::connect`] in one transaction that
//! first takes `pg_advisory_xact_lock`, so two processes starting at once do not both migrate;
//! the applied versions are kept in `t_schema_migration`, and a database whose schema is newer
//! than the binary's ([`SCHEMA_VERSION`]) is refused with [`PostgresError::SchemaTooNew`].
//!
//! - `t_execution`: one row per execution, the state index: next version, the exact pending
//!   state (`state_json`) plus the columns that are queried: `state_kind`, `pending_at` (set
//!   only while `PendingAt`), `lock_expires_at` (set only while `Locked`), the temporary event
//!   count, the response count, retry settings and parent. Partial indexes on
//!   `(pending_at, execution_id)` and `(ffqn, pending_at, execution_id)` serve `lock_pending`,
//!   one on `(lock_expires_at, execution_id)` serves expired leases, and one on
//!   `(created_at, created_at_ns, execution_id)` serves `list_executions`.
//! - `t_event`: the log, keyed by `(execution_id, version)`, each event as JSON text.
//! - `t_response`: responses keyed by `(execution_id, idx)` where `idx` is the arrival order,
//!   with `join_set_idx`, the order within the join set. Duplicates are refused by partial
//!   unique indexes on `(execution_id, delay_id) WHERE delay_id IS NOT NULL` and
//!   `(execution_id, child_execution_id) WHERE child_execution_id IS NOT NULL` (a constraint
//!   over nullable columns would let duplicates through).
//! - `t_join_set`: per execution and join set, the `JoinNext` and response counts, so that the
//!   state transitions need no scan of the log.
//! - `t_delay`: every requested delay, with `is_open` until its `DelayFinished` is stored; a
//!   partial index on open delays' `(expires_at, execution_id)` serves expired delays.
//!
//! Timestamps are `BIGINT` microseconds since the epoch, compared as integers (never as text);
//! the exact values (to the nanosecond) are kept in the JSON of events, responses and states,
//! and in `*_ns` remainder columns where a row reports a time back. Ids are `TEXT COLLATE "C"`,
//! so ties order byte-wise like `ExecutionId`'s `Ord` on every server locale. Payloads are JSON
//! text, not `JSONB`: `JSONB` would reorder the keys of parameters and results.
//!
//! # Writes and locking
//!
//! Every write is one `READ COMMITTED` transaction. Each execution it touches is locked with
//! `SELECT ... FOR UPDATE` before it is read, so concurrent writes to one execution serialize
//! and every read-validate-write sees the latest state. Validation and state transitions are
//! those of every backend: `concepts::ExecutionState::{validate_append, after_append,
//! after_response}`; then the staged rows are written with a few multi-row `UNNEST`
//! statements sent in one pipeline over prepared statements cached per connection.
//!
//! - `lock_pending` selects due executions with `FOR UPDATE SKIP LOCKED`, ordered by
//!   `(pending_at, execution_id)`, `LIMIT batch_size`, and locks the whole batch in the same
//!   transaction, all or nothing. Two processes never lock the same execution: a row locked by
//!   another transaction is skipped, and one that another transaction already moved out of
//!   `PendingAt` no longer matches when re-checked.
//! - A response is stored under its receiver's row lock, which assigns its index: what the
//!   k-th `JoinNext` of a join set sees never changes afterwards, even when children finish
//!   concurrently.
//! - A child finishing locks itself, then its parent; nothing locks a parent and then one of
//!   its existing children, so these never deadlock. A deadlock or serialization failure that
//!   happens anyway (overlapping `create_batch` calls) is retried internally
//!   ([`PostgresConfig::max_transaction_retries`] times) and then returned as retriable.
//! - Reads of several tables (`get`) run in one `REPEATABLE READ READ ONLY` transaction.
//!
//! # Notifications
//!
//! Each committed write publishes what it changed on the channel `stele`:
//! `p:<micros>:<ffqn>` when an execution of that function became pending at that time (one per
//! function and transaction, the earliest), `r:<execution id>` when its responses grew,
//! `f:<execution id>` when it finished. Each store keeps one dedicated listener connection
//! (`LISTEN stele`) that dispatches them to the waiters of its process; the writer also wakes
//! its own process's waiters right after the commit.
//!
//! The `pg_notify` calls run right after the write's `COMMIT`, on the same connection, in a
//! one-statement transaction of their own with `synchronous_commit` off: a notification is
//! thus never seen before the write it announces. They are deliberately not part of the
//! write transaction: a transaction that notifies takes a database-wide lock at commit and
//! keeps it through its WAL flush, which serialized every committing writer (measured here:
//! 5,000 concurrent `Finished` appends took 2.7x longer). If the process dies between the
//! commit and the notification, that one hint is lost, which the contract allows.
//!
//! `wait_for_pending`, `subscribe_to_next_responses` and `wait_for_finished_result` register
//! before they check the database (no lost wake-up), check again after every wake-up (a
//! notification may be late or meant for another time), and remove their registration however
//! they leave. A lost listener connection is reopened with exponential backoff
//! ([`PostgresConfig::listener_min_backoff`] to [`PostgresConfig::listener_max_backoff`]); after
//! each (re)connection every waiter is woken once, since anything may have been missed.
//! Notifications stay hints: executors still poll every `tick_sleep`.
//!
//! # Errors
//!
//! Driver errors are mapped in one place: SQLSTATE `23505` (unique violation) becomes
//! [`concepts::DbError::Duplicate`] with the kind named by the constraint, `40001` / `40P01`
//! a retriable backend error, a lost connection [`concepts::DbError::Connection`], a closed
//! store [`concepts::DbError::Closed`], anything else a backend error carrying the server's
//! message and SQLSTATE. Validation errors come from `concepts` and are the same as on every
//! other backend.
//!
//! # Choices where the contract leaves room
//!
//! The same as the in-memory backend's: `lock_pending` refuses an expiry at or before
//! `now` even when nothing is due, and fails as a whole if a selected execution cannot be
//! locked at `now`; `append_batch` requires every execution it creates to be announced by a
//! `ChildExecutionRequest` or `Schedule` event of the batch; a second `DelayRequest` with the
//! same delay id is `InvalidRequest`. Timestamps are compared at microsecond precision in SQL (the exact
//! value decides where a row is read back).

pub mod admin;
mod codec;
mod config;
mod error;
mod notify;
mod reads;
mod schema;
#[cfg(test)]
mod tests;
mod tx;

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT, PostgresConfig,
};
pub use error::PostgresError;
pub use notify::ListenerState;
pub use schema::SCHEMA_VERSION;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use codec::micros;
use concepts::{
    AppendBatchRequest, CreateRequest, DbClient, DbConnection, DbError, DbExecutor, DbTimers,
    DbWorkflow, ExecutionEvent, ExecutionEventInner, ExecutionId, ExecutionLog, ExecutionSummary,
    ExpiredTimer, FinishedExecutionResult, FunctionFqn, JoinSetResponseEvent,
    JoinSetResponseEventOuter, ListExecutionsFilter, LockPendingRequest, Locked, LockedExecution,
    OutcomeWrite, Pagination, RunId, ValidationError, Version,
};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use error::{is_transaction_retriable, map_pg_error, map_pool_error};
use notify::{Hub, Wakeups};
use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use tokio::{sync::watch, task::JoinHandle};
use tx::{ExecRow, PgTx, exec_columns};

/// A store on one PostgreSQL database. Clones share the pool and the listener.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    config: PostgresConfig,
    hub: Arc<Hub>,
    closed: AtomicBool,
    shutdown: watch::Sender<bool>,
    listener_state: watch::Receiver<ListenerState>,
    listener_task: Mutex<Option<JoinHandle<()>>>,
}

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
            .field("closed", &self.inner.closed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// Runs `$body` (which stages changes on `$tx`) in a write transaction, flushes, commits and
/// wakes this process's waiters; a deadlock or serialization failure runs it again. The body
/// may run more than once, so it only borrows its inputs.
macro_rules! write_tx {
    ($store:expr, |$tx:ident| $body:block) => {{
        let store: &PostgresStore = $store;
        let mut attempt: u32 = 0;
        loop {
            let result = async {
                let mut client = store.client().await?;
                let (value, wakeups) = {
                    let db_tx = client.transaction().await.map_err(map_pg_error)?;
                    #[allow(unused_mut)]
                    let mut $tx = PgTx::new(&db_tx);
                    let value = $body;
                    let wakeups = $tx.flush().await?;
                    db_tx.commit().await.map_err(map_pg_error)?;
                    (value, wakeups)
                };
                // Committed: from here on nothing turns the call into an error.
                notify::publish(&client, &wakeups).await;
                Ok::<_, DbError>((value, wakeups))
            }
            .await;
            match result {
                Ok((value, wakeups)) => {
                    store.wake_local(&wakeups);
                    break Ok(value);
                }
                Err(e)
                    if attempt < store.inner.config.max_transaction_retries
                        && is_transaction_retriable(&e) =>
                {
                    attempt += 1;
                    tracing::debug!(attempt, error = %e, "retrying a transaction");
                }
                Err(e) => break Err(e),
            }
        }
    }};
}

impl PostgresStore {
    /// Opens a store: builds the pool, applies the migrations (see the crate docs), and starts
    /// the notification listener, returning once it listens.
    pub async fn connect(config: PostgresConfig) -> Result<Self, PostgresError> {
        let manager = Manager::from_config(
            config.pool_pg_config(),
            tokio_postgres::NoTls,
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
            let mut client = pool.get().await.map_err(map_pool_error)?;
            schema::migrate(&mut client).await?;
        }
        let hub = Arc::new(Hub::default());
        let (state_tx, mut state_rx) = watch::channel(ListenerState::default());
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(notify::run_listener(
            config.clone(),
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
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                config,
                hub,
                closed: AtomicBool::new(false),
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

    /// The number of registered waiters: `(wait_for_pending, subscribe_to_next_responses,
    /// wait_for_finished_result)`.
    #[must_use]
    pub fn waiter_counts(&self) -> (usize, usize, usize) {
        self.inner.hub.counts()
    }

    fn check_open(&self) -> Result<(), DbError> {
        if self.inner.closed.load(Ordering::SeqCst) {
            Err(DbError::Closed)
        } else {
            Ok(())
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.check_open()?;
        self.inner.pool.get().await.map_err(map_pool_error)
    }

    fn wake_local(&self, wakeups: &Wakeups) {
        for wakeup in wakeups.to_vec() {
            self.inner.hub.dispatch(&wakeup);
        }
    }
}

/// Selects due executions for `lock_pending`.
const SELECT_DUE: &str = concat!(
    "SELECT ",
    exec_columns!(),
    " FROM t_execution WHERE pending_at IS NOT NULL AND pending_at <= $1 AND ffqn = ANY($2) \
     ORDER BY pending_at, execution_id LIMIT $3 FOR UPDATE SKIP LOCKED"
);

#[async_trait]
impl DbExecutor for PostgresStore {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        let LockPendingRequest {
            batch_size,
            pending_at_or_sooner,
            ffqns,
            now,
            component_id,
            executor_id,
            lock_expires_at,
        } = req;
        self.check_open()?;
        if lock_expires_at <= now {
            return Err(ValidationError::InvalidExpiryDate {
                lock_expires_at,
                now,
            }
            .into());
        }
        if batch_size == 0 || ffqns.is_empty() {
            return Ok(Vec::new());
        }
        let ffqn_names: Vec<String> = ffqns.iter().map(ToString::to_string).collect();
        let limit = i64::try_from(batch_size).unwrap_or(i64::MAX);
        let at = micros(pending_at_or_sooner);
        write_tx!(self, |tx| {
            let client = tx.client();
            let stmt = client
                .prepare_cached(SELECT_DUE)
                .await
                .map_err(map_pg_error)?;
            let rows = client
                .query(&stmt, &[&at, &ffqn_names, &limit])
                .await
                .map_err(map_pg_error)?;
            let mut due = Vec::with_capacity(rows.len());
            for row in &rows {
                let row = ExecRow::from_row(row)?;
                // SQL compares microseconds; the exact time decides.
                if let Some(pending_at) = row.state.pending_state.pending_at()
                    && pending_at <= pending_at_or_sooner
                {
                    due.push((pending_at, row.execution_id.clone()));
                    tx.add_locked(row);
                }
            }
            due.sort();
            let mut locked = Vec::with_capacity(due.len());
            for (_, execution_id) in &due {
                let version = tx.next_version(execution_id).await?;
                let locked_event = Locked {
                    component_id: component_id.clone(),
                    executor_id,
                    run_id: RunId::generate_at(now),
                    lock_expires_at,
                };
                let next_version = tx
                    .append(
                        execution_id,
                        version,
                        now,
                        ExecutionEventInner::Locked(locked_event.clone()),
                    )
                    .await?;
                locked.push((execution_id.clone(), next_version, locked_event));
            }
            let ids: Vec<&str> = due.iter().map(|(_, id)| id.as_str()).collect();
            let mut details = reads::lock_details(client, &ids).await?;
            let mut out = Vec::with_capacity(locked.len());
            for (execution_id, next_version, locked_event) in locked {
                let row = tx
                    .row(&execution_id)
                    .ok_or_else(|| DbError::execution_not_found(&execution_id))?;
                let detail = details.remove(execution_id.as_str()).ok_or_else(|| {
                    error::corrupt(format!("the `Created` event of {execution_id} is missing"))
                })?;
                out.push(LockedExecution {
                    next_version,
                    metadata: detail.metadata,
                    locked_event,
                    ffqn: row.ffqn.clone(),
                    params: detail.params,
                    event_history: detail.event_history,
                    responses: detail.responses,
                    scheduled_at: detail.scheduled_at,
                    retry_exp_backoff: row.retry_exp_backoff,
                    max_retries: row.max_retries,
                    parent: row.parent.clone(),
                    temporary_event_count: row.temporary_event_count,
                    execution_id,
                });
            }
            out
        })
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        self.check_open()?;
        let parent_response = write.parent_response();
        write_tx!(self, |tx| {
            let next_version = tx
                .append(
                    &write.execution_id,
                    write.version,
                    write.now,
                    write.event.clone(),
                )
                .await?;
            if let Some((parent_id, response)) = &parent_response {
                tx.append_response(response.created_at, parent_id, response.event.clone())
                    .await?;
            }
            next_version
        })
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        // `None`: a wait too long to represent, i.e. until woken.
        let deadline = tokio::time::Instant::now().checked_add(max_wait);
        let wait = |registration: notify::Registration| async move {
            let mut registration = registration;
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, registration.woken())
                    .await
                    .is_ok(),
                None => {
                    registration.woken().await;
                    true
                }
            }
        };
        let started = tokio::time::Instant::now();
        loop {
            if self.check_open().is_err() {
                return;
            }
            // The horizon moves on with real time: an execution submitted "now" by another
            // process while this one waits is due by then.
            let horizon = concepts::add_saturating(pending_at_or_sooner, started.elapsed());
            let registration = self.inner.hub.register_pending(Arc::clone(&ffqns), horizon);
            match self.any_due(horizon, &ffqns).await {
                Ok(true) | Err(DbError::Closed) => return,
                Ok(false) => {}
                Err(e) => {
                    // The caller polls again after `max_wait` at the latest.
                    tracing::warn!(error = %e, "wait_for_pending could not check the database");
                    wait(registration).await;
                    return;
                }
            }
            // A wake-up may be stale (a notification of an earlier write delivered late) or
            // meant for a time this waiter does not care about: look again before returning.
            if !wait(registration).await {
                return;
            }
        }
    }
}

impl PostgresStore {
    async fn any_due(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: &[FunctionFqn],
    ) -> Result<bool, DbError> {
        let client = self.client().await?;
        reads::any_due(&client, pending_at_or_sooner, ffqns).await
    }
}

#[async_trait]
impl DbWorkflow for PostgresStore {
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError> {
        concepts::kernel::validate_append_batch(&req)?;
        self.check_open()?;
        let AppendBatchRequest {
            execution_id,
            version,
            now,
            events,
            children,
        } = &req;
        write_tx!(self, |tx| {
            let mut next_version = *version;
            for event in events {
                next_version = tx
                    .append(execution_id, next_version, *now, event.clone())
                    .await?;
            }
            for child in children {
                tx.create(child)?;
            }
            next_version
        })
    }

    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        loop {
            self.check_open()?;
            let mut registration = self.inner.hub.register_responses(execution_id.as_str());
            let client = self.client().await?;
            let responses = reads::responses_from(&client, execution_id, start_idx).await?;
            drop(client);
            if !responses.is_empty() {
                return Ok(responses);
            }
            registration.woken().await;
        }
    }
}

#[async_trait]
impl DbTimers for PostgresStore {
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        let client = self.client().await?;
        reads::expired_timers(&client, at).await
    }

    async fn append_response(
        &self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        self.check_open()?;
        write_tx!(self, |tx| {
            tx.append_response(now, execution_id, response.clone())
                .await?;
        })
    }
}

#[async_trait]
impl DbClient for PostgresStore {
    async fn create(&self, req: CreateRequest) -> Result<Version, DbError> {
        self.check_open()?;
        write_tx!(self, |tx| { tx.create(&req)? })
    }

    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        if reqs.is_empty() {
            return Err(ValidationError::EmptyBatch("create_batch").into());
        }
        self.check_open()?;
        write_tx!(self, |tx| {
            for req in &reqs {
                tx.create(req)?;
            }
        })
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        let mut client = self.client().await?;
        reads::get(&mut client, execution_id).await
    }

    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        let client = self.client().await?;
        reads::execution_event(&client, execution_id, version).await
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        let client = self.client().await?;
        reads::list_executions(&client, &filter, &pagination).await
    }

    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        let wait = async {
            loop {
                self.check_open()?;
                let mut registration = self.inner.hub.register_finished(execution_id.as_str());
                let client = self.client().await?;
                let result = reads::finished_result(&client, execution_id).await?;
                drop(client);
                if let Some(result) = result {
                    return Ok(result);
                }
                registration.woken().await;
            }
        };
        match timeout {
            Some(timeout) => tokio::time::timeout(timeout, wait)
                .await
                .unwrap_or(Err(DbError::Timeout)),
            None => wait.await,
        }
    }
}

#[async_trait]
impl DbConnection for PostgresStore {
    async fn close(&self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.inner.hub.close();
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
