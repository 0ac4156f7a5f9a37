//! What the user chooses when opening a store ([`SqliteConfig`]) and what the connection
//! reports back after opening ([`EffectiveSettings`]).

use concepts::{SchemaOptions, SchemaPolicy};
use std::{path::PathBuf, time::Duration};

/// SQLite's `synchronous` level: how hard a commit waits for the disk.
///
/// With `journal_mode=WAL`, [`Synchronous::Full`] (the default) syncs the write-ahead log at
/// every commit, so an acknowledged write survives a power loss; [`Synchronous::Normal`] may lose
/// the last commits on a power loss (never on a process crash) and is faster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Synchronous {
    /// `OFF` (0): no syncs at all; an OS crash or power loss can corrupt the database.
    Off = 0,
    /// `NORMAL` (1): in WAL mode, durable across process crashes, not across power loss.
    Normal = 1,
    /// `FULL` (2): every commit is synced; the default.
    #[default]
    Full = 2,
    /// `EXTRA` (3): like `FULL`, and also syncs the directory after deleting a journal.
    Extra = 3,
}

impl Synchronous {
    const ALL: [Self; 4] = [Self::Off, Self::Normal, Self::Full, Self::Extra];

    /// The number `PRAGMA synchronous` takes and reports.
    #[must_use]
    pub fn pragma_value(self) -> i64 {
        self as i64
    }

    /// The level for a number reported by `PRAGMA synchronous`.
    #[must_use]
    pub fn from_pragma_value(value: i64) -> Option<Self> {
        Self::ALL.get(usize::try_from(value).ok()?).copied()
    }
}

impl std::fmt::Display for Synchronous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The names `PRAGMA synchronous` takes, by level.
        f.write_str(["OFF", "NORMAL", "FULL", "EXTRA"][*self as usize])
    }
}

/// How to open a SQLite store. [`SqliteConfig::new`] gives the durable defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteConfig {
    /// The database file; created if missing (its directory must exist) unless `schema.create`
    /// is false.
    pub path: PathBuf,
    /// Whether a file without any schema (new, empty) gets Stele's and a file of an older
    /// schema is migrated; by default both ([`SchemaOptions`]).
    pub schema: SchemaPolicy,
    /// The `synchronous` level; default [`Synchronous::Full`].
    pub synchronous: Synchronous,
    /// How many write commands may wait for the writer thread before writers wait for room;
    /// default 8192.
    pub queue_capacity: usize,
    /// How many queued write commands share one transaction (one commit, one fsync) at most;
    /// default 1024.
    pub max_commands_per_transaction: usize,
    /// How many read-only connections serve reads beside the writer; default 4.
    pub reader_pool_size: usize,
    /// How long a read waits for a lock held by another connection before reporting busy;
    /// default 5 s. The writer waits as long as it takes, logging a warning after each
    /// `busy_timeout` (see the crate docs on several processes).
    pub busy_timeout: Duration,
}

impl SchemaOptions for SqliteConfig {
    fn schema_mut(&mut self) -> &mut SchemaPolicy {
        &mut self.schema
    }
}

impl SqliteConfig {
    /// The durable defaults for a database at `path`: WAL, `synchronous=FULL`.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            schema: SchemaPolicy::default(),
            synchronous: Synchronous::Full,
            queue_capacity: 8192,
            max_commands_per_transaction: 1024,
            reader_pool_size: 4,
            busy_timeout: Duration::from_secs(5),
        }
    }

    /// The same configuration with another `synchronous` level.
    #[must_use]
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }
}

/// The settings the writer connection reports after opening, read back with `PRAGMA`s (not
/// the ones that were asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveSettings {
    /// `PRAGMA journal_mode`, lower case; always `wal` for an open store.
    pub journal_mode: String,
    /// `PRAGMA synchronous`.
    pub synchronous: Synchronous,
    /// `PRAGMA busy_timeout`.
    pub busy_timeout: Duration,
    /// `PRAGMA user_version`: the schema version of the file after migrations.
    pub schema_version: u32,
}
