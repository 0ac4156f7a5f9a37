//! Typed configuration of a [`crate::PostgresStore`], parsed from a `postgres://` URL.

use crate::error::PostgresError;
use std::{fmt, str::FromStr, time::Duration};

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
#[derive(Clone)]
pub struct PostgresConfig {
    pg: tokio_postgres::Config,
    /// The URL as given, with any password replaced by `***` (for messages).
    redacted_url: String,
    /// Pooled connections of this store (at least 1). The notification listener uses one more.
    pub pool_size: usize,
    /// The server-side `statement_timeout` of pooled connections; `None` for none.
    pub statement_timeout: Option<Duration>,
    /// How long opening one connection may take; also how long `connect` waits for the
    /// notification listener's first connection.
    pub connect_timeout: Duration,
    /// How many times a transaction that failed with a serialization failure or a deadlock
    /// (SQLSTATE 40001 / 40P01) is retried before the error is returned (as retriable); a
    /// `create` or `create_batch` that lost the insert of one of its ids to another
    /// transaction is retried as often (and then answered as the repeat or conflict it is).
    pub max_transaction_retries: u32,
    /// The first delay before the listener reconnects; it doubles up to
    /// `listener_max_backoff`.
    pub listener_min_backoff: Duration,
    /// The longest delay between two reconnection attempts of the listener.
    pub listener_max_backoff: Duration,
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.redacted_url)
            .field("pool_size", &self.pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_transaction_retries", &self.max_transaction_retries)
            .field("listener_min_backoff", &self.listener_min_backoff)
            .field("listener_max_backoff", &self.listener_max_backoff)
            .finish()
    }
}

impl PostgresConfig {
    /// Parses a `postgres://` URL; the error says what is wrong with it.
    pub fn from_url(url: &str) -> Result<Self, PostgresError> {
        let redacted_url = redact(url);
        let invalid = |problem: String| PostgresError::InvalidConfig {
            url: redacted_url.clone(),
            problem,
        };
        let Some(rest) = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
        else {
            return Err(invalid(
                "the URL must start with `postgres://` or `postgresql://`".to_string(),
            ));
        };
        if rest.is_empty() {
            return Err(invalid("the URL names no host".to_string()));
        }
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (url, None),
        };
        let mut pool_size = DEFAULT_POOL_SIZE;
        let mut statement_timeout = Some(DEFAULT_STATEMENT_TIMEOUT);
        let mut driver_params = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            if pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "pool_size" => {
                    pool_size =
                        value
                            .parse::<usize>()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| {
                                invalid(format!(
                                    "`pool_size` must be a positive integer, not `{value}`"
                                ))
                            })?;
                }
                "statement_timeout_ms" => {
                    let ms = value.parse::<u64>().map_err(|_| {
                        invalid(format!(
                            "`statement_timeout_ms` must be a non-negative integer, not `{value}`"
                        ))
                    })?;
                    statement_timeout = (ms > 0).then(|| Duration::from_millis(ms));
                }
                _ => driver_params.push(pair),
            }
        }
        let driver_url = if driver_params.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", driver_params.join("&"))
        };
        let pg =
            tokio_postgres::Config::from_str(&driver_url).map_err(|e| invalid(e.to_string()))?;
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
        })
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
        other.redacted_url = match self.redacted_url.split_once('?') {
            Some((base, query)) => format!("{}?{query}", replace_db(base, database)),
            None => replace_db(&self.redacted_url, database),
        };
        other
    }

    /// The driver configuration of pooled connections: `statement_timeout` applied.
    pub(crate) fn pool_pg_config(&self) -> tokio_postgres::Config {
        let mut pg = self.pg.clone();
        self.apply_common(&mut pg);
        if let Some(timeout) = self.statement_timeout {
            let ms = timeout.as_millis().max(1);
            let options = match pg.get_options() {
                Some(existing) if !existing.is_empty() => {
                    format!("{existing} -c statement_timeout={ms}")
                }
                _ => format!("-c statement_timeout={ms}"),
            };
            pg.options(&options);
        }
        pg
    }

    /// The driver configuration of the listener connection: keepalives so that a half-open
    /// connection is noticed.
    pub(crate) fn listener_pg_config(&self) -> tokio_postgres::Config {
        let mut pg = self.pg.clone();
        self.apply_common(&mut pg);
        pg.keepalives(true);
        pg.keepalives_idle(Duration::from_secs(15));
        pg
    }

    fn apply_common(&self, pg: &mut tokio_postgres::Config) {
        pg.connect_timeout(self.connect_timeout);
        if pg.get_application_name().is_none() {
            pg.application_name("stele");
        }
    }
}

impl FromStr for PostgresConfig {
    type Err = PostgresError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::from_url(url)
    }
}

/// The URL with the password part of its user info replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// `base` (a URL without query) with its path replaced by `/database`.
fn replace_db(base: &str, database: &str) -> String {
    let Some((scheme, rest)) = base.split_once("://") else {
        return base.to_string();
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{database}")
}
