//! The durable embedded storage backend of Stele: every storage trait of [`concepts`] over one
//! SQLite file in WAL mode, written by a single group-committing writer thread.
//!
//! ```no_run
//! use storage_sqlite::{SqliteConfig, SqlitePool};
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqlitePool::open(SqliteConfig::new("stele.sqlite")).await?;
//! assert_eq!(store.effective_settings().journal_mode, "wal");
//! # Ok(()) }
//! ```
//!
//! # Writes: load, plan, persist, wake
//!
//! The rules of every write live in [`concepts::kernel`]; this crate loads rows, persists plans
//! and wakes waiters. A write becomes a [`WriteRequest`](concepts::kernel::WriteRequest) whose
//! keys are computed on the caller's task (a request refused by its keys alone never reaches the
//! writer). On the writer thread, the command loads the snapshot of those keys with cached
//! prepared statements, calls [`concepts::kernel::plan`], and persists the plan: a state row
//! inserted per new execution and updated per changed one, the new events, responses (each with
//! its index in its join set) and delays, the join-set counters it changed (upserted into
//! `t_join_set`), and the delays it closed. Loading a join set is one primary-key lookup of its
//! counters and an index range from `join_set_idx = join_next_count` for the arrival times of
//! the responses the next `JoinNext` events consume, whatever the length of the log. A delay
//! counts as requested when `t_delay` has it and as answered when `t_response` has its
//! `DelayFinished`. The executions a write creates are looked up first, one prepared point
//! lookup of the row and its `Created` event per id (an id that is not stored costs one probe
//! of the primary key), so that the kernel answers a repeated `create` with `AlreadyExisted`
//! or names what conflicts; the primary key stays the last guard. A write whose rows depend on
//! what it read (`cancel`, `prune`) loads its follow-up keys in the same transaction. The
//! descendants of an execution are one range of the primary key
//! ([`descendant_bounds`](concepts::kernel::descendant_bounds)), its open delays a range of
//! `t_delay`'s key, a finished result the `Finished` event at the version its state names, and
//! the prune candidates one range of the partial index `ix_state_finished`. The executions a
//! plan deletes (`prune`) lose every row in every table, a few statements bounded by each id,
//! inside the command's savepoint. The plan's wake-ups wait for the commit.
//!
//! # Writer and group commit
//!
//! All writes go through one OS thread that owns the only write connection. Each storage
//! write (`create`, `append_batch`, `lock_pending`, ...) is a command sent over a bounded channel
//! with a oneshot for its reply. The thread takes every queued command (up to
//! [`SqliteConfig::max_commands_per_transaction`]), runs them all in ONE `BEGIN IMMEDIATE`
//! transaction, each inside its own `SAVEPOINT` so that a failing command rolls back only its
//! own writes (every operation stays atomic), commits once, replies to every command, and only
//! then wakes the waiters. Under load many small writes share one commit and one fsync, which
//! is what makes `synchronous=FULL` fast. If SQLite aborts the whole transaction (a full disk,
//! an I/O error), the commands that had succeeded in it are answered with the error too, so no
//! caller is told that a write committed when it did not.
//!
//! The transaction holds the write lock from `BEGIN IMMEDIATE` on, so what a command loads
//! cannot change before it persists, not even from another process.
//!
//! The writer never checkpoints the WAL in a commit: a WAL hook replaces SQLite's automatic
//! checkpoint (which would copy the log into the database file and sync it inside the `COMMIT`
//! that crosses 1,000 frames, holding up that commit and everything queued behind it), and
//! each time its commits have added 1,000 frames to the log it asks a checkpointer thread,
//! with a connection of its own, for a passive checkpoint, which runs beside the writer and
//! the readers. A log that grows to 4,000 frames all the same (a steady stream of commits
//! overtakes the checkpointer, and a log never copied to its end never restarts) is
//! checkpointed by the writer itself between two transactions. If the checkpointer's
//! connection cannot be opened, the writer keeps the automatic checkpoint. `close` stops the
//! checkpointer before the writer's last checkpoint.
//!
//! # Several processes on one file
//!
//! Any number of processes (and stores within one process) may open the same file; each has
//! its own writer thread, and SQLite's write lock lets one transaction write at a time. What
//! holds for them:
//!
//! - every write is as atomic and durable as with one process, and the kernel's rules hold
//!   across processes, since each command reads what it changes under the write lock;
//! - a busy file is never an error: a writer whose `BEGIN IMMEDIATE` finds the lock taken
//!   tries again every millisecond for as long as it takes, keeping its queued commands (a
//!   warning is logged for each `busy_timeout` of waiting). Only a store that is being closed
//!   gives up, one `busy_timeout` later, failing its queued commands with
//!   [`concepts::DbError::Closed`]. A process that holds the lock forever (a `sqlite3` shell
//!   inside `BEGIN IMMEDIATE`) therefore stalls the writes of the others; it does not fail them;
//! - writers take turns: a writer that met another's lock within the last second leaves the
//!   lock free for 3 ms between its transactions, and ends a transaction that held the lock
//!   for 50 ms once its current command is done, leaving the rest of its queue for the next
//!   one. Without contention a writer batches as one process does. One command is never
//!   split: a `create_batch` stays all or nothing and holds the lock for as long as it takes
//!   to write, and the other writers wait that long (a batch of 100,000 executions held it
//!   for more than 5 s in a debug build). A lease shorter than that can expire while its
//!   `Finished` waits, and the watcher then times the run out and it runs again: submit in
//!   batches that take less than the leases of the executors sharing the file;
//! - notifications are in-process: a process learns of another's writes by polling
//!   (`tick_sleep` of the executor and the watcher), not by wake-ups;
//! - readers never wait for writers (WAL); every process must be on the same machine (WAL
//!   needs shared memory, so no network file systems).
//!
//! # Reads
//!
//! Reads run on a `deadpool-sqlite` pool of read-only connections beside the writer (WAL lets
//! readers and the writer run at once). A read that takes several statements runs in one read
//! transaction and so sees one snapshot. Since a write is acknowledged only after its commit,
//! a read issued after a write's reply sees that write (read-your-writes). `lock_pending` finds
//! and locks due executions in the writer's transaction from their state rows alone; the
//! histories its workers are handed (the events below the locked version, the responses) are
//! read after the commit, outside the write transaction, in one read transaction
//! ([`concepts::kernel::hand_over`]): on the writer's own connection, right after the `COMMIT`
//! and before the reply, when they hold at most 32 rows in all (the lock of an idle executor or
//! of a workflow's next child, spared a round trip to a reader), otherwise on a reader, so that
//! a long log never holds up the writer.
//!
//! # Schema
//!
//! Versioned migrations are applied at open (this build writes schema version 4);
//! `PRAGMA user_version` holds the version and `PRAGMA application_id` marks the file as
//! Stele's. A fresh file and a file of an older version are migrated; a file of a newer
//! version, a SQLite file of another application and a file that is not a database are
//! refused with a typed [`SqliteOpenError`] naming the path. A tool that must not change what
//! it opens says so in its [`SqliteConfig`]: [`SqliteConfig::existing_only`] creates no file
//! and no schema (a missing or empty file is refused), [`SqliteConfig::without_migrations`]
//! refuses an older version instead of migrating it.
//!
//! Timestamps in columns are integer microseconds since the Unix epoch (fixed width and
//! sortable; every `DateTime<Utc>` fits). The JSON documents (events, responses, the pending
//! state) keep the caller's full precision; values that come from index columns only
//! (`ExecutionSummary::created_at` / `scheduled_at`, `ExpiredDelay::expires_at`) are
//! microsecond-precise. Ids are stored in their text form; SQLite's BINARY collation orders them
//! byte by byte, as `ExecutionId`'s `Ord` does, so ties are broken identically on every backend.
//!
//! | table | key | holds |
//! |---|---|---|
//! | `t_execution_state` | `execution_id` | one row per execution: ffqn, next version, pending state (as JSON plus the indexed columns `state`, `pending_at`, `lock_expires_at`, executor, run, join set, result kind, `finished_at`), temporary event count, retry settings, parent, created and scheduled times; `finished_at` is the time of the `Finished` event (schema version 4 filled it from the stored log) |
//! | `t_event` | `(execution_id, version)` | the log: each event as JSON, with `kind` and `join_set_id` columns for lookups |
//! | `t_response` | autoincrement `id` (arrival order) | responses as JSON, with `join_set_idx` (the index within the join set; indexed with the execution and join set); partial unique indexes on `(execution_id, delay_id) WHERE delay_id IS NOT NULL` and `(execution_id, child_execution_id) WHERE child_execution_id IS NOT NULL` make duplicates impossible (never a unique constraint over nullable columns) |
//! | `t_join_set` | `(execution_id, join_set_id)` | per join set the number of its `JoinNext` events and of its responses (schema version 3 filled it from the stored log and responses) |
//! | `t_delay` | `(execution_id, delay_id)` | every requested delay, with its join set and expiry; `is_open` until its `DelayFinished` is stored (kept afterwards so that a repeated `DelayRequest` is refused) |
//!
//! `lock_pending` reads the partial index `(ffqn, pending_at, execution_id) WHERE state =
//! 'PendingAt'`; `get_expired_timers` reads `(lock_expires_at, execution_id) WHERE state =
//! 'Locked'` and `t_delay (expires_at, ...) WHERE is_open = 1`; `prune` reads
//! `ix_state_finished (finished_at, execution_id) WHERE state = 'Finished' AND is_top_level =
//! 1`, seeking to its cursor: small indexes, never the log.
//! A lease and any number of delays of one execution expiring at the same instant never
//! collide: delays are keyed by their id.
//!
//! # Durability defaults
//!
//! `journal_mode=WAL`, `synchronous=FULL` (configurable through [`Synchronous`]),
//! `busy_timeout` 5 s, no foreign keys (the writer keeps the tables consistent itself). After
//! opening, `journal_mode` and `synchronous` are read back from the connection and exposed by
//! [`SqlitePool::effective_settings`]; if WAL could not be enabled, opening fails with
//! [`SqliteOpenError::WalUnavailable`].
//!
//! # Backups
//!
//! [`SqlitePool::backup_to`] copies the database as of one moment into a new file while the
//! store runs (SQLite's online backup API, in one step, on a reader connection, so writers
//! go on): the copy holds every write acknowledged before the call, passes
//! `integrity_check` and opens as a store of its own. `VACUUM INTO 'file'` and the `sqlite3`
//! shell's `.backup` from another process are as good. A file-level copy of a running store
//! is not a backup: the database file alone lacks the commits still in the `-wal` file
//! (acknowledged writes are missing from it), and copying the two one after the other races
//! with the checkpoints that move pages from one to the other. Copy the files only after
//! `close` (which checkpoints the WAL into the database file) or from a file-system snapshot
//! that takes both files at one instant. Whatever is copied, opening it never trusts it
//! blindly: a damaged copy is refused with a typed error naming it.
//!
//! # Errors
//!
//! Each operation fails with the kernel's error or a private error that is mapped into
//! [`concepts::DbError`] in one place: the primary key of a new execution becomes `Duplicate`;
//! any other constraint becomes a `Backend` error (the kernel validated the write already);
//! busy becomes a retriable `Backend` error (only reads can see it, see above); a full disk,
//! I/O errors and a corrupt file become `Backend` errors whose message names the file and
//! says which ("disk full while writing SQLite database ...", "I/O error on SQLite database
//! ..."). A full disk or an I/O error in the middle of a group commit fails the command that
//! met it, and, if SQLite rolled the whole transaction back, the commands batched with it
//! (each told so); nothing of a failed command stays in the store, and it takes writes again
//! once space is back. One case stays ambiguous, as with any database: an I/O error from the
//! sync of a commit whose log frames were written leaves a commit that the next open may
//! recover, so such an error says to read the write back before repeating it. Library code
//! never panics on bad input.
//!
//! # Notifications and closing
//!
//! `wait_for_pending`, `subscribe_to_next_responses` and `wait_for_finished_result` are
//! in-process, on the store's [`concepts::kernel::WaiterHub`]; the checks they run between
//! waits are reads of the pool, and the writer thread delivers the wake-ups of a batch only
//! after its commit and replies. `close` is idempotent: it refuses new calls
//! ([`concepts::DbError::Closed`]), closes the hub (which releases every waiter), lets the
//! writer finish the queued commands, and returns once the writer thread has stopped.

mod backup;
mod checkpoint;
mod codec;
mod config;
mod error;
mod handover;
mod lifecycle;
mod ops;
mod pool;
mod reads;
mod schema;
mod writer;

pub use config::{EffectiveSettings, SqliteConfig, Synchronous};
pub use error::SqliteOpenError;
pub use pool::SqlitePool;

#[cfg(test)]
mod tests;
