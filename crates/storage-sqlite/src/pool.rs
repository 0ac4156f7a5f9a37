//! [`SqlitePool`]: the store handle. Writes go to the writer thread, reads to a pool of
//! read-only connections, waits to the in-process notifier.

use crate::{
    EffectiveSettings, SqliteConfig, SqliteOpenError,
    error::SqliteError,
    notify::{Horizon, Notifier},
    ops::WriteCtx,
    reads, schema,
    writer::{self, FnCommand, Message},
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use concepts::{
    AppendBatchRequest, CreateRequest, DbClient, DbConnection, DbError, DbExecutor, DbTimers,
    DbWorkflow, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredTimer,
    FinishedExecutionResult, FunctionFqn, JoinSetResponseEvent, JoinSetResponseEventOuter,
    ListExecutionsFilter, LockPendingRequest, LockedExecution, OutcomeWrite, Pagination,
    ValidationError, Version,
};
use deadpool_sqlite::{Hook, HookError, Runtime};
use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use tokio::sync::{Notify, mpsc, watch};

/// A SQLite store. Cheap to clone: clones share the writer thread, the reader pool and the
/// waiters. Dropping the last clone stops the writer after it finished the queued commands;
/// [`DbConnection::close`] does so and waits for it.
#[derive(Clone)]
pub struct SqlitePool {
    inner: Arc<Inner>,
}

struct Inner {
    path: Arc<Path>,
    settings: EffectiveSettings,
    commands: mpsc::Sender<Message>,
    /// Always `Some` until `Drop`, which may have to leak it (see there).
    readers: Option<deadpool_sqlite::Pool>,
    notifier: Arc<Notifier>,
    closed: AtomicBool,
    /// Set to `true` by `close`; waiters select on it.
    closing: watch::Sender<bool>,
    /// Its sender lives in the writer thread: the channel closes when the thread ends.
    writer_stopped: watch::Receiver<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The pool's connections are closed on a Tokio blocking thread, which needs a runtime.
        // After `close` no connection is left; without it, outside a runtime, leaking the idle
        // read-only connections (the process is usually ending) beats a panic in `drop`.
        if tokio::runtime::Handle::try_current().is_err()
            && let Some(readers) = self.readers.take()
            && readers.status().size > 0
        {
            tracing::warn!(
                path = %self.path.display(),
                "SqlitePool dropped outside a Tokio runtime without `close`: leaking its reader connections"
            );
            std::mem::forget(readers);
        }
    }
}

impl std::fmt::Debug for SqlitePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlitePool")
            .field("path", &self.inner.path)
            .field("settings", &self.inner.settings)
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SqlitePool {
    /// Opens (or creates) the database at `config.path`: checks that it is a Stele database,
    /// enables WAL, sets `synchronous`, applies pending migrations, reads the settings back,
    /// starts the writer thread and the reader pool.
    ///
    /// Must be called within a Tokio runtime (the reader pool runs its blocking work there).
    ///
    /// # Errors
    /// A [`SqliteOpenError`] naming the file: not a database, another application's database,
    /// a newer schema, WAL unavailable, cannot open or create the file, and so on.
    pub async fn open(config: SqliteConfig) -> Result<Self, SqliteOpenError> {
        let path: Arc<Path> = Arc::from(config.path.as_path());
        let notifier = Arc::new(Notifier::new());
        let (commands, rx) = mpsc::channel(config.queue_capacity.max(1));
        let (opened_tx, opened_rx) = tokio::sync::oneshot::channel();
        let (stopped_tx, writer_stopped) = watch::channel(());
        let thread_config = config.clone();
        let thread_path = Arc::clone(&path);
        let thread_notifier = Arc::clone(&notifier);
        std::thread::Builder::new()
            .name("stele-sqlite-writer".to_string())
            .spawn(move || {
                // Dropped when the thread ends, however it ends: closes `writer_stopped`.
                let _stopped = stopped_tx;
                match schema::open_writer(&thread_config) {
                    Ok((conn, settings)) => {
                        if opened_tx.send(Ok(settings)).is_ok() {
                            writer::run(
                                conn,
                                thread_path,
                                rx,
                                thread_notifier,
                                thread_config.max_commands_per_transaction,
                            );
                        }
                    }
                    Err(err) => {
                        let _ = opened_tx.send(Err(err));
                    }
                }
            })
            .map_err(|source| SqliteOpenError::WriterThread {
                path: config.path.clone(),
                source,
            })?;
        let settings = opened_rx
            .await
            .map_err(|_| SqliteOpenError::WriterThread {
                path: config.path.clone(),
                source: std::io::Error::other(
                    "the writer thread stopped while opening the database",
                ),
            })??;
        let readers = open_readers(&config).await?;
        tracing::info!(
            path = %path.display(),
            journal_mode = %settings.journal_mode,
            synchronous = %settings.synchronous,
            schema_version = settings.schema_version,
            "opened SQLite store"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                settings,
                commands,
                readers: Some(readers),
                notifier,
                closed: AtomicBool::new(false),
                closing: watch::channel(false).0,
                writer_stopped,
            }),
        })
    }

    /// The settings the connection reported after opening (`journal_mode`, `synchronous`,
    /// `busy_timeout`, schema version), read back with `PRAGMA`s.
    #[must_use]
    pub fn effective_settings(&self) -> &EffectiveSettings {
        &self.inner.settings
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The number of registered waiters of every kind (they are removed when their callers
    /// leave; this lets tests check that nothing only grows).
    #[must_use]
    pub fn waiter_count(&self) -> usize {
        self.inner.notifier.waiter_count()
    }

    fn check_open(&self) -> Result<(), DbError> {
        if self.inner.closed.load(Ordering::Acquire) {
            Err(DbError::Closed)
        } else {
            Ok(())
        }
    }

    fn stopped_error(&self) -> DbError {
        if self.inner.closed.load(Ordering::Acquire) {
            DbError::Closed
        } else {
            DbError::Backend(concepts::BackendError {
                message: format!(
                    "the SQLite writer of {} has stopped",
                    self.inner.path.display()
                ),
                retriable: false,
                source: None,
            })
        }
    }

    /// Queues a write for the writer thread and awaits its outcome (sent after the commit).
    async fn write<T, F>(&self, op: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut WriteCtx<'_>) -> Result<T, SqliteError> + Send + 'static,
    {
        self.check_open()?;
        let (command, rx) = FnCommand::boxed(op);
        if self
            .inner
            .commands
            .send(Message::Command(command))
            .await
            .is_err()
        {
            return Err(self.stopped_error());
        }
        rx.await.unwrap_or_else(|_| Err(self.stopped_error()))
    }

    /// Runs a read on a reader connection.
    async fn read<T, F>(&self, op: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut rusqlite::Connection) -> Result<T, SqliteError> + Send + 'static,
    {
        self.check_open()?;
        let path = Arc::clone(&self.inner.path);
        let readers = self.inner.readers.as_ref().ok_or(DbError::Closed)?;
        let conn = readers.get().await.map_err(|err| match err {
            deadpool_sqlite::PoolError::Closed => DbError::Closed,
            other => SqliteError::Pool(other.to_string()).into_db_error(&path),
        })?;
        let outcome = conn.interact(op).await.map_err(|err| {
            SqliteError::Pool(format!("a read failed: {err}")).into_db_error(&path)
        })?;
        outcome.map_err(|err| err.into_db_error(&path))
    }

    /// Resolves when `close` has been called.
    async fn closing(&self) {
        let mut rx = self.inner.closing.subscribe();
        // An error means the sender is gone, which only happens with the store itself.
        let _ = rx.wait_for(|closing| *closing).await;
    }
}

/// Opens the reader pool and checks that one connection works.
async fn open_readers(config: &SqliteConfig) -> Result<deadpool_sqlite::Pool, SqliteOpenError> {
    let pool_error = |message: String| SqliteOpenError::ReaderPool {
        path: config.path.clone(),
        message,
    };
    let busy_timeout = config.busy_timeout;
    let builder = match deadpool_sqlite::Config::new(config.path.clone()).builder(Runtime::Tokio1) {
        Ok(builder) => builder,
        Err(infallible) => match infallible {},
    };
    let pool = builder
        .max_size(config.reader_pool_size)
        .post_create(Hook::async_fn(move |conn, _| {
            Box::pin(async move {
                conn.interact(move |conn| {
                    conn.busy_timeout(busy_timeout)?;
                    conn.set_prepared_statement_cache_capacity(64);
                    // Readers never write: a bug that tries fails instead of taking the lock.
                    conn.pragma_update(None, "query_only", true)
                })
                .await
                .map_err(|err| HookError::message(err.to_string()))?
                .map_err(HookError::Backend)
            })
        }))
        .build()
        .map_err(|err| pool_error(err.to_string()))?;
    let conn = pool
        .get()
        .await
        .map_err(|err| pool_error(err.to_string()))?;
    // Reads the first page of the state table: a damaged file is usually caught here, at
    // open, rather than by the first caller.
    conn.interact(|conn| {
        conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM t_execution_state)",
            [],
            |row| row.get::<_, bool>(0),
        )
    })
    .await
    .map_err(|err| pool_error(err.to_string()))?
    .map_err(|err| SqliteOpenError::from_driver(&config.path, err))?;
    Ok(pool)
}

#[async_trait]
impl DbExecutor for SqlitePool {
    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        self.write(move |ctx| ctx.lock_pending(&req)).await
    }

    async fn append_outcome(&self, write: OutcomeWrite) -> Result<Version, DbError> {
        let parent_response = write.parent_response();
        self.write(move |ctx| {
            let next_version = ctx.append_batch(
                &write.execution_id,
                write.version,
                write.now,
                vec![write.event],
            )?;
            if let Some((parent_id, response)) = parent_response {
                ctx.append_response(response.created_at, &parent_id, response.event)?;
            }
            Ok(next_version)
        })
        .await
    }

    async fn wait_for_pending(
        &self,
        pending_at_or_sooner: DateTime<Utc>,
        ffqns: Arc<[FunctionFqn]>,
        max_wait: Duration,
    ) {
        if self.check_open().is_err() {
            return;
        }
        // Subscribe first, then check: a write that commits after the check finds the
        // subscription, one that committed before it is seen by the check.
        let notify = Arc::new(Notify::new());
        let horizon = Horizon::starting_at(pending_at_or_sooner);
        let _subscriptions: Vec<_> = ffqns
            .iter()
            .map(|ffqn| {
                self.inner
                    .notifier
                    .pending
                    .subscribe(ffqn.clone(), horizon, Arc::clone(&notify))
            })
            .collect();
        let check_ffqns = Arc::clone(&ffqns);
        let due = if ffqns.is_empty() {
            Ok(false)
        } else {
            self.read(move |conn| reads::any_due(conn, &check_ffqns, pending_at_or_sooner))
                .await
        };
        match due {
            Ok(true) | Err(DbError::Closed) => return,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!("wait_for_pending could not check for due executions: {err}")
            }
        }
        tokio::select! {
            () = notify.notified() => {}
            () = tokio::time::sleep(max_wait) => {}
            () = self.closing() => {}
        }
    }
}

#[async_trait]
impl DbWorkflow for SqlitePool {
    async fn append_batch(&self, req: AppendBatchRequest) -> Result<Version, DbError> {
        concepts::kernel::validate_append_batch(&req)?;
        let AppendBatchRequest {
            execution_id,
            version,
            now,
            events,
            children,
        } = req;
        self.write(move |ctx| {
            let next_version = ctx.append_batch(&execution_id, version, now, events)?;
            for child in &children {
                ctx.create(child)?;
            }
            Ok(next_version)
        })
        .await
    }

    async fn subscribe_to_next_responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        loop {
            let notify = Arc::new(Notify::new());
            let _subscription = self.inner.notifier.responses.subscribe(
                execution_id.clone(),
                (),
                Arc::clone(&notify),
            );
            let id = execution_id.clone();
            let responses = self
                .read(move |conn| {
                    let tx = conn.transaction()?;
                    let responses = reads::responses_from(&tx, &id, start_idx)?;
                    if responses.is_empty() && !reads::exists(&tx, &id)? {
                        return Err(DbError::execution_not_found(&id).into());
                    }
                    tx.finish()?;
                    Ok(responses)
                })
                .await?;
            if !responses.is_empty() {
                return Ok(responses);
            }
            tokio::select! {
                () = notify.notified() => {}
                () = self.closing() => return Err(DbError::Closed),
            }
        }
    }
}

#[async_trait]
impl DbTimers for SqlitePool {
    async fn get_expired_timers(&self, at: DateTime<Utc>) -> Result<Vec<ExpiredTimer>, DbError> {
        self.read(move |conn| reads::expired_timers(conn, at)).await
    }

    async fn append_response(
        &self,
        now: DateTime<Utc>,
        execution_id: &ExecutionId,
        response: JoinSetResponseEvent,
    ) -> Result<(), DbError> {
        let execution_id = execution_id.clone();
        self.write(move |ctx| ctx.append_response(now, &execution_id, response))
            .await
    }
}

#[async_trait]
impl DbClient for SqlitePool {
    async fn create(&self, req: CreateRequest) -> Result<Version, DbError> {
        self.write(move |ctx| ctx.create(&req)).await
    }

    async fn create_batch(&self, reqs: Vec<CreateRequest>) -> Result<(), DbError> {
        if reqs.is_empty() {
            return Err(ValidationError::EmptyBatch("create_batch").into());
        }
        self.write(move |ctx| {
            for req in &reqs {
                ctx.create(req)?;
            }
            Ok(())
        })
        .await
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        let execution_id = execution_id.clone();
        self.read(move |conn| reads::execution_log(conn, &execution_id))
            .await
    }

    async fn get_execution_event(
        &self,
        execution_id: &ExecutionId,
        version: Version,
    ) -> Result<ExecutionEvent, DbError> {
        let execution_id = execution_id.clone();
        self.read(move |conn| reads::event_at(conn, &execution_id, version))
            .await
    }

    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        self.read(move |conn| reads::list_executions(conn, &filter, &pagination))
            .await
    }

    async fn wait_for_finished_result(
        &self,
        execution_id: &ExecutionId,
        timeout: Option<Duration>,
    ) -> Result<FinishedExecutionResult, DbError> {
        let wait = async {
            loop {
                let notify = Arc::new(Notify::new());
                let _subscription = self.inner.notifier.finished.subscribe(
                    execution_id.clone(),
                    (),
                    Arc::clone(&notify),
                );
                let id = execution_id.clone();
                if let Some(result) = self
                    .read(move |conn| reads::finished_result(conn, &id))
                    .await?
                {
                    return Ok(result);
                }
                tokio::select! {
                    () = notify.notified() => {}
                    () = self.closing() => return Err(DbError::Closed),
                }
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
impl DbConnection for SqlitePool {
    async fn close(&self) {
        if !self.inner.closed.swap(true, Ordering::AcqRel) {
            self.inner.closing.send_replace(true);
            // The writer finishes what is queued before this, then stops.
            let _ = self.inner.commands.send(Message::Shutdown).await;
        }
        if let Some(readers) = &self.inner.readers {
            readers.close();
        }
        let mut stopped = self.inner.writer_stopped.clone();
        // The channel closes when the writer thread ends.
        while stopped.changed().await.is_ok() {}
    }
}
