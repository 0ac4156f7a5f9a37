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
//! Under load many writes share one commit and one fsync; reads run on a pool of read-only
//! connections. `docs/ARCHITECTURE.md` (section `storage-sqlite`) describes the design.
//!
//! # Several processes on one file
//!
//! Any number of processes (and stores within one process) may open the same file; each has
//! its own writer thread, and SQLite's write lock lets one transaction write at a time:
//!
//! - every write is as atomic and durable as with one process, and the kernel's rules hold
//!   across processes, since each command reads what it changes under the write lock;
//! - a busy file is never an error: a writer that finds the lock taken tries again every
//!   millisecond for as long as it takes, keeping its queued commands and logging a warning
//!   for each `busy_timeout` of waiting; only a store being closed gives up, one
//!   `busy_timeout` later, with [`concepts::DbError::Closed`]. So a process that holds the
//!   lock forever (a `sqlite3` shell inside `BEGIN IMMEDIATE`) stalls the others' writes;
//! - writers take turns: one that met another's lock within the last second leaves the lock
//!   free for 3 ms between its transactions and ends a transaction after 50 ms. A command is
//!   never split, though: a `create_batch` holds the lock as long as it takes to write (more
//!   than 5 s for 100,000 executions in a debug build), and a lease shorter than that can
//!   expire while its `Finished` waits; submit in batches that take less than the leases of
//!   the executors sharing the file;
//! - a repeated `create` of an execution that is stored is answered from a read on the
//!   writer's connection before its transaction (the kernel's `Write::answer_from_read`), so a
//!   submitter retrying never waits for the lock while the writer is idle; only a `create`
//!   whose id is not stored yet, or was just created elsewhere, takes the write path;
//! - waiters hear their own store's commits at once and the other processes' within about
//!   10 ms, when the writer next looks at the file;
//! - readers never wait for writers (WAL); every process must be on the same machine (WAL
//!   needs shared memory, so no network file systems).
//!
//! # Reads
//!
//! A read of several statements runs in one read transaction and sees one snapshot; since a
//! write is acknowledged only after its commit, a read issued after a write's reply sees it.
//!
//! # Schema and settings
//!
//! Opening migrates a fresh file or one of an older schema version and refuses, with a typed
//! [`SqliteOpenError`] naming the path, a file of a newer version, a SQLite file of another
//! application and a file that is not a database; [`SchemaOptions`](concepts::SchemaOptions) (`existing_only`,
//! `without_migrations`) opens without changing it. The durable defaults
//! ([`SqliteConfig::new`]) are read back after opening ([`SqlitePool::effective_settings`]).
//!
//! # Backups
//!
//! [`SqlitePool::backup_to`] copies the database as of one moment into a new file while the
//! store runs (SQLite's `VACUUM INTO`, so the copy is compacted): the copy holds every write
//! acknowledged before the call, passes `integrity_check` and opens as a store of its own; the
//! `sqlite3` shell's `.backup` is as good. A file-level copy of a running store is not a backup: the
//! database file lacks the commits still in the `-wal` file, and copying the two one after the
//! other races with the checkpoints. Copy the files only after `close` (which checkpoints the
//! WAL into the database file) or from a file-system snapshot that takes both at one instant.
//!
//! # Errors
//!
//! Driver errors are mapped into [`concepts::DbError`] in one place: the primary key of a new
//! execution and a response's unique keys (its delay's, its child's) become `Duplicate`, busy (which only reads can meet) a retriable `Backend` error,
//! any other constraint, a full disk, I/O errors and a corrupt file `Backend` errors whose
//! message names the file and says which. A full disk or an I/O error in a group commit fails
//! the command that met it and, if SQLite rolled the whole transaction back, the commands
//! batched with it (each told so); nothing of a failed command stays in the store, which takes
//! writes again once space is back. One case stays ambiguous, as with any database: an I/O
//! error from the sync of a commit may leave a commit that the next open recovers, so that
//! error says to read the write back before repeating it.

mod backup;
mod changes;
mod checkpoint;
mod codec;
mod config;
mod error;
mod ops;
mod pool;
mod reads;
mod schedules;
mod schema;
mod writer;

pub use config::{EffectiveSettings, SqliteConfig, Synchronous};
pub use error::SqliteOpenError;
pub use pool::SqlitePool;

#[cfg(test)]
mod tests;
