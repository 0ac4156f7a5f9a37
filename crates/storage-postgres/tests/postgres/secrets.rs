//! Passwords stay out of every message and every log line, on each error path of opening a
//! store: a refused connection (retried while waiting for the server, logged), a wrong
//! password, a TLS failure, a database without Stele's schema, one with an older schema. The
//! spare server asks its role `stele_password_user` for a password (SCRAM); a URL that does
//! not parse is covered by the unit tests.

use concepts::SchemaOptions;
use std::{
    io::Write,
    sync::{Arc, Mutex},
};
use storage_postgres::{PostgresConfig, PostgresError, PostgresStore, admin};
use test_support::spare_server::{PASSWORD, PASSWORD_ROLE, SpareServer};

/// A wrong password, as distinctive as the right one.
const WRONG: &str = "wr0ng-Pa55word-never-shown";

/// What the tracing subscriber of one test wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Panics when `shown` holds either password.
#[track_caller]
fn assert_no_password(what: &str, shown: &str) {
    for secret in [PASSWORD, WRONG, "Pa55word"] {
        assert!(!shown.contains(secret), "{what} shows a password: {shown}");
    }
}

/// The error's message and its debug form hold no password.
#[track_caller]
fn assert_error_hides_passwords(what: &str, err: &PostgresError) {
    assert_no_password(what, &err.to_string());
    assert_no_password(what, &format!("{err:?}"));
}

fn url(server: &SpareServer, password: &str, host: &str, database: &str, params: &str) -> String {
    server.url(
        &format!("{PASSWORD_ROLE}:{password}"),
        host,
        database,
        params,
    )
}

#[tokio::test(flavor = "current_thread")]
async fn no_error_path_of_opening_a_store_shows_the_password() {
    let Some(server) = SpareServer::lock("no_error_path_shows_the_password") else {
        return;
    };
    server.ensure_password_role().await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // The right password opens a store (so the role's rule is the one refused below).
    let name = format!("stele_secrets_{}", std::process::id());
    let admin_config =
        PostgresConfig::from_url(&url(&server, PASSWORD, "127.0.0.1", "postgres", "")).unwrap();
    admin::drop_database(&admin_config, &name).await.unwrap();
    admin::create_database(&admin_config, &name).await.unwrap();
    let good = url(&server, PASSWORD, "127.0.0.1", &name, "pool_size=2");

    // Refused: nothing listens on port 1; retried for a second while waiting for the server.
    let refused = PostgresConfig::from_url(&format!(
        "postgres://{PASSWORD_ROLE}:{PASSWORD}@127.0.0.1:1/db?wait_for_server_s=1&connect_timeout=1"
    ))
    .unwrap();
    let err = PostgresStore::connect(refused).await.unwrap_err();
    assert!(
        matches!(err, PostgresError::Db(concepts::DbError::Connection(_))),
        "{err:?}"
    );
    assert_error_hides_passwords("a refused connection", &err);

    // A wrong password, for the store and for the admin connections.
    let wrong = PostgresConfig::from_url(&url(&server, WRONG, "127.0.0.1", &name, "")).unwrap();
    let err = PostgresStore::connect(wrong.clone()).await.unwrap_err();
    assert!(
        err.to_string().contains("password authentication failed"),
        "{err}"
    );
    assert_error_hides_passwords("a wrong password", &err);
    let err = admin::create_database(&wrong, "never_created")
        .await
        .unwrap_err();
    assert_error_hides_passwords("a wrong password (admin)", &err);

    // A TLS failure: the certificate names localhost, not 127.0.0.1.
    let tls = PostgresConfig::from_url(&url(
        &server,
        PASSWORD,
        "127.0.0.1",
        &name,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            server.ca_pem().display()
        ),
    ))
    .unwrap();
    let err = PostgresStore::connect(tls).await.unwrap_err();
    assert!(matches!(err, PostgresError::Tls { .. }), "{err:?}");
    assert_error_hides_passwords("a TLS failure", &err);

    // No schema, for a connection that must not create one.
    let existing = PostgresConfig::from_url(&good).unwrap().existing_only();
    let err = PostgresStore::connect(existing).await.unwrap_err();
    assert!(
        matches!(
            err,
            PostgresError::Schema {
                refusal: concepts::SchemaRefusal::NoSchema,
                ..
            }
        ),
        "{err:?}"
    );
    assert_error_hides_passwords("a database without the schema", &err);

    // An older schema, for a connection that must not migrate.
    admin::migrate_to(&PostgresConfig::from_url(&good).unwrap(), 1)
        .await
        .unwrap();
    let frozen = PostgresConfig::from_url(&good)
        .unwrap()
        .without_migrations();
    let err = PostgresStore::connect(frozen).await.unwrap_err();
    assert!(
        matches!(
            err,
            PostgresError::Schema {
                refusal: concepts::SchemaRefusal::TooOld { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_error_hides_passwords("an older schema", &err);

    // A store that opens: its debug form and its config hide the password too.
    let store = PostgresStore::connect(PostgresConfig::from_url(&good).unwrap())
        .await
        .expect("the right password opens the store");
    assert_no_password("the store's debug form", &format!("{store:?}"));
    concepts::DbConnection::close(&store).await;
    admin::drop_database(&admin_config, &name).await.unwrap();

    let logs = captured.text();
    assert!(
        logs.contains("cannot reach the PostgreSQL server; retrying"),
        "the refused connection was retried and logged: {logs}"
    );
    assert_no_password("the log", &logs);
}
