//! Creating, dropping and migrating whole databases on a server, for tests, benchmarks and
//! set-up tools.

use crate::{
    PostgresConfig, PostgresError, SCHEMA_VERSION,
    error::{connect_error, invalid_config, map_pg_error},
    schema,
};

/// Checks that `name` is a plain database name (lower-case ASCII letters, digits and `_`, not
/// starting with a digit, at most 63 bytes), so it can be spliced into SQL as an identifier.
fn check_name(name: &str) -> Result<(), PostgresError> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        return Err(invalid_config(
            "",
            format!("`{name}` is not a plain database name (a-z, 0-9, _; at most 63 bytes)"),
        ));
    }
    Ok(())
}

/// Runs `work` on a short-lived connection to the database `server` names.
async fn with_connection<T>(
    server: &PostgresConfig,
    work: impl AsyncFnOnce(&mut tokio_postgres::Client) -> Result<T, PostgresError>,
) -> Result<T, PostgresError> {
    let (mut client, driver) = crate::tls::Tls::new(server)?
        .connect_driven(&server.listener_pg_config(), "an admin")
        .await
        .map_err(|e| connect_error(server, e))?;
    let result = work(&mut client).await;
    drop(client);
    let _ = driver.await;
    result
}

/// Runs one statement on a short-lived connection to the database `server` names.
async fn run_on_server(server: &PostgresConfig, sql: &str) -> Result<(), PostgresError> {
    with_connection(server, async |client| {
        Ok(client.batch_execute(sql).await.map_err(map_pg_error)?)
    })
    .await
}

/// Applies the embedded migrations up to `version` to the database `database` names, the way
/// [`PostgresStore::connect`](crate::PostgresStore::connect) applies all of them, without
/// opening a store: to prepare a database ahead of a rollout, or to test the upgrade from an
/// older schema. A database already at `version` or newer is left as it is; a `version` this
/// binary does not know is [`PostgresError::InvalidConfig`]. It ignores `database`'s
/// [`schema`](PostgresConfig::schema) policy: creating and migrating are what it is asked for.
pub async fn migrate_to(database: &PostgresConfig, version: i64) -> Result<(), PostgresError> {
    if !(1..=SCHEMA_VERSION).contains(&version) {
        return Err(invalid_config(
            database.redacted_url(),
            format!(
                "schema version {version} is not one this binary knows (1 to {SCHEMA_VERSION})"
            ),
        ));
    }
    let mut changes_allowed = database.clone();
    changes_allowed.schema = concepts::SchemaPolicy::default();
    with_connection(database, async |client| {
        schema::migrate(client, version, &changes_allowed).await
    })
    .await
}

/// Creates the database `name` on the server of `server` (connecting to the database
/// `server` names, usually `postgres`). A database that exists already is a
/// [`DbError::Backend`](concepts::DbError::Backend) error.
pub async fn create_database(server: &PostgresConfig, name: &str) -> Result<(), PostgresError> {
    check_name(name)?;
    run_on_server(server, &format!("CREATE DATABASE \"{name}\"")).await
}

/// Drops the database `name` if it exists, ending the sessions still connected to it.
pub async fn drop_database(server: &PostgresConfig, name: &str) -> Result<(), PostgresError> {
    check_name(name)?;
    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
    run_on_server(server, &sql).await
}

/// Ends the server session with process id `pid` (`pg_terminate_backend`); returns whether
/// a session was ended. Tests use it to cut a store's listener connection.
pub async fn terminate_backend(server: &PostgresConfig, pid: i32) -> Result<bool, PostgresError> {
    with_connection(server, async |client| {
        let ended = client
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .and_then(|row| row.try_get(0));
        Ok(ended.map_err(map_pg_error)?)
    })
    .await
}
