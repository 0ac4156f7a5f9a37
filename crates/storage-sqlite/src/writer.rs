//! The single writer: an OS thread that owns the write connection and commits queued
//! commands in groups.
//!
//! The thread takes whatever commands are queued (up to a bound), runs them all in one
//! transaction, each inside its own savepoint so that a failing command rolls back only
//! itself, commits once, replies to every command, and only then wakes the waiters. Under
//! load many small writes share one commit and one fsync.

use crate::{
    error::{SqliteError, backend_error},
    ops::WriteCtx,
};
use concepts::{
    DbError,
    kernel::{WaiterHub, Wakeup},
};
use rusqlite::Connection;
use std::{panic::AssertUnwindSafe, path::Path, sync::Arc};
use tokio::sync::{mpsc, oneshot};

/// One queued write: runs inside the batch transaction, replies after the commit.
pub(crate) trait Command: Send {
    /// Runs the operation; true when it succeeded (its writes stay in the transaction).
    fn run(&mut self, ctx: &mut WriteCtx<'_>, path: &Path) -> bool;
    /// Gives the command the outcome `err` unless it already failed by itself: the
    /// transaction that held its writes did not commit, or it never ran.
    fn fail(&mut self, err: &DbError);
    /// Sends the outcome to the caller.
    fn reply(self: Box<Self>);
}

/// A [`Command`] made of a closure and the channel its caller awaits.
pub(crate) struct FnCommand<T, F> {
    op: Option<F>,
    outcome: Option<Result<T, DbError>>,
    reply: oneshot::Sender<Result<T, DbError>>,
}

impl<T, F> FnCommand<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut WriteCtx<'_>) -> Result<T, SqliteError> + Send + 'static,
{
    /// The command and the receiver of its outcome.
    pub(crate) fn boxed(op: F) -> (Box<dyn Command>, oneshot::Receiver<Result<T, DbError>>) {
        let (reply, rx) = oneshot::channel();
        (
            Box::new(Self {
                op: Some(op),
                outcome: None,
                reply,
            }),
            rx,
        )
    }
}

impl<T, F> Command for FnCommand<T, F>
where
    T: Send + 'static,
    F: FnOnce(&mut WriteCtx<'_>) -> Result<T, SqliteError> + Send + 'static,
{
    fn run(&mut self, ctx: &mut WriteCtx<'_>, path: &Path) -> bool {
        let Some(op) = self.op.take() else {
            return false;
        };
        let outcome = op(ctx).map_err(|err| err.into_db_error(path));
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn fail(&mut self, err: &DbError) {
        if !matches!(self.outcome, Some(Err(_))) {
            self.outcome = Some(Err(err.clone()));
        }
    }

    fn reply(self: Box<Self>) {
        let outcome = self.outcome.unwrap_or_else(|| {
            let message = "the SQLite writer did not run the command";
            Err(backend_error(message.to_string(), true))
        });
        // The caller may have gone away (its future was dropped); the write stands.
        let _ = self.reply.send(outcome);
    }
}

/// What the writer thread receives.
pub(crate) enum Message {
    /// A write.
    Command(Box<dyn Command>),
    /// Finish the queued commands, then stop.
    Shutdown,
}

/// The writer thread's loop: runs until every sender is gone or a shutdown was processed.
pub(crate) fn run(
    conn: Connection,
    path: Arc<Path>,
    mut rx: mpsc::Receiver<Message>,
    hub: Arc<WaiterHub>,
    max_commands_per_transaction: usize,
) {
    let mut batch: Vec<Box<dyn Command>> = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut shutdown = false;
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Command(command) => batch.push(command),
                Message::Shutdown => shutdown = true,
            }
            if batch.len() < max_commands_per_transaction {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            let wakeups = run_batch(&conn, &path, &mut batch);
            for command in batch.drain(..) {
                command.reply();
            }
            hub.deliver(&wakeups);
        }
        if shutdown {
            // Refuse new commands; the queued ones are still received and run.
            rx.close();
        }
    }
    // Fold the log into the database file so that a closed store is one self-contained file.
    // Idle readers do not hold this up; it waits (up to `busy_timeout`) for reads in flight.
    if let Err(err) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(path = %path.display(), "checkpointing the SQLite WAL at close: {err}");
    }
    if let Err((_, err)) = conn.close() {
        tracing::warn!(path = %path.display(), "closing the SQLite writer connection: {err}");
    }
    tracing::debug!(path = %path.display(), "SQLite writer stopped");
}

/// Runs `batch` in one transaction; returns the wake-ups of what committed.
///
/// Normally there is one transaction. If SQLite itself aborts it (a full disk, an I/O error),
/// the commands that had succeeded in it are failed (their writes are gone) and the remaining
/// commands run in a new transaction.
fn run_batch(conn: &Connection, path: &Path, batch: &mut [Box<dyn Command>]) -> Vec<Wakeup> {
    // The wake-ups of the commands that succeeded in the current transaction.
    let mut woken = Vec::new();
    let mut segment_start = 0;
    let mut in_transaction = false;
    for idx in 0..batch.len() {
        if !in_transaction {
            if let Err(err) = exec(conn, "BEGIN IMMEDIATE") {
                let err = SqliteError::from(err).into_db_error(path);
                tracing::error!(path = %path.display(), "cannot begin a SQLite transaction: {err}");
                fail_all(&mut batch[idx..], &err);
                return Vec::new();
            }
            in_transaction = true;
            segment_start = idx;
        }
        if let Err(err) = exec(conn, "SAVEPOINT op") {
            abort_segment(conn, path, &mut batch[segment_start..=idx], &mut woken, err);
            in_transaction = false;
            continue;
        }
        let mut op_wakeups = Vec::new();
        let command = &mut batch[idx];
        // A bug that panics inside one command must not take the writer (and every other
        // caller) down with it: the command fails and its savepoint is rolled back.
        let ok = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut ctx = WriteCtx {
                conn,
                wakeups: &mut op_wakeups,
            };
            command.run(&mut ctx, path)
        }))
        .unwrap_or_else(|_| {
            tracing::error!(path = %path.display(), "a SQLite write command panicked");
            let message = format!("SQLite database {}: the write panicked", path.display());
            command.fail(&backend_error(message, false));
            false
        });
        if ok {
            match exec(conn, "RELEASE op") {
                Ok(()) => woken.append(&mut op_wakeups),
                Err(err) => {
                    abort_segment(conn, path, &mut batch[segment_start..=idx], &mut woken, err);
                    in_transaction = false;
                }
            }
        } else if conn.is_autocommit() {
            // SQLite rolled back the whole transaction: the earlier commands of this
            // transaction lost their writes too.
            let message = format!(
                "SQLite database {}: the transaction was rolled back by an error of a command \
                 batched with this one",
                path.display()
            );
            let err = backend_error(message, true);
            fail_all(&mut batch[segment_start..idx], &err);
            woken.clear();
            in_transaction = false;
        } else if let Err(err) =
            exec(conn, "ROLLBACK TO op").and_then(|()| exec(conn, "RELEASE op"))
        {
            abort_segment(conn, path, &mut batch[segment_start..=idx], &mut woken, err);
            in_transaction = false;
        }
    }
    if in_transaction && let Err(err) = exec(conn, "COMMIT") {
        abort_segment(conn, path, &mut batch[segment_start..], &mut woken, err);
    }
    woken
}

/// The current transaction is lost: roll it back and fail the commands that had succeeded.
fn abort_segment(
    conn: &Connection,
    path: &Path,
    segment: &mut [Box<dyn Command>],
    woken: &mut Vec<Wakeup>,
    err: rusqlite::Error,
) {
    let err = SqliteError::from(err).into_db_error(path);
    tracing::error!(path = %path.display(), "SQLite transaction failed: {err}");
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    fail_all(segment, &err);
    woken.clear();
}

fn fail_all(batch: &mut [Box<dyn Command>], err: &DbError) {
    for command in batch {
        command.fail(err);
    }
}

fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
