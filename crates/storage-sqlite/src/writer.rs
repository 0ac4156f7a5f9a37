//! The single writer: an OS thread that owns the write connection and commits queued
//! commands in groups, one transaction for many commands.

use crate::{
    SqliteConfig,
    changes::Changes,
    checkpoint::Checkpointer,
    error::{SqliteError, is_busy},
    ops::WriteCtx,
};
use concepts::{
    DbError,
    kernel::{CreatedEvents, KnownRows, WaiterHub, WritePlan},
};
use rusqlite::Connection;
use std::{
    panic::AssertUnwindSafe,
    path::Path,
    time::{Duration, Instant},
};
use tokio::sync::{mpsc, oneshot};

/// One queued write: runs inside the batch transaction, replies after the commit.
pub(crate) trait Command: Send {
    /// Runs the operation; true when it succeeded (its writes stay in the transaction).
    fn run(&mut self, ctx: &mut WriteCtx<'_>, path: &Path) -> bool;
    /// Gives the command the outcome `err` unless it already failed by itself: the
    /// transaction that held its writes did not commit, or it never ran.
    fn fail(&mut self, err: &DbError);
    /// Settles the command from a read on the writer's connection, outside any transaction,
    /// when that read is enough ([`concepts::kernel::Write::answer_from_read`]: a repeated
    /// `create` never waits for the write lock); true when it did, and it is then replied to
    /// without running.
    fn answer_from_read(&mut self, conn: &Connection, path: &Path) -> bool;
    /// Sends the outcome to the caller; a committed one first goes through the command's
    /// `after_commit`, outside any write transaction, on the writer's connection.
    fn reply(self: Box<Self>, at: &AfterCommit<'_>);
}

/// What a committed command's `after_commit` runs with, on the writer thread.
pub(crate) struct AfterCommit<'a> {
    pub(crate) conn: &'a Connection,
    pub(crate) path: &'a Path,
    /// The `Created` events of the executions this writer created due, for their first lease.
    pub(crate) created: &'a CreatedEvents,
}

/// What a [`FnCommand`] runs: a kernel write ([`crate::ops::Written`]), which may also be
/// answered from a read (the unit tests run closures too).
pub(crate) trait Op: Send + 'static {
    type Output;
    fn run(self, ctx: &mut WriteCtx<'_>) -> Result<Self::Output, SqliteError>;
    fn answer_from_read(&self, conn: &Connection) -> Option<Result<Self::Output, SqliteError>>;
}

/// A [`Command`] made of an [`Op`], what it does with a committed outcome `R` on the writer's
/// connection before the reply (the short reads of a small lock's hand-over), and the
/// channel its caller awaits.
pub(crate) struct FnCommand<R, T, F> {
    op: Option<F>,
    after_commit: fn(&AfterCommit<'_>, R) -> T,
    outcome: Option<Result<R, DbError>>,
    reply: oneshot::Sender<Result<T, DbError>>,
}

impl<R, T, F> FnCommand<R, T, F>
where
    Self: Command + 'static,
{
    /// The command and the receiver of its reply.
    pub(crate) fn boxed(
        op: F,
        after_commit: fn(&AfterCommit<'_>, R) -> T,
    ) -> (Box<dyn Command>, oneshot::Receiver<Result<T, DbError>>) {
        let (reply, rx) = oneshot::channel();
        let command = Self {
            op: Some(op),
            after_commit,
            outcome: None,
            reply,
        };
        (Box::new(command), rx)
    }
}

impl<R, T, F> Command for FnCommand<R, T, F>
where
    R: Send + 'static,
    T: Send + 'static,
    F: Op<Output = R>,
{
    fn run(&mut self, ctx: &mut WriteCtx<'_>, path: &Path) -> bool {
        let run = |op: F| op.run(ctx).map_err(|err| err.into_db_error(path));
        let outcome = self.op.take().map(run);
        let ok = matches!(outcome, Some(Ok(_)));
        self.outcome = outcome;
        ok
    }

    fn fail(&mut self, err: &DbError) {
        if !matches!(self.outcome, Some(Err(_))) {
            self.outcome = Some(Err(err.clone()));
        }
    }

    fn answer_from_read(&mut self, conn: &Connection, path: &Path) -> bool {
        let answer = self.op.as_ref().and_then(|op| op.answer_from_read(conn));
        let Some(answer) = answer else { return false };
        self.op = None;
        self.outcome = Some(answer.map_err(|err| err.into_db_error(path)));
        true
    }

    fn reply(self: Box<Self>, at: &AfterCommit<'_>) {
        let outcome = match self.outcome {
            // Only an `Ok` outcome committed: a failed transaction failed all of its commands.
            Some(Ok(value)) => Ok((self.after_commit)(at, value)),
            Some(Err(err)) => Err(err),
            None => {
                let message = "the SQLite writer did not run the command";
                Err(DbError::backend(message.to_string(), true, None))
            }
        };
        // The caller may have gone away (its future was dropped); the write stands.
        let _ = self.reply.send(outcome);
    }
}

pub(crate) enum Message {
    Command(Box<dyn Command>),
    /// Finish the queued commands, then stop.
    Shutdown,
}

/// How often a writer that found the write lock taken tries again. SQLite's own busy handler
/// backs off to 100 ms between tries, so a writer waiting through it misses the short gaps
/// between another process's commits and can starve; a short fixed poll does not.
const LOCK_POLL: Duration = Duration::from_millis(1);
/// After meeting another connection's lock, a writer leaves the lock free this long between
/// its own transactions, so that a waiting writer (polling every [`LOCK_POLL`]) gets its turn.
const COURTESY_GAP: Duration = Duration::from_millis(3);
/// At most this many rows the writer committed are kept for the next writes
/// ([`Writer::known`]).
const KNOWN_ROWS: usize = 4_096;
/// At most this many `Created` events are kept for the first leases ([`Writer::created`]):
/// a backlog of that many executions submitted at once is handed over without reads.
const CREATED_EVENTS: usize = 32_768;
/// How long the writer behaves as contended after it last found the lock taken.
const CONTENTION_MEMORY: Duration = Duration::from_secs(1);
/// While contended, a transaction takes no further queued command once it has held the lock
/// this long (a single command is never split: `create_batch` stays all or nothing).
const MAX_CONTENDED_TRANSACTION: Duration = Duration::from_millis(50);

/// The writer connection and what it knows about the other writers of its file.
struct Writer<'a> {
    conn: &'a Connection,
    path: &'a Path,
    hub: &'a WaiterHub,
    /// How long queued commands wait for the write lock before each warning is logged, and a
    /// closing store before it gives up (the store's `busy_timeout`).
    busy_timeout: Duration,
    /// When `BEGIN IMMEDIATE` last found the lock held by another connection.
    contended_at: Option<Instant>,
    ended_at: Option<Instant>,
    /// The rows this writer committed, for the next write of their executions (a lease's
    /// outcome, a workflow's next step) to be planned without loading them; all forgotten when
    /// another connection committed since (`data_version`).
    known: KnownRows,
    /// The `Created` events of the executions it created due, for the hand-over of their
    /// first lease; forgotten with the known rows.
    created: &'a CreatedEvents,
    /// `PRAGMA data_version` when the last transaction began: it changes with the commits of
    /// other connections only.
    data_version: Option<i64>,
}

/// The writer thread's loop: runs until every sender is gone or a shutdown was processed.
pub(crate) fn run(
    conn: Connection,
    config: &SqliteConfig,
    mut rx: mpsc::Receiver<Message>,
    hub: &WaiterHub,
) {
    let (path, busy_timeout) = (config.path.as_path(), config.busy_timeout);
    // The writer waits for the write lock itself (see `Writer::begin`), never in SQLite's
    // busy handler.
    if let Err(err) = conn.busy_timeout(Duration::ZERO) {
        tracing::warn!(path = %path.display(), "cannot clear the writer's busy timeout: {err}");
    }
    let created = CreatedEvents::new(CREATED_EVENTS);
    let mut writer = Writer {
        conn: &conn,
        path,
        hub,
        busy_timeout,
        contended_at: None,
        ended_at: None,
        known: KnownRows::new(KNOWN_ROWS),
        created: &created,
        data_version: None,
    };
    let after_commit = AfterCommit {
        conn: &conn,
        path,
        created: &created,
    };
    let mut checkpointer = Checkpointer::start(&conn, path, busy_timeout);
    let warn = |err: &SqliteError| {
        tracing::warn!(
            path = %path.display(),
            "cannot watch the SQLite file for other connections' commits; waiters hear them \
             only at their own timeouts: {err}"
        );
    };
    let mut changes = Changes::start(&conn).inspect_err(warn).ok();
    // Only to wait for the next command with a timeout, between two looks at the file.
    let timer = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build();
    let mut batch: Vec<Box<dyn Command>> = Vec::new();
    loop {
        if let Some(changes) = &mut changes {
            changes.check(&conn, path, hub);
        }
        if batch.is_empty()
            && let Some(message) = spin_for_next(&mut rx)
        {
            take(message, &mut batch, &mut rx);
        }
        if batch.is_empty() {
            let received = match (&changes, &timer) {
                (Some(changes), Ok(timer)) => {
                    let wait = changes.due_in();
                    // The timeout is made inside `block_on`, where the timer runs.
                    match timer.block_on(async { tokio::time::timeout(wait, rx.recv()).await }) {
                        Ok(received) => received,
                        Err(_elapsed) => continue,
                    }
                }
                _ => rx.blocking_recv(),
            };
            let Some(message) = received else {
                break;
            };
            take(message, &mut batch, &mut rx);
        }
        while batch.len() < config.max_commands_per_transaction {
            let Ok(message) = rx.try_recv() else { break };
            take(message, &mut batch, &mut rx);
        }
        for answered in batch.extract_if(.., |command| command.answer_from_read(&conn, path)) {
            answered.reply(&after_commit);
        }
        if batch.is_empty() {
            continue;
        }
        let (done, committed) = writer.run_group(&mut batch);
        for command in batch.drain(..done) {
            command.reply(&after_commit);
        }
        hub.deliver_plans(&committed);
        created.remember(committed);
        if let Some(checkpointer) = &mut checkpointer {
            checkpointer.after_commit(&conn, path);
        }
    }
    // Stops the checkpointer before the last checkpoint.
    drop(checkpointer);
    // Fold the log into the database file so that a closed store is one self-contained file.
    // Idle readers do not hold this up; it waits (up to `busy_timeout`) for reads in flight.
    if let Err(err) = conn.busy_timeout(busy_timeout) {
        tracing::warn!(path = %path.display(), "cannot restore the writer's busy timeout: {err}");
    }
    if let Err(err) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(path = %path.display(), "checkpointing the SQLite WAL at close: {err}");
    }
    if let Err((_, err)) = conn.close() {
        tracing::warn!(path = %path.display(), "closing the SQLite writer connection: {err}");
    }
    tracing::debug!(path = %path.display(), "SQLite writer stopped");
}

/// How long the idle writer looks for the next command before it sleeps: a caller that
/// answers a reply with its next write (a workflow's step, an executor's next outcome) usually
/// sends it within this, and finds the writer awake.
const SPIN: Duration = Duration::from_micros(50);

fn spin_for_next(rx: &mut mpsc::Receiver<Message>) -> Option<Message> {
    let started = Instant::now();
    while started.elapsed() < SPIN {
        match rx.try_recv() {
            Ok(message) => return Some(message),
            Err(mpsc::error::TryRecvError::Empty) => std::thread::yield_now(),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
        }
    }
    None
}

/// Queues a received command, or stops receiving new ones at a shutdown.
fn take(message: Message, batch: &mut Vec<Box<dyn Command>>, rx: &mut mpsc::Receiver<Message>) {
    match message {
        Message::Command(command) => batch.push(command),
        // Refuse new commands; the queued ones are still received and run.
        Message::Shutdown => rx.close(),
    }
}

impl Writer<'_> {
    fn contended(&self) -> bool {
        self.contended_at
            .is_some_and(|at| at.elapsed() < CONTENTION_MEMORY)
    }

    /// Takes the file's write lock (`BEGIN IMMEDIATE`), waiting as long as other connections
    /// hold it; a closing store gives up after one more `busy_timeout` (see the crate docs).
    fn begin(&mut self) -> Result<(), DbError> {
        if self.contended()
            && let Some(gap) = self
                .ended_at
                .and_then(|ended| COURTESY_GAP.checked_sub(ended.elapsed()))
        {
            std::thread::sleep(gap);
        }
        let mut waiting_since: Option<Instant> = None;
        let mut warned_after = Duration::ZERO;
        let mut closing_since: Option<Instant> = None;
        loop {
            let err = match exec(self.conn, "BEGIN IMMEDIATE") {
                Ok(()) => {
                    self.see_other_connections();
                    return Ok(());
                }
                Err(err) if is_busy(&err) => err,
                Err(err) => return Err(SqliteError::from(err).into_db_error(self.path)),
            };
            let now = Instant::now();
            self.contended_at = Some(now);
            let waited = now - *waiting_since.get_or_insert(now);
            if waited >= warned_after + self.busy_timeout {
                warned_after = waited;
                tracing::warn!(
                    path = %self.path.display(),
                    waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                    "waiting for the write lock of the SQLite database, held by another connection: {err}"
                );
            }
            if self.hub.is_closed() && now - *closing_since.get_or_insert(now) >= self.busy_timeout
            {
                return Err(DbError::Closed);
            }
            std::thread::sleep(LOCK_POLL);
        }
    }

    /// Forgets the known rows when another connection committed since the last transaction
    /// began (or when that cannot be read): any of them may have changed. Run under the write
    /// lock, so nobody else commits until this transaction ends.
    fn see_other_connections(&mut self) {
        let version = crate::changes::data_version(self.conn).ok();
        if version.is_none() || version != self.data_version {
            self.known.clear();
            self.created.clear();
        }
        self.data_version = version;
    }

    /// Runs the first commands of `batch` in one transaction (normally all of them, without
    /// savepoints: see [`Writer::replay`]); returns how many ran (they have their outcomes) and
    /// the plans that committed. While contended, it commits after
    /// [`MAX_CONTENDED_TRANSACTION`] and leaves the rest to the next one.
    fn run_group(&mut self, batch: &mut [Box<dyn Command>]) -> (usize, Vec<WritePlan>) {
        let path = self.path;
        // The plans of the commands that succeeded in the current transaction, in their order.
        let mut plans = Vec::new();
        // The first command of the open transaction, and when it began.
        let mut open: Option<(usize, Instant)> = None;
        let mut end = batch.len();
        for idx in 0..batch.len() {
            let (start, began) = match open {
                Some((start, began))
                    if idx > start
                        && self.contended()
                        && began.elapsed() >= MAX_CONTENDED_TRANSACTION =>
                {
                    end = idx;
                    break;
                }
                Some(transaction) => transaction,
                None => {
                    if let Err(err) = self.begin() {
                        tracing::error!(path = %path.display(), "cannot begin a SQLite transaction: {err}");
                        batch[idx..].iter_mut().for_each(|c| c.fail(&err));
                        self.ended_at = Some(Instant::now());
                        return (batch.len(), Vec::new());
                    }
                    (idx, Instant::now())
                }
            };
            open = Some((start, began));
            let kept = plans.len();
            match self.run_command(&mut batch[idx], &mut plans) {
                Ran::Succeeded => continue,
                // Refused before it wrote anything, and the transaction is intact.
                Ran::Failed if plans.len() == kept && !self.conn.is_autocommit() => continue,
                Ran::Failed | Ran::Panicked => plans.truncate(kept),
            }
            if let Err(err) = self.replay(&mut plans) {
                self.abort(&mut batch[start..idx], &mut plans, &err);
                open = None;
            }
        }
        if let Some((start, _)) = open {
            match exec(self.conn, "COMMIT") {
                Ok(()) => plans.iter().for_each(|plan| {
                    self.known.remember_for_next(plan);
                    self.created.forget(plan);
                }),
                Err(err) => {
                    let err = SqliteError::from(err).into_db_error(path);
                    self.abort(&mut batch[start..end], &mut plans, &err);
                }
            }
        }
        self.ended_at = Some(Instant::now());
        (end, plans)
    }

    /// Undoes what a failed command left in the open transaction: rolls it back (unless SQLite
    /// did) and persists `plans`, those of the commands that succeeded before it, again in a new
    /// one, which stays open.
    fn replay(&mut self, plans: &mut [WritePlan]) -> Result<(), DbError> {
        let path = self.path;
        if !self.conn.is_autocommit() {
            exec(self.conn, "ROLLBACK").map_err(|e| SqliteError::from(e).into_db_error(path))?;
        }
        self.begin()?;
        let ctx = WriteCtx {
            conn: self.conn,
            plans: &mut Vec::new(),
            known: None,
        };
        for plan in plans {
            ctx.persist(plan).map_err(|err| err.into_db_error(path))?;
        }
        Ok(())
    }

    /// The current transaction is lost: roll it back and fail the commands that had succeeded.
    fn abort(&self, segment: &mut [Box<dyn Command>], plans: &mut Vec<WritePlan>, err: &DbError) {
        tracing::error!(path = %self.path.display(), "SQLite transaction failed: {err}");
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        segment.iter_mut().for_each(|command| command.fail(err));
        plans.clear();
    }

    /// Runs `command` in the current transaction. The plans it persisted are added to `plans`
    /// however it ends (a failed command may have persisted some before failing).
    fn run_command(&self, command: &mut Box<dyn Command>, plans: &mut Vec<WritePlan>) -> Ran {
        let (conn, path, known) = (self.conn, self.path, &self.known);
        // A bug that panics inside one command must not take the writer (and every other
        // caller) down with it: the command fails and what it wrote is undone.
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut ctx = WriteCtx {
                conn,
                plans: &mut *plans,
                known: Some(known),
            };
            command.run(&mut ctx, path)
        }));
        match ran {
            Ok(true) => Ran::Succeeded,
            Ok(false) => Ran::Failed,
            Err(_) => {
                tracing::error!(path = %path.display(), "a SQLite write command panicked");
                let message = format!("SQLite database {}: the write panicked", path.display());
                command.fail(&DbError::backend(message, false, None));
                Ran::Panicked
            }
        }
    }
}

/// How a command ended ([`Writer::run_command`]).
enum Ran {
    Succeeded,
    /// It returned an error.
    Failed,
    /// What it wrote is unknown.
    Panicked,
}

fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}
