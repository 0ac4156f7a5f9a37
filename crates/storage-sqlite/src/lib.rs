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
//! # How it works
//!
//! One writer thread owns the only write connection and commits every queued write in one
//! transaction (each in a savepoint of its own, loaded, planned by [`concepts::kernel`] and
//! persisted there), so that under load many writes share one commit and one fsync; reads run
//! on a pool of read-only connections beside it. `docs/ARCHITECTURE.md` (section
//! `storage-sqlite`) describes the writer, its checkpoints, the tables and their indexes.
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
//! A read that takes several statements runs in one read transaction and so sees one
//! snapshot; since a write is acknowledged only after its commit, a read issued after a
//! write's reply sees that write.
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
