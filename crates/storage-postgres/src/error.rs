//! Errors: the store's own (configuration, schema) and the ONE place where driver and pool
//! errors become the portable [`DbError`] kinds.

use concepts::{DbError, DuplicateKind, SchemaRefusal, kernel::stored::UniqueKey};
use std::sync::Arc;
use tokio_postgres::error::SqlState;

/// Why a store could not be configured or opened.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PostgresError {
    /// The URL or a setting is wrong; `problem` says what.
    #[error("invalid PostgreSQL URL `{url}`: {problem}")]
    InvalidConfig {
        /// The URL, password hidden.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The database's schema version is one this connection may not use ([`SchemaRefusal`]):
    /// a newer one, none (no `t_schema_migration`, or no version in it, and the
    /// [`schema`](crate::PostgresConfig::schema) policy's `create` is false: nothing was
    /// created), or an older one (its `migrate` is false: it is left as is).
    #[error("{url} {refusal}")]
    Schema {
        /// The database's URL, password hidden.
        url: String,
        /// Why.
        refusal: SchemaRefusal,
    },
    /// The TLS negotiation or handshake with the server failed: the server offers no TLS
    /// (`sslmode=require` and stronger), its certificate does not chain to the roots
    /// (`verify-ca`, `verify-full`) or does not name the URL's host (`verify-full`).
    #[error(
        "TLS with the server failed (sslmode={ssl_mode}): {reason}; {hint}",
        hint = tls_hint(*.ssl_mode)
    )]
    Tls {
        /// The database's URL, password hidden.
        url: String,
        /// The mode asked for.
        ssl_mode: crate::SslMode,
        /// What the driver or the certificate check said.
        reason: String,
    },
    /// Connecting, migrating or starting the listener failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

/// What a person can do about a failed TLS connection in `mode`.
fn tls_hint(mode: crate::SslMode) -> &'static str {
    match mode {
        crate::SslMode::VerifyFull => {
            "the server's certificate must chain to the roots (`sslrootcert=PATH` names a PEM \
             file of them) and name the host of the URL exactly (use the name in the \
             certificate, or `sslmode=verify-ca` to skip the name check)"
        }
        crate::SslMode::VerifyCa => {
            "the server's certificate must chain to the roots (`sslrootcert=PATH` names a PEM \
             file of them)"
        }
        crate::SslMode::Require | crate::SslMode::Prefer | crate::SslMode::Disable => {
            "check that the server has `ssl = on` (or use `sslmode=prefer` to allow plain \
             connections)"
        }
    }
}

/// Maps a driver error to its portable kind, the only place that looks at SQLSTATEs (which
/// kind each becomes, `docs/ARCHITECTURE.md` says; a statement timeout, `57014`, is retriable).
pub(crate) fn map_pg_error(err: tokio_postgres::Error) -> DbError {
    let (message, retriable) = match err.as_db_error() {
        Some(db) => {
            let code = db.code();
            if *code == SqlState::UNIQUE_VIOLATION
                && let Some(kind) = db.constraint().and_then(|constraint| {
                    duplicate_kind(constraint, db.detail().unwrap_or_default())
                })
            {
                return DbError::Duplicate(kind);
            }
            let message = format!("{} (SQLSTATE {})", db.message(), code.code());
            if code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || *code == SqlState::TOO_MANY_CONNECTIONS
            {
                return DbError::Connection(message);
            }
            let retriable = reruns_transaction(code) || *code == SqlState::QUERY_CANCELED;
            (message, retriable)
        }
        None if err.is_closed() || causes(&err).any(|cause| cause.is::<std::io::Error>()) => {
            return DbError::Connection(describe(&err));
        }
        None => (describe(&err), false),
    };
    DbError::backend(message, retriable, Some(Arc::new(err)))
}

fn reruns_transaction(code: &SqlState) -> bool {
    *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
}

/// The error of a failed attempt to open a connection for a store or an admin task: a TLS
/// failure is [`PostgresError::Tls`], anything else what [`map_pg_error`] says.
pub(crate) fn connect_error(
    config: &crate::PostgresConfig,
    err: tokio_postgres::Error,
) -> PostgresError {
    if !crate::tls::is_tls_error(&err) {
        return PostgresError::Db(map_pg_error(err));
    }
    PostgresError::Tls {
        url: config.redacted_url().to_string(),
        ssl_mode: config.ssl_mode,
        reason: causes(&err)
            .next()
            .map_or_else(|| err.to_string(), ToString::to_string),
    }
}

/// A serialization failure or a deadlock (the SQLSTATE of the server error behind `err`): the
/// whole transaction may simply run again.
pub(crate) fn is_transaction_retriable(err: &DbError) -> bool {
    let DbError::Backend(backend) = err else {
        return false;
    };
    let driver =
        (backend.source.as_deref()).and_then(|e| e.downcast_ref::<tokio_postgres::Error>());
    driver
        .and_then(tokio_postgres::Error::code)
        .is_some_and(reruns_transaction)
}

/// Maps a pool error: a closed pool is [`DbError::Closed`], a timeout or a failed connect is
/// [`DbError::Connection`].
pub(crate) fn map_pool_error(err: deadpool_postgres::PoolError) -> DbError {
    use deadpool_postgres::PoolError;
    match err {
        PoolError::Closed => DbError::Closed,
        PoolError::Backend(e) => match map_pg_error(e) {
            DbError::Backend(b) => DbError::Connection(b.message),
            other => other,
        },
        PoolError::Timeout(kind) => DbError::Connection(format!(
            "timed out waiting for a pooled connection ({kind:?})"
        )),
        other => DbError::Connection(other.to_string()),
    }
}

/// `url` is shown as it is: a redacted one.
pub(crate) fn invalid_config(url: &str, problem: impl Into<String>) -> PostgresError {
    PostgresError::InvalidConfig {
        url: url.to_string(),
        problem: problem.into(),
    }
}

/// The driver's message with its causes (`error connecting to server: Connection refused`):
/// the driver's own message names the kind of failure only.
pub(crate) fn describe(err: &tokio_postgres::Error) -> String {
    let mut message = err.to_string();
    for cause in causes(err) {
        message.push_str(": ");
        message.push_str(&cause.to_string());
    }
    message
}

fn causes(err: &tokio_postgres::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(err), |cause| cause.source())
}

/// The duplicate a unique violation of `constraint` means ([`UniqueKey::duplicate`]), with the
/// key from `detail` (`Key (a, b)=(x, y) already exists.`); `None` when the constraint is not
/// one of ours or the detail cannot be read.
pub(crate) fn duplicate_kind(constraint: &str, detail: &str) -> Option<DuplicateKind> {
    let key = match constraint {
        "t_execution_pkey" => UniqueKey::Execution,
        "t_event_pkey" => UniqueKey::Event,
        // `t_response (execution_id, delay_id) WHERE delay_id IS NOT NULL`, and of the child.
        "t_response_delay_uq" => UniqueKey::DelayResponse,
        "t_response_child_uq" => UniqueKey::ChildResponse,
        "t_schedule_pkey" => UniqueKey::Schedule,
        _ => return None,
    };
    key.duplicate(&key_values(detail)?)
}

/// The key values of a unique violation's detail. Ids never contain `, ` or `)`.
fn key_values(detail: &str) -> Option<Vec<&str>> {
    let start = detail.find(")=(")? + 3;
    let end = detail.rfind(") already exists")?;
    let values = detail.get(start..end)?;
    Some(values.split(", ").collect())
}
