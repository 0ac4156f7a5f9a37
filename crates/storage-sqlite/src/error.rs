//! Errors: [`SqliteOpenError`] for opening a store, and the private [`SqliteError`] of every
//! operation, mapped into the portable [`DbError`] kinds by [`SqliteError::into_db_error`].

use concepts::{DbError, DuplicateKind, SchemaRefusal};
use rusqlite::ErrorCode;
use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

/// Why a store could not be opened. Every variant names the database file.
#[derive(Debug, thiserror::Error)]
pub enum SqliteOpenError {
    /// The configuration itself is unusable.
    #[error("invalid SQLite configuration for {path}: {reason}")]
    InvalidConfig {
        /// The database file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file could not be opened or created (missing directory, no permission, a
    /// directory in its place).
    #[error("cannot open the SQLite database {path}: {source}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// The driver's error.
        source: rusqlite::Error,
    },
    /// The file exists but is not a SQLite database (or is encrypted or corrupt).
    #[error("{path} is not a SQLite database (or it is encrypted or corrupt): {source}")]
    NotADatabase {
        /// The database file.
        path: PathBuf,
        /// The driver's error.
        source: rusqlite::Error,
    },
    /// The file is a SQLite database that belongs to another application.
    #[error(
        "{path} is a SQLite database of another application ({detail}); refusing to add Stele's tables to it"
    )]
    ForeignDatabase {
        /// The database file.
        path: PathBuf,
        /// What gave it away.
        detail: String,
    },
    /// The file's schema version is one this opening may not use ([`SchemaRefusal`]): a
    /// newer one, none (the [`schema`](crate::SqliteConfig::schema) policy's `create` is
    /// false), or an older one (its `migrate` is false); it is left as it is.
    #[error("{} {refusal}", path.display())]
    Schema {
        /// The database file.
        path: PathBuf,
        /// Why.
        refusal: SchemaRefusal,
    },
    /// `journal_mode=WAL` did not take effect (the file system may not support the shared
    /// memory WAL needs). Running without WAL would make readers block the writer.
    #[error(
        "could not enable WAL on {path}: journal_mode is `{journal_mode}` after asking for `wal`"
    )]
    WalUnavailable {
        /// The database file.
        path: PathBuf,
        /// What the connection reports instead.
        journal_mode: String,
    },
    /// `synchronous` did not take the requested level.
    #[error("{path}: asked for synchronous={requested}, the connection reports {reported}")]
    SynchronousNotApplied {
        /// The database file.
        path: PathBuf,
        /// The requested level.
        requested: crate::Synchronous,
        /// What `PRAGMA synchronous` reports.
        reported: i64,
    },
    /// A schema migration failed; the file keeps its previous version.
    #[error("migrating {path} to schema version {version} failed: {source}")]
    Migration {
        /// The database file.
        path: PathBuf,
        /// The version that could not be applied.
        version: u32,
        /// The driver's error.
        source: rusqlite::Error,
    },
    /// Any other driver error while setting up (a full disk, an I/O error).
    #[error("setting up the SQLite database {path} failed: {source}")]
    Setup {
        /// The database file.
        path: PathBuf,
        /// The driver's error.
        source: rusqlite::Error,
    },
    /// The writer thread could not be started.
    #[error("cannot start the writer thread for {path}: {source}")]
    WriterThread {
        /// The database file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The reader connections could not be opened.
    #[error("cannot open reader connections to {path}: {message}")]
    ReaderPool {
        /// The database file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

impl SqliteOpenError {
    /// The database file the error is about.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            Self::InvalidConfig { path, .. }
            | Self::Open { path, .. }
            | Self::NotADatabase { path, .. }
            | Self::ForeignDatabase { path, .. }
            | Self::Schema { path, .. }
            | Self::WalUnavailable { path, .. }
            | Self::SynchronousNotApplied { path, .. }
            | Self::Migration { path, .. }
            | Self::Setup { path, .. }
            | Self::WriterThread { path, .. }
            | Self::ReaderPool { path, .. } => path,
        }
    }

    /// Classifies a driver error met while opening `path`.
    pub(crate) fn from_driver(path: &Path, source: rusqlite::Error) -> Self {
        let path = path.to_path_buf();
        match source.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                Self::NotADatabase { path, source }
            }
            Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => {
                Self::Open { path, source }
            }
            _ => Self::Setup { path, source },
        }
    }
}

impl From<SqliteOpenError> for DbError {
    fn from(err: SqliteOpenError) -> Self {
        DbError::backend(err.to_string(), false, Some(Arc::new(err)))
    }
}

/// Every way an operation of this backend can fail, before it is mapped to a [`DbError`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum SqliteError {
    /// Already a portable error (the kernel's refusals, not found, duplicate, a stored value
    /// that does not decode).
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("reader pool: {0}")]
    Pool(String),
}

impl SqliteError {
    /// The driver error of an insert, with a uniqueness violation reported as `duplicate`.
    pub(crate) fn from_insert(
        err: rusqlite::Error,
        duplicate: impl FnOnce() -> DuplicateKind,
    ) -> Self {
        // `SQLITE_CONSTRAINT_PRIMARYKEY` and `SQLITE_CONSTRAINT_UNIQUE`.
        match err.sqlite_error() {
            Some(e) if matches!(e.extended_code, 1555 | 2067) => {
                Self::Db(DbError::Duplicate(duplicate()))
            }
            _ => Self::Sqlite(err),
        }
    }

    /// The portable error kind of this error, its message naming the database `path`: the one
    /// place where driver errors become portable kinds (the crate docs say which). Duplicates
    /// are mapped with their context by [`Self::from_insert`]; any other constraint means the
    /// rows disagree with the kernel, which validated the write.
    pub(crate) fn into_db_error(self, path: &Path) -> DbError {
        let display = path.display();
        match self {
            Self::Db(err) => err,
            Self::Sqlite(err) => {
                let message = match err.sqlite_error_code() {
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                        format!("SQLite database {display} is busy: {err}")
                    }
                    Some(ErrorCode::ConstraintViolation) => {
                        format!("constraint violated in SQLite database {display}: {err}")
                    }
                    Some(ErrorCode::DiskFull) => format!(
                        "disk full while writing SQLite database {display}: {err} (nothing of \
                         this operation was applied; free space on its file system and retry)"
                    ),
                    Some(
                        ErrorCode::SystemIoFailure
                        | ErrorCode::CannotOpen
                        | ErrorCode::PermissionDenied
                        | ErrorCode::ReadOnly
                        | ErrorCode::NoLargeFileSupport
                        | ErrorCode::FileLockingProtocolFailed,
                    ) => format!(
                        "I/O error on SQLite database {display}: {err} (check the disk, the \
                         file's permissions and size limits; a write that failed while \
                         committing may be found applied after a restart, so read it back \
                         before repeating it)"
                    ),
                    Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
                        format!("SQLite database {display} is corrupt: {err}")
                    }
                    _ => format!("SQLite database {display}: {err}"),
                };
                DbError::backend(message, is_busy(&err), Some(Arc::new(err) as Arc<_>))
            }
            Self::Pool(message) => {
                let message = format!("SQLite database {display}: reader pool: {message}");
                DbError::backend(message, false, None)
            }
        }
    }
}

/// True when another connection holds the lock (`SQLITE_BUSY`, `SQLITE_LOCKED` and their
/// extended codes).
pub(crate) fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// A convenient result alias for this crate's internals.
pub(crate) type Result<T, E = SqliteError> = std::result::Result<T, E>;
