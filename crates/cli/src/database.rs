//! The `--database` argument: which store it names, and opening it.
//!
//! Accepted forms:
//!
//! | form | store |
//! |---|---|
//! | `PATH` (no scheme) | the SQLite file at `PATH` |
//! | `sqlite://PATH` or `sqlite:PATH` | the SQLite file at `PATH` (`sqlite:///abs/path` for an absolute path) |
//! | `postgres://...` or `postgresql://...` | a PostgreSQL database (see `storage_postgres::PostgresConfig::from_url` for the options) |

use concepts::{DbConnection, SchemaOptions};
use std::{fmt, path::PathBuf, str::FromStr, sync::Arc};
use storage_postgres::{PostgresConfig, PostgresError, PostgresStore};
use storage_sqlite::{SqliteConfig, SqliteOpenError, SqlitePool};

/// A store named by a `--database` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, by its URL.
    Postgres(String),
}

/// Why a `--database` argument was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatabaseUrlError {
    /// Nothing was given.
    #[error("the database is empty: give a file path, sqlite://PATH or postgres://...")]
    Empty,
    /// A URL of a scheme no backend serves.
    #[error(
        "unsupported database URL scheme `{scheme}://`: use a file path, sqlite://PATH or postgres://..."
    )]
    UnknownScheme {
        /// The scheme found.
        scheme: String,
    },
}

impl FromStr for DatabaseUrl {
    type Err = DatabaseUrlError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        if input.is_empty() {
            return Err(DatabaseUrlError::Empty);
        }
        if input.starts_with("postgres://") || input.starts_with("postgresql://") {
            return Ok(Self::Postgres(input.to_string()));
        }
        if let Some(path) = input
            .strip_prefix("sqlite://")
            .or_else(|| input.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(DatabaseUrlError::Empty);
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if let Some((scheme, _)) = input.split_once("://") {
            return Err(DatabaseUrlError::UnknownScheme {
                scheme: scheme.to_string(),
            });
        }
        Ok(Self::Sqlite(PathBuf::from(input)))
    }
}

impl fmt::Display for DatabaseUrl {
    /// The path of a SQLite file; a PostgreSQL URL without its password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => match PostgresConfig::from_url(url) {
                Ok(config) => f.write_str(config.redacted_url()),
                Err(_) => f.write_str("postgres://<invalid URL>"),
            },
        }
    }
}

/// What opening may change in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the SQLite file and the schema (of either backend) if they are missing, migrate
    /// an older schema (`stele demo`).
    CreateIfMissing,
    /// As [`OpenMode::CreateIfMissing`], and a PostgreSQL server that cannot be reached yet
    /// (refused, unreachable, starting up) is waited for, with a note on stderr, unless the
    /// URL bounds the wait with `wait_for_server_s` (`stele serve`: a service comes up once
    /// its database server does).
    CreateAndWait,
    /// Only a database that exists: a missing file, an empty one, a file without Stele's
    /// schema and a PostgreSQL database without Stele's tables are refused, an older schema is
    /// migrated (the commands that write: `submit`, `cancel`, `complete`, `prune`).
    ExistingOnly,
    /// As [`OpenMode::ExistingOnly`], and an older schema is refused instead of migrated: the
    /// file or database is left as it was (the commands that only read: `list`, `show`,
    /// `wait`).
    Inspection,
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// [`OpenMode::ExistingOnly`] or [`OpenMode::Inspection`] and no file at the path.
    #[error(
        "no database at {path} (run `stele serve --db {path}` or `stele demo --db {path}` to create one)",
        path = .0.display()
    )]
    Missing(PathBuf),
    /// The SQLite file cannot be opened, created or used.
    #[error(transparent)]
    Sqlite(#[from] SqliteOpenError),
    /// The PostgreSQL database cannot be reached or used.
    #[error(transparent)]
    Postgres(#[from] PostgresError),
}

/// Opens the store named by `url`, as a whole backend.
///
/// # Errors
/// [`OpenError::Missing`] for a missing file unless [`OpenMode::CreateIfMissing`]; otherwise
/// the backend's own error, which names the file or the database (an empty file or a
/// PostgreSQL database without Stele's tables in a mode that does not create is
/// the `Schema` error of either with `SchemaRefusal::NoSchema`, an older schema in
/// [`OpenMode::Inspection`] with `SchemaRefusal::TooOld`).
pub async fn open(url: &DatabaseUrl, mode: OpenMode) -> Result<Arc<dyn DbConnection>, OpenError> {
    open_with_notes(url, mode, &|_| {}).await
}

/// [`open`], telling `note` what a person waiting for it should know (that it waits for a
/// PostgreSQL server in [`OpenMode::CreateAndWait`]).
///
/// # Errors
/// As [`open`].
pub async fn open_with_notes(
    url: &DatabaseUrl,
    mode: OpenMode,
    note: &(dyn Fn(&str) + Sync),
) -> Result<Arc<dyn DbConnection>, OpenError> {
    match url {
        DatabaseUrl::Sqlite(path) => {
            let config = SqliteConfig::new(path.clone());
            let config = match mode {
                OpenMode::CreateIfMissing | OpenMode::CreateAndWait => config,
                OpenMode::ExistingOnly => config.existing_only(),
                OpenMode::Inspection => config.existing_only().without_migrations(),
            };
            let creates = matches!(mode, OpenMode::CreateIfMissing | OpenMode::CreateAndWait);
            if !creates && !path.exists() {
                return Err(OpenError::Missing(path.clone()));
            }
            let pool = SqlitePool::open(config).await?;
            Ok(Arc::new(pool))
        }
        DatabaseUrl::Postgres(url) => {
            let config = PostgresConfig::from_url(url)?;
            let config = match mode {
                OpenMode::CreateIfMissing | OpenMode::CreateAndWait => config,
                OpenMode::ExistingOnly => config.existing_only(),
                OpenMode::Inspection => config.existing_only().without_migrations(),
            };
            let wait_bounded = url.contains("wait_for_server_s=");
            let store = match PostgresStore::connect(config.clone()).await {
                Err(PostgresError::Db(err))
                    if mode == OpenMode::CreateAndWait && !wait_bounded && err.is_retriable() =>
                {
                    note(&format!(
                        "cannot reach {} yet ({err}); waiting for the server",
                        config.redacted_url()
                    ));
                    let mut config = config;
                    config.wait_for_server = None;
                    PostgresStore::connect(config).await?
                }
                other => other?,
            };
            Ok(Arc::new(store))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_urls_name_their_backend() {
        let sqlite = |path: &str| Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
        assert_eq!("stele.db".parse(), sqlite("stele.db"));
        assert_eq!("./dir/x.db".parse(), sqlite("./dir/x.db"));
        assert_eq!("sqlite://rel.db".parse(), sqlite("rel.db"));
        assert_eq!("sqlite:///abs/x.db".parse(), sqlite("/abs/x.db"));
        assert_eq!("sqlite:x.db".parse(), sqlite("x.db"));
        assert_eq!(
            "postgres://u@h/db".parse(),
            Ok(DatabaseUrl::Postgres("postgres://u@h/db".to_string()))
        );
        assert_eq!(
            "postgresql://u@h/db".parse(),
            Ok(DatabaseUrl::Postgres("postgresql://u@h/db".to_string()))
        );
    }

    #[test]
    fn unknown_schemes_and_empty_input_are_refused() {
        assert_eq!(
            "mysql://h/db".parse::<DatabaseUrl>(),
            Err(DatabaseUrlError::UnknownScheme {
                scheme: "mysql".to_string()
            })
        );
        assert_eq!("".parse::<DatabaseUrl>(), Err(DatabaseUrlError::Empty));
        assert_eq!(
            "sqlite://".parse::<DatabaseUrl>(),
            Err(DatabaseUrlError::Empty)
        );
    }
}
