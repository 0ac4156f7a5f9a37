//! [`SqlitePool`]: the store handle, and its [`kernel::Backend`]: writes go to the writer
//! thread, each read is written once, in its trait method, on a pooled read-only connection.

use crate::{
    EffectiveSettings, SqliteConfig, SqliteOpenError,
    codec::{self, STATE_ROW_COLUMNS, json, parsed, time},
    error::SqliteError,
    ops::Written,
    reads::{self, rows},
    schema,
    writer::{self, AfterCommit, Command, FnCommand, Message},
};
use chrono::{DateTime, Utc};
use concepts::{
    DbError, ExecutionEvent, ExecutionId, ExecutionLog, ExecutionSummary, ExpiredDelay,
    FinishedExecutionResult, FunctionFqn, JoinSetResponseEventOuter, ListExecutionsFilter,
    LockPendingRequest, LockedExecution, Pagination, Version,
    kernel::{
        self, ExecutionRow, WaiterHub, Write,
        stored::{count, micros, to_i64},
    },
    schedule::{ScheduleName, ScheduleRow, Tick},
};
use deadpool_sqlite::{Hook, HookError, Runtime};
use rusqlite::{config::DbConfig, params, params_from_iter};
use std::{path::Path, sync::Arc};
use tokio::sync::{mpsc, oneshot, watch};

/// A SQLite store. Cheap to clone: clones share the writer thread, the reader pool and the
/// waiters. Dropping the last clone stops the writer after it finished the queued commands;
/// [`close`](concepts::DbConnection::close) does so and waits for it.
#[derive(Clone)]
pub struct SqlitePool {
    inner: Arc<Inner>,
}

struct Inner {
    path: Arc<Path>,
    settings: EffectiveSettings,
    busy_timeout: std::time::Duration,
    commands: mpsc::Sender<Message>,
    /// Always `Some` until `Drop`, which may have to leak it (see there).
    readers: Option<deadpool_sqlite::Pool>,
    hub: Arc<WaiterHub>,
    /// Its sender lives in the writer thread: the channel closes when the thread ends.
    writer_stopped: watch::Receiver<()>,
    /// How many reads were sent to the reader pool (tests count round trips with it).
    #[cfg(test)]
    reads: std::sync::atomic::AtomicU64,
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
            .field("closed", &self.inner.hub.is_closed())
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
        let hub = Arc::new(WaiterHub::new());
        let thread_error = |source| SqliteOpenError::WriterThread {
            path: config.path.clone(),
            source,
        };
        let thread_config = config.clone();
        let opened = tokio::task::spawn_blocking(move || schema::open_writer(&thread_config));
        let stopped = "opening the database panicked";
        let (conn, settings) =
            (opened.await).map_err(|_| thread_error(std::io::Error::other(stopped)))??;
        let (commands, rx) = mpsc::channel(config.queue_capacity);
        let (stopped_tx, writer_stopped) = watch::channel(());
        let (thread_config, thread_hub) = (config.clone(), Arc::clone(&hub));
        std::thread::Builder::new()
            .name("stele-sqlite-writer".to_string())
            .spawn(move || {
                // Dropped when the thread ends, however it ends: closes `writer_stopped`.
                let _stopped = stopped_tx;
                writer::run(conn, &thread_config, rx, &thread_hub);
            })
            .map_err(thread_error)?;
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
                busy_timeout: config.busy_timeout,
                commands,
                readers: Some(readers),
                hub,
                writer_stopped,
                #[cfg(test)]
                reads: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    /// The settings read back from the connection after opening.
    #[must_use]
    pub fn effective_settings(&self) -> &EffectiveSettings {
        &self.inner.settings
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Copies the database, as of one moment, into the new file `dest` while the store runs
    /// and writers go on (`VACUUM INTO`, so the copy is compacted; see the crate docs).
    ///
    /// # Errors
    /// A backend error naming the file: `dest` exists (a backup never overwrites a file), it
    /// cannot be created or written (a full disk), or the database cannot be read. A failed
    /// backup leaves no file at `dest`.
    pub async fn backup_to(&self, dest: impl AsRef<std::path::Path>) -> Result<(), DbError> {
        let dest = dest.as_ref().to_path_buf();
        let (source, busy_timeout) = (Arc::clone(&self.inner.path), self.inner.busy_timeout);
        self.read(move |_| crate::backup::backup_to(&source, busy_timeout, &dest))
            .await
    }

    /// How many reads were sent to the reader pool so far.
    #[cfg(test)]
    pub(crate) fn reads_sent(&self) -> u64 {
        self.inner.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stopped_error(&self) -> DbError {
        if self.inner.hub.is_closed() {
            DbError::Closed
        } else {
            let path = self.inner.path.display();
            let message = format!("the SQLite writer of {path} has stopped");
            DbError::backend(message, false, None)
        }
    }

    /// Runs `write` on the writer thread and awaits its reply once committed (turned into what
    /// the caller gets by `after_commit`, there), or why it was refused. The keys, and the
    /// refusals that depend on the request alone, are computed here, off the writer thread.
    async fn run<W: Write, T: Send + 'static>(
        &self,
        write: W,
        after_commit: fn(&AfterCommit<'_>, W::Reply) -> T,
    ) -> Result<T, DbError> {
        self.inner.hub.ensure_open()?;
        let keys = write.keys()?;
        self.send(FnCommand::boxed(Written { write, keys }, after_commit))
            .await
    }

    /// Queues `command` for the writer thread and awaits its reply.
    pub(crate) async fn send<T>(
        &self,
        (command, reply): (Box<dyn Command>, oneshot::Receiver<Result<T, DbError>>),
    ) -> Result<T, DbError> {
        let sent = self.inner.commands.send(Message::Command(command)).await;
        sent.map_err(|_| self.stopped_error())?;
        reply.await.unwrap_or_else(|_| Err(self.stopped_error()))
    }

    /// Runs a read on a reader connection.
    async fn read<T, F>(&self, op: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&mut rusqlite::Connection) -> Result<T, SqliteError> + Send + 'static,
    {
        self.inner.hub.ensure_open()?;
        let path = Arc::clone(&self.inner.path);
        let readers = self.inner.readers.as_ref().ok_or(DbError::Closed)?;
        #[cfg(test)]
        self.inner
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let conn = readers.get().await.map_err(|err| match err {
            deadpool_sqlite::PoolError::Closed => DbError::Closed,
            other => SqliteError::Pool(other.to_string()).into_db_error(&path),
        })?;
        let outcome = conn.interact(op).await.map_err(|err| {
            SqliteError::Pool(format!("a read failed: {err}")).into_db_error(&path)
        })?;
        outcome.map_err(|err| err.into_db_error(&path))
    }
}

/// Opens the reader pool and checks that one connection works.
async fn open_readers(config: &SqliteConfig) -> Result<deadpool_sqlite::Pool, SqliteOpenError> {
    let pool_error = |message: String| SqliteOpenError::ReaderPool {
        path: config.path.clone(),
        message,
    };
    let busy_timeout = config.busy_timeout;
    let pool = deadpool_sqlite::Config::new(config.path.clone())
        .builder(Runtime::Tokio1)
        .unwrap_or_else(|infallible| match infallible {})
        .max_size(config.reader_pool_size)
        .post_create(Hook::async_fn(move |conn, _| {
            Box::pin(async move {
                conn.interact(move |conn| {
                    conn.busy_timeout(busy_timeout)?;
                    conn.set_prepared_statement_cache_capacity(64);
                    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
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
    let sql = "SELECT EXISTS(SELECT 1 FROM t_execution_state)";
    conn.interact(|conn| conn.query_row(sql, [], |row| row.get::<_, bool>(0)))
        .await
        .map_err(|err| pool_error(err.to_string()))?
        .map_err(|err| SqliteOpenError::from_driver(&config.path, err))?;
    Ok(pool)
}

impl kernel::Backend for SqlitePool {
    async fn write<W: Write>(&self, write: W) -> Result<W::Reply, DbError> {
        self.run(write, |_, reply| reply).await
    }

    async fn lock_pending(&self, req: LockPendingRequest) -> Result<Vec<LockedExecution>, DbError> {
        let (mut ready, unread) = self.run(req, reads::handover_on_writer).await?;
        if !unread.is_empty() {
            let rest = self.read(move |conn| reads::locked_executions(conn, &unread, usize::MAX));
            ready.extend(rest.await?);
        }
        Ok(ready)
    }

    fn hub(&self) -> &WaiterHub {
        &self.inner.hub
    }

    async fn responses(
        &self,
        execution_id: &ExecutionId,
        start_idx: usize,
    ) -> Result<Vec<JoinSetResponseEventOuter>, DbError> {
        let id = execution_id.clone();
        self.read(move |conn| {
            reads::of_existing(conn, &id, |tx| {
                reads::responses_up_to(tx, &id, start_idx, usize::MAX)
            })
        })
        .await
    }

    async fn finished_result(
        &self,
        execution_id: &ExecutionId,
    ) -> Result<Option<FinishedExecutionResult>, DbError> {
        let id = execution_id.clone();
        self.read(move |conn| reads::finished_result(conn, &id))
            .await
    }

    async fn expired(
        &self,
        at: DateTime<Utc>,
    ) -> Result<(Vec<ExecutionRow>, Vec<ExpiredDelay>), DbError> {
        self.read(move |conn| {
            let tx = conn.transaction()?;
            let sql = format!(
                "SELECT {STATE_ROW_COLUMNS} FROM t_execution_state \
                 WHERE state = 'Locked' AND lock_expires_at <= ?1"
            );
            let locks = rows(&tx, &sql, [micros(at)], codec::execution_row)?;
            let sql = "SELECT execution_id, delay_id, join_set_id, expires_at FROM t_delay \
                       WHERE is_open = 1 AND expires_at <= ?1";
            let delays = rows(&tx, sql, [micros(at)], |row| {
                Ok(ExpiredDelay {
                    execution_id: parsed(row, 0, "execution id")?,
                    join_set_id: parsed(row, 2, "join set id")?,
                    delay_id: parsed(row, 1, "delay id")?,
                    expires_at: time(row, 3)?,
                })
            })?;
            tx.finish()?;
            Ok((locks, delays))
        })
        .await
    }

    /// To the microsecond: `ix_state_pending`'s range, in its order.
    async fn due_times(
        &self,
        ffqns: &[FunctionFqn],
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DateTime<Utc>>, DbError> {
        let ffqns = ffqns.to_vec();
        self.read(move |conn| {
            reads::due(conn, "pending_at", (&ffqns, at, limit), |row| time(row, 0))
        })
        .await
    }

    async fn get(&self, execution_id: &ExecutionId) -> Result<ExecutionLog, DbError> {
        let execution_id = execution_id.clone();
        self.read(move |conn| {
            let tx = conn.transaction()?;
            let row = reads::execution_row(&tx, &execution_id)?;
            let row = row.ok_or_else(|| DbError::execution_not_found(&execution_id))?;
            let log = ExecutionLog {
                events: reads::events(&tx, &execution_id, Version(0), usize::MAX)?,
                responses: reads::responses_up_to(&tx, &execution_id, 0, usize::MAX)?,
                next_version: row.state.next_version,
                pending_state: row.state.pending_state,
                execution_id,
            };
            tx.finish()?;
            Ok(log)
        })
        .await
    }

    async fn list_events(
        &self,
        execution_id: &ExecutionId,
        from: Version,
        limit: usize,
    ) -> Result<Vec<ExecutionEvent>, DbError> {
        let execution_id = execution_id.clone();
        self.read(move |conn| {
            reads::of_existing(conn, &execution_id, |tx| {
                reads::events(tx, &execution_id, from, limit)
            })
        })
        .await
    }

    /// From one snapshot: one statement per thousand ids (a replay reads its children's
    /// `Created` events at once, not one by one).
    async fn created_events(
        &self,
        execution_ids: &[ExecutionId],
    ) -> Result<Vec<(ExecutionId, ExecutionEvent)>, DbError> {
        let ids = execution_ids.to_vec();
        self.read(move |conn| {
            let tx = conn.transaction()?;
            let mut found = Vec::with_capacity(ids.len());
            for chunk in ids.chunks(1_000) {
                let sql = format!(
                    "SELECT execution_id, event_json FROM t_event WHERE version = 0 AND \
                     execution_id IN ({})",
                    vec!["?"; chunk.len()].join(", ")
                );
                let ids = chunk.iter().map(ExecutionId::as_str);
                found.extend(rows(&tx, &sql, params_from_iter(ids), |row| {
                    Ok((parsed(row, 0, "execution id")?, json(row, 1)?))
                })?);
            }
            tx.finish()?;
            Ok(found)
        })
        .await
    }

    /// One statement (`reads::listing`).
    async fn list_executions(
        &self,
        filter: ListExecutionsFilter,
        pagination: Pagination,
    ) -> Result<Vec<ExecutionSummary>, DbError> {
        self.read(move |conn| {
            let (sql, values) = reads::listing(&filter, &pagination);
            rows(conn, &sql, params_from_iter(values), |row| {
                Ok(ExecutionSummary {
                    execution_id: parsed(row, 0, "execution id")?,
                    ffqn: parsed(row, 1, "function name")?,
                    created_at: time(row, 2)?,
                    scheduled_at: time(row, 3)?,
                    pending_state: json(row, 4)?,
                    next_version: Version(count(row.get(5)?, "next version")?),
                })
            })
        })
        .await
    }

    async fn list_schedules(
        &self,
        from: Option<&ScheduleName>,
        limit: usize,
    ) -> Result<Vec<ScheduleRow>, DbError> {
        let from = from.map_or_else(String::new, ToString::to_string);
        self.read(move |conn| {
            let sql = "SELECT row_json FROM t_schedule WHERE name >= ?1 ORDER BY name LIMIT ?2";
            rows(conn, sql, params![from, to_i64(limit)], |row| json(row, 0))
        })
        .await
    }

    async fn schedule_ticks(
        &self,
        name: &ScheduleName,
        limit: usize,
    ) -> Result<Vec<Tick>, DbError> {
        let name = name.to_string();
        self.read(move |conn| {
            let sql = "SELECT tick_json FROM t_schedule_tick WHERE name = ?1 ORDER BY seq DESC \
                       LIMIT ?2";
            rows(conn, sql, params![name, to_i64(limit)], |row| json(row, 0))
        })
        .await
    }

    async fn close(&self) {
        if self.inner.hub.close() {
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
