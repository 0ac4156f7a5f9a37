//! Typed configuration of a [`crate::PostgresStore`], parsed from a `postgres://` URL.

use crate::{
    error::{PostgresError, invalid_config},
    tls::{RootCertificates, SslMode},
};
use concepts::{SchemaOptions, SchemaPolicy};
use rustls::pki_types::CertificateDer;
use std::{str::FromStr, time::Duration};

/// The default number of pooled connections per store.
pub const DEFAULT_POOL_SIZE: usize = 16;
/// The default `statement_timeout` of every pooled connection.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default time allowed to open one connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach the database and how to use it.
///
/// Parsed from a URL `postgres://user[:password]@host[:port]/database[?params]`
/// (`postgresql://` works too). Besides the driver's own parameters (`connect_timeout`,
/// `application_name`, `sslmode`, ...), the query string may carry this store's settings:
///
/// | parameter | meaning | default |
/// |---|---|---|
/// | `pool_size` | pooled connections of this store (the listener has its own) | 16 |
/// | `statement_timeout_ms` | server-side `statement_timeout` of pooled connections, `0` = none | 30000 |
/// | `sslmode` | `disable`, `prefer`, `require`, `verify-ca` or `verify-full`, as libpq (see [`SslMode`]) | `prefer` |
/// | `sslrootcert` | a PEM file of the roots `verify-ca` and `verify-full` trust | Mozilla's roots, compiled in |
/// | `wait_for_server_s` | how long [`crate::PostgresStore::connect`] retries a server it cannot reach | 0 |
///
/// Every connection (pooled, the listener, admin) opens within `connect_timeout` (10 s unless
/// given) and has TCP keepalives probed after 15 s idle, every 5 s, dropped after 3 unanswered,
/// and a `tcp_user_timeout` of 30 s, so that a half-open connection is noticed within about
/// 30 s rather than when the operating system gives up; the driver's parameters of those
/// names override each.
///
/// ```
/// use storage_postgres::PostgresConfig;
///
/// let config: PostgresConfig =
///     "postgres://postgres@127.0.0.1:54329/stele?pool_size=4".parse().unwrap();
/// assert_eq!(config.pool_size, 4);
/// assert_eq!(config.database_name(), Some("stele"));
/// assert!("mysql://nope".parse::<PostgresConfig>().is_err());
/// ```
// `Debug` shows no password: `redacted_url` holds none, and the driver's `Config` prints its
// own as `_` (the unit tests check both).
#[derive(Clone, Debug)]
pub struct PostgresConfig {
    pg: tokio_postgres::Config,
    /// The URL as given, with any password replaced by `***` (for messages).
    redacted_url: String,
    /// Pooled connections of this store (at least 1). The notification listener uses one more.
    pub pool_size: usize,
    /// The server-side `statement_timeout` of pooled connections; `None` for none.
    pub statement_timeout: Option<Duration>,
    /// How long opening one connection may take (`connect_timeout`); `connect` waits twice
    /// as long for the notification listener to listen.
    pub connect_timeout: Duration,
    /// How many times a transaction that hit a serialization failure or a deadlock (SQLSTATE
    /// 40001 / 40P01), or a `create` or `create_batch` that lost the insert of one of its ids
    /// to another transaction, runs again before the error is returned (as retriable).
    pub max_transaction_retries: u32,
    /// The first delay before the listener reconnects; it doubles up to `listener_max_backoff`.
    pub listener_min_backoff: Duration,
    /// The longest delay between two reconnection attempts of the listener.
    pub listener_max_backoff: Duration,
    /// Whether a database without Stele's schema gets it when connecting and an older schema
    /// is migrated; by default both ([`SchemaOptions`]).
    pub schema: SchemaPolicy,
    /// How every connection of the store uses TLS (`sslmode`; default `prefer`).
    pub ssl_mode: SslMode,
    /// What `verify-ca` and `verify-full` trust (`sslrootcert`; default Mozilla's roots).
    pub root_certificates: RootCertificates,
    /// How long [`crate::PostgresStore::connect`] retries, with the listener's backoff, a server
    /// it cannot reach (refused, unreachable, starting up, timed out); `None`: until it
    /// succeeds; default zero: one attempt. Other errors (a refused password, a TLS failure, a
    /// missing database) are returned at once; an open store reconnects whatever this says.
    pub wait_for_server: Option<Duration>,
}

impl PostgresConfig {
    /// Parses a `postgres://` URL; the error says what is wrong with it.
    pub fn from_url(url: &str) -> Result<Self, PostgresError> {
        let redacted_url = redact(url);
        let invalid = |problem: String| invalid_config(&redacted_url, problem);
        if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
            return Err(invalid(
                "the URL must start with `postgres://` or `postgresql://`".to_string(),
            ));
        }
        let (base, query) = split_query(url);
        let mut pool_size = DEFAULT_POOL_SIZE;
        let mut statement_timeout = Some(DEFAULT_STATEMENT_TIMEOUT);
        let mut ssl_mode = SslMode::default();
        let mut root_certificates = RootCertificates::default();
        let mut wait_for_server = Some(Duration::ZERO);
        let mut driver_params = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            if pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "pool_size" => pool_size = integer(key, value, true).map_err(invalid)?,
                "statement_timeout_ms" => {
                    let ms = integer(key, value, false).map_err(invalid)?;
                    statement_timeout = (ms > 0).then(|| Duration::from_millis(ms));
                }
                "sslmode" => ssl_mode = value.parse().map_err(invalid)?,
                "sslrootcert" if value.is_empty() => {
                    return Err(invalid("`sslrootcert` names no file".to_string()));
                }
                "sslrootcert" => root_certificates = RootCertificates::PemFile(value.into()),
                "wait_for_server_s" => {
                    let secs = integer(key, value, false).map_err(invalid)?;
                    wait_for_server = Some(Duration::from_secs(secs));
                }
                _ => driver_params.push(pair),
            }
        }
        let driver_url = if driver_params.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", driver_params.join("&"))
        };
        let mut pg = tokio_postgres::Config::from_str(&driver_url)
            .map_err(|e| invalid(crate::error::describe(&e)))?;
        let given = |key: &str| {
            driver_params
                .iter()
                .any(|pair| pair.split('=').next() == Some(key))
        };
        // A half-open connection (a server that vanished without a FIN) is noticed within
        // about 30 s, idle or with a statement unanswered, on the pool and the listener alike.
        if !given("keepalives_idle") {
            pg.keepalives_idle(Duration::from_secs(15));
        }
        if !given("keepalives_interval") {
            pg.keepalives_interval(Duration::from_secs(5));
        }
        if !given("keepalives_retries") {
            pg.keepalives_retries(3);
        }
        if !given("tcp_user_timeout") {
            pg.tcp_user_timeout(Duration::from_secs(30));
        }
        if pg.get_hosts().is_empty() {
            return Err(invalid("the URL names no host".to_string()));
        }
        let connect_timeout = pg
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        Ok(Self {
            pg,
            redacted_url,
            pool_size,
            statement_timeout,
            connect_timeout,
            max_transaction_retries: 5,
            listener_min_backoff: Duration::from_millis(50),
            listener_max_backoff: Duration::from_secs(5),
            schema: SchemaPolicy::default(),
            ssl_mode,
            root_certificates,
            wait_for_server,
        })
    }

    /// The same configuration, trusting exactly `certificates` (DER) for `verify-ca` and
    /// `verify-full` instead of `sslrootcert` or Mozilla's roots.
    #[must_use]
    pub fn with_root_certificates(mut self, certificates: Vec<CertificateDer<'static>>) -> Self {
        self.root_certificates = RootCertificates::Certificates(certificates);
        self
    }

    /// The database the URL names (`None`: the server's default, the user's name).
    #[must_use]
    pub fn database_name(&self) -> Option<&str> {
        self.pg.get_dbname()
    }

    /// The URL with its password hidden, for messages and logs.
    #[must_use]
    pub fn redacted_url(&self) -> &str {
        &self.redacted_url
    }

    /// The same server and credentials, another database (tests create one per scenario).
    #[must_use]
    pub fn with_database(&self, database: &str) -> Self {
        let mut other = self.clone();
        other.pg.dbname(database);
        let (base, query) = split_query(&self.redacted_url);
        let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
        let authority = rest.split('/').next().unwrap_or(rest);
        let query = query.map(|query| format!("?{query}")).unwrap_or_default();
        other.redacted_url = format!("{scheme}://{authority}/{database}{query}");
        other
    }

    /// The driver configuration of pooled connections: `statement_timeout` applied, and JIT
    /// compilation off. Every statement of the store is small and keyed; a plan whose cost
    /// the planner overestimates (a fresh table without statistics, a batch of a few hundred
    /// keys) would otherwise be compiled first, which costs more than running it.
    pub(crate) fn pool_pg_config(&self) -> tokio_postgres::Config {
        let mut pg = self.listener_pg_config();
        let mut options = format!("{} -c jit=off", pg.get_options().unwrap_or_default());
        if let Some(timeout) = self.statement_timeout {
            let ms = timeout.as_millis().max(1);
            options.push_str(&format!(" -c statement_timeout={ms}"));
        }
        pg.options(options.trim_start());
        pg
    }

    /// The driver configuration of the listener connection (and of admin connections).
    pub(crate) fn listener_pg_config(&self) -> tokio_postgres::Config {
        let mut pg = self.pg.clone();
        pg.connect_timeout(self.connect_timeout);
        if pg.get_application_name().is_none() {
            pg.application_name("stele");
        }
        pg
    }
}

impl SchemaOptions for PostgresConfig {
    fn schema_mut(&mut self) -> &mut SchemaPolicy {
        &mut self.schema
    }
}

impl FromStr for PostgresConfig {
    type Err = PostgresError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::from_url(url)
    }
}

/// `value`, the value of the parameter `key`, as an integer (a positive one if `positive`).
fn integer<T: FromStr + PartialOrd + Default>(
    key: &str,
    value: &str,
    positive: bool,
) -> Result<T, String> {
    let kind = if positive { "positive" } else { "non-negative" };
    value
        .parse::<T>()
        .ok()
        .filter(|n| !positive || *n > T::default())
        .ok_or_else(|| format!("`{key}` must be a {kind} integer, not `{value}`"))
}

/// The URL with every password replaced by `***`: the user info's, taken as the driver takes
/// it (everything before the first `@` is user info, the password follows its first `:`, so a
/// password holding `/`, `?` or `#` is hidden whole; a URL without its scheme too), and a
/// `password=` query parameter's.
fn redact(url: &str) -> String {
    let scheme_len = match url.split_once("://") {
        Some((scheme, _))
            if scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '+') =>
        {
            scheme.len() + 3
        }
        _ => 0,
    };
    let (scheme, rest) = url.split_at(scheme_len);
    let mut redacted = url.to_string();
    if let Some((user_info, after)) = rest.split_once('@')
        && let Some((user, _password)) = user_info.split_once(':')
    {
        redacted = format!("{scheme}{user}:***@{after}");
    }
    let Some((base, query)) = redacted.split_once('?') else {
        return redacted;
    };
    let query: Vec<&str> = query
        .split('&')
        .map(|pair| {
            if pair.starts_with("password=") {
                "password=***"
            } else {
                pair
            }
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

/// The URL before its query and the query: the query starts at the first `?` after the user
/// info (which ends at the first `@`, as the driver reads it), so a password may hold a `?`.
fn split_query(url: &str) -> (&str, Option<&str>) {
    let after_user_info = url.find('@').map_or(0, |at| at + 1);
    match url[after_user_info..].find('?') {
        Some(at) => {
            let at = after_user_info + at;
            (&url[..at], Some(&url[at + 1..]))
        }
        None => (url, None),
    }
}
